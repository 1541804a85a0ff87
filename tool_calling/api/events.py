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

The view is ``async``: under an ASGI server a stream holds no thread while it waits. A step
announces each event it stored on Redis, with its content (``_notify.run_event``): a stream
that has every event before it sends the announced one as it is; otherwise (a gap, Redis
reconnected, a quiet run at keep-alive time) it reads the database, which stays the record.
One Redis subscription per process serves every stream. Without Redis it polls every second.
Under WSGI (which cannot stream an async iterator) the same stream is driven by the request's
thread, reading every second.
Database work runs in the shared thread pool (``thread_sensitive=False``), its connection given
back after each read.
Authentication follows the project's ``REST_FRAMEWORK`` authentication classes, and a run the
user may not see answers 404, as everywhere in the API.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings

from tool_calling import _notify, models
from tool_calling.api._digits import whole_number
from tool_calling.api.permissions import configured_permissions, visible_run
from tool_calling.conf import settings as app_settings
from tool_calling.runs.events import as_json

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
    for permission in configured_permissions():
        if not permission.has_permission(drf_request, None):
            message = (
                getattr(permission, "message", None) or exceptions.PermissionDenied.default_detail
            )
            return None, _error(exceptions.PermissionDenied(message), drf_request)
    return user, None


def _error(exc: exceptions.APIException, request: Request) -> HttpResponse:
    """What DRF answers: 401 with ``WWW-Authenticate`` from the first class, else 403."""
    response = JsonResponse({"detail": str(exc.detail)}, status=exc.status_code)
    if exc.status_code != 401:
        return response
    authenticators = request.authenticators
    header = authenticators[0].authenticate_header(request) if authenticators else None
    if not header:
        response.status_code = 403
    else:
        response["WWW-Authenticate"] = header
    return response


def _find_run(request: HttpRequest, pk: uuid.UUID) -> tuple[uuid.UUID | None, HttpResponse | None]:
    """Authenticate, then find the run among those the user may see (else 404)."""
    user, refusal = _authenticate(request)
    if refusal is not None:
        return None, refusal
    found = visible_run(user, pk)
    if found is None:
        return None, JsonResponse({"detail": "No Run matches the given query."}, status=404)
    return found, None


def _after(request: HttpRequest) -> tuple[int, str | None]:
    """The last event the client has (``Last-Event-ID``, else ``?after=``, else 0).

    Returns the number, or 0 and why the value is refused.
    """
    header = request.headers.get("Last-Event-ID")
    if header:  # EventSource sends none before its first event; an empty one is none too
        name, raw = "Last-Event-ID", header
    elif "after" in request.GET:
        name, raw = "?after=", request.GET["after"]
    else:
        return 0, None
    sequence = whole_number(raw)
    if sequence is None:
        return 0, f"{name} must be an event sequence number (digits 0-9), got {raw!r}."
    return sequence, None


def _events_after(run_id: uuid.UUID, after: int) -> list[dict[str, Any]]:
    """The run's events after ``after``, as clients get them (``runs.events.as_json``)."""
    return [
        as_json(row)
        for row in models.RunEvent.objects.filter(run_id=run_id, sequence__gt=after)
        .order_by("sequence")
        .values("sequence", "kind", "data", "created_at")
    ]


_DELETED = "deleted"
"""The status of a run that is gone."""


def _read(
    run_id: uuid.UUID, after: int, *, always_status: bool = True
) -> tuple[str, list[dict[str, Any]]]:
    """The run's status and its events after ``after``.

    The status is read first: a run's last event is stored in the transaction that ends it, so
    a status read as ended means its last event is among those read next. A stream needs the
    status only when nothing is new (did the run end before it started, or vanish?); with
    ``always_status=False`` a read that finds events skips it and returns ``""``.
    """
    if not always_status:
        events = _events_after(run_id, after)
        if events:
            return "", events
    status = models.Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    return status or _DELETED, _events_after(run_id, after)


def _sse(event: dict[str, Any], text: str | None = None) -> str:
    """One event as an SSE message; ``text`` is the event as JSON when it came announced."""
    if text is None:
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event['sequence']}\nevent: {event['kind']}\ndata: {text}\n\n"


