"""What is checked when a call runs, in-process and on workers: who may (S4), how often (S8),
retries of transient failures (R6), and what the model reads of an unexpected error (S13).

Calls on workers run through eager Celery here (tests.settings), so the worker's code path runs
in this process; tests/celery runs it on real workers.
"""

from __future__ import annotations

import datetime
import json
import logging
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.django._api import client_for, url
from tests.django._tools import registered, tool_calling_settings
from tool_calling import ToolContext, ToolResponse, ToolResponseMessage, models, tool
from tool_calling.calls import quotas
from tool_calling.calls.authorization import CallRequest, ToolPermissionError, authorize
from tool_calling.calls.failures import generic_text
from tool_calling.calls.retries import RetryPolicy, TransientToolError
from tool_calling.core.chat.client import ChatClient
from tool_calling.exceptions import ToolFailure
from tool_calling.governance import governed_chat_client
from tool_calling.mcp.serving import McpPrincipal, _list_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, object]] = []
"""Side effects: (tool, argument) per run of a tool below."""
FAILURES: dict[str, int] = {}
"""Transient failures still to raise, per key (the flaky tools count them down)."""
CHECKED: list[CallRequest] = []
"""What the authorization check saw."""
DSN = "postgres://admin:hunter2@db.internal:5432/prod"


def owns_conversation(call: CallRequest) -> bool:
    """The tool's check: the conversation must be the user's own (a tenant filter)."""
    CHECKED.append(call)
    return models.Conversation.objects.filter(
        pk=call.arguments.get("conversation_id"), owner=call.user
    ).exists()


@authorize(check=owns_conversation)
@tool
def conversation_title(conversation_id: str) -> str:
    """The title of one of the user's conversations."""
    RAN.append(("conversation_title", conversation_id))
    return models.Conversation.objects.get(pk=conversation_id).title


@authorize(permission="auth.view_user")
@tool
def list_users() -> str:
    """The user names (needs auth.view_user)."""
    RAN.append(("list_users", None))
    return ", ".join(User.objects.order_by("username").values_list("username", flat=True))


def broken_check(call: CallRequest) -> bool:
    raise RuntimeError("the check itself is broken")


@authorize(check=broken_check)
@tool
def guarded_by_a_broken_check() -> str:
    """Its check raises: refused, never run."""
    RAN.append(("guarded_by_a_broken_check", None))
    return "ran"


def says_why(call: CallRequest) -> bool:
    raise ToolPermissionError("Only the account's owner may close it.")


@authorize(check=says_why)
@tool
def close_account() -> str:
    """Refused with the check's own reason."""
    RAN.append(("close_account", None))
    return "closed"


@tool
def metered(key: str) -> str:
    """A tool with quotas (its Tool row says how many)."""
    RAN.append(("metered", key))
    return f"metered {key}"


@tool
def flaky(key: str) -> str:
    """Fail transiently while FAILURES[key] lasts, then answer."""
    RAN.append(("flaky", key))
    if FAILURES.get(key, 0) > 0:
        FAILURES[key] -= 1
        raise TransientToolError(f"upstream busy for {key}")
    return f"flaky {key} answered"


@tool
def unreliable_network(key: str) -> str:
    """Raise ConnectionError while FAILURES[key] lasts (retried only when idempotent)."""
    RAN.append(("unreliable_network", key))
    if FAILURES.get(key, 0) > 0:
        FAILURES[key] -= 1
        raise ConnectionError(f"connection reset for {key}")
    return f"network {key} answered"


@tool
def broken_database(key: str) -> str:
    """Fail with a driver error whose message holds a DSN (never for the model)."""
    RAN.append(("broken_database", key))
    raise RuntimeError(f"could not connect to {DSN}")


@tool
def says_no(key: str) -> str:
    """Fail on purpose with a message for the model."""
    RAN.append(("says_no", key))
    raise ToolFailure(f"Order {key} is already shipped; it cannot be cancelled.")


