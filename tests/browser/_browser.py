"""The browser tier's shared pieces: Debian's chromium through Playwright, sessions, screenshots.

Needs ``bash scripts/setup_browser.sh`` (chromium from apt, the pinned playwright package);
without them the tests fail with that hint, never skip (``require_browser``). Playwright's own
browser download is never used: chromium is launched from /usr/bin/chromium.

Playwright's sync API keeps an event loop running while it is active, which Django's ORM refuses
to run under: use the browser inside the ``with`` block, do database work outside it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SETUP_HINT = "run `bash scripts/setup_browser.sh` to install chromium and playwright"
OPERATOR = ("operator", "correct horse battery staple")
"""The superuser the admin tests create and log in as."""

VIEWPORT = {"width": 1280, "height": 860}
"""The window of every page, screenshots included."""

ARTIFACTS_DIR = "TC_BROWSER_ARTIFACTS"
"""Environment variable: where ``artifacts_dir()`` puts each test's failure artifacts
(default ``var/browser-artifacts/`` of the checkout, which git ignores)."""

SCREENSHOTS_DIR = "TC_SCREENSHOTS_DIR"
"""Environment variable: a directory where ``screenshot()`` also saves its pictures
(``scripts/screenshots.sh`` sets it to docs/ to refresh the documentation's)."""

try:
    from playwright import sync_api
except ImportError:  # reported by the tests, never skipped: the suite's setup installs it
    sync_api = None


def artifacts_dir(test_name: str) -> Path:
    """Where the test ``test_name`` keeps its screenshots: one directory per test, emptied first.

    A fixed place rather than pytest's temporary directories, which other runs prune.
    """
    root = Path(os.environ.get(ARTIFACTS_DIR) or Path(__file__).resolve().parents[2] / "var")
    if not os.environ.get(ARTIFACTS_DIR):
        root = root / "browser-artifacts"
    directory = root / re.sub(r"[^\w.-]+", "_", test_name)
    shutil.rmtree(directory, ignore_errors=True)
    return directory


def require_browser() -> None:
    """Fail (never skip) with the setup hint when playwright or chromium is missing."""
    if sync_api is None:
        pytest.fail(f"playwright is not installed: {SETUP_HINT}", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}", pytrace=False)


@dataclass
class Browser:
    """One chromium; each ``new_page`` is a separate context (its own cookies: its own user)."""

    browser: Any
    artifacts: Path
    pages: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    """For each page, the uncaught script errors and console errors it reported."""

    def new_page(self, name: str) -> Any:
        """A page in a new context, named ``name`` in the failure artifacts."""
        context = self.browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.set_default_timeout(15_000)
        problems = self.problems.setdefault(name, [])
        page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
        page.on(
            "console",
            lambda message: (
                problems.append(f"console: {message.text}") if message.type == "error" else None
            ),
        )
        self.pages[name] = page
        return page

    def assert_no_script_errors(self, **expected: str) -> None:
        """No page reported a script error, but ``expected[page name]`` (one message each)."""
        reported = {name: list(problems) for name, problems in self.problems.items()}
        for name, message in expected.items():
            assert message in reported[name], reported
            reported[name].remove(message)
        assert reported == {name: [] for name in reported}, reported

    def save_artifacts(self) -> None:
        """A full-page screenshot, the HTML and the reported script errors of every page."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for name, page in self.pages.items():
            try:
                page.screenshot(path=str(self.artifacts / f"{name}.png"), full_page=True)
                (self.artifacts / f"{name}.html").write_text(page.content(), encoding="utf-8")
            except Exception as exc:  # a closed page: keep what the others have
                print(f"no artifacts of page {name!r}: {exc}")
            (self.artifacts / f"{name}.errors.txt").write_text(
                "\n".join(self.problems.get(name, [])), encoding="utf-8"
            )
        print(f"browser artifacts (screenshots, HTML, script errors) saved in {self.artifacts}")


@contextmanager
def chromium(artifacts: Path) -> Iterator[Browser]:
    """Headless chromium; if the block fails, every page's screenshot and HTML in ``artifacts``."""
    assert sync_api is not None
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        session = Browser(browser, artifacts)
        try:
            yield session
        except BaseException:
            session.save_artifacts()
            raise
        finally:
            browser.close()


@contextmanager
def admin_page(base_url: str, artifacts: Path) -> Iterator[Any]:
    """A page logged into the admin as ``OPERATOR``; on failure a screenshot and the HTML."""
    with chromium(artifacts) as browser:
        page = browser.new_page("admin")
        page.goto(f"{base_url}/admin/")
        page.fill("#id_username", OPERATOR[0])
        page.fill("#id_password", OPERATOR[1])
        page.click("#login-form [type=submit]")
        page.wait_for_selector("#user-tools")
        yield page


def screenshot(page: Any, name: str, artifacts: Path, *, full_page: bool = True) -> Path:
    """Save ``page`` (all of it, or the window) as ``<artifacts>/<name>.png``, and in
    ``$TC_SCREENSHOTS_DIR`` when it is set.

    The docs' pictures come from here (``bash scripts/screenshots.sh`` runs the tests marked
    ``screenshots``), so they show the pages as the tests leave them.
    """
    artifacts.mkdir(parents=True, exist_ok=True)
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    target = os.environ.get(SCREENSHOTS_DIR)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / path.name)
    return path
