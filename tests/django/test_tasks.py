"""Tool calls on Celery workers, unit tier: claim, lease, fencing, the sweeper, the executor.

Celery is eager here (tests.settings) and the tasks are also called as plain functions, so the
state machine of a call is exercised without Redis or a worker process. tests/celery runs the
same paths on real workers over a real Redis.
"""

import datetime
import json
import logging
import threading
from concurrent.futures import Future
from unittest import mock

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from tests.django._tools import registered
from tool_calling import ToolContext, models, tasks, tool
from tool_calling.calls import dispatch as calls_dispatch
from tool_calling.calls import lifecycle, worker
from tool_calling.calls.dispatch import Dispatch, dispatch, dispatch_on_commit, in_worker_task
from tool_calling.calls.executors import (
    CeleryToolExecutor,
    _ExecutionFuture,
    execution_mode,
    outcome_of,
)
from tool_calling.calls.failures import generic_text
from tool_calling.calls.gate import ToolNotAvailableError
from tool_calling.core.chat.messages import ToolResponse, ToolResponseMessage
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.exceptions import (
    ToolArgumentsError,
    ToolCallingError,
    ToolExecutionException,
    ToolFailure,
)
from tool_calling.governance import governed_chat_client
from tool_calling.registry import registry
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db

RAN: list[tuple[str, object]] = []
"""Side effects of the tools below, one entry per run."""
SENTINEL = "sk-SENTINEL-1c9e"
CELERY = {"EXECUTION": {"MODE": "celery"}}
NOT_AVAILABLE = (
    "Tool 'counted' is not available: an operator disabled, removed or restricted it. "
    "Do not call it again in this conversation."
)


@tool
def counted(key: str) -> str:
    """Count the calls, per key."""
    RAN.append(("counted", key))
    return f"counted {key}"


@tool
def local_only(key: str) -> str:
    """An in-process tool."""
    RAN.append(("local_only", key, threading.current_thread().name))
    return f"local {key}"


@tool
def explode(reason: str) -> str:
    """Raise an unexpected exception."""
    RAN.append(("explode", reason))
    raise ValueError(reason)


@tool
def refuse(reason: str) -> str:
    """Fail on purpose, with a message for the model."""
    raise ToolFailure(f"refused: {reason}")


@tool
def overrun() -> str:
    """What a tool sees when the worker's soft time limit strikes."""
    RAN.append(("overrun", None))
    raise SoftTimeLimitExceeded()


@tool
def whoami(context: ToolContext) -> str:
    """Return the server-side context."""
    return json.dumps(dict(context), sort_keys=True)


@tool
def secret() -> str:
    """Return a secret the audit must never hold."""
    return f"token {SENTINEL}"


@tool
def stopped(key: str) -> str:
    """What a tool sees when the pool terminates its process mid-call: SystemExit."""
    RAN.append(("stopped", key))
    raise SystemExit(-15)


TOOLS = (counted, local_only, explode, refuse, overrun, whoami, secret, stopped)


def mask(text, *, tool_name, field):
    return text.replace(SENTINEL, "[MASKED]")


@pytest.fixture(autouse=True)
def worker_tools():
    """The tools above in the project registry (which workers resolve names in), with rows."""
    RAN.clear()
    with registered(*TOOLS):
        yield


def turn(model, *, user=None, conversation=None):
    client = governed_chat_client(user=user, conversation=conversation, model=model)
    return client.prompt("Go").call().content()


def responses(model, request=-1):
    message = model.requests[request].messages[-1]
    assert isinstance(message, ToolResponseMessage)
    return message.responses


def new_call(name="counted", arguments=None, *, idempotent=False, **fields):
    """A committed call for a worker, as CeleryToolExecutor records it (not yet sent)."""
    arguments = {"key": "a"} if arguments is None and name == "counted" else arguments or {}
    fields.setdefault("status", models.ExecutionStatus.PENDING)
    fields.setdefault("payload", {"arguments": json.dumps(arguments), "context": {}})
    fields.setdefault("mode", models.ExecutionMode.CELERY)
    fields.setdefault("queue", "tool_calling")
    fields.setdefault("timeout", 30)
    return models.ToolExecution.objects.create(
        tool=models.Tool.objects.get(name=name),
        tool_name=name,
        tool_call_id="call_1",
        arguments=json.dumps(arguments),
        idempotent=idempotent,
        **fields,
    )