TOOLS = (
    conversation_title,
    list_users,
    guarded_by_a_broken_check,
    close_account,
    metered,
    flaky,
    unreliable_network,
    broken_database,
    says_no,
)


@pytest.fixture(autouse=True)
def tools():
    RAN.clear()
    FAILURES.clear()
    CHECKED.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


@pytest.fixture
def bob():
    return User.objects.create_user("bob")


@pytest.fixture(params=["inline", "celery"])
def mode(request):
    """Each test runs its calls in-process and on a (eager) worker.

    One call at a time: the in-memory test database refuses concurrent writers ("database
    table is locked"); concurrency is covered on PostgreSQL (tests/postgres).
    """
    execution = {"MODE": request.param, "MAX_CONCURRENT_CALLS": 1}
    with override_settings(TOOL_CALLING=tool_calling_settings(EXECUTION=execution)):
        yield request.param


def turn(model, user, *, conversation=None):
    client = governed_chat_client(user=user, conversation=conversation, model=model)
    return client.prompt("Go").call().content()


def responses(model, request=-1):
    message = model.requests[request].messages[-1]
    assert isinstance(message, ToolResponseMessage)
    return message.responses


def configure(name, **fields):
    assert models.Tool.objects.filter(name=name).update(**fields) == 1


def grant(user, codename):
    app_label, code = codename.split(".")
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label=app_label, codename=code)
    )
    return User.objects.get(pk=user.pk)  # permissions are cached per instance


# --- S4: authorization in the end user's context ---------------------------------------------


def test_s4_the_model_passing_another_users_object_id_is_refused_and_audited(
    mode, alice, bob, caplog
):
    """Alice's turn; a prompt-injected model asks for Bob's conversation: refused, audited."""
    bobs = models.Conversation.objects.create(owner=bob, title="Bob's medical notes")
    alices = models.Conversation.objects.create(owner=alice, title="Alice's trip")
    model = ScriptedChatModel(
        [
            tool_call("conversation_title", conversation_id=str(bobs.pk)),
            tool_call("conversation_title", conversation_id=str(alices.pk)),
            text("Done"),
        ]
    )
    refused = (
        "Tool 'conversation_title' refused the call: the user of this conversation may not do "
        "that (with these arguments). The call was not made."
    )
    with CaptureQueriesContext(connection) as queries, caplog.at_level(logging.WARNING):
        assert turn(model, alice) == "Done"

    assert responses(model, 1) == [ToolResponse("call_1", "conversation_title", refused, True)]
    assert responses(model, 2) == [ToolResponse("call_2", "conversation_title", "Alice's trip")]
    assert RAN == [("conversation_title", str(alices.pk))]  # Bob's was never read
    first, second = models.ToolExecution.objects.order_by("pk")
    assert (first.status, first.result, first.is_error, first.user) == (
        "refused",
        refused,
        True,
        alice,
    )
    assert second.status == "succeeded"
    # The log names the tool, the user and the rule; the reason (a check may quote the call's
    # arguments) is in the audit row only.
    assert f"Refused a call of tool 'conversation_title' for user {alice.pk} (permission)" in (
        caplog.text
    )
    assert refused not in caplog.text
    # The check ran as Alice, and its query carries the tenant filter.
    assert [(c.user, c.arguments) for c in CHECKED] == [
        (alice, {"conversation_id": str(bobs.pk)}),
        (alice, {"conversation_id": str(alices.pk)}),
    ]
    assert CHECKED[0].context["user_id"] == alice.pk
    owner_filter = f'"tool_calling_conversation"."owner_id" = {alice.pk}'
    checks = [q["sql"] for q in queries if owner_filter in q["sql"]]
    assert checks and all(bobs.pk.hex in q or str(bobs.pk) in q for q in checks[:1])


