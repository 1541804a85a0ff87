"""Who decides a waiting call: the user's confirmation, an approver's approval, or both in order.

Durable runs over the API (Celery eager, as in tests.settings): the gate queues the call for its
deciders, the decision comes from the API, the run goes on.
"""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings

from tests.django._api import client_for, url
from tests.django._tools import registered, tool_calling_settings
from tool_calling import models, tool
from tool_calling.calls import approvals, gate, policies
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.tools.callback import FunctionToolCallback
from tool_calling.sync import sync_tools
from tool_calling.testing import text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, object]] = []


@tool(requires_confirmation=True)
def conf_delete(path: str) -> str:
    """Delete a file (the user confirms each deletion)."""
    RAN.append(("conf_delete", path))
    return f"deleted {path}"


@tool(requires_confirmation=True, requires_approval=True)
def conf_wire(amount: int) -> str:
    """Wire money (the user confirms, then an approver approves)."""
    RAN.append(("conf_wire", amount))
    return f"wired {amount}"


@tool(requires_confirmation=lambda args: args["amount"] > 100)
def conf_refund(order: str, amount: int) -> str:
    """Refund an order (the user confirms refunds over 100)."""
    RAN.append(("conf_refund", (order, amount)))
    return f"refunded {amount} on {order}"


@tool
def conf_lookup(order: str) -> str:
    """Look an order up."""
    RAN.append(("conf_lookup", order))
    return f"order {order}: paid"


TOOLS = (conf_delete, conf_wire, conf_refund, conf_lookup)


@pytest.fixture(autouse=True)
def confirmation_tools():
    RAN.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob():
    return User.objects.create_user("bob", password="pw")


@pytest.fixture
def approver():
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    return user


def start(user, script, *steps, text_="Do it"):
    script(*steps)
    conversation = models.Conversation.objects.create(owner=user)
    response = client_for(user).post(
        url("conversation-messages", conversation.pk), {"text": text_}, format="json"
    )
    assert response.status_code == 202, response.data
    return models.Run.objects.get(pk=response.data["id"])


def waiting(run, name):
    return models.ToolExecution.objects.get(run=run, tool_name=name)


def approve(user, execution, **body):
    return client_for(user).post(url("tool-execution-approve", execution.pk), body, format="json")


def test_the_user_confirms_their_own_call_and_nobody_else_can(alice, bob, approver, script):
    run = start(
        alice,
        script,
        tool_calls(tool_call("conf_delete", path="/tmp/a")),
        text("Deleted."),
    )
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    call = waiting(run, "conf_delete")
    assert (call.status, call.deciders) == ("awaiting_approval", "user")
    assert RAN == []
    own = client_for(alice).get(url("tool-execution-detail", call.pk)).data
    assert (own["stage"], own["deciders"]) == ("user", "user")

    # An approver is not the person whose turn it is: refused, in words for a person.
    refused = approve(approver, call)
    assert refused.status_code == 403
    assert str(refused.data["detail"]) == (
        "This call of 'conf_delete' waits for the confirmation of the person who asked for it; "
        "only they can confirm it."
    )
    # Another user does not even see it.
    assert approve(bob, call).status_code == 404
    assert RAN == []

    confirmed = approve(alice, call)
    assert confirmed.status_code == 200, confirmed.data
    assert RAN == [("conf_delete", "/tmp/a")]
    run.refresh_from_db()
    assert run.status == "succeeded"
    call.refresh_from_db()
    assert (call.status, call.approval, call.decided_by_id) == ("succeeded", "approved", alice.pk)


def test_both_kinds_in_order_the_user_first_then_an_approver(alice, approver, script):
    run = start(alice, script, tool_calls(tool_call("conf_wire", amount=500)), text("Wired."))
    call = waiting(run, "conf_wire")
    assert call.deciders == "user+approver"
    # The approver cannot decide before the user confirmed.
    assert approve(approver, call).status_code == 403

    confirmed = approve(alice, call)
    assert confirmed.status_code == 200, confirmed.data
    assert (confirmed.data["stage"], confirmed.data["confirmed_by"]) == ("approver", "alice")
    assert confirmed.data["status"] == "awaiting_approval"
    assert RAN == []  # confirmed is not approved: still waiting for four eyes

    # The user cannot also be the approver (self-approval is off by default).
    again = approve(alice, call)
    assert again.status_code == 403
    assert str(again.data["detail"]) == (
        "You asked for this call of 'conf_wire' yourself, so another person must approve it."
    )

    approved = approve(approver, call)
    assert approved.status_code == 200, approved.data
    assert RAN == [("conf_wire", 500)]
    call.refresh_from_db()
    assert (call.confirmed_by_id, call.decided_by_id) == (alice.pk, approver.pk)
    run.refresh_from_db()
    assert run.status == "succeeded"
    decided = [
        e.data["decision"] for e in run.events.order_by("sequence") if e.kind == "approval_decided"
    ]
    assert decided == ["confirmed", "approved"]


