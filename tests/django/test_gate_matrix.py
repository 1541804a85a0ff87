"""S22: every rule of the gate holds on every path: the rule x path matrix, one cell per test.

Rules (``calls.gate``, in the order they apply): validation, availability, permission, the
approval floor (code OR row), quotas, limits. Paths, each driven as users drive it:

- ``inline``: a governed turn whose tool runs in the turn's process (``governed_chat_client``);
- ``worker``: the same turn with the tool on a Celery worker (eager here: the worker's code);
- ``durable``: a background run (``runs.start_turn``), planned by its step, run by a worker;
- ``mcp_served``: a ``tools/call`` to ``/mcp/``'s handler for an MCP session (the HTTP layer is
  tested in tests/mcp/test_django_server.py);
- ``approval_resume``: a call that waited for a person, approved, run on its worker;
- ``retry``: a call that failed transiently, run again in the turn's thread.

The tools of MCP servers (``mcp_imported``) are a column of their own in
tests/mcp/test_gate_matrix_imported.py (a real MCP server process, so in the MCP tier). Each
cell injects its rule's violation where the path decides: before the call (the first four),
while the call waits for a person (``approval_resume``), or between two attempts (``retry``);
and checks the call never ran, what the model (or the MCP client) read, and that nothing was
counted or queued.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings

from tests.django._tools import chat_model, registered, tool_calling_settings
from tool_calling import models, runs, signals, tool
from tool_calling.calls import approvals, quotas
from tool_calling.calls.authorization import CallRequest, authorize
from tool_calling.calls.gate import approval_refusal_text, refusal_text
from tool_calling.calls.retries import TransientToolError
from tool_calling.core.execution.limits import breach_text
from tool_calling.exceptions import ToolArgumentsError, ToolFailure
from tool_calling.governance import governed_chat_client
from tool_calling.mcp.serving import McpPrincipal, _call_tool, approval_text
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, str]] = []
"""(tool, key) per run of a tool below."""
DENIED: set[str] = set()
"""Keys the authorization check of ``gate_guarded`` refuses."""
FAILURES: dict[str, int] = {}
"""Transient failures ``gate_flaky`` still raises, per key."""
BETWEEN_ATTEMPTS: list[Callable[[], None]] = []
"""What ``gate_flaky`` does when it fails (the retry cells' violation)."""


@tool
def gate_echo(key: str) -> str:
    """Echo a key."""
    RAN.append(("gate_echo", key))
    return f"echo {key}"


def _allowed(call: CallRequest) -> bool:
    return call.arguments.get("key") not in DENIED


@authorize(check=_allowed)
@tool
def gate_guarded(key: str) -> str:
    """A tool whose own check decides each call."""
    RAN.append(("gate_guarded", key))
    return f"guarded {key}"


@tool(requires_approval=True)
def gate_gated(key: str) -> str:
    """A tool a person approves each call of (in its code)."""
    RAN.append(("gate_gated", key))
    return f"gated {key}"


@authorize(check=_allowed)
@tool
def gate_flaky(key: str) -> str:
    """Fail transiently while FAILURES[key] lasts (and do what BETWEEN_ATTEMPTS says)."""
    RAN.append(("gate_flaky", key))
    if FAILURES.get(key, 0) > 0:
        FAILURES[key] -= 1
        for act in BETWEEN_ATTEMPTS:
            act()
        raise TransientToolError(f"busy {key}")
    return f"flaky {key}"


TOOLS = (gate_echo, gate_guarded, gate_gated, gate_flaky)
PATHS = ["inline", "worker", "durable", "mcp_served", "approval_resume", "retry"]
CELERY = tool_calling_settings(EXECUTION={"MODE": "celery"})
KEEP_GOING = tool_calling_settings(LIMITS={"ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE"})


@pytest.fixture(autouse=True)
def gate_tools() -> Iterator[None]:
    RAN.clear()
    DENIED.clear()
    FAILURES.clear()
    BETWEEN_ATTEMPTS.clear()
    with registered(*TOOLS):
        # Retries of gate_flaky: one, after a pause of about a millisecond.
        models.Tool.objects.filter(name="gate_flaky").update(retries=1, retry_backoff=0.001)
        yield


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


@pytest.fixture
def rita() -> User:
    """An approver (someone else: four eyes)."""
    user = User.objects.create_user("rita")
    user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    return user


# -- the paths ------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What became of one call: what the model (or the MCP client) read, or that it waits."""

    text: str | None
    is_error: bool = True
    awaiting: bool = False


Inject = Callable[[], None]


def _nothing() -> None:
    return None


def _model(calls: list[tuple[str, dict[str, Any]]], inject: Inject) -> ScriptedChatModel:
    """The model asks for ``calls`` in one batch; ``inject`` runs just before it answers."""

    def asks(prompt: Any) -> Any:
        inject()
        return tool_calls(*(tool_call(name, **arguments) for name, arguments in calls))

    return ScriptedChatModel([asks, text("ok")])


def _read(model: ScriptedChatModel) -> list[Seen]:
    responses = model.requests[1].messages[-1].responses
    return [Seen(r.response_data, r.is_error) for r in responses]


def in_turn(user: User, calls: list[tuple[str, dict[str, Any]]], inject: Inject) -> list[Seen]:
    conversation = models.Conversation.objects.create(owner=user)
    model = _model(calls, inject)
    client = governed_chat_client(user=user, conversation=conversation, model=model)
    assert client.prompt("Go").call().content() == "ok"
    return _read(model)


def on_worker(user: User, calls: list[tuple[str, dict[str, Any]]], inject: Inject) -> list[Seen]:
    with override_settings(TOOL_CALLING={**CELERY, "LIMITS": KEEP_GOING["LIMITS"]}):
        return in_turn(user, calls, inject)


def in_run(
    user: User,
    calls: list[tuple[str, dict[str, Any]]],
    inject: Inject,
    then: Callable[[models.Run], None] | None = None,
) -> tuple[models.Run, ScriptedChatModel]:
    """A background run whose model asks for ``calls``; ``then(run)`` once it paused or ended.

    Whatever ``then`` sets off (an approval, so the run goes on) runs with the same model and
    settings.
    """
    conversation = models.Conversation.objects.create(owner=user)
    model = _model(calls, inject)
    with chat_model(model), override_settings(TOOL_CALLING={**CELERY, **_limits()}):
        run = runs.start_turn(conversation, "Go", user=user)
        run.refresh_from_db()
        if then is not None:
            then(run)
            run.refresh_from_db()
    return run, model


def _limits() -> dict[str, Any]:
    return {"LIMITS": KEEP_GOING["LIMITS"]}


def _seen_in_run(run: models.Run, model: ScriptedChatModel, count: int) -> list[Seen]:
    if run.status == "awaiting_approval":
        waiting = set(
            models.ToolExecution.objects.filter(run=run, status="awaiting_approval").values_list(
                "tool_call_id", flat=True
            )
        )
        by_id = {row.tool_call_id: row for row in models.ToolExecution.objects.filter(run=run)}
        return [
            Seen(None, awaiting=True)
            if f"call_{n}" in waiting
            else Seen(by_id[f"call_{n}"].result if f"call_{n}" in by_id else None)
            for n in range(1, count + 1)
        ]
    assert run.status == "succeeded", run.error
    return _read(model)


def durable(user: User, calls: list[tuple[str, dict[str, Any]]], inject: Inject) -> list[Seen]:
    run, model = in_run(user, calls, inject)
    return _seen_in_run(run, model, len(calls))


def mcp_served(user: User, calls: list[tuple[str, dict[str, Any]]], inject: Inject) -> list[Seen]:
    inject()
    principal = McpPrincipal(user, f"session-{uuid.uuid4().hex}")
    seen = []
    with override_settings(TOOL_CALLING={**settings_now(), **_limits()}):
        for name, arguments in calls:
            try:
                seen.append(Seen(_call_tool(principal, name, arguments, {}), is_error=False))
            except ToolFailure as failure:
                seen.append(Seen(str(failure)))
    return seen


def settings_now() -> dict[str, Any]:
    return tool_calling_settings()


def approval_resume(
    user: User, calls: list[tuple[str, dict[str, Any]]], inject: Inject, *, approver: User
) -> list[Seen]:
    """The calls wait for a person (the code gates gate_gated); ``inject``, then approvals."""

    def decide(run: models.Run) -> None:
        assert run.status == "awaiting_approval"
        inject()
        for row in models.ToolExecution.objects.filter(run=run, status="awaiting_approval"):
            approvals.approve(row, user=approver)

    run, model = in_run(user, calls, _nothing, decide)
    return _seen_in_run(run, model, len(calls))


def retried(user: User, calls: list[tuple[str, dict[str, Any]]], inject: Inject) -> list[Seen]:
    """gate_flaky fails once, ``inject`` runs, and the turn's thread runs it again."""
    ((name, arguments),) = calls
    assert name == "gate_flaky"
    FAILURES[arguments["key"]] = 1
    BETWEEN_ATTEMPTS.append(inject)
    return in_turn(user, calls, _nothing)


def drive(
    path: str,
    user: User,
    calls: list[tuple[str, dict[str, Any]]],
    inject: Inject = _nothing,
    *,
    approver: User | None = None,
) -> list[Seen]:
    if path == "inline":
        with override_settings(TOOL_CALLING={**settings_now(), **_limits()}):
            return in_turn(user, calls, inject)
    if path == "worker":
        return on_worker(user, calls, inject)
    if path == "durable":
        return durable(user, calls, inject)
    if path == "mcp_served":
        return mcp_served(user, calls, inject)
    if path == "approval_resume":
        assert approver is not None
        return approval_resume(user, calls, inject, approver=approver)
    assert path == "retry"
    return retried(user, calls, inject)


def gated_and_metered(name: str, *, requires_approval: bool | None = None) -> None:
    """A quota of one call per user; the row's approval flag as given."""
    fields: dict[str, Any] = {"quota_per_user": 1}
    if requires_approval is not None:
        fields["requires_approval"] = requires_approval
    models.Tool.objects.filter(name=name).update(**fields)


def counted(name: str) -> int:
    return sum(models.QuotaCounter.objects.filter(tool_name=name).values_list("count", flat=True))


# -- 1. validation: nothing invalid is counted, queued for approval or run -----------------------

INVALID = "Invalid arguments for tool '{}':\n- key: Input should be a valid string"


@pytest.mark.parametrize("path", ["inline", "worker", "durable", "mcp_served"])
def test_s22_validation_first_nothing_invalid_is_counted_queued_or_run(path, alice):
    """Bad arguments for a tool gated by its row and its code, with a quota of one."""
    gated_and_metered("gate_gated", requires_approval=True)
    (seen,) = drive(path, alice, [("gate_gated", {"key": 5})])
    assert (seen.text, seen.awaiting) == (INVALID.format("gate_gated"), False)
    assert RAN == []
    assert counted("gate_gated") == 0
    assert not models.ToolExecution.objects.filter(status="awaiting_approval").exists()
    row = models.ToolExecution.objects.get(tool_name="gate_gated")
    assert (row.status, row.error_type) == ("failed", "tool_calling.core.errors.ToolArgumentsError")


def test_s22_validation_approval_resume_an_edit_that_fails_the_schema_never_runs(alice, rita):
    run, _ = in_run(alice, [("gate_gated", {"key": "a"})], _nothing)
    row = models.ToolExecution.objects.get(run=run)
    with pytest.raises(ToolArgumentsError) as raised:
        approvals.approve(row, user=rita, arguments={"key": 5})
    assert str(raised.value) == INVALID.format("gate_gated")
    row.refresh_from_db()
    assert (row.status, RAN) == ("awaiting_approval", [])


def test_s22_validation_retry_an_invalid_call_is_never_retried(alice):
    (seen,) = drive("inline", alice, [("gate_flaky", {"key": 5})])
    assert seen.text == INVALID.format("gate_flaky")
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, row.attempts, RAN) == ("failed", 0, [], [])


