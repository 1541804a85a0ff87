"""A real browser (Debian's chromium through Playwright) governs a tool in the admin.

Needs ``bash scripts/setup_browser.sh`` (chromium from apt, the pinned playwright package);
without them the test fails with that hint, never skips (conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser._browser import admin_page, artifacts_dir, sync_api
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