def test_the_condition_on_the_arguments_decides_per_call(alice, script):
    """``amount > 100``: 50 runs at once, 250 waits for the user."""
    run = start(
        alice,
        script,
        tool_calls(tool_call("conf_refund", order="A1", amount=50)),
        tool_calls(tool_call("conf_refund", order="A1", amount=250)),
        text("Refunded."),
    )
    assert RAN == [("conf_refund", ("A1", 50))]
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    big = models.ToolExecution.objects.get(run=run, status="awaiting_approval")
    assert json.loads(big.payload["arguments"]) == {"order": "A1", "amount": 250}
    assert big.deciders == "user"


def test_the_user_may_deny_with_a_reason_the_model_reads(alice, script):
    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/etc")), text("OK."))
    call = waiting(run, "conf_delete")
    denied = client_for(alice).post(
        url("tool-execution-deny", call.pk), {"reason": "Not that one."}, format="json"
    )
    assert denied.status_code == 200
    assert RAN == []
    call.refresh_from_db()
    assert call.status == "denied"
    assert call.result == (
        "The user declined the call to tool 'conf_delete'; it was not run. Reason: Not that one."
    )


def test_an_operator_can_ask_for_confirmation_where_the_code_does_not(alice, script):
    sync_tools()
    models.Tool.objects.filter(name="conf_lookup").update(requires_confirmation=True)
    run = start(alice, script, tool_calls(tool_call("conf_lookup", order="A1")), text("Paid."))
    assert waiting(run, "conf_lookup").deciders == "user"
    assert RAN == []


def test_the_code_flag_is_a_floor_the_sync_restores(alice):
    sync_tools()
    assert models.Tool.objects.get(name="conf_delete").requires_confirmation is True
    # A condition on the arguments is applied per call by the gate, not stored on the row.
    assert models.Tool.objects.get(name="conf_refund").requires_confirmation is False
    models.Tool.objects.filter(name="conf_delete").update(requires_confirmation=False)
    sync_tools()
    assert models.Tool.objects.get(name="conf_delete").requires_confirmation is True


def test_a_path_that_cannot_wait_refuses_with_words_for_the_model(alice):
    """In-process turns (and MCP calls) cannot wait for the user: the gate refuses the call."""
    sync_tools()
    models.Tool.objects.filter(name__startswith="conf_").update(enabled=True)
    verdict = gate.admit(
        gate.GateCall(
            ToolCall("c1", "conf_delete", '{"path": "/a"}'),
            FunctionToolCallback(conf_delete),
            user=alice,
        )
    )
    assert verdict.refused_by is gate.Rule.APPROVAL
    assert verdict.text == (
        "Tool 'conf_delete' needs the user's confirmation before each call, and this "
        "conversation cannot wait for one (confirmations pause background runs only). The call "
        "was not made."
    )
    small = gate.admit(
        gate.GateCall(
            ToolCall("c2", "conf_refund", '{"order": "A1", "amount": 5}'),
            FunctionToolCallback(conf_refund),
            user=alice,
        )
    )
    assert small.admitted


def test_self_approval_on_lets_the_user_also_approve_after_confirming(alice, script):
    alice.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    run = start(alice, script, tool_calls(tool_call("conf_wire", amount=5)), text("Wired."))
    call = waiting(run, "conf_wire")
    with override_settings(
        TOOL_CALLING=tool_calling_settings(APPROVALS={"ALLOW_SELF_APPROVAL": True})
    ):
        assert approve(alice, call).status_code == 200
        call.refresh_from_db()
        assert approvals.stage(call) == approvals.APPROVER
        assert approve(alice, call).status_code == 200
    assert RAN == [("conf_wire", 5)]


# -- operators' decision policies ---------------------------------------------------------------


def big_amount(arguments):
    """A policy condition (referenced by its dotted path below)."""
    return arguments.get("amount", 0) > 1000


def test_a_policy_by_name_pattern_asks_an_approver(alice, script):
    models.DecisionPolicy.objects.create(
        name="lookups", tool_pattern="conf_look*", requires_approval=True
    )
    run = start(alice, script, tool_calls(tool_call("conf_lookup", order="A1")), text("Paid."))
    assert waiting(run, "conf_lookup").deciders == "approver"
    assert RAN == []


