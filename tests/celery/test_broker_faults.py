"""The broker misbehaving under the API and the workers: a stalled Redis (S9), a flushed one (R10).

Faults are real: the tier's ``redis-server`` is SIGSTOPped (it accepts connections and never
answers, as a hung or overloaded Redis does) or ``FLUSHALL``ed while calls are queued. Requests
go through Django's test client in this process, with this tier's settings (a Redis broker and,
unless a test says otherwise, the local-memory cache).
"""

from __future__ import annotations

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

from tool_calling import models
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

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


def test_s9_with_the_redis_cache_a_stalled_redis_answers_the_throttles_503_first(
    alice, redis_server
):
    """The throttle's cache (Redis, 2 s socket timeouts) answers first: 503, nothing saved."""
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
    assert response.json()["detail"] == (
        "The turn was not started: the rate limiter's cache is unavailable. Nothing was saved; "
        "send the message again later."
    )
    assert not models.Run.objects.exists()
    assert not conversation.messages.exists()


def test_s9_cancelling_a_run_while_redis_stalls_answers(alice, redis_server):
    """Cancel writes the database and announces the event: the announcement is bounded too."""
    conversation = models.Conversation.objects.create(owner=alice)
    run = models.Run.objects.create(conversation=conversation, user=alice, text="x")
    with stalled(redis_server):
        response = request("post", alice, f"/api/runs/{run.pk}/cancel/")
    assert response.status_code == 202, response.content
    run.refresh_from_db()
    assert run.cancel_requested is True