def test_s22_validation_comes_before_a_quota_that_is_full(alice):
    """Nothing invalid is counted: a later valid call still has the quota's one call."""
    gated_and_metered("gate_echo")
    seen = drive("inline", alice, [("gate_echo", {"key": 5}), ("gate_echo", {"key": "a"})])
    assert [s.text for s in seen] == [INVALID.format("gate_echo"), "echo a"]
    assert counted("gate_echo") == 1


# -- 2. availability: withdrawn after the model was offered the tool (S2) -----------------------


def _withdraw(name: str) -> Inject:
    return lambda: models.Tool.objects.filter(name=name).update(enabled=False)


@pytest.mark.parametrize("path", PATHS)
def test_s22_availability_a_tool_withdrawn_is_refused(path, alice, rita):
    name = {"approval_resume": "gate_gated", "retry": "gate_flaky"}.get(path, "gate_echo")
    (seen,) = drive(path, alice, [(name, {"key": "a"})], _withdraw(name), approver=rita)
    if path == "mcp_served":
        # An MCP call's turn begins with the call: the tool is not offered, never looked up.
        assert seen.text is not None and seen.text.startswith(
            "Unknown or disabled tool 'gate_echo'. Available tools: "
        )
        assert RAN == []
        return
    assert seen.text == refusal_text(name)
    # Never ran (the retry's first attempt did, and failed; its second was refused).
    assert RAN == ([("gate_flaky", "a")] if path == "retry" else [])
    row = models.ToolExecution.objects.get(tool_name=name)
    assert (row.status, row.result) == ("refused", refusal_text(name))