def test_a_policy_adds_to_the_code_and_never_lifts_it(alice, script):
    """The code asks for the user; a policy adds an approver: both, the user first."""
    models.DecisionPolicy.objects.create(
        name="deletes", tool_pattern="conf_delete", requires_approval=True
    )
    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/a")), text("OK."))
    assert waiting(run, "conf_delete").deciders == "user+approver"


def test_a_policy_condition_reads_the_arguments(alice, script):
    models.DecisionPolicy.objects.create(
        name="big refunds",
        tool_pattern="conf_*",
        condition="tests.django.test_confirmation.big_amount",
        requires_approval=True,
    )
    run = start(
        alice,
        script,
        tool_calls(tool_call("conf_refund", order="A1", amount=20)),
        tool_calls(tool_call("conf_refund", order="A1", amount=5000)),
        text("Done."),
    )
    assert RAN == [("conf_refund", ("A1", 20))]
    held = models.ToolExecution.objects.get(run=run, status="awaiting_approval")
    # The code asks the user for amounts over 100, the policy an approver over 1000.
    assert held.deciders == "user+approver"


def test_a_disabled_policy_and_another_source_do_not_apply(alice, script):
    sync_tools()
    models.DecisionPolicy.objects.create(
        name="off", tool_pattern="conf_lookup", enabled=False, requires_approval=True
    )
    models.DecisionPolicy.objects.create(
        name="other source", source="mcp:elsewhere", requires_confirmation=True
    )
    run = start(alice, script, tool_calls(tool_call("conf_lookup", order="A1")), text("Paid."))
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert RAN == [("conf_lookup", "A1")]


def test_a_policy_by_source_and_by_destructive_hint(alice):
    """An MCP server's tools by source; only those its pinned hints call destructive."""
    sync_tools()
    server = models.McpServer.objects.create(alias="files", transport="stdio", command="true")
    lookup = models.Tool.objects.get(name="conf_lookup")
    lookup.source = "mcp:files"
    lookup.save()
    link = models.McpServerTool.objects.create(
        server=server, tool=lookup, server_name="lookup", annotations={"readOnlyHint": True}
    )
    policies.forget_policies()
    models.DecisionPolicy.objects.create(
        name="files server", source="mcp:files", requires_confirmation=True
    )
    models.DecisionPolicy.objects.create(
        name="destructive", destructive_only=True, requires_approval=True
    )
    assert policies.policy_deciders("conf_lookup", {}) == (True, False)
    assert policies.policy_deciders("conf_delete", {}) == (False, False)  # not from that server
    link.annotations = {"destructiveHint": True}
    link.save()
    assert policies.policy_deciders("conf_lookup", {}) == (True, True)
    link.annotations = {}  # MCP's default: a tool that is not read-only may be destructive
    link.save()
    assert policies.policy_deciders("conf_lookup", {}) == (True, True)


def test_mcp_and_in_process_paths_obey_a_policy_through_the_gate(alice):
    """A path that cannot wait refuses the call a policy gates (as it does for approvals)."""
    sync_tools()
    models.DecisionPolicy.objects.create(
        name="lookups", tool_pattern="conf_lookup", requires_approval=True
    )
    verdict = gate.admit(
        gate.GateCall(
            ToolCall("c1", "conf_lookup", '{"order": "A1"}'),
            FunctionToolCallback(conf_lookup),
            user=alice,
        )
    )
    assert verdict.refused_by is gate.Rule.APPROVAL
    assert verdict.text == gate.approval_refusal_text("conf_lookup")


def test_a_policy_must_ask_for_something_and_name_a_function():
    from django.core.exceptions import ValidationError

    policy = models.DecisionPolicy(name="nothing", condition="tests.django.nope.missing")
    with pytest.raises(ValidationError) as info:
        policy.full_clean()
    assert info.value.message_dict == {
        "requires_confirmation": [
            "A policy must ask for the user's confirmation, an approval, or both."
        ],
        "condition": ["'tests.django.nope.missing' cannot be imported."],
    }
    good = models.DecisionPolicy(
        name="ok", condition="tests.django.test_confirmation.big_amount", requires_approval=True
    )
    good.full_clean()


