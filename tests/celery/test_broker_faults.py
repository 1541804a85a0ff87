"""The broker misbehaving under the API and the workers (S9, R2, R6, R10).

Faults are real: the tier's ``redis-server`` is SIGSTOPped (it accepts connections and never
answers, as a hung or overloaded Redis does) or ``FLUSHALL``ed while calls and runs are in
flight; a worker whose broker connection has a 2 s visibility timeout gets a running call's
message handed back by Redis; a tool fails transiently on a worker and is retried after real
countdowns. Requests go through Django's test client in this process, with this tier's settings
(a Redis broker and, unless a test says otherwise, the local-memory cache).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.test import override_settings
from rest_framework.test import APIClient

from tool_calling import models, runs, tasks
from tool_calling.calls.dispatch import Dispatch, dispatch
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer, text

from .conftest import start_worker, stop_worker, wait_ready

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

HANG = 45.0
"""A request still unanswered after this long hangs (the defect); the bound is far lower."""

NO_THROTTLE = {
    **settings.REST_FRAMEWORK,
    "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": None},
}


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@contextmanager
def stalled(redis_server: Any) -> Iterator[None]:
    """The tier's Redis stopped (SIGSTOP) for the block: connections open, nothing answers."""
    os.kill(redis_server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)


def request(method: str, user: User, path: str, body: Any = None) -> Any:
    """The API's answer to one request, made on a thread; fails the test if it hangs."""
    answer: dict[str, Any] = {}

    def send() -> None:
        try:
            client = APIClient()
            client.force_authenticate(user)
            answer["response"] = getattr(client, method)(path, body, format="json")
        except BaseException as exc:  # noqa: BLE001 - reported below
            answer["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=send, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(HANG)
    if thread.is_alive():
        pytest.fail(f"{method.upper()} {path} got no answer within {HANG} s: it hangs")
    if "error" in answer:
        raise answer["error"]
    response = answer["response"]
    response.seconds = time.monotonic() - started
    return response


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


def test_s9_a_stalled_broker_answers_503_and_keeps_the_message_and_a_retryable_run(
    alice, redis_server
):
    """POST .../messages/ with Redis stalled: 503 within the broker timeouts, nothing lost.

    The message and the run are saved, the run is failed (the documented 503 path); a retry
    while Redis still stalls is a 503 as well, a cancel answers; once Redis answers again the
    retried run ends on the workers.
    """
    sync_tools()
    conversation = models.Conversation.objects.create(owner=alice)
    path = f"/api/conversations/{conversation.pk}/messages/"
    with override_settings(REST_FRAMEWORK=NO_THROTTLE), stalled(redis_server):
        response = request("post", alice, path, {"text": "Hello"})
        print(f"POST with Redis stalled: {response.status_code} after {response.seconds:.1f} s")
        assert response.status_code == 503, response.content
        run = models.Run.objects.get(conversation=conversation)
        assert response.json()["detail"] == (
            "The turn could not be queued: the message broker is unavailable. Your message and "
            f"run {run.pk} are saved; the run is marked failed and can be retried."
        )
        assert (run.status, run.started_at) == ("failed", None)
        assert run.error.startswith(
            "The turn could not be queued: the message broker is unavailable ("
        )
        assert list(conversation.messages.values_list("role", "text")) == [("user", "Hello")]
        conversation.refresh_from_db()
        assert conversation.turn_token == ""  # the conversation is free for the retry

        retried = request("post", alice, f"/api/runs/{run.pk}/retry/")
        assert retried.status_code == 503, retried.content
        run.refresh_from_db()
        assert run.status == "failed"

    with ReplayServer([{"text": "Hi there"}], port=settings.MODEL_PORT):
        retried = request("post", alice, f"/api/runs/{run.pk}/retry/")
        assert retried.status_code == 202, retried.content
        wait_until(
            lambda: models.Run.objects.get(pk=run.pk).status == "succeeded", "the retried run"
        )
    assert list(conversation.messages.values_list("role", "text")) == [
        ("user", "Hello"),
        ("assistant", "Hi there"),
    ]


def test_s9_with_the_redis_cache_a_stalled_redis_leaves_the_throttle_and_the_broker_answers(
    alice, redis_server
):
    """The turn throttle counts in the database (S24), not the cache: a stalled Redis (cache
    and broker) gets as far as the broker's bounded publish, whose 503 keeps the message."""
    conversation = models.Conversation.objects.create(owner=alice)
    caches = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
    with override_settings(CACHES=caches), stalled(redis_server):
        response = request(
            "post", alice, f"/api/conversations/{conversation.pk}/messages/", {"text": "Hello"}
        )
    assert response.status_code == 503, response.content
    assert response.json()["detail"].startswith(
        "The turn could not be queued: the message broker is unavailable."
    )
    assert models.RequestHistory.objects.count() == 1
    assert list(conversation.messages.values_list("text", flat=True)) == ["Hello"]


def test_s9_cancelling_a_run_while_redis_stalls_answers(alice, redis_server):
    """Cancel writes the database and announces the event: the announcement is bounded too."""
    conversation = models.Conversation.objects.create(owner=alice)
    run = models.Run.objects.create(conversation=conversation, user=alice, text="x")
    with stalled(redis_server):
        response = request("post", alice, f"/api/runs/{run.pk}/cancel/")
    assert response.status_code == 202, response.content
    run.refresh_from_db()
    assert run.cancel_requested is True


# --- R2: a redelivery the visibility timeout forces ---------------------------------------------


def tool_runs(tool_name: str) -> list[str]:
    """The keys the Celery tier's tool recorded, one per run (tests/celery/toolsapp/tools.py)."""
    log = settings.STATE_DIR / f"runs-{tool_name}.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split(" ", 1)[1] for line in lines if line]


def pending_call(name: str, arguments: dict[str, Any], queue: str) -> models.ToolExecution:
    return models.ToolExecution.objects.create(
        tool=models.Tool.objects.get(name=name),
        tool_name=name,
        arguments=json.dumps(arguments),
        status=models.ExecutionStatus.PENDING,
        mode=models.ExecutionMode.CELERY,
        queue=queue,
        timeout=20,
        payload={"arguments": json.dumps(arguments), "context": {}},
    )


def test_r2_a_visibility_timeout_redelivery_of_a_running_call_runs_the_tool_once(workers):
    """Redis hands a running call's message to a worker again: the claim stops it (counter = 1).

    A worker whose transport has a 2 s visibility timeout, checked every second, runs a 7 s
    call; Redis redelivers the unacknowledged message meanwhile, and the redelivery finds the
    call claimed under a live lease. A delivery after the call ended finds it finished and
    leaves its stored result alone.
    """
    sync_tools()
    quick = start_worker(9, queues="tc_visibility", env={"TC_CELERY_VISIBILITY_TIMEOUT": "2"})
    workers.append(quick)  # stopped with the session should the test fail
    try:
        wait_ready(quick)
        call = pending_call("sleepy", {"key": "vt", "seconds": 7}, "tc_visibility")
        assert dispatch(Dispatch.of(call))
        wait_until(
            lambda: f"Tool call {call.pk} is already running" in quick.log_text(),
            "Redis to redeliver the running call",
            timeout=30,
        )
        wait_until(
            lambda: models.ToolExecution.objects.get(pk=call.pk).status == "succeeded", "the call"
        )
        call.refresh_from_db()
        result = call.result
        assert dispatch(Dispatch.of(call))  # and once more, after the end
        wait_until(
            lambda: f"Tool call {call.pk} already ended" in quick.log_text(), "the late delivery"
        )
    finally:
        stop_worker(quick)
        workers.remove(quick)
    assert tool_runs("sleepy") == ["vt"]  # the side effect happened once
    call.refresh_from_db()
    assert (call.status, call.attempt, call.result) == ("succeeded", 1, result)


# --- R6: retries on real workers, with real countdowns ------------------------------------------


def test_r6_transient_failures_on_a_worker_are_retried_after_growing_countdowns():
    sync_tools()
    models.Tool.objects.filter(name="flaky_on_workers").update(retries=3, retry_backoff=0.4)
    call = pending_call("flaky_on_workers", {"key": "r6", "failures": 3}, "tool_calling")
    assert dispatch(Dispatch.of(call))
    wait_until(
        lambda: models.ToolExecution.objects.get(pk=call.pk).status == "succeeded", "the retries"
    )
    call.refresh_from_db()
    assert call.result == "r6 answered on run 4"
    assert (call.attempt, len(call.attempts)) == (4, 3)
    assert tool_runs("flaky_on_workers") == ["r6"] * 4
    pauses = [attempt["retry_after_s"] for attempt in call.attempts]
    for retry, pause in enumerate(pauses, 1):
        assert 0.2 * 2 ** (retry - 1) <= pause <= 0.4 * 2 ** (retry - 1) + 0.001
    starts = [datetime.datetime.fromisoformat(a["started_at"]) for a in call.attempts]
    starts.append(call.started_at)
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    # The broker held each retry for its countdown: the gaps are at least the pauses.
    assert all(gap >= pause - 0.05 for gap, pause in zip(gaps, pauses, strict=True)), gaps
    assert call.attempts[0]["error"] == "upstream busy (1 of 3)"


# --- R10: Redis flushed under load ---------------------------------------------------------------


def test_r10_flushall_under_load_every_committed_call_and_run_still_ends(redis_server, alice):
    """FLUSHALL while 12 calls and 4 durable runs are in flight: the sweeper recovers all."""
    import redis as redis_client

    sync_tools()
    calls = [
        pending_call("sleepy", {"key": f"f{n}", "seconds": 0.3}, "tool_calling") for n in range(12)
    ]
    conversations = [models.Conversation.objects.create(owner=alice) for _ in range(4)]
    with ReplayServer([text("ok")] * 8, port=settings.MODEL_PORT):
        for call in calls:
            assert dispatch(Dispatch.of(call))
        started = [runs.start_turn(c, "Hello", user=alice) for c in conversations]
        redis_client.Redis(port=redis_server.port).flushall()  # the broker forgets everything

        fast = {**settings.TOOL_CALLING, "EXECUTION": {**settings.TOOL_CALLING["EXECUTION"]}}
        fast["EXECUTION"]["REDISPATCH_AFTER"] = 1

        def everything_ended() -> bool:
            with override_settings(TOOL_CALLING=fast):
                tasks.sweep_tool_executions()
            ids = [c.pk for c in calls]
            open_calls = models.ToolExecution.objects.filter(pk__in=ids).exclude(
                status__in=models.TERMINAL_STATUSES
            )
            open_runs = models.Run.objects.filter(pk__in=[r.pk for r in started]).exclude(
                status__in=models.RUN_TERMINAL_STATUSES
            )
            if open_calls.exists() or open_runs.exists():
                time.sleep(1)
                return False
            return True

        wait_until(everything_ended, "every call and run to end after FLUSHALL", timeout=90)
    statuses = models.ToolExecution.objects.filter(pk__in=[c.pk for c in calls]).values_list(
        "status", flat=True
    )
    assert set(statuses) == {"succeeded"}
    assert sorted(tool_runs("sleepy")) == sorted(f"f{n}" for n in range(12))  # each ran once
    assert set(
        models.Run.objects.filter(pk__in=[r.pk for r in started]).values_list("status", flat=True)
    ) == {"succeeded"}


def test_r13_a_redis_restart_mid_call_neither_aborts_a_call_nor_runs_it_twice(redis_server):
    """R13: the call needs no Redis to finish. Celery would cancel it on the lost connection
    (CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS): a call that is not idempotent
    would end "outcome unknown". Left running, it finishes once; its row records the outcome."""
    from tool_calling.testing import ScriptedChatModel, tool_call

    from .test_workers import Background, responses

    sync_tools()
    log = settings.STATE_DIR / "side-effects.log"
    log.unlink(missing_ok=True)
    model = ScriptedChatModel([tool_call("count_side_effect", key="blip", seconds=6), text("Done")])
    background = Background(model)
    background.start()
    wait_until(
        lambda: models.ToolExecution.objects.filter(status="running").exists(), "the call to run"
    )
    redis_server.stop()  # gone: every connection to it is lost
    try:
        time.sleep(3)
    finally:
        redis_server.start()
    assert background.result() == "Done"
    [response] = responses(model)
    assert (response.response_data, response.is_error) == ("counted blip", False)
    row = models.ToolExecution.objects.get()
    assert (row.status, row.attempt) == ("succeeded", 1)
    time.sleep(1)  # a second run, had there been one, would have left its line by now
    assert log.read_text().split() == ["blip"]


def test_r11_a_publish_does_not_wait_for_ten_others_in_flight(redis_server):
    """Hundreds of request and worker threads publish together: with Celery's pool of 10 broker
    connections, the eleventh publish waited for one of them, then failed (LimitExceeded: a 503
    "broker unavailable" with Redis up). Ten connections held by slow publishes stop nobody."""
    from tool_calling.calls import dispatch as sending

    pool = sending._connections(sending.task(sending.RUN_STEP).app, sending._timeout())
    held = [pool.acquire(block=True, timeout=1) for _ in range(10)]
    try:
        sending.publish(sending.RUN_STEP, ["nobody"], queue="tc_nobody_consumes")
    finally:
        for connection in held:
            connection.release()
    import redis

    assert redis.Redis.from_url(redis_server.url).llen("tc_nobody_consumes") == 1