def recorded(name="counted", arguments='{"key": "a"}'):
    """A call for a worker recorded as the executor and durable runs record one (not sent)."""
    from tool_calling.core.chat.messages import ToolCall

    return lifecycle.record_for_worker(
        ToolCall("call_1", name, arguments), {}, tool=models.Tool.objects.get(name=name)
    )


def reload(execution):
    return models.ToolExecution.objects.get(pk=execution.pk)


def expire_lease(execution):
    past = timezone.now() - datetime.timedelta(seconds=1)
    models.ToolExecution.objects.filter(pk=execution.pk).update(lease_expires_at=past)


# --- the task: claim, run, record -----------------------------------------------------------


def test_the_task_claims_runs_and_records_the_call():
    call = new_call()
    tasks.execute_tool_call(call.pk)
    row = reload(call)
    assert RAN == [("counted", "a")]
    assert (row.status, row.result, row.is_error, row.attempt, row.lease_expires_at) == (
        "succeeded",
        "counted a",
        False,
        1,
        None,
    )
    # The audited result is the exact text: no working data left for the caller to purge.
    assert row.payload == {}
    assert row.worker.endswith(")") and " (pid " in row.worker
    assert row.started_at <= row.finished_at


def test_r2_the_same_task_delivered_twice_runs_the_tool_once():
    """R2: a redelivered or duplicated task finds the row finished and does nothing."""
    call = new_call()
    tasks.execute_tool_call(call.pk)
    tasks.execute_tool_call(call.pk)
    assert RAN == [("counted", "a")]
    assert (reload(call).status, reload(call).attempt) == ("succeeded", 1)


def test_r2_a_duplicate_while_the_first_runs_finds_a_live_lease_and_does_nothing():
    call = new_call(idempotent=True)
    first = worker.claim(call.pk, task_id="t1", worker="w1")
    assert (first.execution_id, first.attempt) == (call.pk, 1)
    assert worker.claim(call.pk, task_id="t1", worker="w2") is None
    tasks.execute_tool_call(call.pk)
    assert RAN == []
    row = reload(call)
    assert (row.status, row.attempt, row.task_id, row.worker) == ("running", 1, "t1", "w1")
    assert row.lease_expires_at > timezone.now() + datetime.timedelta(seconds=10)


def test_a_call_for_a_row_that_no_longer_exists_does_nothing(caplog):
    tasks.execute_tool_call(999_999)
    assert RAN == []
    assert "Tool call 999999 does not exist (deleted?); nothing to run" in caplog.text


def test_r5_a_late_result_of_a_fenced_off_attempt_is_discarded(caplog):
    """R5: attempt 1 stalls past its lease, attempt 2 takes over; attempt 1's result is dropped."""
    call = new_call(idempotent=True)
    stalled = worker.claim(call.pk, task_id="t1", worker="w1")
    expire_lease(call)

    tasks.execute_tool_call(call.pk)  # attempt 2, on another worker
    taken_over = reload(call)
    assert (taken_over.status, taken_over.attempt, taken_over.result) == (
        "succeeded",
        2,
        "counted a",
    )

    late = ToolOutcome.ok("stale result")
    with caplog.at_level(logging.WARNING, logger="tool_calling.calls"):
        assert lifecycle.finish(stalled, "succeeded", late, duration_ms=1) is False
    assert (reload(call).result, reload(call).payload) == ("counted a", {})
    assert (
        f"Discarded the late result (succeeded) of attempt 1 of tool call {call.pk} ('counted')"
        in caplog.text
    )


@pytest.mark.django_db(transaction=True)
def test_r5_a_stalled_attempt_cannot_renew_a_lease_it_lost():
    call = new_call(idempotent=True)
    stalled = worker.claim(call.pk, task_id="t1", worker="w1")
    expire_lease(call)
    assert worker.claim(call.pk, task_id="t2", worker="w2").attempt == 2
    with override_settings(TOOL_CALLING={"EXECUTION": {"LEASE_SECONDS": 1}}):
        heartbeat = worker.heartbeat(stalled)
        heartbeat.start()
        heartbeat.join(3)  # it stops by itself at its first beat: the claim is gone
    assert not heartbeat.is_alive()
    assert reload(call).worker == "w2"


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_renews_the_lease_while_the_tool_runs():
    call = new_call(idempotent=True)
    with override_settings(TOOL_CALLING={"EXECUTION": {"LEASE_SECONDS": 1}}):
        claimed = worker.claim(call.pk, task_id="t1", worker="w1")
        first = reload(call).lease_expires_at
        heartbeat = worker.heartbeat(claimed)
        heartbeat.start()
        try:
            threading.Event().wait(0.8)
            assert reload(call).lease_expires_at > first
        finally:
            heartbeat.stop()
    assert not heartbeat.is_alive()


