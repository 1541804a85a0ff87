"""Tool calls on real Celery workers over a real Redis.

Governed turns in this process send their calls to two ``celery -A project worker`` processes
(prefork, two children each) and wait for them; the tools record every run in files, so the
tests can count side effects across processes. Faults are real: SIGKILL of a pool child, time
limits enforced by the pool, Redis stopped while a call is published, a pickled message.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from tool_calling import models, tasks
from tool_calling.calls import lifecycle
from tool_calling.calls.dispatch import Dispatch, dispatch
from tool_calling.core.chat.messages import ToolResponse, ToolResponseMessage
from tool_calling.governance import governed_chat_client
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

WAIT = 60.0
"""Longest any test waits for something to happen."""


@pytest.fixture(autouse=True)
def tool_rows() -> None:
    """Fresh Tool rows (each test's flush removes them) and fresh run logs."""
    sync_tools()
    for log in settings.STATE_DIR.glob("runs-*.log"):
        log.unlink()


def runs(tool_name: str) -> list[tuple[int, str]]:
    """The runs the tool recorded: (pid, key) each."""
    log = settings.STATE_DIR / f"runs-{tool_name}.log"
    if not log.exists():
        return []
    pairs = (line.split(" ", 1) for line in log.read_text().splitlines() if line)
    return [(int(pid), key) for pid, key in pairs]


def wait_until(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def turn(model: ScriptedChatModel, **kwargs: Any) -> str:
    client = governed_chat_client(model=model, **kwargs)
    return client.prompt("Go").call().content()


class Background(threading.Thread):
    """Runs a turn on a thread, as a web request would, while the test injects a fault."""

    def __init__(self, model: ScriptedChatModel) -> None:
        super().__init__(daemon=True)
        self.model = model
        self.answer: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = turn(self.model)
        except BaseException as exc:  # noqa: BLE001 - reported by result()
            self.error = exc
        finally:
            connections.close_all()

    def result(self) -> str:
        self.join(WAIT)
        assert not self.is_alive(), "the turn did not end"
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


def responses(model: ScriptedChatModel) -> list[ToolResponse]:
    message = model.requests[-1].messages[-1]
    assert isinstance(message, ToolResponseMessage)
    return message.responses


def worker_pid(execution: models.ToolExecution) -> int:
    """The pid of the pool child that claimed the call, from ``worker`` ("name (pid N)")."""
    return int(execution.worker.rsplit("(pid ", 1)[1].rstrip(")"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def configure(name: str, **fields: Any) -> None:
    assert models.Tool.objects.filter(name=name).update(**fields) == 1


# --- runs on workers -----------------------------------------------------------------------------


def test_a_tool_call_runs_on_a_worker_and_the_audit_names_the_task_and_the_worker(workers):
    model = ScriptedChatModel([tool_call("sleepy", key="one", seconds=0), text("Done")])
    assert turn(model) == "Done"
    [(pid, key)] = runs("sleepy")
    assert (key, pid != os.getpid()) == ("one", True)
    assert responses(model) == [ToolResponse("call_1", "sleepy", f"one slept 0 s in pid {pid}")]
    row = models.ToolExecution.objects.get()
    assert (row.mode, row.status, row.attempt, row.queue, row.timeout) == (
        "celery",
        "succeeded",
        1,
        "tool_calling",
        20,
    )
    assert row.task_id and row.dispatched_at and row.lease_expires_at is None
    assert worker_pid(row) == pid
    assert row.worker.split(" (pid ")[0] in {worker.name for worker in workers}
    assert row.payload == {}  # the exact result was delivered, then dropped


def test_parallel_calls_take_about_as_long_as_the_longest_not_the_sum():
    """Three calls on the workers' four processes plus one in-process, at the same time."""
    configure("sleepy_here", execution_mode="inline")
    configure("sleepy", queue="tc_other")
    seconds = 1.5
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("sleepy", key="a", seconds=seconds),
                tool_call("sleepy_here", key="b", seconds=seconds),
                tool_call("sleepy", key="c", seconds=seconds),
                tool_call("sleepy", key="d", seconds=seconds),
            ),
            text("Done"),
        ]
    )
    started = time.monotonic()
    assert turn(model) == "Done"
    elapsed = time.monotonic() - started
    assert elapsed < 0.75 * 4 * seconds, f"{elapsed:.2f} s: the calls did not run in parallel"
    assert [r.id for r in responses(model)] == ["call_1", "call_2", "call_3", "call_4"]
    assert not any(r.is_error for r in responses(model))
    assert len({pid for pid, _ in runs("sleepy")}) == 3
    assert runs("sleepy_here") == [(os.getpid(), "b")]
    assert sorted(models.ToolExecution.objects.values_list("tool_name", "mode", "queue")) == [
        ("sleepy", "celery", "tc_other"),
        ("sleepy", "celery", "tc_other"),
        ("sleepy", "celery", "tc_other"),
        ("sleepy_here", "inline", ""),
    ]


# --- crashes and duplicates ----------------------------------------------------------------------


def test_r1_sigkill_of_the_child_mid_call_reruns_an_idempotent_tool_and_the_turn_completes():
    configure("crash_prone", idempotent=True)
    model = ScriptedChatModel([tool_call("crash_prone", key="k1"), text("Done")])
    background = Background(model)
    background.start()
    [(first_pid, _)] = wait_until(lambda: runs("crash_prone"), "the first run")
    os.kill(first_pid, signal.SIGKILL)

    assert background.result() == "Done"
    assert responses(model) == [ToolResponse("call_1", "crash_prone", "done k1")]
    (pid_1, key_1), (pid_2, key_2) = runs("crash_prone")
    assert (key_1, key_2) == ("k1", "k1") and pid_1 != pid_2
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, row.is_error, worker_pid(row)) == (
        "succeeded",
        2,
        False,
        pid_2,
    )


