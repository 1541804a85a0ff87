"""Approval gates, eager tier: runs pause, people decide, runs go on.

Celery runs eagerly (tests.settings): an approved call runs as it is dispatched (on commit) and
the step that follows it runs too, so each decision below returns with the run moved on.
"""

import datetime
import json
from unittest import mock

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from django.utils import timezone

from tests.django._tools import registered, tool_calling_settings
from tool_calling import models, runs, tasks, tool
from tool_calling.calls import approvals
from tool_calling.conversations import ConversationBusyError
from tool_calling.exceptions import ToolArgumentsError
from tool_calling.governance import governed_chat_client
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, object]] = []


@tool(requires_approval=True)
def wire_money(account: str, amount: int) -> str:
    """Send money (a person approves each transfer)."""
    RAN.append(("wire_money", (account, amount)))
    return f"sent {amount} to {account}"


@tool
def lookup(key: str) -> str:
    """Look something up (no approval needed)."""
    RAN.append(("lookup", key))
    return f"found {key}"


@tool
def archive(key: str) -> str:
    """An operator flags this one in the admin."""
    RAN.append(("archive", key))
    return f"archived {key}"


TOOLS = (wire_money, lookup, archive)
GATED_ROUND = (
    tool_calls(tool_call("wire_money", account="ACME", amount=10), tool_call("lookup", key="a")),
    text("Done"),
)


@pytest.fixture(autouse=True)
def gated_tools():
    RAN.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