def test_a_non_idempotent_call_whose_worker_died_is_never_run_again():
    call = new_call(idempotent=False)
    worker.claim(call.pk, task_id="t1", worker="w1")
    expire_lease(call)
    tasks.execute_tool_call(call.pk)  # the redelivered task
    row = reload(call)
    assert RAN == []
    assert (row.status, row.is_error, row.attempt, row.result) == (
        "unknown",
        True,
        1,
        lifecycle.UNKNOWN_OUTCOME_TEXT,
    )
    assert lifecycle.UNKNOWN_OUTCOME_TEXT == (
        "The outcome of this call is unknown: the worker running it stopped mid-call, and the "
        "tool is not idempotent, so it was not run again."
    )
    outcome = outcome_of(models.ToolExecution.objects.values().get(pk=call.pk))
    assert (outcome.kind, outcome.text) == (ToolOutcomeKind.UNKNOWN, lifecycle.UNKNOWN_OUTCOME_TEXT)


def test_an_idempotent_call_whose_worker_died_runs_again_as_the_next_attempt():
    call = new_call(idempotent=True)
    worker.claim(call.pk, task_id="t1", worker="w1")
    expire_lease(call)
    tasks.execute_tool_call(call.pk)
    assert RAN == [("counted", "a")]
    assert (reload(call).status, reload(call).attempt) == ("succeeded", 2)


@override_settings(TOOL_CALLING={"EXECUTION": {"MAX_ATTEMPTS": 3}})
def test_r6_a_poison_call_ends_failed_after_max_attempts():
    """R6: a call whose worker dies on every attempt stops being re-run after MAX_ATTEMPTS."""
    call = new_call(idempotent=True)
    for attempt in (1, 2, 3):
        assert worker.claim(call.pk, task_id="t", worker="w").attempt == attempt
        expire_lease(call)  # the worker died mid-call
    assert worker.claim(call.pk, task_id="t", worker="w") is None
    row = reload(call)
    text = (
        "Tool 'counted' failed: the worker running it stopped mid-call 3 times, so it was not "
        "run again."
    )
    assert (row.status, row.is_error, row.attempt, row.result) == ("failed", True, 3, text)
    tasks.execute_tool_call(call.pk)
    assert RAN == []


@pytest.mark.parametrize("idempotent", [False, True])
def test_r1_a_call_whose_process_is_stopped_mid_call_is_settled_as_a_dead_workers(idempotent):
    """SystemExit mid-call (the pool terminating the child): "outcome unknown", or run again.

    Never "failed" with the exit code for a text: the soak found that, and the run then failed
    on the re-raised SystemExit.
    """
    call = new_call("stopped", {"key": "k"}, idempotent=idempotent)
    with pytest.raises(SystemExit):
        worker.execute(call.pk, task_id="t", worker="w")
    row = reload(call)
    if idempotent:
        # Left running with its lease ended: the redelivery (or the sweeper) takes it over.
        assert (row.status, row.attempt) == ("running", 1)
        assert row.lease_expires_at <= timezone.now()
        assert worker.claim(call.pk, task_id="t2", worker="w2").attempt == 2
    else:
        assert (row.status, row.is_error, row.result) == (
            "unknown",
            True,
            lifecycle.UNKNOWN_OUTCOME_TEXT,
        )
        assert outcome_of(models.ToolExecution.objects.values().get(pk=call.pk)).kind is (
            ToolOutcomeKind.UNKNOWN
        )
    assert RAN == [("stopped", "k")]


def test_s2_a_tool_disabled_after_the_call_was_made_is_refused_on_the_worker():
    call = new_call()
    models.Tool.objects.filter(name="counted").update(enabled=False)
    tasks.execute_tool_call(call.pk)
    row = reload(call)
    assert RAN == []
    assert (row.status, row.is_error, row.result) == ("refused", True, NOT_AVAILABLE)
    outcome = outcome_of(models.ToolExecution.objects.values().get(pk=call.pk))
    assert outcome.is_a(ToolNotAvailableError) and outcome.text == NOT_AVAILABLE


