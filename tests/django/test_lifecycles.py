"""The state machines of calls and runs, walked from this module's own tables.

``CALLS`` and ``RUNS`` below are written out here, status by status, not read from the code's
``TRANSITIONS``: a test that took its expectations from the table under test could not catch a
wrong entry in it. For every transition and every status a row can be in, the named transition
function succeeds exactly when the table here lists that status as a start, leaves the row in a
status listed as an end, and refuses (changing nothing) from every other status.
"""

from __future__ import annotations

import ast
import datetime
from pathlib import Path
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

import tool_calling
from tool_calling import models
from tool_calling.calls import lifecycle as calls
from tool_calling.core.execution.plan import ToolOutcome
from tool_calling.runs import lifecycle as runs

pytestmark = pytest.mark.django_db

S = models.ExecutionStatus
R = models.RunStatus
PAST = datetime.timedelta(seconds=5)

# transition -> (the statuses it starts from, the statuses it may end in): what a call may do.
CALLS = {
    "claim": ({"pending"}, {"running"}),
    "take_over": ({"running"}, {"running"}),
    "renew": ({"running"}, {"running"}),
    "retry": ({"running"}, {"pending"}),
    "end_lease": ({"running"}, {"running"}),
    "finish": ({"running"}, {"succeeded", "failed", "refused", "timed_out"}),
    "settle_lost": ({"running"}, {"unknown", "failed"}),
    "kill": ({"running"}, {"timed_out"}),
    "withdraw": ({"pending"}, {"timed_out"}),
    "confirm": ({"awaiting_approval"}, {"awaiting_approval"}),
    "approve": ({"awaiting_approval"}, {"pending"}),
    "deny": ({"awaiting_approval"}, {"denied"}),
}
CALL_STATUSES = {
    "pending",
    "running",
    "succeeded",
    "failed",
    "refused",
    "timed_out",
    "unknown",
    "awaiting_approval",
    "denied",
}
# What a run may do. The three endings start from every status of a run that has not ended.
_ACTIVE = {"queued", "running", "awaiting_approval"}
RUNS = {
    "begin": ({"queued"}, {"running"}),
    "wait": ({"running"}, {"awaiting_approval"}),
    "resume": ({"awaiting_approval"}, {"running"}),
    "succeed": (_ACTIVE, {"succeeded"}),
    "fail": (_ACTIVE, {"failed"}),
    "cancel": (_ACTIVE, {"cancelled"}),
    "retry": ({"failed"}, {"queued"}),
}
RUN_STATUSES = {"queued", "running", "awaiting_approval", "succeeded", "failed", "cancelled"}


def _call(status: str) -> models.ToolExecution:
    return models.ToolExecution.objects.create(
        tool_name="t",
        tool_call_id="c1",
        status=status,
        attempt=1,
        worker="w1",
        mode=models.ExecutionMode.CELERY,
        lease_expires_at=timezone.now() - PAST,
        payload={"arguments": "{}", "context": {}},
    )


CALL_TRANSITIONS = {
    "claim": lambda ref: calls.claim(ref, S.PENDING, task_id="t2", worker="w2") is not None,
    "take_over": lambda ref: calls.claim(ref, S.RUNNING, task_id="t2", worker="w2") is not None,
    "renew": lambda ref: calls.renew(ref),
    "retry": lambda ref: (
        calls.retry(ref, ToolOutcome.failure("busy"), earlier=[], duration_ms=1, pause=0.5)
        is not None
    ),
    "end_lease": lambda ref: calls.end_lease(ref.execution_id, "w1"),
    "finish": lambda ref: calls.finish(ref, S.SUCCEEDED, ToolOutcome.ok("x"), duration_ms=1),
    "settle_lost": lambda ref: bool(calls.settle_lost(ref, idempotent=False)),
    "kill": lambda ref: calls.kill(ref.execution_id, "w1", "killed"),
    "withdraw": lambda ref: calls.withdraw(ref, "gave up"),
    "confirm": lambda ref: calls.confirm(ref.execution_id, confirmed_at=timezone.now()),
    "approve": lambda ref: calls.approve(ref.execution_id, approval="approved"),
    "deny": lambda ref: calls.deny(ref, "denied", expired=False, user=None, reason=""),
}