@pytest.fixture
def reviewer():
    """Staff holding the permission approving takes."""
    user = User.objects.create_user("rita", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    return user


def start(user, script_steps=GATED_ROUND, script=None):
    script(*script_steps)
    conversation = models.Conversation.objects.create(owner=user)
    run = runs.start_turn(conversation, "Pay ACME 10", user=user)
    run.refresh_from_db()
    return conversation, run


def gated_call(run):
    return models.ToolExecution.objects.get(run=run, tool_name="wire_money")


def tool_message(conversation):
    message = conversation.messages.get(role="tool")
    return {r["name"]: r for r in message.tool_responses}


# --- the pause --------------------------------------------------------------------------------


def test_a_gated_call_pauses_the_run_and_never_runs_before_a_decision(alice, script):
    conversation, run = start(alice, script=script)
    assert run.status == "awaiting_approval"
    call = gated_call(run)
    assert (call.status, call.approval) == ("awaiting_approval", "pending")
    assert call.approval_expires_at is not None
    # The other call of the batch ran; the gated one did not, and nothing was answered yet.
    assert RAN == [("lookup", "a")]
    assert not conversation.messages.filter(role="tool").exists()
    kinds = [e.kind for e in run.events.order_by("sequence")]
    assert "approval_needed" in kinds and kinds[-1] != "succeeded"
    needed = run.events.get(kind="approval_needed").data
    assert (needed["execution"], needed["tool"]) == (call.pk, "wire_money")
    # Nothing wakes it up meanwhile: a delivered step and the sweeper leave it waiting.
    tasks.run_step(str(run.pk))
    tasks.sweep_tool_executions()
    run.refresh_from_db()
    assert run.status == "awaiting_approval" and RAN == [("lookup", "a")]


def test_approving_runs_the_call_and_the_run_finishes(alice, reviewer, script):
    conversation, run = start(alice, script=script)
    decided = approvals.approve(gated_call(run), user=reviewer, note="ok by finance")
    assert (decided.approval, decided.decided_by, decided.decision_reason) == (
        "approved",
        reviewer,
        "ok by finance",
    )
    assert decided.decided_at is not None
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Done")
    assert ("wire_money", ("ACME", 10)) in RAN
    responses = tool_message(conversation)
    assert responses["wire_money"]["response_data"] == "sent 10 to ACME"
    assert gated_call(run).status == "succeeded"
    decision = run.events.get(kind="approval_decided").data
    assert (decision["decision"], decision["by"], decision["edited"]) == (
        "approved",
        reviewer.pk,
        False,
    )


def test_approving_with_edited_arguments_runs_them_and_keeps_the_models(alice, reviewer, script):
    conversation, run = start(alice, script=script)
    decided = approvals.approve(
        gated_call(run), user=reviewer, arguments={"account": "ACME", "amount": 5}
    )
    assert ("wire_money", ("ACME", 5)) in RAN and ("wire_money", ("ACME", 10)) not in RAN
    assert json.loads(decided.original_arguments) == {"account": "ACME", "amount": 10}
    assert json.loads(decided.arguments) == {"account": "ACME", "amount": 5}
    assert tool_message(conversation)["wire_money"]["response_data"] == "sent 5 to ACME"


@pytest.mark.parametrize(
    "edited, message",
    [
        ({"account": "ACME", "amount": "lots"}, "amount"),
        ({"account": "ACME"}, "amount"),
        ({"account": "ACME", "amount": 1, "extra": True}, "extra"),
        ("[1, 2]", "object"),
        ("{not json", "wire_money"),
        ({"account": "AC\x00ME", "amount": 1}, "NUL"),
        ('{"account": "AC\\u0000ME", "amount": 1}', "NUL"),
    ],
)
def test_edited_arguments_that_fail_the_schema_change_nothing(
    alice, reviewer, script, edited, message
):
    _, run = start(alice, script=script)
    before = gated_call(run).payload["arguments"]
    with pytest.raises(ToolArgumentsError) as caught:
        approvals.approve(gated_call(run), user=reviewer, arguments=edited)
    assert message in str(caught.value)
    call = gated_call(run)
    assert (call.status, call.approval, call.decided_by) == ("awaiting_approval", "pending", None)
    assert json.loads(call.payload["arguments"]) == {"account": "ACME", "amount": 10}
    assert call.payload["arguments"] == before and call.original_arguments == ""
    assert not any(name == "wire_money" for name, _ in RAN)


def test_denying_tells_the_model_why_and_the_run_goes_on(alice, reviewer, script):
    conversation, run = start(alice, script=script)
    decided = approvals.deny(gated_call(run), user=reviewer, reason="Over the daily limit")
    assert (decided.status, decided.approval, decided.decided_by) == ("denied", "denied", reviewer)
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Done")
    response = tool_message(conversation)["wire_money"]
    assert response["is_error"] is True
    assert "denied by a reviewer" in response["response_data"]
    assert "Over the daily limit" in response["response_data"]
    assert tool_message(conversation)["lookup"]["response_data"] == "found a"
    assert not any(name == "wire_money" for name, _ in RAN)


def test_a_second_decision_is_refused(alice, reviewer, script):
    _, run = start(alice, script=script)
    approvals.deny(gated_call(run), user=reviewer)
    with pytest.raises(approvals.ApprovalStateError, match="not awaiting approval"):
        approvals.approve(gated_call(run), user=reviewer)
    with pytest.raises(approvals.ApprovalStateError):
        approvals.deny(gated_call(run), user=reviewer)
    assert not any(name == "wire_money" for name, _ in RAN)


def test_an_approval_nobody_gives_in_time_expires_and_the_run_goes_on(alice, script):
    conversation, run = start(alice, script=script)
    assert tasks.sweep_tool_executions()["expired"] == 0  # not yet
    models.ToolExecution.objects.filter(pk=gated_call(run).pk).update(
        approval_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert tasks.sweep_tool_executions()["expired"] == 1
    call = gated_call(run)
    assert (call.status, call.approval, call.decided_by) == ("denied", "expired", None)
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert "nobody approved it in time" in tool_message(conversation)["wire_money"]["response_data"]


@override_settings(TOOL_CALLING=tool_calling_settings(APPROVALS={"EXPIRE_AFTER": None}))
def test_without_expiry_a_pending_approval_waits(alice, script):
    _, run = start(alice, script=script)
    assert gated_call(run).approval_expires_at is None
    assert tasks.sweep_tool_executions()["expired"] == 0


def test_cancelling_a_waiting_run_denies_its_pending_calls(alice, script):
    conversation, run = start(alice, script=script)
    assert runs.cancel_run(run, user=alice) is True
    run.refresh_from_db()
    assert run.status == "cancelled"
    call = gated_call(run)
    assert (call.status, call.decision_reason) == ("denied", "The run was cancelled.")
    assert not any(name == "wire_money" for name, _ in RAN)
    conversation.refresh_from_db()
    assert conversation.turn_token == ""  # the conversation is free again


def test_an_operator_flag_gates_a_tool_whose_code_does_not(alice, reviewer, script):
    models.Tool.objects.filter(name="archive").update(requires_approval=True)
    _, run = start(
        alice, (tool_calls(tool_call("archive", key="x")), text("Archived")), script=script
    )
    assert run.status == "awaiting_approval" and RAN == []
    approvals.approve(models.ToolExecution.objects.get(run=run), user=reviewer)
    run.refresh_from_db()
    assert run.status == "succeeded" and RAN == [("archive", "x")]


# --- where no one can approve -------------------------------------------------------------------


def test_an_in_process_turn_refuses_a_gated_call_with_a_clear_text(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel(
        [tool_calls(tool_call("wire_money", account="ACME", amount=10)), text("Could not pay")]
    )
    client = governed_chat_client(user=alice, conversation=conversation, model=model)
    assert client.prompt("Pay").call().content() == "Could not pay"
    assert RAN == []
    response = tool_message(conversation)["wire_money"]
    assert (
        response["is_error"] is True and "requires a person's approval" in response["response_data"]
    )
    audit = models.ToolExecution.objects.get(conversation=conversation)
    assert audit.status == "refused"


def test_a_worker_refuses_a_gated_call_nobody_approved(alice):
    from tool_calling.calls.lifecycle import record_for_worker
    from tool_calling.core.chat.messages import ToolCall

    row = record_for_worker(
        ToolCall("c1", "wire_money", '{"account": "X", "amount": 1}'),
        {},
        tool=models.Tool.objects.get(name="wire_money"),
        user=alice,
    )
    tasks.execute_tool_call(row.pk)
    row.refresh_from_db()
    assert row.status == "refused" and "approval" in row.result
    assert RAN == []


# --- the flag in code, and who decides -----------------------------------------------------------


def test_the_code_flag_is_a_floor_sync_restores(reviewer):
    row = models.Tool.objects.get(name="wire_money")
    assert row.requires_approval is True
    models.Tool.objects.filter(pk=row.pk).update(requires_approval=False)
    report = sync_tools()
    assert "wire_money" in report.changed
    assert models.Tool.objects.get(name="wire_money").requires_approval is True
    # An operator may still require approval for a tool whose code does not.
    models.Tool.objects.filter(name="lookup").update(requires_approval=True)
    sync_tools()
    assert models.Tool.objects.get(name="lookup").requires_approval is True


def test_who_may_decide(alice, reviewer):
    """S6: the explicit permission (superusers hold it); staff without it may not decide."""
    assert approvals.can_decide(reviewer) is True
    assert approvals.can_decide(alice) is False
    assert approvals.can_decide(User.objects.create_user("otto", is_staff=True)) is False
    assert approvals.can_decide(User.objects.create_superuser("sam")) is True
    alice.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    alice = User.objects.get(pk=alice.pk)  # permissions are cached per instance
    assert approvals.can_decide(alice) is True
    alice.is_active = False
    assert approvals.can_decide(alice) is False
    assert approvals.can_decide(None) is False


def test_approving_after_the_deadline_is_refused_and_the_call_expires(alice, reviewer, script):
    _, run = start(alice, script=script)
    models.ToolExecution.objects.filter(pk=gated_call(run).pk).update(
        approval_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    with pytest.raises(approvals.ApprovalStateError):
        approvals.approve(gated_call(run), user=reviewer)
    call = gated_call(run)
    assert (call.status, call.approval, call.decided_by) == ("denied", "expired", None)
    assert not any(name == "wire_money" for name, _ in RAN)
    run.refresh_from_db()
    assert run.status == "succeeded"


def test_a_call_deleted_meanwhile_is_reported_as_not_waiting(alice, reviewer, script):
    _, run = start(alice, script=script)
    call = gated_call(run)
    models.ToolExecution.objects.filter(pk=call.pk).delete()
    with pytest.raises(approvals.ApprovalStateError):
        approvals.approve(call, user=reviewer)
    with pytest.raises(approvals.ApprovalStateError):
        approvals.deny(call, user=reviewer)


def test_an_approval_is_bound_to_the_exact_arguments_approved(alice, reviewer, script):
    """S6: arguments changed after the approval (in the database) are refused by the worker."""
    _, run = start(alice, script=script)
    with mock.patch("tool_calling.calls.approvals.dispatch_on_commit"):  # approved, not sent yet
        decided = approvals.approve(gated_call(run), user=reviewer)
    exact = decided.payload["arguments"]
    assert decided.approved_arguments_sha256 == approvals.arguments_digest(exact)
    tampered = {**decided.payload, "arguments": '{"account": "MALLORY", "amount": 10000}'}
    models.ToolExecution.objects.filter(pk=decided.pk).update(payload=tampered)
    tasks.execute_tool_call(decided.pk)
    call = gated_call(run)
    assert call.status == "refused"
    assert not any(name == "wire_money" for name, _ in RAN)


def test_a_model_repeating_an_approved_call_with_other_arguments_waits_again(
    alice, reviewer, script
):
    script(
        tool_calls(tool_call("wire_money", account="ACME", amount=10)),
        tool_calls(tool_call("wire_money", account="ACME", amount=5000)),
        text("Done"),
    )
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Pay", user=alice)
    approvals.approve(models.ToolExecution.objects.get(run=run), user=reviewer)
    run.refresh_from_db()
    assert run.status == "awaiting_approval"  # the second call is not covered by the first
    second = models.ToolExecution.objects.filter(run=run).order_by("pk").last()
    assert (second.status, json.loads(second.arguments)["amount"]) == ("awaiting_approval", 5000)
    assert RAN == [("wire_money", ("ACME", 10))]


def test_a_run_waiting_longer_than_the_turn_timeout_keeps_its_conversation(alice, reviewer, script):
    """A stale claim is taken over, but not one an active run holds (it waits for a person)."""
    conversation, run = start(alice, script=script)
    long_ago = timezone.now() - datetime.timedelta(days=1)
    models.Conversation.objects.filter(pk=conversation.pk).update(turn_started_at=long_ago)
    with pytest.raises(ConversationBusyError):
        runs.start_turn(conversation, "Another message", user=alice)
    approvals.deny(gated_call(run), user=reviewer)
    run.refresh_from_db()
    assert run.status == "succeeded"
    script(text("Hello again"))
    assert runs.start_turn(conversation, "Another message", user=alice).status == "succeeded"


def test_signals_tell_the_project_when_a_call_waits_and_when_it_is_decided(alice, reviewer, script):
    from tool_calling import signals

    received = []

    def requested(sender, execution, run, **kwargs):
        received.append(("requested", execution.status, run.status, execution.tool_name))

    def decided(sender, execution, decision, **kwargs):
        received.append(("decided", decision, execution.decided_by))

    def broken(sender, **kwargs):
        raise RuntimeError("a receiver that fails must not undo anything")

    signals.approval_requested.connect(requested)
    signals.approval_requested.connect(broken)
    signals.approval_decided.connect(decided)
    try:
        _, run = start(alice, script=script)
        assert received == [("requested", "awaiting_approval", "awaiting_approval", "wire_money")]
        approvals.deny(gated_call(run), user=reviewer, reason="No")
    finally:
        signals.approval_requested.disconnect(requested)
        signals.approval_requested.disconnect(broken)
        signals.approval_decided.disconnect(decided)
    assert received[-1] == ("decided", "denied", reviewer)
    run.refresh_from_db()
    assert run.status == "succeeded"