def test_a_soft_time_limit_ends_the_call_timed_out():
    call = new_call("overrun", timeout=7)
    tasks.execute_tool_call(call.pk)
    row = reload(call)
    assert (row.status, row.is_error, row.result) == (
        "timed_out",
        True,
        "Tool 'overrun' timed out after 7 s.",
    )
    assert "SoftTimeLimitExceeded" in row.error
    outcome = outcome_of(models.ToolExecution.objects.values().get(pk=call.pk))
    assert (outcome.kind, outcome.text) == ("timeout", "Tool 'overrun' timed out after 7 s.")


def test_a_tool_missing_from_the_workers_code_fails_the_call():
    call = new_call()
    registry.unregister("counted")
    try:
        tasks.execute_tool_call(call.pk)
    finally:
        registry.register(counted, source="tests")
    row = reload(call)
    assert (row.status, row.result) == (
        "failed",
        "Tool 'counted' is not installed on the worker that took the call.",
    )


# --- publishing: on commit only, and failures left to the sweeper ------------------------------


@pytest.mark.django_db(transaction=True)
def test_r4_a_call_recorded_in_a_rolled_back_transaction_is_never_sent():
    with mock.patch.object(tasks.execute_tool_call, "apply_async") as send:
        with pytest.raises(RuntimeError), transaction.atomic():
            call = recorded()
            dispatch_on_commit(Dispatch.of(call))
            raise RuntimeError("roll back")
        assert send.call_count == 0
        assert not models.ToolExecution.objects.exists()

        with transaction.atomic():
            call = recorded()
            dispatch_on_commit(Dispatch.of(call))
            assert send.call_count == 0  # not before the commit
        send.assert_called_once_with(
            args=[call.pk], queue="tool_calling", soft_time_limit=30, time_limit=35
        )
    assert reload(call).dispatched_at is not None
    assert RAN == []


@pytest.mark.django_db(transaction=True)
def test_r3_a_failed_publish_leaves_the_call_pending_and_the_sweeper_sends_it(caplog):
    down = OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    with mock.patch.object(tasks.execute_tool_call, "apply_async", side_effect=down):
        call = recorded()
        assert dispatch(Dispatch.of(call)) is False
    row = reload(call)
    assert (row.status, row.dispatched_at) == ("pending", None)
    assert (
        f"Could not send tool call {call.pk} ('counted') to queue 'tool_calling'; the sweeper "
        "will send it again" in caplog.text
    )

    assert tasks.sweep_tool_executions() == {
        "redispatched": 0,
        "settled": 0,
        "purged": 0,
        "expired": 0,
    }
    # A just-committed call gets a lease's length of time to be sent by its own commit.
    models.ToolExecution.objects.filter(pk=call.pk).update(
        created_at=timezone.now() - datetime.timedelta(seconds=16)
    )
    assert tasks.sweep_tool_executions()["redispatched"] == 1  # eager: it runs right away
    assert (reload(call).status, RAN) == ("succeeded", [("counted", "a")])


def test_the_sweeper_sends_again_a_call_sent_long_ago_that_no_worker_started():
    now = timezone.now()
    fresh = new_call(dispatched_at=now - datetime.timedelta(seconds=60))
    lost = new_call(dispatched_at=now - datetime.timedelta(seconds=301))
    with mock.patch.object(tasks.execute_tool_call, "apply_async") as send:
        assert tasks.sweep_tool_executions()["redispatched"] == 1
    send.assert_called_once_with(
        args=[lost.pk], queue="tool_calling", soft_time_limit=30, time_limit=35
    )
    assert reload(fresh).dispatched_at == fresh.dispatched_at
    assert reload(lost).dispatched_at > now


def test_the_sweeper_settles_expired_attempts_and_sends_again_the_idempotent_ones():
    idempotent = new_call(idempotent=True)
    not_idempotent = new_call(idempotent=False)
    alive = new_call(idempotent=False)
    for call in (idempotent, not_idempotent, alive):
        worker.claim(call.pk, task_id="t1", worker="w1")
    expire_lease(idempotent)
    expire_lease(not_idempotent)

    assert tasks.sweep_tool_executions() == {
        "redispatched": 1,
        "settled": 1,
        "purged": 0,
        "expired": 0,
    }
    assert (reload(idempotent).status, reload(idempotent).attempt) == ("succeeded", 2)
    assert reload(not_idempotent).status == "unknown"
    assert reload(alive).status == "running"
    assert RAN == [("counted", "a")]


