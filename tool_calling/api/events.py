"""``GET runs/{id}/events/``: a run's events, as Server-Sent Events or as JSON for polling.

With ``Accept: text/event-stream`` the answer is an SSE stream: every stored event from the
one after ``Last-Event-ID`` (header) or ``?after=N`` on, each as ``id: <sequence>``,
``event: <kind>`` and ``data: <json>``, then new events as they are stored, until the run ends
(its ``succeeded``/``failed``/``cancelled`` event is the last one sent) or
``API["SSE_MAX_SECONDS"]`` passed; a client that reconnects with ``Last-Event-ID`` misses
nothing and sees nothing twice. Quiet streams get a ``: keep-alive`` comment every
``API["SSE_KEEPALIVE_SECONDS"]``.

Otherwise the answer is JSON: ``{"events": [...], "last_event_id": N, "status": ...,
"finished": bool}`` with the events after ``N``; poll with ``?after=<last_event_id>``.

The view is ``async``: under an ASGI server a stream holds no thread while it waits. It wakes
up when a step announces a new event on Redis (``_notify.run_event``) and reads the database,
which stays the record; without Redis it polls every second. Database work runs in the shared
thread pool (``thread_sensitive=False``), its connection given back after each read.
Authentication follows the project's ``REST_FRAMEWORK`` authentication classes, and a run the
user may not see answers 404, as everywhere in the API.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings

from tool_calling import _notify, models
from tool_calling.api.permissions import visible_runs
from tool_calling.conf import settings as app_settings

__all__ = ["run_events"]

T = TypeVar("T")

_POLL_WITHOUT_REDIS = 1.0
"""Seconds between database reads when no Redis announcement can arrive."""

_TERMINAL_KINDS = frozenset(models.RUN_TERMINAL_STATUSES)


async def _db(function: Callable[[], T]) -> T:
    """Run ``function`` (database work) in the shared pool, then give its connection back."""

    def work() -> T:
        try:
            return function()
        finally:
            close_old_connections()

    return await sync_to_async(work, thread_sensitive=False)()


def _authenticate(request: HttpRequest) -> tuple[Any, HttpResponse | None]:
    """The user, as the API's other views authenticate them; or the 401/403 to answer."""
    drf_request = Request(
        request, authenticators=[cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    )
    try:
        user = drf_request.user
    except exceptions.APIException as exc:
        return None, _error(exc, drf_request)
    if not getattr(user, "is_authenticated", False):
        return None, _error(exceptions.NotAuthenticated(), drf_request)
    return user, None


def _error(exc: exceptions.APIException, request: Request) -> HttpResponse:
    """What DRF answers: 401 with ``WWW-Authenticate`` from the first class, else 403."""
    response = JsonResponse({"detail": str(exc.detail)}, status=exc.status_code)
    authenticators = request.authenticators
    header = authenticators[0].authenticate_header(request) if authenticators else None
    if exc.status_code == 401 and not header:
        response.status_code = 403
    elif header:
        response["WWW-Authenticate"] = header
    return response


def _start(request: HttpRequest, pk: uuid.UUID) -> tuple[uuid.UUID | None, HttpResponse | None]:
    """Authenticate, then find the run among those the user may see (else 404)."""
    user, refusal = _authenticate(request)
    if refusal is not None:
        return None, refusal
    found = visible_runs(user).filter(pk=pk).values_list("pk", flat=True).first()
    if found is None:
        return None, JsonResponse({"detail": "No Run matches the given query."}, status=404)
    return found, None


def _after(request: HttpRequest) -> int | None:
    """The last event the client has: ``Last-Event-ID``, else ``?after=``; ``None`` if bad."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def _read(run_id: uuid.UUID, after: int) -> tuple[str, list[dict[str, Any]]]:
    """The run's status, then its events after ``after``.

    In this order: a run's last event is stored in the transaction that ends it, so a status
    read as ended means its last event is among those read next.
    """
    status = models.Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    events: list[dict[str, Any]] = [
        dict(row)
        for row in models.RunEvent.objects.filter(run_id=run_id, sequence__gt=after)
        .order_by("sequence")
        .values("sequence", "kind", "data", "created_at")
    ]
    return status or "", events


def _as_json(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "sequence": event["sequence"],
        "kind": event["kind"],
        "data": event["data"],
        "created_at": event["created_at"].isoformat(),
    }


def _sse(event: dict[str, Any]) -> str:
    data = json.dumps(_as_json(event), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event['sequence']}\nevent: {event['kind']}\ndata: {data}\n\n"


async def _stream(run_id: uuid.UUID, after: int) -> AsyncIterator[str]:
    settings = app_settings.API
    keepalive = float(settings["SSE_KEEPALIVE_SECONDS"])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + float(settings["SSE_MAX_SECONDS"])
    subscription = _notify.RunEventSubscription(run_id)
    try:
        # Subscribe before the first read: an event stored in between is announced, not lost.
        await subscription.open()
        yield f"retry: {int(_POLL_WITHOUT_REDIS * 2000)}\n\n"
        quiet_since = loop.time()
        while True:
            status, events = await _db(functools.partial(_read, run_id, after))
            for event in events:
                yield _sse(event)
                after = event["sequence"]
                if event["kind"] in _TERMINAL_KINDS:
                    return
            if events:
                quiet_since = loop.time()
            if status in models.RUN_TERMINAL_STATUSES or not status:
                return  # ended (its last event was sent earlier) or deleted
            now = loop.time()
            if now >= deadline:
                return
            if now - quiet_since >= keepalive:
                yield ": keep-alive\n\n"
                quiet_since = now
            until_keepalive = keepalive - (now - quiet_since)
            await subscription.wait(
                max(0.05, min(until_keepalive, deadline - now)), _POLL_WITHOUT_REDIS
            )
    finally:
        await subscription.close()


def _wants_stream(request: HttpRequest) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


async def run_events(request: HttpRequest, pk: uuid.UUID) -> HttpResponseBase:
    """The run's events: an SSE stream, or JSON for polling (see the module docstring)."""
    if request.method not in ("GET", "HEAD"):
        return JsonResponse(
            {"detail": f'Method "{request.method}" not allowed.'},
            status=405,
            headers={"Allow": "GET, HEAD"},
        )
    run_id, refusal = await _db(lambda: _start(request, pk))
    if refusal is not None:
        return refusal
    assert run_id is not None
    after = _after(request)
    if after is None:
        return JsonResponse(
            {"detail": "Last-Event-ID and ?after= take an event sequence number (0 or more)."},
            status=400,
        )
    if _wants_stream(request):
        return StreamingHttpResponse(
            _stream(run_id, after),
            content_type="text/event-stream; charset=utf-8",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    status, events = await _db(functools.partial(_read, run_id, after))
    return JsonResponse(
        {
            "events": [_as_json(e) for e in events],
            "last_event_id": events[-1]["sequence"] if events else after,
            "status": status,
            "finished": status in models.RUN_TERMINAL_STATUSES,
        }
    )