def test_s4_permissions_the_code_and_the_operator_require(mode, alice):
    """Without the permission the tool is not offered, and a call of it is refused unrun."""
    model = ScriptedChatModel([tool_call("list_users"), text("Done")])
    turn(model, alice)
    assert model.tool_names_seen[0].count("list_users") == 0
    [refused] = responses(model)
    assert refused.is_error
    assert refused.response_data.startswith("Unknown or disabled tool 'list_users'.")
    alice = grant(alice, "auth.view_user")
    model = ScriptedChatModel([tool_call("list_users"), text("Done")])
    turn(model, alice)
    assert responses(model) == [ToolResponse("call_1", "list_users", "alice")]

    configure("list_users", permission="auth.change_user")  # the operator asks for more
    model = ScriptedChatModel([tool_call("list_users"), text("Done")])
    turn(model, alice)
    assert responses(model)[0].response_data.startswith("Unknown or disabled tool 'list_users'.")
    assert RAN == [("list_users", None)]
    statuses = list(models.ToolExecution.objects.order_by("pk").values_list("status", flat=True))
    assert statuses == ["refused", "succeeded", "refused"]


def test_s4_a_permission_withdrawn_after_the_offer_refuses_the_call(mode, alice):
    """The gate checks the permissions again when the call runs (S2, S4)."""
    alice = grant(alice, "auth.view_user")

    def operator_asks_for_more(prompt):
        configure("list_users", permission="auth.change_user")
        return tool_call("list_users")

    model = ScriptedChatModel([operator_asks_for_more, text("Done")])
    turn(model, alice)
    assert "list_users" in model.tool_names_seen[0]
    assert responses(model) == [
        ToolResponse(
            "call_1",
            "list_users",
            "Tool 'list_users' needs the permission 'auth.change_user', which the user of this "
            "conversation does not have. The call was not made; do not try it again.",
            True,
        )
    ]
    assert RAN == []
    assert models.ToolExecution.objects.get().status == "refused"


def test_s4_a_check_that_fails_refuses_the_call_and_one_may_say_why(mode, alice, caplog):
    model = ScriptedChatModel(
        [tool_calls(tool_call("guarded_by_a_broken_check"), tool_call("close_account")), text("k")]
    )
    with caplog.at_level(logging.ERROR):
        turn(model, alice)
    assert responses(model) == [
        ToolResponse(
            "call_1",
            "guarded_by_a_broken_check",
            "Tool 'guarded_by_a_broken_check' refused the call: the user of this conversation "
            "may not do that (with these arguments). The call was not made.",
            True,
        ),
        ToolResponse("call_2", "close_account", "Only the account's owner may close it.", True),
    ]
    assert RAN == []
    assert "The authorization check of tool 'guarded_by_a_broken_check' failed" in caplog.text