def test_a_process_reads_the_policies_once_and_again_after_a_change():
    """No query per call: one read, kept; a save here drops the copy at once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def reads():
        with CaptureQueriesContext(connection) as captured:
            policies.policy_deciders("conf_lookup", {})
            policies.policy_deciders("conf_delete", {})
        return sum("tool_calling_decisionpolicy" in q["sql"] for q in captured.captured_queries)

    assert reads() == 1
    assert reads() == 0
    models.DecisionPolicy.objects.create(name="new", tool_pattern="x", requires_approval=True)
    assert reads() == 1


# -- telling approvers --------------------------------------------------------------------------


def test_approvers_are_emailed_when_a_call_waits_for_them_if_the_setting_is_on(
    alice, approver, script, mailoutbox
):
    approver.email = "staff@example.com"
    approver.save()
    alice.email = "alice@example.com"  # asked for it: not an approver of her own call
    alice.save()
    User.objects.create_user("idle", email="idle@example.com")  # not an approver
    with override_settings(TOOL_CALLING=tool_calling_settings(APPROVALS={"NOTIFY_BY_EMAIL": True})):
        run = start(alice, script, tool_calls(tool_call("conf_wire", amount=777)), text("Wired."))
        call = waiting(run, "conf_wire")
        assert mailoutbox == []  # the user confirms first
        assert approve(alice, call).status_code == 200
    (mail,) = mailoutbox
    assert mail.bcc == ["staff@example.com"] and mail.to == []
    assert mail.subject == "A call of conf_wire waits for your approval"
    assert "asked by alice" in mail.body
    assert "777" not in mail.body  # never the arguments


def test_no_email_unless_the_setting_is_on(alice, approver, script, mailoutbox):
    approver.email = "staff@example.com"
    approver.save()
    sync_tools()
    models.Tool.objects.filter(name="conf_lookup").update(requires_approval=True)
    start(alice, script, tool_calls(tool_call("conf_lookup", order="A1")), text("Paid."))
    assert mailoutbox == []
    with override_settings(TOOL_CALLING=tool_calling_settings(APPROVALS={"NOTIFY_BY_EMAIL": True})):
        start(alice, script, tool_calls(tool_call("conf_lookup", order="A2")), text("Paid."))
    assert [m.subject for m in mailoutbox] == ["A call of conf_lookup waits for your approval"]


# -- decisions bound to the tool and the rules; standing decisions ------------------------------


def test_always_allow_in_this_conversation_covers_the_next_calls_there_only(alice, script):
    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/a")), text("Done."))
    first = waiting(run, "conf_delete")
    assert approve(alice, first, remember=True).status_code == 200
    (standing,) = models.StandingDecision.objects.all()
    assert (standing.tool_name, standing.stage, standing.created_by) == (
        "conf_delete",
        "user",
        alice,
    )

    # The same conversation: the next call runs at once, audited as covered by it.
    script(tool_calls(tool_call("conf_delete", path="/b")), text("Done again."))
    response = client_for(alice).post(
        url("conversation-messages", run.conversation_id), {"text": "And /b"}, format="json"
    )
    assert response.status_code == 202
    second = models.ToolExecution.objects.get(run_id=response.data["id"])
    assert (second.status, second.approval, second.decided_by) == ("succeeded", "approved", alice)
    assert second.decision_reason == "Covered by a standing decision of this conversation."
    assert RAN == [("conf_delete", "/a"), ("conf_delete", "/b")]

    # Another conversation is asked again.
    other = start(alice, script, tool_calls(tool_call("conf_delete", path="/c")), text("Done."))
    assert waiting(other, "conf_delete").status == "awaiting_approval"


def _second_turn(alice, script, conversation_id, path):
    script(tool_calls(tool_call("conf_delete", path=path)), text("Done."))
    response = client_for(alice).post(
        url("conversation-messages", conversation_id), {"text": "Again"}, format="json"
    )
    return models.ToolExecution.objects.get(run_id=response.data["id"])


def test_a_standing_decision_is_void_once_the_tools_definition_changes(alice, script):
    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/a")), text("Done."))
    assert approve(alice, waiting(run, "conf_delete"), remember=True).status_code == 200
    # A deploy changed the tool (sync_tools records the new definition's hash).
    models.Tool.objects.filter(name="conf_delete").update(schema_hash="0" * 64)
    again = _second_turn(alice, script, run.conversation_id, "/b")
    assert again.status == "awaiting_approval"
    assert RAN == [("conf_delete", "/a")]


def test_a_standing_decision_is_void_once_the_rules_change(alice, script):
    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/a")), text("Done."))
    assert approve(alice, waiting(run, "conf_delete"), remember=True).status_code == 200
    models.DecisionPolicy.objects.create(
        name="files", tool_pattern="conf_*", requires_confirmation=True
    )
    again = _second_turn(alice, script, run.conversation_id, "/b")
    assert again.status == "awaiting_approval"
    assert client_for(alice).post(url("tool-execution-deny", again.pk), {}).status_code == 200
    # Revoked, it covers nothing either.
    models.DecisionPolicy.objects.all().delete()
    approvals.revoke_standing(models.StandingDecision.objects.get())
    third = _second_turn(alice, script, run.conversation_id, "/c")
    assert third.status == "awaiting_approval"
    assert RAN == [("conf_delete", "/a")]


def test_a_decision_taken_after_the_tool_changed_is_void_and_the_model_told(alice, script):
    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/a")), text("OK."))
    call = waiting(run, "conf_delete")
    assert call.definition_sha256 == models.Tool.objects.get(name="conf_delete").schema_hash
    assert len(call.decision_basis) == 64
    models.Tool.objects.filter(name="conf_delete").update(schema_hash="1" * 64)
    refused = approve(alice, call)
    assert refused.status_code == 409
    assert str(refused.data["detail"]) == (
        "The tool 'conf_delete' or the rules that asked for this decision changed since the "
        "call was asked for, so it was not made; if it is still needed, the assistant asks "
        "again and it is decided under the tool and rules as they are now."
    )
    call.refresh_from_db()
    assert call.status == "denied"
    assert call.result == (
        "The call to tool 'conf_delete' was not run: the tool or the rules that asked for a "
        "decision on it changed while it waited. Call it again if it is still needed."
    )
    assert RAN == []


def test_parallel_calls_of_one_reply_are_each_decided_in_any_order(alice, approver, script):
    run = start(
        alice,
        script,
        tool_calls(
            tool_call("conf_delete", path="/a"),
            tool_call("conf_lookup", order="A1"),
            tool_call("conf_delete", path="/b"),
        ),
        text("All done."),
    )
    first, second = models.ToolExecution.objects.filter(run=run, tool_name="conf_delete").order_by(
        "tool_call_id"
    )
    assert RAN == [("conf_lookup", "A1")]
    denied = client_for(alice).post(url("tool-execution-deny", second.pk), {}, format="json")
    assert denied.status_code == 200
    run.refresh_from_db()
    assert run.status == "awaiting_approval"  # one still waits
    assert approve(alice, first).status_code == 200
    run.refresh_from_db()
    assert run.status == "succeeded"
    tool_message = run.conversation.messages.get(role="tool")
    assert [r["id"] for r in tool_message.tool_responses] == ["call_1", "call_2", "call_3"]
    assert RAN == [("conf_lookup", "A1"), ("conf_delete", "/a")]


# -- the admin ----------------------------------------------------------------------------------


def test_operators_add_a_policy_in_the_admin_and_it_applies(admin_client, alice, script):
    """No deploy: the admin's form (validated), then the next call waits."""
    add = "/admin/tool_calling/decisionpolicy/add/"
    refused = admin_client.post(add, {"name": "nothing", "enabled": "on"})
    assert refused.status_code == 200
    assert "A policy must ask for the user&#x27;s confirmation, an approval, or both." in (
        refused.content.decode()
    )
    saved = admin_client.post(
        add,
        {
            "name": "lookups",
            "enabled": "on",
            "tool_pattern": "conf_look*",
            "requires_approval": "on",
        },
    )
    assert saved.status_code == 302
    run = start(alice, script, tool_calls(tool_call("conf_lookup", order="A1")), text("Paid."))
    assert waiting(run, "conf_lookup").deciders == "approver"