def test_inline_calls_are_never_swept():
    old = timezone.now() - datetime.timedelta(hours=1)
    row = new_call(mode=models.ExecutionMode.INLINE, status=models.ExecutionStatus.RUNNING)
    models.ToolExecution.objects.filter(pk=row.pk).update(created_at=old, lease_expires_at=old)
    assert tasks.sweep_tool_executions() == {
        "redispatched": 0,
        "settled": 0,
        "purged": 0,
        "expired": 0,
    }
    assert reload(row).status == "running"


@override_settings(TOOL_CALLING={**CELERY, "AUDIT_REDACTOR": "tests.django.test_tasks.mask"})
def test_the_sweeper_drops_the_exact_results_of_calls_nobody_waits_for():
    done = new_call("secret")
    tasks.execute_tool_call(done.pk)
    # The audit keeps the redacted text; the exact one waits for the caller, for a while.
    exact = {"outcome": {"kind": "ok", "text": f"token {SENTINEL}"}}
    assert (reload(done).payload, reload(done).result) == (exact, "token [MASKED]")
    assert tasks.sweep_tool_executions()["purged"] == 0
    # 30 s timeout + 5 s grace + 30 s margin after it ended: after that nobody reads it.
    models.ToolExecution.objects.filter(pk=done.pk).update(
        created_at=timezone.now() - datetime.timedelta(seconds=3600)
    )
    assert tasks.sweep_tool_executions()["purged"] == 0  # made long ago, ended just now
    models.ToolExecution.objects.filter(pk=done.pk).update(
        finished_at=timezone.now() - datetime.timedelta(seconds=66)
    )
    assert tasks.sweep_tool_executions()["purged"] == 1
    assert (reload(done).payload, reload(done).result) == ({}, "token [MASKED]")


# --- the executor and governed turns ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@override_settings(TOOL_CALLING=CELERY)
def test_a_governed_turn_sends_calls_to_workers_and_waits_for_their_results():
    alice = User.objects.create_user("alice")
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel(
        [
            tool_calls(tool_call("counted", key="x"), tool_call("whoami")),
            text("Done"),
        ]
    )
    assert turn(model, user=alice, conversation=conversation) == "Done"
    context = json.dumps({"conversation_id": str(conversation.pk), "user_id": alice.pk})
    assert responses(model) == [
        ToolResponse("call_1", "counted", "counted x"),
        ToolResponse("call_2", "whoami", context),
    ]
    rows = models.ToolExecution.objects.order_by("tool_call_id")
    assert [
        (r.tool_call_id, r.mode, r.status, r.attempt, r.queue, r.timeout, r.user, r.payload)
        for r in rows
    ] == [
        ("call_1", "celery", "succeeded", 1, "tool_calling", 30, alice, {}),
        ("call_2", "celery", "succeeded", 1, "tool_calling", 30, alice, {}),
    ]
    assistant = conversation.messages.get(sequence=2)
    assert all(r.task_id and r.dispatched_at and r.assistant_message == assistant for r in rows)


class _CallerThreadPool:
    """Runs "pool" calls on the calling thread: the in-memory test database takes one writer."""

    def submit(self, function, *args):
        future = Future()
        future.set_result(function(*args))
        return future


@pytest.mark.django_db(transaction=True)
def test_a_tools_own_mode_wins_and_a_mixed_batch_runs_both_ways_in_order():
    """Concurrently so on real databases (tests/celery); one after the other here."""
    models.Tool.objects.filter(name="counted").update(execution_mode="celery", queue="slow")
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("local_only", key="1"),
                tool_call("counted", key="2"),
                tool_call("local_only", key="3"),
            ),
            text("Done"),
        ]
    )
    with (
        mock.patch.object(
            tasks.execute_tool_call, "apply_async", wraps=tasks.execute_tool_call.apply_async
        ) as send,
        mock.patch("tool_calling.calls.executors._pool", return_value=_CallerThreadPool()) as pool,
    ):
        assert turn(model) == "Done"
    assert pool.call_count == 2
    assert responses(model) == [
        ToolResponse("call_1", "local_only", "local 1"),
        ToolResponse("call_2", "counted", "counted 2"),
        ToolResponse("call_3", "local_only", "local 3"),
    ]
    assert [kwargs["queue"] for _, kwargs in send.call_args_list] == ["slow"]
    assert sorted(models.ToolExecution.objects.values_list("tool_call_id", "mode", "status")) == [
        ("call_1", "inline", "succeeded"),
        ("call_2", "celery", "succeeded"),
        ("call_3", "inline", "succeeded"),
    ]


