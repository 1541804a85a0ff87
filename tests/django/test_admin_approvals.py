"""The admin's approval queue: list, approve and deny actions, the decision page, the floor.

Who may decide is ``approvals.can_decide`` (the ``approve_toolexecution`` permission; superusers
hold it, staff alone do not), the same rule as the API's; the admin site admits staff only, so a
non-staff holder of the permission decides through the API, not here. The tests that resume runs use
a transactional database: an approved call is dispatched on commit, and Celery runs eagerly.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin as django_admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.test import RequestFactory, override_settings
from django.urls import reverse
from django.utils import timezone

from tests.django._tools import tool_calling_settings
from tests.fixtures import approval_tools
from tests.fixtures.approval_tools import (
    ONE_TRANSFER,
    RAN,
    TWO_TRANSFERS,
    gated_calls,
    scripted_model,
    start_gated_run,
)
from tests.fixtures.redactors import SECRET
from tool_calling import models
from tool_calling.admin import ApprovalQueueAdmin
from tool_calling.calls import approvals
from tool_calling.testing import tool_call

pytestmark = pytest.mark.django_db

QUEUE_URL = reverse("admin:tool_calling_pendingapproval_changelist")
TOOLS_URL = reverse("admin:tool_calling_tool_changelist")
EXECUTIONS_URL = reverse("admin:tool_calling_toolexecution_changelist")
XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
SKIPPED_ONE = "Skipped 1 call that was no longer awaiting approval."


# -- helpers -------------------------------------------------------------------------------------


def decision_url(call: models.ToolExecution) -> str:
    return reverse("admin:tool_calling_pendingapproval_change", args=[call.pk])


def make_call(*, minutes_ago: float = 0, **fields: Any) -> models.ToolExecution:
    """An audit row, awaiting approval unless told otherwise."""
    fields.setdefault("tool_name", "transfer_funds")
    fields.setdefault("status", models.ExecutionStatus.AWAITING_APPROVAL)
    fields.setdefault(
        "approval",
        models.ApprovalDecision.PENDING
        if fields["status"] == models.ExecutionStatus.AWAITING_APPROVAL
        else models.ApprovalDecision.NOT_REQUIRED,
    )
    row = models.ToolExecution.objects.create(**fields)
    if minutes_ago:
        models.ToolExecution.objects.filter(pk=row.pk).update(
            created_at=timezone.now() - timedelta(minutes=minutes_ago)
        )
    return row


def make_staff(django_user_model: Any, username: str, *perms: str, **fields: Any) -> Any:
    fields.setdefault("is_staff", True)
    user = django_user_model.objects.create_user(username, password="pw", **fields)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def run_action(client: Any, action: str, calls: list[Any], **extra: Any) -> Any:
    data = {"action": action, "_selected_action": [c.pk for c in calls], "index": 0, **extra}
    return client.post(QUEUE_URL, data, follow=True)


def confirm_denial(client: Any, calls: list[Any], reason: str) -> Any:
    """What the deny confirmation page posts (Django's delete-confirmation pattern)."""
    data = {
        "action": "deny_selected",
        "_selected_action": [c.pk for c in calls],
        "post": "yes",
        "reason": reason,
    }
    return client.post(QUEUE_URL, data, follow=True)


def page_messages(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def decision_log(call: models.ToolExecution) -> list[tuple[int, str]]:
    """The admin log of the call's audit row: (user id, message)."""
    content_type = ContentType.objects.get_for_model(models.ToolExecution)
    return list(
        LogEntry.objects.filter(
            content_type=content_type, object_id=str(call.pk), action_flag=CHANGE
        )
        .order_by("pk")
        .values_list("user_id", "change_message")
    )


def tool_responses(run: models.Run) -> dict[str, dict[str, Any]]:
    """The stored tool message of the run's conversation, by call id."""
    message = models.Message.objects.get(conversation=run.conversation, role="tool")
    return {r["id"]: r for r in message.tool_responses}


@pytest.fixture
def gated_tool() -> Any:
    with approval_tools.gated_tool():
        yield


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice")


# -- the queue -----------------------------------------------------------------------------------


def test_queue_lists_only_calls_awaiting_approval_oldest_first(admin_client: Any) -> None:
    newer = make_call(minutes_ago=1, arguments='{"account": "B"}')
    older = make_call(minutes_ago=30, arguments='{"account": "A"}')
    make_call(status=models.ExecutionStatus.SUCCEEDED)
    make_call(status=models.ExecutionStatus.PENDING, approval=models.ApprovalDecision.APPROVED)
    make_call(status=models.ExecutionStatus.DENIED, approval=models.ApprovalDecision.DENIED)
    make_call(status=models.ExecutionStatus.DENIED, approval=models.ApprovalDecision.EXPIRED)

    response = admin_client.get(QUEUE_URL)

    assert response.status_code == 200
    assert [row.pk for row in response.context["cl"].result_list] == [older.pk, newer.pk]
    html = response.content.decode()
    assert "<h1>Approval queue: calls awaiting a decision, oldest first</h1>" in html
    assert "2 calls awaiting approval" in html
    for header in ("Tool name", "User", "Conversation", "Run", "Arguments", "Approval expires"):
        assert f">{header}<" in html
    # Deciding is the only change: no add button, no bulk delete.
    actions = [value for value, _label in response.context["action_form"].fields["action"].choices]
    assert actions == ["", "approve_selected", "deny_selected"]
    assert reverse("admin:tool_calling_pendingapproval_add") not in html


def test_queue_columns_link_the_conversation_and_run_and_escape_the_arguments(
    admin_client: Any, alice: Any
) -> None:
    conversation = models.Conversation.objects.create(owner=alice, title=f"Chat {XSS}")
    run = models.Run.objects.create(
        conversation=conversation, user=alice, text="hi", status="awaiting_approval"
    )
    long_tail = "x" * 500
    make_call(
        conversation=conversation,
        run=run,
        user=alice,
        arguments=json.dumps({"note": XSS, "tail": long_tail}),
        approval_expires_at=timezone.now() + timedelta(hours=1),
    )

    response = admin_client.get(QUEUE_URL)

    html = response.content.decode()
    assert XSS not in html
    assert XSS_ESCAPED in html  # the arguments and the conversation title, escaped
    assert long_tail not in html  # truncated in the list
    transcript = reverse("admin:tool_calling_conversation_change", args=[conversation.pk])
    assert f'href="{transcript}"' in html
    assert f"{str(run.pk)[:8]} (Awaiting approval)" in html
    assert ">alice<" in html


def test_admin_index_lists_the_queue_for_approvers(client: Any, django_user_model: Any) -> None:
    client.force_login(make_staff(django_user_model, "rita", "tool_calling.approve_toolexecution"))
    response = client.get(reverse("admin:index"))
    assert QUEUE_URL in response.content.decode()


# -- who may decide ------------------------------------------------------------------------------


def test_staff_need_the_approve_permission_to_decide(client: Any, django_user_model: Any) -> None:
    """Being staff is not enough: without approve_toolexecution the queue refuses; with it, fine.

    The admin follows approvals.can_decide (the explicit permission; superusers hold it).
    """
    otto = make_staff(django_user_model, "otto")
    call = make_call()
    client.force_login(otto)

    assert approvals.can_decide(otto) is False
    assert client.get(QUEUE_URL).status_code == 403
    assert client.get(decision_url(call)).status_code == 403
    assert client.post(decision_url(call), {"_deny": "1", "reason": ""}).status_code == 403
    response = client.post(
        QUEUE_URL, {"action": "deny_selected", "_selected_action": [call.pk], "index": 0}
    )
    assert response.status_code == 403
    assert QUEUE_URL not in client.get(reverse("admin:index")).content.decode()
    call.refresh_from_db()
    assert call.status == "awaiting_approval"

    rita = make_staff(django_user_model, "rita", "tool_calling.approve_toolexecution")
    client.force_login(rita)
    assert client.get(QUEUE_URL).status_code == 200
    assert client.get(decision_url(call)).status_code == 200
    response = confirm_denial(client, [call], "no")

    call.refresh_from_db()
    assert (call.status, call.decided_by) == ("denied", rita)
    assert page_messages(response) == ["Denied 1 call; the model is told so."]


def test_the_queue_follows_can_decide(
    client: Any, django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When can_decide says no, the queue, the actions and the decision page all refuse."""
    client.force_login(make_staff(django_user_model, "rita"))
    call = make_call()
    monkeypatch.setattr(approvals, "can_decide", lambda user: False)

    assert client.get(QUEUE_URL).status_code == 403
    assert client.get(decision_url(call)).status_code == 403
    assert client.post(decision_url(call), {"_deny": "1", "reason": ""}).status_code == 403
    response = client.post(
        QUEUE_URL,
        {"action": "approve_selected", "_selected_action": [call.pk], "index": 0},
    )
    assert response.status_code == 403
    assert QUEUE_URL not in client.get(reverse("admin:index")).content.decode()
    call.refresh_from_db()
    assert call.status == "awaiting_approval"


def test_permission_holders_who_are_not_staff_never_reach_the_admin(
    client: Any, django_user_model: Any
) -> None:
    """can_decide is true for them (they use the API), but the admin site admits staff only."""
    holder = make_staff(
        django_user_model, "paula", "tool_calling.approve_toolexecution", is_staff=False
    )
    assert approvals.can_decide(holder)
    call = make_call()
    client.force_login(holder)

    for response in (
        client.get(QUEUE_URL),
        client.post(decision_url(call), {"_approve": "1", "arguments": "{}"}),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
    call.refresh_from_db()
    assert call.status == "awaiting_approval"


@pytest.mark.parametrize(
    ("fields", "perms", "allowed"),
    [
        ({"is_staff": True}, (), False),
        ({"is_staff": True}, ("tool_calling.approve_toolexecution",), True),
        ({"is_staff": True, "is_superuser": True}, (), True),
        ({"is_staff": False}, ("tool_calling.approve_toolexecution",), True),
        ({"is_staff": False}, ("tool_calling.view_toolexecution",), False),
        ({"is_staff": True, "is_active": False}, ("tool_calling.approve_toolexecution",), False),
    ],
)
def test_queue_permissions_are_can_decide(
    django_user_model: Any, fields: dict[str, bool], perms: tuple[str, ...], allowed: bool
) -> None:
    request = RequestFactory().get(QUEUE_URL)
    request.user = make_staff(django_user_model, "someone", *perms, **fields)
    queue = ApprovalQueueAdmin(models.PendingApproval, django_admin.site)

    assert queue.has_module_permission(request) is allowed
    assert queue.has_view_permission(request) is allowed
    assert queue.has_change_permission(request) is allowed
    assert queue.has_decide_permission(request) is allowed
    assert queue.has_add_permission(request) is False
    assert queue.has_delete_permission(request) is False


# -- the actions (runs resume: transactional database, eager Celery) -----------------------------


@pytest.mark.django_db(transaction=True)
def test_approve_action_resumes_the_run_and_records_the_approver(
    admin_client: Any, admin_user: Any, alice: Any, gated_tool: None
) -> None:
    with scripted_model(*ONE_TRANSFER) as model:
        run = start_gated_run(alice)
        [call] = gated_calls(run)
        assert RAN == []

        response = run_action(admin_client, "approve_selected", [call])

    assert page_messages(response) == ["Approved 1 call; it runs now."]
    call.refresh_from_db()
    run.refresh_from_db()
    assert (call.status, call.approval, call.decided_by) == ("succeeded", "approved", admin_user)
    assert call.decided_at is not None
    assert RAN == [("ACME", 10)]
    assert (run.status, run.answer) == ("succeeded", "Done")
    model.assert_consumed()
    assert decision_log(call) == [(admin_user.pk, "Approved (bulk action).")]
    # The decision is in the history of the call's audit row, and the queue is empty again.
    history = reverse("admin:tool_calling_toolexecution_history", args=[call.pk])
    assert "Approved (bulk action)." in admin_client.get(history).content.decode()
    assert list(admin_client.get(QUEUE_URL).context["cl"].result_list) == []


@pytest.mark.django_db(transaction=True)
def test_deny_action_asks_for_a_reason_that_the_model_then_reads(
    admin_client: Any, admin_user: Any, alice: Any, gated_tool: None
) -> None:
    with scripted_model(*TWO_TRANSFERS) as model:
        run = start_gated_run(alice)
        acme, evil = gated_calls(run)

        # First the confirmation page: the calls, a reason field, nothing decided yet.
        page = admin_client.post(
            QUEUE_URL,
            {"action": "deny_selected", "_selected_action": [acme.pk, evil.pk], "index": 0},
        )
        assert page.status_code == 200
        assert page.templates[0].name == "tool_calling/admin/approval/deny_confirmation.html"
        html = page.content.decode()
        assert 'name="reason"' in html
        assert 'name="post" value="yes"' in html
        assert "EVIL" in html
        assert models.ToolExecution.objects.filter(status="awaiting_approval").count() == 2

        response = confirm_denial(admin_client, [acme, evil], "Not to unknown accounts.")

    assert page_messages(response) == ["Denied 2 calls; the model is told so."]
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Done")
    assert RAN == []
    for call in (acme, evil):
        call.refresh_from_db()
        assert (call.status, call.approval, call.decided_by) == ("denied", "denied", admin_user)
        assert call.decision_reason == "Not to unknown accounts."
        assert decision_log(call) == [(admin_user.pk, "Denied (bulk action).")]
    # The model was told, in the stored tool message and in its next request.
    responses = tool_responses(run)
    for call in (acme, evil):
        assert responses[call.tool_call_id]["is_error"] is True
        assert "Reason: Not to unknown accounts." in responses[call.tool_call_id]["response_data"]
    assert "Reason: Not to unknown accounts." in str(model.requests[-1].messages[-1])


def test_deny_confirmation_rejects_a_reason_that_is_too_long(admin_client: Any) -> None:
    call = make_call(arguments=json.dumps({"note": XSS}))

    response = confirm_denial(admin_client, [call], "x" * (approvals.MAX_REASON_CHARS + 1))

    assert response.status_code == 200
    assert response.context["form"].errors["reason"]
    html = response.content.decode()
    assert XSS not in html
    assert XSS_ESCAPED in html
    call.refresh_from_db()
    assert call.status == "awaiting_approval"


@pytest.mark.django_db(transaction=True)
def test_a_second_decision_on_the_same_call_is_reported_as_skipped(
    admin_client: Any, admin_user: Any, alice: Any, gated_tool: None
) -> None:
    with scripted_model(*TWO_TRANSFERS):
        run = start_gated_run(alice)
        acme, evil = gated_calls(run)
        # Another approver was quicker with the first call.
        other = make_staff(type(admin_user), "otto")
        approvals.approve(acme, user=other)

        mixed = run_action(admin_client, "approve_selected", [acme, evil])
        again = run_action(admin_client, "approve_selected", [evil])
        denied = confirm_denial(admin_client, [acme], "too late")

    assert page_messages(mixed) == [f"Approved 1 call; it runs now. {SKIPPED_ONE}"]
    assert page_messages(again) == [SKIPPED_ONE]
    assert page_messages(denied) == [SKIPPED_ONE]
    acme.refresh_from_db()
    evil.refresh_from_db()
    assert (acme.decided_by, evil.decided_by) == (other, admin_user)
    assert (acme.status, evil.status) == ("succeeded", "succeeded")
    assert decision_log(acme) == []
    assert decision_log(evil) == [(admin_user.pk, "Approved (bulk action).")]
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert RAN == [("ACME", 10), ("EVIL", 99)]


def test_the_decision_page_of_a_decided_call_says_what_became_of_it(
    admin_client: Any, admin_user: Any
) -> None:
    call = make_call(
        status=models.ExecutionStatus.DENIED,
        approval=models.ApprovalDecision.DENIED,
        decided_by=admin_user,
    )

    for response in (
        admin_client.get(decision_url(call), follow=True),
        admin_client.post(decision_url(call), {"_approve": "1", "arguments": "{}"}, follow=True),
    ):
        assert response.redirect_chain[-1][0] == QUEUE_URL
        assert page_messages(response) == [
            "The call to tool “transfer_funds” is no longer awaiting approval: Denied by admin."
        ]
    call.refresh_from_db()
    assert call.status == "denied"


# -- the decision page ---------------------------------------------------------------------------


def test_decision_page_shows_the_call_with_its_arguments_to_edit(
    admin_client: Any, alice: Any, gated_tool: None
) -> None:
    call = make_call(
        tool=models.Tool.objects.get(name="transfer_funds"),
        user=alice,
        tool_call_id="call_7",
        arguments=json.dumps({"account": XSS, "amount": 3}),
    )

    response = admin_client.get(decision_url(call))

    assert response.status_code == 200
    form = response.context["form"]
    assert json.loads(form.initial["arguments"]) == {"account": XSS, "amount": 3}
    html = response.content.decode()
    assert XSS not in html
    assert XSS_ESCAPED in html
    assert 'name="_approve"' in html
    assert 'name="_deny"' in html
    assert "call_7" in html
    assert "Send money to an account" in html  # the tool's description, to judge the call
    assert "&quot;amount&quot;" in html  # its input schema


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ("{not json", "not valid JSON"),
        ('{"account": "ACME"}', "amount"),
        ('{"account": "ACME", "amount": "ten"}', "amount"),
        ("[1, 2]", "object"),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_invalid_edited_arguments_show_the_error_and_change_nothing(
    admin_client: Any, alice: Any, gated_tool: None, arguments: str, error: str
) -> None:
    with scripted_model(*ONE_TRANSFER):
        run = start_gated_run(alice)
        [call] = gated_calls(run)

        response = admin_client.post(
            decision_url(call), {"_approve": "1", "arguments": arguments, "reason": ""}
        )

    assert response.status_code == 200
    [message] = response.context["form"].errors["arguments"]
    assert error in message
    assert "transfer_funds" in message
    assert "Nothing was decided" in response.content.decode()
    assert response.context["form"]["arguments"].value() == arguments  # kept for fixing
    call.refresh_from_db()
    run.refresh_from_db()
    assert (call.status, call.approval, call.decided_by) == ("awaiting_approval", "pending", None)
    assert call.original_arguments == ""
    assert run.status == "awaiting_approval"
    assert RAN == []
    assert decision_log(call) == []


@pytest.mark.django_db(transaction=True)
def test_edited_arguments_run_with_the_edited_values_and_keep_the_original(
    admin_client: Any, admin_user: Any, alice: Any, gated_tool: None
) -> None:
    with scripted_model(*ONE_TRANSFER) as model:
        run = start_gated_run(alice)
        [call] = gated_calls(run)
        original = call.arguments

        response = admin_client.post(
            decision_url(call),
            {
                "_approve": "1",
                "arguments": '{"account": "ACME", "amount": 5}',
                "reason": "Capped at 5.",
            },
            follow=True,
        )

    assert page_messages(response) == [
        "The call to tool “transfer_funds” was approved with your arguments; it runs now."
    ]
    assert response.redirect_chain[-1][0] == QUEUE_URL
    assert RAN == [("ACME", 5)]
    call.refresh_from_db()
    run.refresh_from_db()
    assert (call.status, call.approval, call.decided_by) == ("succeeded", "approved", admin_user)
    assert json.loads(call.original_arguments) == {"account": "ACME", "amount": 10}
    assert call.original_arguments == original
    assert json.loads(call.arguments) == {"account": "ACME", "amount": 5}
    assert call.decision_reason == "Capped at 5."
    assert tool_responses(run)[call.tool_call_id]["response_data"] == "sent 5 to ACME"
    assert (run.status, run.answer) == ("succeeded", "Done")
    model.assert_consumed()
    assert decision_log(call) == [(admin_user.pk, "Approved with edited arguments.")]


@pytest.mark.django_db(transaction=True)
def test_unchanged_arguments_approve_the_models_own(
    admin_client: Any, admin_user: Any, alice: Any, gated_tool: None
) -> None:
    """The prefilled text (indented, as the browser sends it back) is not an edit."""
    with scripted_model(*ONE_TRANSFER):
        run = start_gated_run(alice)
        [call] = gated_calls(run)
        shown = admin_client.get(decision_url(call)).context["form"].initial["arguments"]

        response = admin_client.post(
            decision_url(call),
            {"_approve": "1", "arguments": shown.replace("\n", "\r\n"), "reason": ""},
            follow=True,
        )

    assert page_messages(response) == [
        "The call to tool “transfer_funds” was approved; it runs now."
    ]
    call.refresh_from_db()
    assert (call.status, call.original_arguments) == ("succeeded", "")
    assert RAN == [("ACME", 10)]
    assert decision_log(call) == [(admin_user.pk, "Approved.")]


@override_settings(
    TOOL_CALLING=tool_calling_settings(AUDIT_REDACTOR="tests.fixtures.redactors.redact")
)
@pytest.mark.django_db(transaction=True)
def test_redacted_arguments_left_unchanged_run_with_the_exact_ones(
    admin_client: Any, alice: Any, gated_tool: None
) -> None:
    """The page shows the audit's redacted text; approving it as is must not run with it."""
    steps = (tool_call("transfer_funds", account=SECRET, amount=1), ONE_TRANSFER[-1])
    with scripted_model(*steps):
        run = start_gated_run(alice)
        [call] = gated_calls(run)
        page = admin_client.get(decision_url(call))
        shown = page.context["form"].initial["arguments"]
        assert SECRET not in page.content.decode()
        assert page.context["arguments_abridged"] is True

        admin_client.post(decision_url(call), {"_approve": "1", "arguments": shown})

    assert RAN == [(SECRET, 1)]


@pytest.mark.django_db(transaction=True)
def test_denying_on_the_decision_page_tells_the_model_the_reason(
    admin_client: Any, admin_user: Any, alice: Any, gated_tool: None
) -> None:
    with scripted_model(*ONE_TRANSFER) as model:
        run = start_gated_run(alice)
        [call] = gated_calls(run)

        response = admin_client.post(
            decision_url(call),
            {"_deny": "1", "arguments": "{not even json", "reason": "Ask the customer first."},
            follow=True,
        )

    assert page_messages(response) == [
        "The call to tool “transfer_funds” was denied; the model is told so."
    ]
    call.refresh_from_db()
    run.refresh_from_db()
    assert (call.status, call.approval, call.decided_by) == ("denied", "denied", admin_user)
    assert call.decision_reason == "Ask the customer first."
    assert (
        "Reason: Ask the customer first." in tool_responses(run)[call.tool_call_id]["response_data"]
    )
    assert "Reason: Ask the customer first." in str(model.requests[-1].messages[-1])
    assert (run.status, RAN) == ("succeeded", [])
    assert decision_log(call) == [(admin_user.pk, "Denied.")]


# -- the tools' approval flag: the code is a floor ------------------------------------------------


def test_no_approval_action_skips_tools_whose_code_requires_approval(
    admin_client: Any, admin_user: Any, gated_tool: None
) -> None:
    coded = models.Tool.objects.get(name="transfer_funds")
    flagged = models.Tool.objects.create(name="t_flagged", requires_approval=True)

    response = admin_client.post(
        TOOLS_URL,
        {"action": "skip_approval", "_selected_action": [coded.pk, flagged.pk], "index": 0},
        follow=True,
    )

    assert page_messages(response) == [
        "1 tool requires approval in its code, which cannot be lifted here; left unchanged: "
        "transfer_funds.",
        "1 tool no longer requires approval.",
    ]
    coded.refresh_from_db()
    flagged.refresh_from_db()
    assert (coded.requires_approval, flagged.requires_approval) == (True, False)
    content_type = ContentType.objects.get_for_model(models.Tool)
    logged = LogEntry.objects.filter(content_type=content_type).values_list("object_id", flat=True)
    assert list(logged) == [str(flagged.pk)]


def test_no_approval_action_on_code_required_tools_only_says_so(
    admin_client: Any, gated_tool: None
) -> None:
    coded = models.Tool.objects.get(name="transfer_funds")

    response = admin_client.post(
        TOOLS_URL,
        {"action": "skip_approval", "_selected_action": [coded.pk], "index": 0},
        follow=True,
    )

    assert page_messages(response) == [
        "1 tool requires approval in its code, which cannot be lifted here; left unchanged: "
        "transfer_funds."
    ]
    coded.refresh_from_db()
    assert coded.requires_approval is True


def test_tool_form_keeps_the_code_floor_read_only(admin_client: Any, gated_tool: None) -> None:
    coded = models.Tool.objects.get(name="transfer_funds")
    url = reverse("admin:tool_calling_tool_change", args=[coded.pk])

    page = admin_client.get(url)
    html = page.content.decode()
    assert 'name="requires_approval"' not in html
    assert "cannot be lifted here" in html

    response = admin_client.post(
        url,
        {
            "enabled": "on",
            "requires_approval": "",  # unticked: not a field of this form, so ignored
            "execution_mode": "",
            "queue": "",
            "timeout": "",
            "quota_window": "60",
            "retries": "0",
            "retry_backoff": "1.0",
            "limit_override-TOTAL_FORMS": "1",
            "limit_override-INITIAL_FORMS": "0",
            "limit_override-MIN_NUM_FORMS": "0",
            "limit_override-MAX_NUM_FORMS": "1",
            "limit_override-0-max_calls_per_turn": "",
            "limit_override-0-tool": str(coded.pk),
            "limit_override-0-id": "",
        },
    )

    assert response.status_code == 302, response.context and response.context["errors"]
    coded.refresh_from_db()
    assert coded.requires_approval is True
    # A tool without the floor still has the editable flag.
    plain = models.Tool.objects.create(name="t_plain")
    plain_page = admin_client.get(reverse("admin:tool_calling_tool_change", args=[plain.pk]))
    assert 'name="requires_approval"' in plain_page.content.decode()


# -- the audit -----------------------------------------------------------------------------------


def test_audit_shows_the_approval_fields_read_only_and_filters_by_decision(
    admin_client: Any, admin_user: Any
) -> None:
    denied = make_call(
        status=models.ExecutionStatus.DENIED,
        approval=models.ApprovalDecision.DENIED,
        decided_by=admin_user,
        decided_at=timezone.now(),
        decision_reason=f"Because {XSS}",
        original_arguments=json.dumps({"note": XSS}),
        approval_expires_at=timezone.now(),
    )
    approved = make_call(
        status=models.ExecutionStatus.SUCCEEDED, approval=models.ApprovalDecision.APPROVED
    )
    plain = make_call(status=models.ExecutionStatus.SUCCEEDED)

    page = admin_client.get(reverse("admin:tool_calling_toolexecution_change", args=[denied.pk]))
    html = page.content.decode()
    for label in (
        "Approval:",
        "Approval expires:",
        "Decided by:",
        "Decided:",
        "Decision reason:",
        "Original arguments:",
    ):
        assert f">{label}<" in html
    assert XSS not in html
    assert html.count(XSS_ESCAPED) == 2  # the reason and the original arguments
    assert "<textarea" not in html  # read-only

    listed = admin_client.get(EXECUTIONS_URL, {"approval": "denied"})
    assert 'data-filter-title="approval"' in listed.content.decode()  # offered in the sidebar
    assert [row.pk for row in listed.context["cl"].result_list] == [denied.pk]
    listed = admin_client.get(EXECUTIONS_URL, {"approval": "approved"})
    assert [row.pk for row in listed.context["cl"].result_list] == [approved.pk]
    assert plain.pk not in [
        row.pk
        for row in admin_client.get(EXECUTIONS_URL, {"approval": "pending"})
        .context["cl"]
        .result_list
    ]


@pytest.mark.django_db(transaction=True)
def test_approve_action_leaves_ones_own_calls_waiting_when_self_approval_is_off(
    admin_client: Any, admin_user: Any, gated_tool: None
) -> None:
    with scripted_model(*ONE_TRANSFER):
        run = start_gated_run(admin_user)
        [call] = gated_calls(run)
        with override_settings(
            TOOL_CALLING=tool_calling_settings(APPROVALS={"ALLOW_SELF_APPROVAL": False})
        ):
            response = run_action(admin_client, "approve_selected", [call])
    assert any("another person must approve" in m for m in page_messages(response))
    call.refresh_from_db()
    assert (call.status, call.approval) == ("awaiting_approval", "pending")
    assert RAN == []


@pytest.mark.django_db(transaction=True)
def test_the_decision_page_of_ones_own_call_offers_no_approve_and_says_why(
    admin_client: Any, admin_user: Any, gated_tool: None
) -> None:
    """No "please correct the error below" with nothing to correct: the page says who decides."""
    with scripted_model(*ONE_TRANSFER):
        run = start_gated_run(admin_user)
        [call] = gated_calls(run)
        with override_settings(
            TOOL_CALLING=tool_calling_settings(APPROVALS={"ALLOW_SELF_APPROVAL": False})
        ):
            page = admin_client.get(decision_url(call))
            html = page.content.decode()
            assert 'name="_approve"' not in html
            assert (
                "You asked for this call yourself, so another person must approve it. You may "
                "still deny it."
            ) in html
            # A hand-made POST is told the same, not sent back to a form with errors.
            posted = admin_client.post(
                decision_url(call), {"arguments": "{}", "reason": "", "_approve": "1"}, follow=True
            )
    assert "please correct the error below" not in posted.content.decode()
    assert page_messages(posted) == [
        "You asked for this call of 'transfer_funds' yourself, so another person must approve it."
    ]
    call.refresh_from_db()
    assert call.status == "awaiting_approval"