def test_the_admin_revokes_a_standing_decision_and_logs_it(admin_client, alice, script):
    from django.contrib.admin.models import LogEntry

    run = start(alice, script, tool_calls(tool_call("conf_delete", path="/a")), text("Done."))
    assert approve(alice, waiting(run, "conf_delete"), remember=True).status_code == 200
    standing = models.StandingDecision.objects.get()
    response = admin_client.post(
        "/admin/tool_calling/standingdecision/",
        {"action": "revoke_selected", "_selected_action": [standing.pk]},
        follow=True,
    )
    assert response.status_code == 200
    standing.refresh_from_db()
    assert standing.revoked_at is not None
    assert LogEntry.objects.get(object_id=str(standing.pk)).change_message == "Revoked."
    assert admin_client.get("/admin/tool_calling/standingdecision/add/").status_code == 403


def test_a_decision_on_a_call_decided_meanwhile_is_answered_in_words(alice, approver, script):
    """What the chat page shows when two people decide at once: no row id, no setting key."""
    run = start(alice, script, tool_calls(tool_call("conf_wire", amount=5)), text("Wired."))
    call = waiting(run, "conf_wire")
    assert client_for(alice).post(url("tool-execution-deny", call.pk), {}).status_code == 200
    late = approve(approver, call)
    assert late.status_code == 409
    assert str(late.data["detail"]) == (
        "This call of 'conf_wire' is not awaiting approval any more (denied)."
    )
