"""A real browser (Debian's chromium through Playwright) works through the approval queue.

A run waits on two gated calls; an operator approves one with the bulk action and denies the
other through the reason page; the run then goes on. Needs ``bash scripts/setup_browser.sh``
(chromium from apt, the pinned playwright package); without them the test fails with that hint,
never skips. Playwright's own browser download is never used: chromium is launched from
/usr/bin/chromium.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser._browser import admin_page, artifacts_dir, sync_api
from tests.fixtures.approval_tools import (
    RAN,
    TWO_TRANSFERS,
    gated_calls,
    gated_tool,
    scripted_model,
    start_gated_run,
)
from tool_calling import models

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REASON = "EVIL is not a known payee; ask the customer first."


def decide_in_admin(base_url: str, approve: str, deny: str, artifacts: Path) -> dict[str, Any]:
    """Approve the queued call whose arguments mention ``approve``, deny the one with ``deny``.

    Returns what the pages said. Playwright's sync API keeps an event loop running while it is
    active, which Django's ORM refuses to run under, so the browser lives only inside this
    function and the test body does its database work outside it. On failure a screenshot and
    the page's HTML are saved in ``artifacts``.
    """
    seen: dict[str, Any] = {}
    with admin_page(base_url, artifacts) as page:
        # The admin index links the queue.
        page.click("a[href='/admin/tool_calling/pendingapproval/']")
        rows = page.locator("#result_list tbody tr")
        sync_api.expect(rows).to_have_count(2)
        seen["queued"] = [row.inner_text() for row in rows.all()]

        def row_of(text: str) -> Any:
            return rows.filter(has=page.locator("td.field-arguments_preview", has_text=text))

        # Approve one call with the bulk action.
        row_of(approve).locator("input.action-select").check()
        page.select_option("select[name=action]", "approve_selected")
        page.click("#changelist-form button[name=index]")
        success = page.locator("ul.messagelist li.success")
        sync_api.expect(success).to_have_count(1)
        seen["approved"] = success.inner_text()
        sync_api.expect(rows).to_have_count(1)

        # Deny the other through the confirmation page, with a reason.
        row_of(deny).locator("input.action-select").check()
        page.select_option("select[name=action]", "deny_selected")
        page.click("#changelist-form button[name=index]")
        page.wait_for_selector("body.tool-calling-deny-confirmation")
        seen["confirmation"] = page.locator("#content").inner_text()
        page.fill("#id_reason", REASON)
        page.click("#deny_form input[type=submit]")
        success = page.locator("ul.messagelist li.success")
        sync_api.expect(success).to_have_count(1)
        seen["denied"] = success.inner_text()
        seen["queue_after"] = page.locator("#changelist").inner_text()
        sync_api.expect(page.locator("#result_list")).to_have_count(0)
        return seen


def test_an_operator_approves_one_call_and_denies_another_and_the_run_goes_on(
    live_server: Any, django_user_model: Any, request: pytest.FixtureRequest
) -> None:
    """Both decisions land in the database and the run, which waited on both, succeeds."""
    operator = django_user_model.objects.create_superuser(
        "operator", "operator@example.com", "correct horse battery staple"
    )
    alice = django_user_model.objects.create_user("alice")

    with gated_tool(), scripted_model(*TWO_TRANSFERS) as model:
        run = start_gated_run(alice)
        acme, evil = gated_calls(run)
        assert RAN == []
        # The model answers once both decisions are in: its second request happens in the live
        # server's thread, while the browser denies the second call.
        seen = decide_in_admin(live_server.url, "ACME", "EVIL", artifacts_dir(request.node.name))
        model.assert_consumed()

    assert all("transfer_funds" in row and "alice" in row for row in seen["queued"])
    assert seen["approved"] == "Approved 1 call; it runs now."
    assert "EVIL" in seen["confirmation"]
    assert "ACME" not in seen["confirmation"]
    assert seen["denied"] == "Denied 1 call; the model is told so."
    assert "0 calls awaiting approval" in seen["queue_after"]

    acme.refresh_from_db()
    evil.refresh_from_db()
    run.refresh_from_db()
    assert (acme.status, acme.approval, acme.decided_by) == ("succeeded", "approved", operator)
    assert (evil.status, evil.approval, evil.decided_by) == ("denied", "denied", operator)
    assert evil.decision_reason == REASON
    assert RAN == [("ACME", 10)]
    assert (run.status, run.answer) == ("succeeded", "Done")
    tool_message = models.Message.objects.get(conversation=run.conversation, role="tool")
    responses = {r["id"]: r for r in tool_message.tool_responses}
    assert responses[acme.tool_call_id]["response_data"] == "sent 10 to ACME"
    assert f"Reason: {REASON}" in responses[evil.tool_call_id]["response_data"]
