"""Tool calls and durable runs on a thread pool (``celery worker -P threads``).

The I/O worker of the main job runs turns and tool calls in threads, hundreds in one process. A
thread cannot be killed, so these tests hold it to what the prefork pool gives: calls wait side
by side in one process; a call past its soft time limit gets Celery's ``SoftTimeLimitExceeded``
(an ``async def`` tool is cancelled); a call past its hard limit ends ``timed_out`` without
holding the pool; a worker killed mid-call or mid-step is recovered from the database (R1, R11).

One thread-pool worker consumes the queue ``tc_threads``, which only it consumes; tools are sent
there by their Tool row's queue, and its runs' steps by ``EXECUTION["QUEUE"]`` (the worker's own
setting, ``TC_CELERY_QUEUE``; the test process overrides the same key).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from tool_calling import models, runs, tasks
from tool_calling.core.chat.messages import ToolResponse
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer, ScriptedChatModel, text, tool_call, tool_calls

from .conftest import Worker, start_worker, stop_worker, wait_ready
from .test_workers import WAIT, Background, configure, responses, turn, wait_until
from .test_workers import runs as tool_runs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

QUEUE = "tc_threads"
THREADS = 64


def _start() -> Worker:
    worker = start_worker(
        f"threads-{time.monotonic_ns()}",
        queues=QUEUE,
        pool="threads",
        concurrency=THREADS,
        env={"TC_CELERY_QUEUE": QUEUE},
    )
    wait_ready(worker)
    return worker


@pytest.fixture(scope="module")
def thread_workers() -> Iterator[list[Worker]]:
    """One thread-pool worker; a test that kills it appends its replacement."""
    started = [_start()]
    try:
        yield started
    finally:
        for worker in started:
            stop_worker(worker)


@pytest.fixture(autouse=True)
def on_threads(thread_workers: list[Worker]) -> None:
    """Fresh Tool rows whose calls go to the thread pool; fresh run logs."""
    sync_tools()
    models.Tool.objects.update(queue=QUEUE)
    for log in settings.STATE_DIR.glob("runs-*.log"):
        log.unlink()


def live(workers: list[Worker]) -> Worker:
    return next(w for w in reversed(workers) if w.process.poll() is None)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_r11_calls_on_a_thread_pool_wait_side_by_side_in_one_process(thread_workers):
    """30 calls of one batch are all running at once, in the one worker process."""
    count = 30
    batch = tool_calls(*(tool_call("where", key=f"k{i}", seconds=2) for i in range(count)))
    model = ScriptedChatModel([batch, text("ok")])
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            running = models.ToolExecution.objects.filter(status="running").count()
            peak = max(peak, running)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert turn(model) == "ok"
    finally:
        stop.set()
        watcher.join(5)
    answers = [r.response_data for r in responses(model)]
    assert not any(r.is_error for r in responses(model))
    pids = {answer.split(" in pid ")[1].split()[0] for answer in answers}
    assert pids == {str(live(thread_workers).process.pid)}  # the worker itself: no pool children
    assert peak == count


def test_a_soft_time_limit_on_threads_raises_in_the_tool_and_the_model_is_told(thread_workers):
    configure("patient", timeout=1)
    model = ScriptedChatModel([tool_call("patient", seconds=30), text("Done")])
    assert turn(model) == "Done"
    assert responses(model) == [
        ToolResponse("call_1", "patient", "Tool 'patient' timed out after 1 s.", True)
    ]
    assert [key for _, key in tool_runs("patient")] == ["run", "cleaned up"]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.is_error) == ("timed_out", True)
    assert alive(live(thread_workers).process.pid)


def test_a_call_past_its_hard_limit_on_threads_is_given_up_and_the_pool_goes_on(thread_workers):
    """``stubborn`` ignores the soft limit: at the hard one it ends ``timed_out``; its thread
    runs on (a thread cannot be killed) while the worker takes the next calls."""
    configure("stubborn", timeout=1)
    model = ScriptedChatModel([tool_call("stubborn", seconds=15), text("Done")])
    assert turn(model) == "Done"
    assert responses(model) == [
        ToolResponse("call_1", "stubborn", "Tool 'stubborn' timed out after 1 s.", True)
    ]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.is_error) == ("timed_out", True)
    worker = live(thread_workers)
    wait_until(lambda: "given up on" in worker.log_text(), "the worker to log it gave up")

    # The abandoned tool still runs (it ignored the soft limit), and the pool serves others.
    assert [key for _, key in tool_runs("stubborn")] == ["run", "ignored the soft limit"]
    model = ScriptedChatModel([tool_call("where", key="after"), text("Done")])
    assert turn(model) == "Done"
    assert responses(model)[0].response_data.startswith(f"after in pid {worker.process.pid} ")


def test_an_async_tool_past_its_soft_limit_on_threads_is_cancelled(thread_workers):
    configure("waiting_async", timeout=1)
    model = ScriptedChatModel([tool_call("waiting_async", key="w1", seconds=30), text("Done")])
    assert turn(model) == "Done"
    assert responses(model) == [
        ToolResponse("call_1", "waiting_async", "Tool 'waiting_async' timed out after 1 s.", True)
    ]
    assert [key for _, key in tool_runs("waiting_async")] == ["w1", "w1 cancelled"]


def _kill(worker: Worker) -> None:
    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait(10)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
def test_r1_a_thread_pool_worker_killed_mid_call_is_recovered_from_the_database(
    thread_workers, idempotent
):
    """SIGKILL of the worker process (its threads die with it): an idempotent call runs again on
    the replacement, another ends "outcome unknown"; the turn completes either way."""
    name = "crash_prone" if idempotent else "crash_prone_unsafe"
    configure(name, idempotent=idempotent)
    model = ScriptedChatModel([tool_call(name, key=f"threads-{idempotent}"), text("Done")])
    background = Background(model)
    background.start()
    wait_until(lambda: tool_runs(name), "the first run")
    _kill(live(thread_workers))
    thread_workers.append(_start())

    def swept() -> bool:
        report = tasks.sweep_tool_executions()
        return bool(report["redispatched"] or report["settled"])

    wait_until(swept, "the sweeper to find the call whose lease expired")
    assert background.result() == "Done"
    row = models.ToolExecution.objects.get()
    if idempotent:
        assert responses(model) == [ToolResponse("call_1", name, f"done threads-{idempotent}")]
        assert (row.status, row.attempt) == ("succeeded", 2)
        assert len(tool_runs(name)) == 2
    else:
        assert (row.status, row.attempt) == ("unknown", 1)
        assert len(tool_runs(name)) == 1


def _finished(run: models.Run, timeout: float = WAIT) -> models.Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("succeeded", "failed", "cancelled"):
            return run
        tasks.sweep_tool_executions()
        time.sleep(0.2)
    pytest.fail(f"run {run.pk} still {run.status} after {timeout} s")


def _durable() -> tuple[models.Run, models.Conversation]:
    conversation = models.Conversation.objects.create(title="threads")
    with override_settings(
        TOOL_CALLING={
            **settings.TOOL_CALLING,
            "EXECUTION": {**settings.TOOL_CALLING["EXECUTION"], "QUEUE": QUEUE},
        }
    ):
        run = runs.start_turn(conversation, "Go")
    return run, conversation


def test_r11_durable_runs_on_a_thread_pool_complete_side_by_side(thread_workers):
    """Ten runs whose model answers after a second each: every step and call on the threads."""
    call = {"delay": 1, "tool_calls": [{"name": "where", "arguments": {"key": "d"}}]}
    answer = {"delay": 1, "text": "done"}

    def step(body: dict[str, Any]) -> dict[str, Any]:
        return call if body["messages"][-1]["role"] == "user" else answer

    with ReplayServer([step] * 20, port=settings.MODEL_PORT) as server:
        started = [_durable()[0] for _ in range(10)]
        ended = [_finished(run) for run in started]
        requests = len(server.requests)
    assert [(run.status, run.answer) for run in ended] == [("succeeded", "done")] * 10
    assert requests == 20
    worker = live(thread_workers)
    workers_seen = set(models.ToolExecution.objects.values_list("worker", flat=True))
    assert {w.rsplit("(pid ", 1)[1].rstrip(")") for w in workers_seen} == {str(worker.process.pid)}
    # Each step ran its call itself: no call task, and one step task per model call.
    log = worker.log_text()
    assert "Task tool_calling.execute_tool_call" not in log
    assert log.count("Task tool_calling.run_step[") <= 2 * 20  # received and succeeded lines


def test_r11_a_thread_pool_worker_killed_with_100_turns_in_flight_leaves_no_run_behind(
    thread_workers,
):
    """SIGKILL of the worker with 100 turns in flight (64 waiting on the model, the rest still
    queued or prefetched): every run ends, each answer stored once."""
    count = 100
    slow = {"delay": 4, "text": "lost"}
    fast = {"text": "Recovered"}
    killed = threading.Event()

    def step(body: dict[str, Any]) -> dict[str, Any]:
        return fast if killed.is_set() else slow  # the answers asked before the kill are lost

    with ReplayServer([step] * (2 * count), port=settings.MODEL_PORT) as server:
        pairs = [_durable() for _ in range(count)]
        wait_until(lambda: len(server.requests) >= THREADS, "every thread to wait on the model")
        killed.set()
        _kill(live(thread_workers))
        thread_workers.append(_start())
        ended = [_finished(run, timeout=120) for run, _ in pairs]
    assert [(run.status, run.answer) for run in ended] == [("succeeded", "Recovered")] * count
    for _, conversation in pairs:
        roles = list(conversation.messages.order_by("sequence").values_list("role", flat=True))
        assert roles == ["user", "assistant"]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
def test_r1_a_call_run_in_its_step_on_a_killed_worker_is_recovered(thread_workers, idempotent):
    """The step runs its call itself (no call task): SIGKILL of the worker mid-call loses the
    step and the call at once. Their leases expire; the sweeper queues the step again and settles
    or re-sends the call (an idempotent one runs again, another ends "outcome unknown"); the run
    ends with every message once."""
    name = "crash_prone" if idempotent else "crash_prone_unsafe"
    configure(name, idempotent=idempotent)
    key = f"in-step-{idempotent}"
    call = {"tool_calls": [{"name": name, "arguments": {"key": key}}]}
    steps = [call, {"text": "Recovered"}]
    with ReplayServer(steps, port=settings.MODEL_PORT):
        run, conversation = _durable()
        wait_until(lambda: tool_runs(name), "the call to start in its step")
        _kill(live(thread_workers))
        thread_workers.append(_start())
        run = _finished(run, timeout=90)
    assert (run.status, run.answer) == ("succeeded", "Recovered")
    roles = list(conversation.messages.order_by("sequence").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant"]
    row = models.ToolExecution.objects.get(run=run)
    if idempotent:
        assert (row.status, row.attempt) == ("succeeded", 2)
        assert [k for _, k in tool_runs(name)] == [key, key]
    else:
        assert (row.status, row.attempt) == ("unknown", 1)
        assert [k for _, k in tool_runs(name)] == [key]