def test_s4_a_turn_without_a_user_holds_no_permission():
    model = ScriptedChatModel([tool_call("list_users"), text("Done")])
    turn(model, None)
    assert "list_users" not in model.tool_names_seen[0]
    assert responses(model)[0].response_data.startswith("Unknown or disabled tool 'list_users'.")
    assert RAN == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"permission": "view_user"}, "authorize(permission=...) takes 'app_label.codename', got "),
        (
            {"permission": ["auth.a", 3]},
            "authorize(permission=...) takes 'app_label.codename', got 3",
        ),
        ({"check": "yes"}, "authorize(check=...) takes a callable, got str"),
    ],
)
def test_s4_authorize_refuses_what_it_cannot_check(kwargs, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        authorize(**kwargs)


def _listed_everywhere(user):
    """The tool names ``user`` is given: by /mcp/'s tools/list, to the model, by the API."""
    mcp = {definition.name for definition in _list_tools(McpPrincipal(user))}
    model = ScriptedChatModel([text("Hi")])
    turn(model, user)
    offered = set(model.tool_names_seen[0])
    if user is None:  # the API has no anonymous users
        return mcp, offered
    return mcp, offered, {entry["name"] for entry in client_for(user).get(url("tool-list")).data}


def test_s22_a_tool_the_user_may_not_call_is_neither_listed_nor_offered(mode, alice):
    """The permissions of a tool's code (list_users) and of its operator (metered) decide what
    a user is shown and the model offered, not only what a call may do."""
    configure("metered", permission="auth.change_user")
    for names in _listed_everywhere(alice):
        assert {"list_users", "metered"}.isdisjoint(names)
        assert "flaky" in names
    alice = grant(grant(alice, "auth.view_user"), "auth.change_user")
    for names in _listed_everywhere(alice):
        assert {"list_users", "metered", "flaky"} <= names
    # A turn without a user holds no permission: neither is offered.
    for names in _listed_everywhere(None):
        assert {"list_users", "metered"}.isdisjoint(names)


# --- S8: quotas, counted atomically --------------------------------------------------------------


def test_s8_a_per_user_quota_refuses_the_call_past_it_and_counts_users_apart(mode, alice, bob):
    configure("metered", quota_per_user=2, quota_window=3600)
    # One call per round: the in-memory test database serializes no concurrent writers.
    model = ScriptedChatModel([*(tool_call("metered", key=str(n)) for n in range(3)), text("k")])
    turn(model, alice)
    third = responses(model, 3)[0].response_data
    assert re.fullmatch(
        r"Tool 'metered' has reached its quota of 2 calls per 3600 s for you; the call was not "
        r"made\. The quota allows calls again in \d+ s\.",
        third,
    )
    assert RAN == [("metered", "0"), ("metered", "1")]
    model = ScriptedChatModel([tool_call("metered", key="bob"), text("k")])
    turn(model, bob)
    assert responses(model) == [ToolResponse("call_1", "metered", "metered bob")]
    statuses = list(models.ToolExecution.objects.order_by("pk").values_list("status", flat=True))
    assert statuses == ["succeeded", "succeeded", "refused", "succeeded"]


def test_s8_a_quota_for_everyone_and_a_new_window():
    configure("metered", quota_total=1, quota_window=60)
    now = timezone.now()
    assert quotas.consume("metered", None, per_user=None, total=1, window=60, now=now) is None
    refused = quotas.consume("metered", None, per_user=None, total=1, window=60, now=now)
    assert refused is not None and "quota of 1 calls per 60 s for everyone" in refused
    later = now + datetime.timedelta(seconds=60)
    assert quotas.consume("metered", None, per_user=None, total=1, window=60, now=later) is None
    assert models.QuotaCounter.objects.count() == 2
    assert quotas.purge_counters(later + datetime.timedelta(hours=2)) == 2


def test_s8_a_call_over_the_total_quota_does_not_use_up_the_users_quota(alice):
    now = timezone.now()
    assert quotas.consume("metered", alice, per_user=5, total=1, window=60, now=now) is None
    assert quotas.consume("metered", alice, per_user=5, total=1, window=60, now=now) is not None
    counters = dict(models.QuotaCounter.objects.values_list("scope", "count"))
    assert counters == {f"user:{alice.pk}": 1, "*": 1}  # the refused call took nothing


def test_s8_windows_are_aligned_to_their_length():
    moment = datetime.datetime(2026, 3, 1, 10, 7, 42, tzinfo=datetime.UTC)
    assert quotas.window_start(moment, 60) == moment.replace(second=0)
    assert quotas.window_start(moment, 3600) == moment.replace(minute=0, second=0)


# --- R6: retries of transient failures -----------------------------------------------------------


def test_r6_transient_failures_are_retried_with_growing_pauses_and_each_attempt_audited(
    mode, alice
):
    """Transient x3, then an answer: 4 attempts, pauses that grow, every attempt in the audit."""
    configure("flaky", retries=3, retry_backoff=0.05)
    FAILURES["k"] = 3
    model = ScriptedChatModel([tool_call("flaky", key="k"), text("Done")])
    assert turn(model, alice) == "Done"
    assert responses(model) == [ToolResponse("call_1", "flaky", "flaky k answered")]
    assert RAN == [("flaky", "k")] * 4
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, len(row.attempts)) == ("succeeded", 4, 3)
    assert [a["attempt"] for a in row.attempts] == [1, 2, 3]
    assert {a["error"] for a in row.attempts} == {"upstream busy for k"}
    assert {a["error_type"] for a in row.attempts} == {
        "tool_calling.calls.retries.TransientToolError"
    }
    pauses = [a["retry_after_s"] for a in row.attempts]
    # Equal jitter: pause n lies in [ceiling/2, ceiling] of 0.05 * 2 ** (n - 1).
    for retry, pause in enumerate(pauses, 1):
        ceiling = 0.05 * 2 ** (retry - 1)
        assert ceiling / 2 - 0.001 <= pause <= ceiling + 0.001
    assert pauses == sorted(pauses)
    if mode == "inline":
        starts = [datetime.datetime.fromisoformat(a["started_at"]) for a in row.attempts]
        starts.append(row.started_at)
        gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
        assert all(gap >= pause - 0.005 for gap, pause in zip(gaps, pauses, strict=True))