def test_sigkill_of_the_child_mid_call_never_reruns_a_non_idempotent_tool():
    model = ScriptedChatModel([tool_call("crash_prone_unsafe", key="k2"), text("Done")])
    background = Background(model)
    background.start()
    [(pid, _)] = wait_until(lambda: runs("crash_prone_unsafe"), "the first run")
    os.kill(pid, signal.SIGKILL)

    assert background.result() == "Done"
    assert responses(model) == [
        ToolResponse("call_1", "crash_prone_unsafe", lifecycle.UNKNOWN_OUTCOME_TEXT, is_error=True)
    ]
    time.sleep(1)  # a redelivery, had there been one, would have run by now
    assert runs("crash_prone_unsafe") == [(pid, "k2")]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt, row.result) == ("unknown", 1, lifecycle.UNKNOWN_OUTCOME_TEXT)


def test_r5_a_stalled_attempt_is_taken_over_and_its_late_result_discarded(workers):
    """R5: SIGSTOP the child past its lease; the sweeper has it re-run; SIGCONT: fenced off."""
    configure("slow_first", idempotent=True)
    model = ScriptedChatModel([tool_call("slow_first", key="k5"), text("Done")])
    background = Background(model)
    background.start()
    [(stalled, _)] = wait_until(lambda: runs("slow_first"), "the first run")
    os.kill(stalled, signal.SIGSTOP)
    try:
        # The stopped process renews no lease: once it expires, the sweeper sends the call again.
        wait_until(lambda: tasks.sweep_tool_executions()["redispatched"], "the lease to expire")
        assert background.result() == "Done"
    finally:
        os.kill(stalled, signal.SIGCONT)
    assert responses(model) == [ToolResponse("call_1", "slow_first", "k5 from the second run")]
    row = models.ToolExecution.objects.get()
    late = f"Discarded the late result (succeeded) of attempt 1 of tool call {row.pk}"
    wait_until(lambda: any(late in w.log_text() for w in workers), "attempt 1 to finish")
    row.refresh_from_db()
    assert (row.status, row.attempt, row.result) == ("succeeded", 2, "k5 from the second run")
    assert [pid for pid, _ in runs("slow_first")][0] == stalled
    assert len(runs("slow_first")) == 2


def _pending_call(name: str, arguments: dict[str, Any], **fields: Any) -> models.ToolExecution:
    return models.ToolExecution.objects.create(
        tool=models.Tool.objects.get(name=name),
        tool_name=name,
        arguments=json.dumps(arguments),
        status=models.ExecutionStatus.PENDING,
        mode=models.ExecutionMode.CELERY,
        queue="tool_calling",
        timeout=20,
        payload={"arguments": json.dumps(arguments), "context": {}},
        **fields,
    )


def test_r2_the_same_call_delivered_twice_runs_the_tool_once(workers):
    call = _pending_call("sleepy", {"key": "twice", "seconds": 1})
    message = Dispatch.of(call)
    assert dispatch(message) and dispatch(message)  # two messages for one call

    def both_deliveries_handled() -> bool:
        logs = "".join(worker.log_text() for worker in workers)
        return f"Tool call {call.pk} is already running" in logs or (
            f"Tool call {call.pk} already ended" in logs
        )

    wait_until(both_deliveries_handled, "the second delivery")
    wait_until(
        lambda: models.ToolExecution.objects.get(pk=call.pk).status == "succeeded", "the call"
    )
    assert [key for _, key in runs("sleepy")] == ["twice"]
    assert models.ToolExecution.objects.get(pk=call.pk).attempt == 1


# --- time limits ----------------------------------------------------------------------------------


