"""A real browser (Debian's chromium through Playwright) governs a tool in the admin.

Needs ``bash scripts/setup_browser.sh`` (chromium from apt, the pinned playwright package);
without them the test fails with that hint, never skips (conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser._browser import admin_page, artifacts_dir, screenshot, sync_api
from tool_calling import models
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.governance import governed_chat_client
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DEMO_TOOLS = {"get_current_time", "get_weather", "add_numbers"}


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
    with admin_page(base_url, artifacts) as page:
        page.goto(f"{base_url}/admin/tool_calling/tool/")
        row = page.locator("#result_list tbody tr").filter(
            has=page.locator("th.field-name_display", has_text=tool_name)
        )
        sync_api.expect(row).to_have_count(1)
        row.locator("input.action-select").check()
        page.select_option("select[name=action]", "disable")
        page.click("#changelist-form button[name=index]")

        success = page.locator("ul.messagelist li.success")
        sync_api.expect(success).to_have_count(1)
        message = success.inner_text()
        disabled_row = page.locator("#result_list tbody tr").filter(
            has=page.locator("th.field-name_display", has_text=tool_name)
        )
        sync_api.expect(disabled_row.locator("td.field-enabled img")).to_have_attribute(
            "alt", "False"
        )
        return message


def test_disabling_a_tool_in_the_admin_removes_it_from_the_next_turn(
    live_server: Any, django_user_model: Any, request: pytest.FixtureRequest
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
        message = disable_in_admin(live_server.url, "get_weather", artifacts_dir(request.node.name))
        after = offered_tools(server)

    assert DEMO_TOOLS <= before
    assert message == "Disabled 1 tool."
    assert models.Tool.objects.get(name="get_weather").enabled is False
    assert "get_weather" not in after
    assert after == before - {"get_weather"}


def test_the_tool_list_fits_1280_pixels_and_says_what_its_error_rate_counts(
    live_server: Any, django_user_model: Any, request: pytest.FixtureRequest
) -> None:
    """At 1280 px (the test viewport) the tool list needs no sideways scrolling."""
    sync_tools()
    for number in range(12):  # long names, as MCP tools have (server alias + tool name)
        models.Tool.objects.create(
            name=f"crm_server__search_customer_accounts_by_region_{number}",
            source="mcp:crm_server",
        )
    django_user_model.objects.create_superuser(
        "operator", "operator@example.com", "correct horse battery staple"
    )
    artifacts = artifacts_dir(request.node.name)
    with admin_page(live_server.url, artifacts) as page:
        page.goto(f"{live_server.url}/admin/tool_calling/tool/")
        page.wait_for_selector("#result_list")
        # The page, and the table inside its own scrolling box (Django's .results).
        overflow = page.evaluate(
            """() => Math.max(
                document.documentElement.scrollWidth - document.documentElement.clientWidth,
                ...[...document.querySelectorAll('#changelist .results')].map(
                    (box) => box.scrollWidth - box.clientWidth))"""
        )
        header = page.locator("#result_list th.column-error_rate_24h").inner_text()
        note = page.locator("#tool-list-note").inner_text()
        screenshot(page, "tool-list-1280", artifacts, full_page=False)

    assert overflow <= 0, f"the tool list is {overflow} px wider than the window"
    assert "denials excluded" in header.lower()
    assert "Error rate" in note and "denied" in note