def test_a_batch_of_inline_calls_runs_as_before_without_the_router():
    model = ScriptedChatModel([tool_call("local_only", key="1"), text("Done")])
    assert turn(model) == "Done"
    assert RAN == [("local_only", "1", threading.current_thread().name)]
    assert models.ToolExecution.objects.get().mode == "inline"


@pytest.mark.django_db(transaction=True)
@override_settings(TOOL_CALLING=CELERY)
def test_failures_on_workers_reach_the_model_as_in_process_failures_do():
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("explode", reason="backend down"),
                tool_call("refuse", reason="no"),
                tool_call("counted", nope=1),
            ),
            text("Done"),
        ]
    )
    assert turn(model) == "Done"
    bad_arguments = (
        "Invalid arguments for tool 'counted':\n"
        "- key: Field required\n"
        "- nope: Unknown parameter; remove it"
    )
    rows = {r.tool_name: r for r in models.ToolExecution.objects.all()}
    # S13: the unexpected error becomes a generic text with its error id, on a worker too; the
    # ToolFailure and the bad arguments go through as written.
    assert responses(model) == [
        ToolResponse(
            "call_1", "explode", generic_text("explode", rows["explode"].error_id), is_error=True
        ),
        ToolResponse("call_2", "refuse", "refused: no", is_error=True),
        ToolResponse("call_3", "counted", bad_arguments, is_error=True),
    ]
    assert (rows["explode"].result, rows["refuse"].error_id, rows["counted"].error_id) == (
        "backend down",  # the detail stays in the audit
        "",
        "",
    )
    assert (rows["explode"].status, rows["explode"].error_type) == ("failed", "builtins.ValueError")
    assert rows["explode"].error.startswith("Traceback (most recent call last):")
    assert rows["refuse"].error_type == "tool_calling.core.errors.ToolFailure"
    assert rows["counted"].error_type == "tool_calling.core.errors.ToolArgumentsError"


@pytest.mark.django_db(transaction=True)
@override_settings(TOOL_CALLING={**CELERY, "THROW_EXCEPTION_ON_ERROR": True})
def test_throw_exception_on_error_applies_to_calls_on_workers():
    model = ScriptedChatModel([tool_call("explode", reason="backend down"), text("Done")])
    with pytest.raises(ToolExecutionException, match="^backend down$") as raised:
        turn(model)
    # Raised on the worker, rebuilt here as its own class, with the worker's traceback.
    assert type(raised.value.cause) is ValueError
    assert "raise ValueError(reason)" in raised.value.cause.__notes__[0]


@pytest.mark.django_db(transaction=True)
@override_settings(TOOL_CALLING={**CELERY, "STRICT_TOOL_CALLS": True})
def test_strict_tool_calls_raise_bad_arguments_from_workers():
    model = ScriptedChatModel([tool_call("counted"), text("Done")])
    with pytest.raises(ToolArgumentsError, match="^Invalid arguments for tool 'counted'"):
        turn(model)


@pytest.mark.django_db(transaction=True)
@override_settings(
    TOOL_CALLING={
        **CELERY,
        "AUDIT_REDACTOR": "tests.django.test_tasks.mask",
    }
)
def test_the_model_gets_the_exact_result_and_the_audit_never_keeps_the_secret():
    model = ScriptedChatModel([tool_call("secret"), text("Done")])
    assert turn(model) == "Done"
    assert responses(model) == [ToolResponse("call_1", "secret", f"token {SENTINEL}")]
    row = models.ToolExecution.objects.values().get()
    assert row["result"] == "token [MASKED]"
    assert SENTINEL not in json.dumps(row, default=str)


def test_a_call_on_a_worker_cannot_be_waited_for_inside_a_transaction():
    executor = CeleryToolExecutor()
    with pytest.raises(ToolCallingError) as raised:
        executor.submit_tool_call(registry.get("counted"), _call(), ToolContext())
    assert str(raised.value) == (
        "Tool 'counted' runs on a Celery worker, which cannot see the call until the current "
        "database transaction commits; run the turn outside atomic() (and without "
        "ATOMIC_REQUESTS), or run the tool inline."
    )
    assert not models.ToolExecution.objects.exists()


def test_a_call_on_a_worker_cannot_be_waited_for_from_inside_a_worker_task():
    with mock.patch("tool_calling.calls.executors.in_worker_task", return_value=True):
        with pytest.raises(ToolCallingError, match="^Tool 'counted' runs on a Celery worker and "):
            CeleryToolExecutor().submit_tool_call(registry.get("counted"), _call(), ToolContext())
    assert not models.ToolExecution.objects.exists()
    assert in_worker_task() is False  # a test, not a worker
    with mock.patch.object(calls_dispatch._celery, "current_task") as task:
        task.request.configure_mock(id="t1", is_eager=False, called_directly=False)
        assert in_worker_task() is True
        task.request.is_eager = True
        assert in_worker_task() is False


