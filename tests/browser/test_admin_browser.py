"""A real browser (Debian's chromium through Playwright) governs a tool in the admin.

Needs ``bash scripts/setup_browser.sh`` (chromium from apt, the pinned playwright package);
without them the test is skipped with that hint. Playwright's own browser download is never
used: chromium is launched from /usr/bin/chromium.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tool_calling import models
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.governance import governed_chat_client
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

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
DEMO_TOOLS = {"get_current_time", "get_weather", "add_numbers"}
SETUP_HINT = "run `bash scripts/setup_browser.sh` to install chromium and playwright"

try:
    from playwright import sync_api
except ImportError:  # reported by the test, never skipped: the suite's setup installs it
    sync_api = None


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    """Fail, never skip, without the browser: scripts/test.sh installs it on every machine."""
    if sync_api is None:
        pytest.fail(f"playwright is not installed: {SETUP_HINT}", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}", pytrace=False)


def offered_tools(server: ReplayServer) -> set[str]:
    """Run one governed turn against ``server``; return the tool names its request listed."""
    model = OpenAIChatModel(base_url=server.base_url + "/v1", api_key="test", max_retries=0)
    before = len(server.requests)
    reply = governed_chat_client(model=model).prompt("hi").call().content()
    assert reply == "Hello."
    [body] = server.requests[before:]
    return {tool["function"]["name"] for tool in body.get("tools", [])}


def disable_in_admin(base_url: str, tool_name: str, artifacts: Path) -> str:
    """Log into the admin, disable ``tool_name`` with the bulk action; return the message shown.

    Playwright's sync API keeps an event loop running while it is active, which Django's ORM
    refuses to run under, so the browser lives only inside this function and the test body does
    its database work outside it. On failure a screenshot and the page's HTML are saved in
    ``artifacts``.
    """
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(15_000)
        try:
            page.goto(f"{base_url}/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "correct horse battery staple")
            page.click("#login-form [type=submit]")
            page.wait_for_selector("#user-tools")

            page.goto(f"{base_url}/admin/tool_calling/tool/")
            row = page.locator("#result_list tbody tr").filter(
                has=page.locator("th.field-name", has_text=tool_name)
            )
            sync_api.expect(row).to_have_count(1)
            row.locator("input.action-select").check()
            page.select_option("select[name=action]", "disable")
            page.click("#changelist-form button[name=index]")

            success = page.locator("ul.messagelist li.success")
            sync_api.expect(success).to_have_count(1)
            message = success.inner_text()
            disabled_row = page.locator("#result_list tbody tr").filter(
                has=page.locator("th.field-name", has_text=tool_name)
            )
            sync_api.expect(disabled_row.locator("td.field-enabled img")).to_have_attribute(
                "alt", "False"
            )
            return message
        except Exception:
            artifacts.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
            (artifacts / "failure.html").write_text(page.content(), encoding="utf-8")
            print(f"browser artifacts (screenshot, HTML) saved in {artifacts}")
            raise
        finally:
            browser.close()


def test_disabling_a_tool_in_the_admin_removes_it_from_the_next_turn(
    live_server: Any, django_user_model: Any, tmp_path: Path
) -> None:
    """An operator disables get_weather in bulk; the next request to the model omits it."""
    sync_tools()  # the demo tools, in case the flushed database lost them
    assert DEMO_TOOLS <= set(models.Tool.objects.values_list("name", flat=True))
    models.Tool.objects.filter(name__in=DEMO_TOOLS).update(enabled=True)
    django_user_model.objects.create_superuser(
        "operator", "operator@example.com", "correct horse battery staple"
    )

    with ReplayServer([{"text": "Hello."}, {"text": "Hello."}]) as server:
        before = offered_tools(server)
        message = disable_in_admin(live_server.url, "get_weather", tmp_path / "browser")
        after = offered_tools(server)

    assert DEMO_TOOLS <= before
    assert message == "Disabled 1 tool."
    assert models.Tool.objects.get(name="get_weather").enabled is False
    assert "get_weather" not in after
    assert after == before - {"get_weather"}