def test_every_call_transition_has_a_function_and_every_status_is_covered():
    assert set(CALL_TRANSITIONS) == set(CALLS) == set(calls.TRANSITIONS)
    assert CALL_STATUSES == set(S.values)
    starts_and_ends = set().union(*(a | b for a, b in CALLS.values()))
    created = {"pending", "awaiting_approval", "running", "refused"}  # by the record_* functions
    assert starts_and_ends | created == CALL_STATUSES


@pytest.mark.parametrize("status", sorted(CALL_STATUSES))
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_call_transition_succeeds_only_from_its_starts(name, status):
    starts, ends = CALLS[name]
    row = _call(status)
    before = models.ToolExecution.objects.values().get(pk=row.pk)
    moved = CALL_TRANSITIONS[name](calls.CallRef.of(row))
    after = models.ToolExecution.objects.values().get(pk=row.pk)
    if status in starts:
        assert moved is True
        assert after["status"] in ends
    else:
        assert moved is False
        assert after == before  # refused: nothing changed


@pytest.mark.parametrize("name", ["take_over", "renew", "retry", "finish", "settle_lost"])
def test_a_call_transition_is_fenced_by_the_attempt_it_acts_for(name):
    """A writer acting for attempt 1 of a call now on attempt 2 changes nothing (R5)."""
    starts, _ = CALLS[name]
    row = _call(next(iter(starts)))
    models.ToolExecution.objects.filter(pk=row.pk).update(attempt=2)
    before = models.ToolExecution.objects.values().get(pk=row.pk)
    assert CALL_TRANSITIONS[name](calls.CallRef.of(row, attempt=1)) is False
    assert models.ToolExecution.objects.values().get(pk=row.pk) == before


def test_r6_a_retry_keeps_the_failed_attempt_and_is_due_after_its_pause():
    row = _call(S.RUNNING)
    before = timezone.now()
    earlier = [{"attempt": 0, "error": "older"}]
    recorded = calls.retry(
        calls.CallRef.of(row),
        ToolOutcome.failure("busy, try later"),
        earlier=earlier,
        duration_ms=12,
        pause=2.5,
    )
    row.refresh_from_db()
    assert (row.status, row.attempt, row.lease_expires_at) == (S.PENDING, 1, None)
    assert row.attempts == recorded
    assert row.attempts[0] == earlier[0]
    entry = row.attempts[1]
    assert (entry["attempt"], entry["error"], entry["duration_ms"]) == (1, "busy, try later", 12)
    assert entry["error_type"] == "tool_calling.core.errors.ToolFailure"
    assert entry["retry_after_s"] == 2.5
    assert row.dispatched_at >= before + datetime.timedelta(seconds=2.5)
    # The next attempt claims it as any pending call.
    assert calls.claim(calls.CallRef.of(row), S.PENDING, task_id="t", worker="w").attempt == 2


def test_a_transition_cannot_end_in_a_status_its_table_does_not_list():
    row = _call(S.RUNNING)
    with pytest.raises(Exception, match="Transition 'finish' cannot end in status 'pending'"):
        calls.finish(calls.CallRef.of(row), S.PENDING, ToolOutcome.ok("x"), duration_ms=1)


def _run(status: str) -> models.Run:
    owner = User.objects.get_or_create(username="owner")[0]
    conversation = models.Conversation.objects.create(owner=owner)
    return models.Run.objects.create(conversation=conversation, user=owner, status=status, text="x")


def _retry(run: models.Run) -> bool:
    try:
        with mock.patch.object(runs, "publish"):
            runs.retry_run(run)
    except ValueError:
        return False
    return True


RUN_TRANSITIONS = {
    "begin": lambda run: runs.begin(run.pk),
    "wait": lambda run: runs.wait(run.pk),
    "resume": lambda run: runs.resume(run.pk),
    "succeed": lambda run: runs.finish(run.pk, R.SUCCEEDED, answer="ok"),
    "fail": lambda run: runs.finish(run.pk, R.FAILED, error="broken"),
    "cancel": lambda run: runs.finish(run.pk, R.CANCELLED),
    "retry": _retry,
}


def test_every_run_transition_has_a_function_and_every_status_is_covered():
    assert set(RUN_TRANSITIONS) == set(RUNS) == set(runs.TRANSITIONS)
    assert RUN_STATUSES == set(R.values)
    starts_and_ends = set().union(*(a | b for a, b in RUNS.values()))
    assert starts_and_ends == RUN_STATUSES