def _call(name="counted", arguments='{"key": "k"}'):
    from tool_calling.core.chat.messages import ToolCall

    return ToolCall("call_9", name, arguments)


@pytest.mark.django_db(transaction=True)
def test_a_tool_context_that_is_not_json_is_refused_before_anything_is_recorded():
    executor = CeleryToolExecutor()
    with pytest.raises(ToolCallingError, match="^Tool 'counted' runs on a Celery worker, so its"):
        executor.submit_tool_call(registry.get("counted"), _call(), ToolContext(user=object()))
    assert not models.ToolExecution.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_call_no_worker_starts_is_withdrawn_when_the_caller_gives_up():
    with mock.patch.object(calls_dispatch, "dispatch", return_value=True):  # the message is lost
        future = CeleryToolExecutor().submit_tool_call(
            registry.get("counted"), _call(), ToolContext()
        )
    assert isinstance(future, _ExecutionFuture)
    assert future.wait_seconds == 65
    future.deadline -= 65
    outcome = future.result()
    assert (outcome.kind, outcome.text) == (
        ToolOutcomeKind.TIMEOUT,
        "Tool 'counted' did not start within 65 s: no worker took it.",
    )
    row = models.ToolExecution.objects.get()
    assert (row.status, row.is_error, row.payload) == ("timed_out", True, {})
    tasks.execute_tool_call(row.pk)  # a late delivery never runs it
    assert RAN == []


@pytest.mark.django_db(transaction=True)
def test_a_call_still_running_at_the_deadline_is_reported_unfinished():
    with mock.patch.object(calls_dispatch, "dispatch", return_value=True):
        future = CeleryToolExecutor().submit_tool_call(
            registry.get("counted"), _call(), ToolContext()
        )
    worker.claim(future.ref.execution_id, task_id="t1", worker="w1")
    future.deadline -= 65
    outcome = future.result()
    assert (outcome.kind, outcome.text) == (
        ToolOutcomeKind.TIMEOUT,
        "Tool 'counted' did not finish within 65 s on a worker.",
    )
    assert models.ToolExecution.objects.get().status == "running"


@pytest.mark.django_db(transaction=True)
def test_a_future_waits_only_as_long_as_its_caller_asks():
    from concurrent.futures import TimeoutError as FutureTimeoutError

    with mock.patch.object(calls_dispatch, "dispatch", return_value=True):
        future = CeleryToolExecutor().submit_tool_call(
            registry.get("counted"), _call(), ToolContext()
        )
    with pytest.raises(FutureTimeoutError):
        future.result(timeout=0.05)
    assert not future.done()
    tasks.execute_tool_call(future.ref.execution_id)
    assert future.result() == ToolOutcome.ok("counted k")


# --- small pieces -------------------------------------------------------------------------------


def test_execution_mode_is_the_tools_own_else_the_setting():
    tool_row = models.Tool.objects.get(name="counted")
    assert execution_mode(tool_row) == "inline"
    assert execution_mode(None) == "inline"
    with override_settings(TOOL_CALLING=CELERY):
        assert execution_mode(tool_row) == "celery"
        tool_row.execution_mode = "inline"
        assert execution_mode(tool_row) == "inline"


@pytest.mark.parametrize(
    ("status", "kind", "failure"),
    [
        ("succeeded", "ok", None),
        ("failed", "error", ToolFailure),
        ("refused", "error", ToolFailure),
        ("denied", "error", ToolFailure),
        ("timed_out", "timeout", None),
    ],
)
def test_outcome_of_falls_back_to_the_audit_once_the_working_data_is_gone(status, kind, failure):
    row = {"id": 1, "tool_name": "t", "status": status, "result": "audited", "payload": {}}
    outcome = outcome_of(row)
    assert (outcome.kind, outcome.text) == (kind, "audited")
    if failure is not None:
        assert outcome.is_a(failure)


def test_outcome_of_reads_the_exact_outcome_the_worker_wrote():
    stored = ToolOutcome.from_exception(ValueError("exact")).to_json()
    row = {"id": 1, "status": "failed", "result": "redacted", "payload": {"outcome": stored}}
    outcome = outcome_of(row)
    assert (outcome.text, outcome.error_type) == ("exact", "builtins.ValueError")
    assert outcome.is_a(ValueError) and outcome.exception is None