class _Stream:
    """What an event stream sends, whoever drives it: the event loop (ASGI) or a thread (WSGI)."""

    def __init__(self, run_id: uuid.UUID, after: int, now: float) -> None:
        settings = app_settings.API
        self.run_id = run_id
        self.after = after
        """The last event sent (or the client's ``Last-Event-ID``)."""
        self.keepalive = float(settings["SSE_KEEPALIVE_SECONDS"])
        self.deadline = now + float(settings["SSE_MAX_SECONDS"])
        self.quiet_since = now
        self.done = False
        """Set once the stream must end: the run ended, vanished, or the time is up."""

    @staticmethod
    def opening() -> str:
        """How long a client waits before reconnecting after a drop (EventSource's ``retry``)."""
        return f"retry: {int(_POLL_WITHOUT_REDIS * 2000)}\n\n"

    def feed(self, status: str, events: list[dict[str, Any]], now: float) -> list[str]:
        """The chunks to send after a read of the run's status and new events."""
        chunks = self.send(events, now)
        if self.done:
            return chunks
        if status in models.RUN_TERMINAL_STATUSES or status == _DELETED or now >= self.deadline:
            # Ended (its last event went out earlier), deleted, or open long enough.
            self.done = True
        elif now - self.quiet_since >= self.keepalive:
            chunks.append(": keep-alive\n\n")
            self.quiet_since = now
        return chunks

    def send(
        self, events: list[dict[str, Any]], now: float, texts: list[str] | None = None
    ) -> list[str]:
        """The chunks of ``events`` (the next ones, in order); ``texts``: each as JSON, if known."""
        chunks = []
        for index, event in enumerate(events):
            chunks.append(_sse(event, texts[index] if texts is not None else None))
            self.after = event["sequence"]
            if event["kind"] in _TERMINAL_KINDS:
                self.done = True
                return chunks
        if events:
            self.quiet_since = now
        return chunks

    def announced(self, texts: list[str], now: float) -> tuple[list[str], bool]:
        """The chunks of announced events that follow the last one sent, in order.

        Returns them and whether the database must be read: an announcement skipped an event
        (its own came late, or was lost).
        """
        events: list[dict[str, Any]] = []
        kept: list[str] = []
        expected = self.after + 1
        for text in sorted(texts, key=_sequence_of):
            event = json.loads(text)
            sequence = event.get("sequence")
            if not isinstance(sequence, int) or sequence < expected:
                continue  # sent already (or not an event)
            if sequence > expected:
                return self.send(events, now, kept), True
            events.append(event)
            kept.append(text)
            expected += 1
        return self.send(events, now, kept), False

    def wait_seconds(self, now: float) -> float:
        """How long to wait for news before reading again (the next keep-alive at most)."""
        until_keepalive = self.keepalive - (now - self.quiet_since)
        return max(0.05, min(until_keepalive, self.deadline - now))


def _sequence_of(text: str) -> int:
    """The sequence number at the start of an announced event's JSON (0 if it is not there)."""
    match = _ANNOUNCED_SEQUENCE.match(text)
    return int(match.group(1)) if match else 0


_ANNOUNCED_SEQUENCE = re.compile(r'\{"sequence":([0-9]+)')


async def _stream_async(
    run_id: uuid.UUID,
    after: int,
    subscription: _notify.RunEventSubscription,
    first: tuple[str, list[dict[str, Any]]],
) -> AsyncIterator[str]:
    """Under ASGI: waits on the event loop (a Redis announcement or a timer), no thread held.

    Announced events are sent as they come; the database is read at the start, when an
    announcement skipped an event, after Redis reconnected, and when the run was quiet until
    the next keep-alive (did it end, or vanish?).
    """
    loop = asyncio.get_running_loop()
    stream = _Stream(run_id, after, loop.time())
    read = False
    try:
        yield stream.opening()
        chunks = stream.feed(*first, loop.time())  # the view's read: after the subscription
        while True:
            if read:
                status, events = await _db(
                    functools.partial(_read, run_id, stream.after, always_status=False)
                )
                chunks = stream.feed(status, events, loop.time())
            for chunk in chunks:
                yield chunk
            if stream.done:
                return
            news = await subscription.next(stream.wait_seconds(loop.time()), _POLL_WITHOUT_REDIS)
            if isinstance(news, list) and news:
                chunks, read = stream.announced(news, loop.time())
            else:  # quiet until the keep-alive, or announcements were lost: read
                chunks, read = [], True
    finally:
        await subscription.close()