def test_r6_retries_are_bounded_and_the_last_failure_reaches_the_model(mode, alice):
    configure("flaky", retries=2, retry_backoff=0.01)
    FAILURES["k"] = 10
    model = ScriptedChatModel([tool_call("flaky", key="k"), text("Done")])
    turn(model, alice)
    assert responses(model) == [ToolResponse("call_1", "flaky", "upstream busy for k", True)]
    assert len(RAN) == 3
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, len(row.attempts), row.error_id) == ("failed", 3, 2, "")


@pytest.mark.parametrize("tool_name", ["broken_database", "says_no"])
def test_r6_errors_that_are_not_transient_run_once(mode, alice, tool_name):
    configure(tool_name, retries=3, retry_backoff=0.01, idempotent=True)
    model = ScriptedChatModel([tool_call(tool_name, key="k"), text("Done")])
    turn(model, alice)
    assert RAN == [(tool_name, "k")]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, row.attempts) == ("failed", 1, [])


def test_r6_a_refused_call_and_bad_arguments_never_run(mode, alice):
    configure("flaky", retries=3, retry_backoff=0.01, permission="auth.view_user")
    model = ScriptedChatModel(
        [tool_calls(tool_call("flaky", key="k"), tool_call("metered", nope=1)), text("Done")]
    )
    turn(model, alice)
    assert RAN == []
    assert [r.is_error for r in responses(model)] == [True, True]


@pytest.mark.parametrize(("idempotent", "runs"), [(True, 2), (False, 1)])
def test_r6_connection_errors_are_retried_only_for_idempotent_tools(mode, alice, idempotent, runs):
    configure("unreliable_network", retries=2, retry_backoff=0.01, idempotent=idempotent)
    FAILURES["k"] = 1
    model = ScriptedChatModel([tool_call("unreliable_network", key="k"), text("Done")])
    turn(model, alice)
    assert len(RAN) == runs
    assert models.ToolExecution.objects.get().status == ("succeeded" if idempotent else "failed")


def test_r6_a_retry_does_not_count_against_the_quota_again(mode, alice):
    configure("flaky", retries=2, retry_backoff=0.01, quota_per_user=1, quota_window=3600)
    FAILURES["k"] = 2
    model = ScriptedChatModel([tool_call("flaky", key="k"), text("Done")])
    turn(model, alice)
    assert responses(model) == [ToolResponse("call_1", "flaky", "flaky k answered")]
    assert models.QuotaCounter.objects.get().count == 1