def test_a_soft_time_limit_becomes_an_error_response_the_model_sees():
    configure("overrunning", timeout=1)
    model = ScriptedChatModel([tool_call("overrunning", seconds=10), text("Done")])
    started = time.monotonic()
    assert turn(model) == "Done"
    assert time.monotonic() - started < 8
    assert responses(model) == [
        ToolResponse("call_1", "overrunning", "Tool 'overrunning' timed out after 1 s.", True)
    ]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.is_error) == ("timed_out", True)
    assert alive(worker_pid(row))  # the soft limit leaves the process running


def test_s9_a_hard_time_limit_times_the_call_out_and_replaces_the_worker_process():
    configure("stubborn", timeout=1)
    model = ScriptedChatModel([tool_call("stubborn", seconds=30), text("Done")])
    started = time.monotonic()
    assert turn(model) == "Done"
    assert time.monotonic() - started < 10
    assert responses(model) == [
        ToolResponse("call_1", "stubborn", "Tool 'stubborn' timed out after 1 s.", True)
    ]
    assert [key for _, key in runs("stubborn")] == ["run", "ignored the soft limit"]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.is_error) == ("timed_out", True)
    killed = worker_pid(row)
    wait_until(lambda: not alive(killed), "the timed-out process to be gone", timeout=10)

    # The pool replaced it: the workers still run calls.
    model = ScriptedChatModel([tool_call("whose_pid"), text("Done")])
    assert turn(model) == "Done"
    assert responses(model)[0].response_data != str(killed)
    assert not responses(model)[0].is_error


# --- the broker ---------------------------------------------------------------------------


def test_r3_a_call_published_while_redis_is_down_is_sent_by_the_sweeper_once_it_is_back(
    redis_server,
):
    redis_server.stop()
    try:
        model = ScriptedChatModel([tool_call("sleepy", key="r3", seconds=0), text("Done")])
        background = Background(model)
        background.start()
        row = wait_until(
            lambda: models.ToolExecution.objects.filter(tool_name="sleepy").first(), "the call"
        )
        # Publishing failed: the call waits in the database, not in the broker.
        time.sleep(2)
        row.refresh_from_db()
        assert (row.status, row.dispatched_at) == ("pending", None)
    finally:
        redis_server.start()

    def swept() -> bool:
        return tasks.sweep_tool_executions()["redispatched"] > 0

    wait_until(swept, "the sweeper to send the call")
    assert background.result() == "Done"
    [(pid, _)] = runs("sleepy")
    assert responses(model) == [ToolResponse("call_1", "sleepy", f"r3 slept 0 s in pid {pid}")]
    row.refresh_from_db()
    assert (row.status, row.attempt) == ("succeeded", 1)
    assert row.dispatched_at is not None and row.dispatched_at < timezone.now()


def test_s20_a_pickled_message_is_refused_and_nothing_runs(workers):
    from project import celery_app

    call = _pending_call("sleepy", {"key": "pickled", "seconds": 0})
    celery_app.send_task(
        "tool_calling.execute_tool_call",
        args=[call.pk],
        queue="tool_calling",
        serializer="pickle",
    )

    def refused() -> bool:
        logs = "".join(worker.log_text() for worker in workers)
        return "ContentDisallowed" in logs or "untrusted content of type pickle" in logs

    wait_until(refused, "a worker to refuse the pickled message")
    time.sleep(0.5)
    assert runs("sleepy") == []
    call.refresh_from_db()
    assert (call.status, call.attempt, call.task_id) == ("pending", 0, "")


def test_r1_sigkill_of_a_whole_worker_is_recovered_from_the_database_long_before_v(workers):
    """R1: the worker's main process and children die; its message would come back only after
    the visibility timeout (1800 s). The lease expires in 3 s and the sweeper re-dispatches."""
    from tests.celery.conftest import start_worker, wait_ready

    configure("crash_prone", idempotent=True)
    model = ScriptedChatModel([tool_call("crash_prone", key="whole"), text("Done")])
    background = Background(model)
    background.start()
    wait_until(lambda: runs("crash_prone"), "the first run")
    row = wait_until(
        lambda: models.ToolExecution.objects.filter(status="running").first(), "the claim"
    )
    [victim] = [w for w in workers if row.worker.startswith(f"{w.name} (pid ")]
    os.killpg(victim.process.pid, signal.SIGKILL)  # the worker we started, and its children
    victim.process.wait(10)
    try:
        wait_until(lambda: tasks.sweep_tool_executions()["redispatched"], "the lease to expire")
        assert background.result() == "Done"
        assert responses(model) == [ToolResponse("call_1", "crash_prone", "done whole")]
        row.refresh_from_db()
        assert (row.status, row.attempt) == ("succeeded", 2)
        assert not row.worker.startswith(victim.name)
    finally:
        replacement = start_worker(len(workers) + 1)
        workers.append(replacement)
        wait_ready(replacement)