def _stream_sync(run_id: uuid.UUID, after: int) -> Iterator[str]:
    """Under WSGI: the same stream, read every second by the request's thread.

    A WSGI server cannot stream an async iterator (Django would buffer the whole stream), so a
    WSGI deployment pays one thread per open stream; serve the project with ASGI to avoid it.
    """
    stream = _Stream(run_id, after, time.monotonic())
    yield stream.opening()
    while True:
        status, events = _read(run_id, stream.after, always_status=False)
        yield from stream.feed(status, events, time.monotonic())
        if stream.done:
            return
        time.sleep(min(stream.wait_seconds(time.monotonic()), _POLL_WITHOUT_REDIS))


def _wants_stream(request: HttpRequest) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


def _open(
    request: HttpRequest, pk: uuid.UUID
) -> tuple[HttpResponse | None, uuid.UUID | None, int, str, list[dict[str, Any]]]:
    """Everything a request needs from the database, in one trip to the thread pool.

    Returns the refusal to answer (401/403/404/400), or the run, the client's last event, and
    the run's status and events after it.
    """
    run_id, refusal = _find_run(request, pk)
    if refusal is not None:
        return refusal, None, 0, "", []
    after, refused = _after(request)
    if refused is not None:
        return JsonResponse({"detail": refused}, status=400), None, 0, "", []
    assert run_id is not None
    status, events = _read(run_id, after)
    return None, run_id, after, status, events


# Exempt from the CSRF middleware: the view changes nothing, and answers every method but GET
# and HEAD with a JSON 405 (the middleware would answer an HTML 403 first).
async def run_events(request: HttpRequest, pk: uuid.UUID) -> HttpResponseBase:
    """The run's events: an SSE stream, or JSON for polling (see the module docstring).

    A stream asked for after the last event of a run that ended answers 204 No Content: the
    status that tells a browser's ``EventSource`` not to reconnect (a stream that just closes
    would be reopened every ``retry`` milliseconds, forever).
    """
    if request.method not in ("GET", "HEAD"):
        return JsonResponse(
            {"detail": f'Method "{request.method}" not allowed.'},
            status=405,
            headers={"Allow": "GET, HEAD"},
        )
    stream = _wants_stream(request)
    under_asgi = isinstance(request, ASGIRequest)
    subscription = _notify.RunEventSubscription(pk)
    if stream and under_asgi:
        # Before the first read: an event stored after it is announced, never missed.
        await subscription.open()
    refusal, run_id, after, status, events = await _db(functools.partial(_open, request, pk))
    if refusal is not None or run_id is None:
        await subscription.close()
        return refusal or HttpResponse(status=500)
    if stream:
        if not events and (status in models.RUN_TERMINAL_STATUSES or status == _DELETED):
            # The run ended and the client has its every event.
            await subscription.close()
            return HttpResponse(status=204)
        return StreamingHttpResponse(
            _stream_async(run_id, after, subscription, (status, events))
            if under_asgi
            else _stream_sync(run_id, after),
            content_type="text/event-stream; charset=utf-8",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return JsonResponse(
        {
            "events": events,
            "last_event_id": events[-1]["sequence"] if events else after,
            "status": status,
            "finished": status in models.RUN_TERMINAL_STATUSES,
        }
    )


# What @csrf_exempt sets (a GET needs no token; token-authenticated clients send none), set
# directly: before Django 5.0 the decorator's wrapper is a sync function, which turns this
# async view into one that returns an unawaited coroutine.
run_events.csrf_exempt = True  # type: ignore[attr-defined]