def test_r6_the_backoff_is_capped():
    with override_settings(TOOL_CALLING=tool_calling_settings(EXECUTION={"RETRY_BACKOFF_MAX": 5})):
        policy = RetryPolicy.of(models.Tool(retries=10, retry_backoff=1.0))
    assert [policy.ceiling(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert all(2.5 <= policy.pause(8) <= 5.0 for _ in range(50))
    assert policy.longest_wait() == 1 + 2 + 4 + 5 * 7


# --- S13: unexpected errors reach the model as a generic text with an error id ------------------


def test_s13_an_unexpected_error_reaches_the_model_as_a_generic_text_with_its_error_id(
    mode, alice, caplog
):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel([tool_call("broken_database", key="k"), text("Sorry")])
    with caplog.at_level(logging.ERROR):
        turn(model, alice, conversation=conversation)
    row = models.ToolExecution.objects.get()
    assert re.fullmatch(r"[0-9a-f]{12}", row.error_id)
    assert responses(model) == [
        ToolResponse(
            "call_1", "broken_database", generic_text("broken_database", row.error_id), True
        )
    ]
    assert generic_text("broken_database", row.error_id) == (
        f"Tool 'broken_database' failed with an unexpected error (error id {row.error_id}). The "
        "details are in the server's log; do not retry the same call, and give the user this "
        "error id if it matters to them."
    )
    # The detail stays with the operators: the audit row and the log (which names the id).
    assert DSN in row.result and DSN in row.error and row.error_type == "builtins.RuntimeError"
    assert f"error id {row.error_id}" in caplog.text and DSN in caplog.text
    # ... and nowhere the model or the conversation's readers see.
    stored = json.dumps(list(conversation.messages.values("text", "tool_responses")))
    assert DSN not in stored and row.error_id in stored


def test_s13_a_tool_failure_goes_through_as_written(mode, alice):
    model = ScriptedChatModel([tool_call("says_no", key="A1"), text("OK")])
    turn(model, alice)
    assert responses(model) == [
        ToolResponse(
            "call_1", "says_no", "Order A1 is already shipped; it cannot be cancelled.", True
        )
    ]
    assert models.ToolExecution.objects.get().error_id == ""


def test_s13_the_spring_behaviour_is_one_setting_away(mode, alice):
    """EXCEPTION_PROCESSOR = the core's default: the exception's message goes to the model."""
    with override_settings(
        TOOL_CALLING=tool_calling_settings(
            EXECUTION={"MODE": mode},
            EXCEPTION_PROCESSOR="tool_calling.DefaultToolExecutionExceptionProcessor",
        )
    ):
        model = ScriptedChatModel([tool_call("broken_database", key="k"), text("Sorry")])
        turn(model, alice)
    assert responses(model) == [
        ToolResponse("call_1", "broken_database", f"could not connect to {DSN}", True)
    ]


def test_s13_throw_exception_on_error_still_raises(alice):
    from tool_calling.exceptions import ToolExecutionException

    with override_settings(TOOL_CALLING=tool_calling_settings(THROW_EXCEPTION_ON_ERROR=True)):
        model = ScriptedChatModel([tool_call("broken_database", key="k"), text("Sorry")])
        with pytest.raises(ToolExecutionException, match=re.escape(f"could not connect to {DSN}")):
            turn(model, alice)


def test_s13_the_cores_default_is_unchanged_outside_governance():
    """Plain ChatClient code keeps Spring AI's behaviour: the message goes to the model."""
    model = ScriptedChatModel([tool_call("broken_database", key="k"), text("Sorry")])
    ChatClient.create(model).prompt("Go").tools(broken_database).call()
    assert responses(model) == [
        ToolResponse("call_1", "broken_database", f"could not connect to {DSN}", True)
    ]


def test_s5_the_tool_runtime_knows_the_end_user(mode, alice):
    """The authorization check and the tool see the turn's user (server-side, not model input)."""
    conversation = models.Conversation.objects.create(owner=alice, title="mine")
    model = ScriptedChatModel(
        [tool_call("conversation_title", conversation_id=str(conversation.pk)), text("k")]
    )
    turn(model, alice, conversation=conversation)
    [checked] = CHECKED
    assert checked.user == alice
    assert dict(checked.context) == {"user_id": alice.pk, "conversation_id": str(conversation.pk)}
    assert isinstance(checked.context, ToolContext)
