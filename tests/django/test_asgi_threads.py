"""``tool_calling.asgi``: requests reuse their threads, so connections outlive a request.

Django's handler gives every request a new thread: a new database connection and a new cache
connection each time. Ours keeps the threads (one request at a time each): counted here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from asgiref.sync import ThreadSensitiveContext
from django.core.cache import caches
from django.http import HttpRequest, JsonResponse
from django.test import override_settings
from django.urls import path

from tool_calling.asgi import DEFAULT_MAX_THREADS, EventStreamFriendlyASGIHandler, request_threads
from tool_calling.cache import SharedConnectionPool

_running = {"now": 0, "most": 0}
_running_lock = threading.Lock()


def where(request: HttpRequest) -> JsonResponse:
    with _running_lock:
        _running["now"] += 1
        _running["most"] = max(_running["most"], _running["now"])
    try:
        time.sleep(float(request.GET.get("sleep", 0)))
    finally:
        with _running_lock:
            _running["now"] -= 1
    return JsonResponse({"thread": threading.get_ident()})


urlpatterns = [path("where/", where)]


async def threads_of(client: httpx.AsyncClient, count: int, *, together: bool) -> set[int]:
    async def one() -> int:
        response = await client.get("/where/", params={"sleep": 0.3 if together else 0})
        assert response.status_code == 200
        return int(response.json()["thread"])

    if together:
        return set(await asyncio.gather(*(one() for _ in range(count))))
    return {await one() for _ in range(count)}


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"])
def test_requests_reuse_the_threads_of_earlier_requests() -> None:
    app = EventStreamFriendlyASGIHandler()

    async def scenario() -> tuple[set[int], set[int], set[int]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            one_by_one = await threads_of(client, 20, together=False)
            together = await threads_of(client, 10, together=True)
            again = await threads_of(client, 10, together=True)
        return one_by_one, together, again

    one_by_one, together, again = asyncio.run(scenario())
    assert len(one_by_one) == 1  # Django's own handler: 20 threads, one per request
    assert len(together) == 10  # one request at a time per thread
    assert again <= together | one_by_one  # kept, not replaced


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"])
def test_past_max_threads_requests_wait_their_turn_and_all_succeed() -> None:
    """A burst larger than the bound (a PostgreSQL pool's size) queues on the event loop: no
    more threads than the bound run at once, every request is answered, none fails."""
    app = EventStreamFriendlyASGIHandler(max_threads=3)
    _running["most"] = 0

    async def scenario() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            answers = await asyncio.gather(
                *(client.get("/where/", params={"sleep": 0.05}) for _ in range(12))
            )
        return [answer.status_code for answer in answers]

    assert asyncio.run(scenario()) == [200] * 12
    assert _running["most"] == 3


async def status_of(app: EventStreamFriendlyASGIHandler, accept: str) -> int:
    """Serve one GET /where/ through ``app`` as an ASGI server would; its status code."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/where/",
        "raw_path": b"/where/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"accept", accept.encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    body_sent = False
    never = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await never.wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"])
def test_a_request_started_inside_an_ended_requests_context_is_served(accept: str) -> None:
    """uvicorn starts a pipelined request's task from inside the previous request's task, so it
    inherits that request's thread-sensitive context, which has exited by the time it runs (the
    chat page's stream after a reload answered 500: "ThreadSensitiveContext has exited")."""
    app = EventStreamFriendlyASGIHandler()

    async def scenario() -> int:
        previous_ended = asyncio.Event()

        async def pipelined() -> int:
            await previous_ended.wait()
            return await status_of(app, accept)

        async with ThreadSensitiveContext(executor=ThreadPoolExecutor(max_workers=1)):
            task = asyncio.create_task(pipelined())  # created in the previous request's context
        previous_ended.set()
        return await task

    assert asyncio.run(scenario()) == 200


@pytest.mark.parametrize(
    ("options", "threads"),
    [
        ({}, DEFAULT_MAX_THREADS),
        ({"pool": False}, DEFAULT_MAX_THREADS),
        ({"pool": True}, 4),  # psycopg_pool's own default size
        ({"pool": {"min_size": 2, "max_size": 20}}, 20),
        ({"pool": {"min_size": 6}}, 6),
    ],
)
def test_the_bound_is_the_default_databases_pool_size(options: dict, threads: int) -> None:
    assert request_threads({"ENGINE": "django.db.backends.postgresql", "OPTIONS": options}) == (
        threads
    )


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_threads must be 1 or more, got 0"):
        EventStreamFriendlyASGIHandler(max_threads=0)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:9/0"])
def test_the_shared_pool_is_one_per_url_and_options(url: str) -> None:
    pool = SharedConnectionPool.from_url(url, socket_timeout=2)
    assert SharedConnectionPool.from_url(url, socket_timeout=2) is pool
    assert SharedConnectionPool.from_url(url, socket_timeout=3) is not pool
    assert SharedConnectionPool.from_url(url.replace("/0", "/1"), socket_timeout=2) is not pool


def test_caches_of_different_requests_share_one_redis_pool() -> None:
    """Django makes a cache object per request context; each made its own pool (a connection to
    Redis per request) until they shared one."""
    cache_settings = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/3",
            "OPTIONS": {"pool_class": "tool_calling.cache.SharedConnectionPool"},
        }
    }
    with override_settings(CACHES=cache_settings):
        first = caches.create_connection("default")
        second = caches.create_connection("default")
        assert first is not second
        assert first._cache._get_connection_pool(True) is second._cache._get_connection_pool(True)