# -- 3. permission: the tool's own check, in the end user's context (S4) ------------------------

CHECK_REFUSED = (
    "Tool '{}' refused the call: the user of this conversation may not do that (with these "
    "arguments). The call was not made."
)


@pytest.mark.parametrize("path", PATHS)
def test_s22_permission_a_call_the_users_rights_do_not_cover_is_refused(path, alice, rita):
    """The tool's check refuses the call (for a retry: from its second attempt on)."""
    name = {"approval_resume": "gate_gated", "retry": "gate_flaky"}.get(path, "gate_guarded")
    if path == "approval_resume":
        # The check of gate_guarded, on a tool gated by its row: refused when it resumes.
        name = "gate_guarded"
        models.Tool.objects.filter(name=name).update(requires_approval=True)
    deny = lambda: DENIED.add("a")  # noqa: E731
    (seen,) = drive(path, alice, [(name, {"key": "a"})], deny, approver=rita)
    assert seen.text == CHECK_REFUSED.format(name)
    assert RAN == ([("gate_flaky", "a")] if path == "retry" else [])
    assert models.ToolExecution.objects.get(tool_name=name).status == "refused"


# -- 4. the approval floor: the code's flag OR the row's (S6) -----------------------------------


@pytest.mark.parametrize("path", ["inline", "worker", "mcp_served"])
def test_s22_approval_the_codes_flag_is_a_floor_when_the_rows_is_off(path, alice):
    """Finding 1: a deploy added requires_approval=True; the row still says False."""
    models.Tool.objects.filter(name="gate_gated").update(requires_approval=False)
    (seen,) = drive(path, alice, [("gate_gated", {"key": "a"})])
    expected = approval_text if path == "mcp_served" else approval_refusal_text
    assert seen.text == expected("gate_gated")
    assert RAN == []
    assert models.ToolExecution.objects.get(tool_name="gate_gated").status == "refused"


