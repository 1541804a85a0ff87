"""The browser tier's shared pieces: Debian's chromium through Playwright, an admin session.

Needs ``bash scripts/setup_browser.sh`` (chromium from apt, the pinned playwright package);
without them the tests fail with that hint, never skip (conftest.py). Playwright's own browser
download is never used: chromium is launched from /usr/bin/chromium.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
"""The superuser the tests create and log in as."""

try:
    from playwright import sync_api
except ImportError:  # reported by the tests, never skipped: the suite's setup installs it
    sync_api = None


@contextmanager
def admin_page(base_url: str, artifacts: Path) -> Iterator[Any]:
    """A page logged into the admin as ``OPERATOR``; on failure a screenshot and the HTML.

    Playwright's sync API keeps an event loop running while it is active, which Django's ORM
    refuses to run under: use the page inside the block, do database work outside it.
    """
    assert sync_api is not None
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(15_000)
        try:
            page.goto(f"{base_url}/admin/")
            page.fill("#id_username", OPERATOR[0])
            page.fill("#id_password", OPERATOR[1])
            page.click("#login-form [type=submit]")
            page.wait_for_selector("#user-tools")
            yield page
        except Exception:
            artifacts.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
            (artifacts / "failure.html").write_text(page.content(), encoding="utf-8")
            print(f"browser artifacts (screenshot, HTML) saved in {artifacts}")
            raise
        finally:
            browser.close()