@pytest.mark.parametrize("status", sorted(RUN_STATUSES))
@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_transition_succeeds_only_from_its_starts(name, status):
    starts, ends = RUNS[name]
    run = _run(status)
    before = models.Run.objects.values().get(pk=run.pk)
    moved = RUN_TRANSITIONS[name](run)
    after = models.Run.objects.values().get(pk=run.pk)
    if status in starts:
        assert moved is True
        assert after["status"] in ends
        # ... once: the same transition from where it ended is refused, unless it starts there.
        if after["status"] not in starts:
            assert RUN_TRANSITIONS[name](run) is False
    else:
        assert moved is False
        assert after == before


def test_resume_waits_while_a_call_of_the_run_waits_for_a_person():
    run = _run(R.AWAITING_APPROVAL)
    call = _call(S.AWAITING_APPROVAL)
    models.ToolExecution.objects.filter(pk=call.pk).update(run=run)
    assert runs.resume(run.pk) is False
    models.ToolExecution.objects.filter(pk=call.pk).update(status=S.DENIED)
    assert runs.resume(run.pk) is True


def test_an_ending_frees_the_conversation_before_the_event_is_stored():
    run = _run(R.RUNNING)
    token = "held"
    models.Run.objects.filter(pk=run.pk).update(turn_token=token)
    models.Conversation.objects.filter(pk=run.conversation_id).update(turn_token=token)
    seen = []
    original = runs.events.append

    def append(run_id, kind, data=None):
        seen.append(models.Conversation.objects.values_list("turn_token", flat=True).get())
        return original(run_id, kind, data)

    with mock.patch.object(runs.events, "append", side_effect=append):
        assert runs.finish(run.pk, R.SUCCEEDED, answer="ok") is True
    assert seen == [""]


@pytest.mark.parametrize("name", ["take_over", "settle_lost"])
def test_a_live_lease_is_never_taken_over_or_settled(name):
    row = _call(S.RUNNING)
    models.ToolExecution.objects.filter(pk=row.pk).update(
        lease_expires_at=timezone.now() + datetime.timedelta(minutes=1)
    )
    assert CALL_TRANSITIONS[name](calls.CallRef.of(row)) is False
    assert models.ToolExecution.objects.get(pk=row.pk).worker == "w1"


# -- one writer per row -------------------------------------------------------------------------

PACKAGE = Path(tool_calling.__file__).resolve().parent
WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_create", "bulk_update"}


def _writes_of(model: str, path: Path) -> list[str]:
    """The ``model.objects...<write>(...)`` calls in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in WRITES:
            continue
        chain = ast.unparse(node.func.value)
        if f"{model}.objects" in chain:
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {chain}.{node.func.attr}")
    return found


def _sources() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts]


def test_only_the_runs_lifecycle_writes_a_run():
    """``Run`` rows change through ``runs.lifecycle`` only (its event count: ``runs.events``)."""
    writers = {PACKAGE / "runs" / "lifecycle.py", PACKAGE / "runs" / "events.py"}
    strays = [w for path in _sources() if path not in writers for w in _writes_of("Run", path)]
    assert strays == []
    # The scan sees the writes it is meant to find.
    assert _writes_of("Run", PACKAGE / "runs" / "lifecycle.py")


def test_only_the_runs_lifecycle_changes_a_run_with_an_event():
    """The run fields an event may set in its write are named keywords ``runs.lifecycle`` uses."""
    callers = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "events.append"
                and node.keywords
            ):
                callers.append(str(path.relative_to(PACKAGE)))
    assert set(callers) == {"runs/lifecycle.py"}
    run = _run(R.RUNNING)
    with pytest.raises(TypeError):
        runs.events.append(run.pk, "x", status="succeeded")  # type: ignore[call-arg]
    assert models.Run.objects.get(pk=run.pk).status == R.RUNNING


def test_only_the_calls_lifecycle_writes_a_tool_execution():
    writer = PACKAGE / "calls" / "lifecycle.py"
    strays = [w for path in _sources() if path != writer for w in _writes_of("ToolExecution", path)]
    assert strays == []
    assert _writes_of("ToolExecution", writer)