def test_s22_approval_durable_the_codes_flag_queues_the_call_for_a_person(alice):
    models.Tool.objects.filter(name="gate_gated").update(requires_approval=False)
    (seen,) = drive("durable", alice, [("gate_gated", {"key": "a"})])
    assert seen.awaiting and RAN == []


def test_s22_approval_resume_arguments_changed_after_the_approval_are_refused(alice, rita):
    def tamper(sender: Any, execution: Any, decision: str, **kwargs: Any) -> None:
        # After the decision, before the worker runs it: other arguments than those approved.
        payload = {**execution.payload, "arguments": '{"key": "b"}'}
        models.ToolExecution.objects.filter(pk=execution.pk).update(payload=payload)

    def decide(run: models.Run) -> None:
        signals.approval_decided.connect(tamper, dispatch_uid="tamper")
        try:
            approvals.approve(models.ToolExecution.objects.get(run=run), user=rita)
        finally:
            signals.approval_decided.disconnect(dispatch_uid="tamper")

    run, _ = in_run(alice, [("gate_gated", {"key": "a"})], _nothing, decide)
    row = models.ToolExecution.objects.get(run=run)
    assert (row.status, row.result, RAN) == ("refused", approval_refusal_text("gate_gated"), [])
    assert run.status == "succeeded"


def test_s22_approval_retry_a_flag_set_between_attempts_refuses_the_retry(alice):
    flag = lambda: models.Tool.objects.filter(name="gate_flaky").update(  # noqa: E731
        requires_approval=True
    )
    (seen,) = drive("retry", alice, [("gate_flaky", {"key": "a"})], flag)
    assert seen.text == approval_refusal_text("gate_flaky")
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, RAN) == ("refused", 2, [("gate_flaky", "a")])