@override_settings(
    CELERY_BROKER_URL="redis://127.0.0.1:6379/0",
    CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 100},
)
def test_a_tool_timeout_the_broker_would_not_wait_for_is_refused_in_the_admin_form():
    tool_row = models.Tool.objects.get(name="counted")
    tool_row.timeout = 94
    tool_row.full_clean()
    tool_row.timeout = 95
    with pytest.raises(ValidationError) as raised:
        tool_row.full_clean()
    assert raised.value.message_dict == {
        "timeout": [
            "A call may run 100 s (this timeout plus TOOL_CALLING['EXECUTION']['TIMEOUT_GRACE']), "
            "which is not less than the broker's visibility timeout of 100 s: the broker would "
            "deliver the call again while it runs. Lower the timeout or raise the visibility "
            "timeout."
        ]
    }


def test_the_admin_shows_where_a_call_ran_and_never_its_working_data(admin_client):
    call = new_call(payload={"arguments": "{}", "context": {"token": SENTINEL}})
    worker.claim(call.pk, task_id="task-42", worker="celery@w1 (pid 7)")
    changelist = reverse("admin:tool_calling_toolexecution_changelist")
    page = admin_client.get(changelist, {"mode__exact": "celery", "q": "celery@w1 (pid 7)"})
    assert page.status_code == 200
    assert list(page.context["cl"].result_list) == [reload(call)]
    detail = admin_client.get(reverse("admin:tool_calling_toolexecution_change", args=[call.pk]))
    content = detail.content.decode()
    for shown in ("task-42", "celery@w1 (pid 7)", "Where it ran", "Lease expires"):
        assert shown in content
    assert SENTINEL not in content
    assert admin_client.get(changelist, {"status__exact": "unknown"}).status_code == 200


@pytest.mark.parametrize(
    ("who", "runs"),
    [("member", True), ("outsider", False), ("superuser", True), ("anonymous", False)],
)
def test_s2_the_worker_rechecks_the_tools_groups_for_the_calls_user(who, runs):
    """The worker's re-check (read with the call, in SQL) applies the snapshot's group rules."""
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="payments")
    models.Tool.objects.get(name="counted").allowed_groups.add(group)
    users = {
        "member": User.objects.create_user("member"),
        "outsider": User.objects.create_user("outsider"),
        "superuser": User.objects.create_superuser("root"),
        "anonymous": None,
    }
    users["member"].groups.add(group)
    call = new_call(user=users[who])
    tasks.execute_tool_call(call.pk)
    row = reload(call)
    assert (row.status, RAN) == (("succeeded", [("counted", "a")]) if runs else ("refused", []))


@pytest.mark.parametrize(
    "held_back", ["server disabled", "definition changed", "server groups", "nothing"]
)
def test_s2_the_worker_rechecks_an_mcp_tools_server_and_pinning(held_back):
    """The worker's SQL re-check applies the MCP rules of the snapshot (S2, S18)."""
    from django.contrib.auth.models import Group

    server = models.McpServer.objects.create(alias="remote", transport="stdio", command="true")
    tool_row = models.Tool.objects.create(
        name="remote_lookup", source="mcp:remote", enabled=True, input_schema={"type": "object"}
    )
    link = models.McpServerTool.objects.create(server=server, tool=tool_row, server_name="lookup")
    user = User.objects.create_user("caller")
    if held_back == "server disabled":
        models.McpServer.objects.filter(pk=server.pk).update(enabled=False)
    elif held_back == "definition changed":
        models.McpServerTool.objects.filter(pk=link.pk).update(changed=True)
    elif held_back == "server groups":
        server.allowed_groups.add(Group.objects.create(name="remote users"))
    call = models.ToolExecution.objects.create(
        tool=tool_row,
        tool_name="remote_lookup",
        status=models.ExecutionStatus.PENDING,
        mode=models.ExecutionMode.CELERY,
        user=user,
        payload={"arguments": "{}", "context": {}},
    )
    tasks.execute_tool_call(call.pk)
    row = reload(call)
    if held_back == "nothing":
        # Allowed: the worker goes on to call the server, which is not there.
        assert row.status == "failed" and "remote" in row.result
        return
    assert (row.status, row.is_error) == ("refused", True)
    assert row.result.startswith("Tool 'remote_lookup' is not available")