# -- 5. quotas: counted once, atomically (S8) ------------------------------------------------------

QUOTA = re.compile(
    r"^Tool '(\w+)' has reached its quota of 1 calls per 60 s for you; the call was not made\. "
    r"The quota allows calls again in \d+ s\.$"
)


def _use_up(name: str, user: User) -> Inject:
    return lambda: quotas.consume(name, user, per_user=1, total=None, window=60) and None


@pytest.mark.parametrize("path", ["inline", "worker", "durable", "mcp_served", "approval_resume"])
def test_s22_quota_a_call_past_the_quota_is_refused(path, alice, rita):
    name = "gate_gated" if path == "approval_resume" else "gate_echo"
    gated_and_metered(name)
    (seen,) = drive(path, alice, [(name, {"key": "a"})], _use_up(name, alice), approver=rita)
    assert seen.text is not None and QUOTA.match(seen.text), seen.text
    assert RAN == []
    assert counted(name) == 1  # the one used up; the refused call took nothing
    assert models.ToolExecution.objects.get(tool_name=name).status == "refused"


def test_s22_quota_retry_a_retry_is_the_same_call_and_is_not_counted_again(alice):
    gated_and_metered("gate_flaky")
    (seen,) = drive("retry", alice, [("gate_flaky", {"key": "a"})])
    assert (seen.text, seen.is_error) == ("flaky a", False)
    assert RAN == [("gate_flaky", "a"), ("gate_flaky", "a")] and counted("gate_flaky") == 1


# -- 6. limits: the turn's caps, last (S7) --------------------------------------------------------


def _limit_one(name: str) -> None:
    tool_row = models.Tool.objects.get(name=name)
    models.ToolLimitOverride.objects.create(tool=tool_row, max_calls_per_turn=1)


@pytest.mark.parametrize("path", ["inline", "worker", "durable", "mcp_served", "approval_resume"])
def test_s22_limit_a_call_over_the_turns_cap_is_refused(path, alice, rita):
    """Limit one call per turn (per MCP session): the second call of the batch is refused."""
    name = "gate_gated" if path == "approval_resume" else "gate_echo"
    _limit_one(name)
    seen = drive(path, alice, [(name, {"key": "a"}), (name, {"key": "b"})], approver=rita)
    assert seen[1].text == breach_text(name, 1)
    assert RAN == [(name, "a")]
    refused = models.ToolExecution.objects.get(tool_name=name, status="refused")
    assert refused.result == breach_text(name, 1)
    # Over the limit, a gated call is never queued for a person.
    assert not models.ToolExecution.objects.filter(status="awaiting_approval").exists()


def test_s22_limit_retry_a_retry_is_not_counted_toward_the_turns_cap(alice):
    _limit_one("gate_flaky")
    (seen,) = drive("retry", alice, [("gate_flaky", {"key": "a"})])
    assert (seen.text, seen.is_error) == ("flaky a", False)


@pytest.mark.parametrize("path", ["inline", "durable"])
def test_s22_limit_last_a_call_over_the_cap_reads_the_first_rule_that_refuses_it(path, alice):
    """Over the cap: with bad arguments, the validation's text; past its quota, the quota's."""
    _limit_one("gate_echo")
    gated_and_metered("gate_echo")
    calls = [("gate_echo", {"key": "a"}), ("gate_echo", {"key": 5}), ("gate_echo", {"key": "b"})]
    seen = drive(path, alice, calls, _use_up("gate_echo", alice))
    assert seen[0].text is not None and QUOTA.match(seen[0].text), seen[0].text
    assert seen[1].text == INVALID.format("gate_echo")
    assert seen[2].text is not None and QUOTA.match(seen[2].text), seen[2].text
    assert counted("gate_echo") == 1 and RAN == []


def test_s22_limit_last_a_call_the_cap_refuses_takes_nothing_from_its_quota(alice):
    _limit_one("gate_echo")
    models.Tool.objects.filter(name="gate_echo").update(quota_per_user=5)
    seen = drive("inline", alice, [("gate_echo", {"key": "a"}), ("gate_echo", {"key": "b"})])
    assert seen[1].text == breach_text("gate_echo", 1)
    assert counted("gate_echo") == 1
