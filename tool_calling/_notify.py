"""Wake-ups for callers waiting on tool calls: a Redis channel the workers publish to.

The database stays the record; a notification only tells a waiting caller to read it now
instead of at its next poll. Without a Redis broker (tests, other brokers) nothing is
published and callers poll as before. Every Redis operation here is bounded (S9): publishes and
subscriptions time out after ``_SOCKET_TIMEOUT`` seconds, and listeners check their connection
every ``_HEALTH_CHECK_INTERVAL`` seconds, so a stalled Redis costs a wake-up, never a hang.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

logger = logging.getLogger("tool_calling.execution")

CHANNEL = "tool_calling:calls_ended"

_SOCKET_TIMEOUT = 2.0
"""Seconds one Redis operation of a publish or a subscription may take."""
_HEALTH_CHECK_INTERVAL = 10
"""Seconds after which an idle subscription pings Redis (a dead connection is replaced)."""

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _redis_url() -> str | None:
    from django.conf import settings

    url = getattr(settings, "CELERY_BROKER_URL", None) or ""
    return url if url.startswith(("redis://", "rediss://", "unix://")) else None


def _client(url: str) -> Any:
    client = _clients.get(url)
    if client is None:
        import redis

        with _clients_lock:
            client = _clients.get(url)
            if client is None:
                client = redis.Redis.from_url(
                    url, socket_timeout=_SOCKET_TIMEOUT, socket_connect_timeout=_SOCKET_TIMEOUT
                )
                _clients[url] = client
    return client


_PAUSE_AFTER_FAILURE = 5.0
"""Seconds without publishing after Redis failed once: a broker that is down must not add its
connect timeout to every step of every run (callers poll anyway)."""

_paused_until = 0.0


def _publish(channel: str, message: str) -> None:
    global _paused_until
    url = _redis_url()
    if url is None or time.monotonic() < _paused_until:
        return
    try:
        _client(url).publish(channel, message)
    except Exception:  # noqa: BLE001 - a lost wake-up only costs the listener one poll
        _paused_until = time.monotonic() + _PAUSE_AFTER_FAILURE
        logger.debug("Could not publish on %s", channel, exc_info=True)


def call_ended(execution_id: int) -> None:
    """Tell waiting callers that a call ended (best effort: they poll anyway)."""
    _publish(CHANNEL, str(execution_id))


def run_channel(run_id: object) -> str:
    """The channel that announces new events of run ``run_id``."""
    return f"tool_calling:run_events:{run_id}"


def run_event(run_id: object, sequence: int) -> None:
    """Tell the run's event streams that event ``sequence`` is stored (best effort)."""
    _publish(run_channel(run_id), str(sequence))


class RunEventSubscription:
    """An asyncio subscription to one run's announcements; ``wait`` returns when one arrives.

    Without a Redis broker, or while Redis is unreachable, ``wait`` just sleeps: the stream
    reads the database after each wait, so it only gets slower, never loses events.
    """

    def __init__(self, run_id: object) -> None:
        self._channel = run_channel(run_id)
        self._url = _redis_url()
        self._client: Any = None
        self._pubsub: Any = None

    async def _connect(self) -> Any:
        if self._pubsub is None and self._url is not None:
            import redis.asyncio

            client = redis.asyncio.Redis.from_url(
                self._url,
                socket_timeout=_SOCKET_TIMEOUT,
                socket_connect_timeout=_SOCKET_TIMEOUT,
                health_check_interval=_HEALTH_CHECK_INTERVAL,
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
            except Exception:
                await pubsub.aclose()
                await client.aclose()
                raise
            self._client, self._pubsub = client, pubsub
        return self._pubsub

    async def open(self) -> None:
        """Subscribe now (before the first read, so nothing stored meanwhile goes unheard)."""
        try:
            await self._connect()
        except Exception:  # noqa: BLE001 - poll the database instead
            logger.debug("Run events: no Redis subscription; polling", exc_info=True)
            await self.close()
            self._url = None

    async def wait(self, timeout: float, fallback: float) -> None:
        """Until an announcement arrives or ``timeout``; at most ``fallback`` without Redis."""
        import asyncio

        await self.open()
        pubsub = self._pubsub
        if pubsub is None:
            await asyncio.sleep(min(timeout, fallback))
            return
        try:
            message = await pubsub.get_message(timeout=timeout)
            # Several events may have been announced: drain them, one database read follows.
            while message is not None:
                message = await pubsub.get_message(timeout=0)
        except Exception:  # noqa: BLE001 - reconnect on the next wait
            logger.debug("Run events: Redis subscription lost", exc_info=True)
            await self.close()

    async def close(self) -> None:
        """Drop the subscription and its connection."""
        pubsub, client = self._pubsub, self._client
        self._pubsub = self._client = None
        try:
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()
        except Exception:  # noqa: BLE001 - closing a broken connection
            logger.debug("Run events: closing the subscription failed", exc_info=True)


class Listener:
    """Counts the notifications on the channel; ``wait`` returns early when one arrives."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._condition = threading.Condition()
        self._count = 0
        self._thread = threading.Thread(
            target=self._listen, name="tool-calling-notify", daemon=True
        )
        self._thread.start()

    @property
    def count(self) -> int:
        """How many notifications arrived so far (compare before and after a poll)."""
        return self._count

    def wait(self, since: int, timeout: float) -> None:
        """Block until a notification newer than ``since`` arrives, or ``timeout`` passes."""
        with self._condition:
            self._condition.wait_for(lambda: self._count != since, timeout)

    def _listen(self) -> None:
        import time

        import redis

        pause = 0.5
        while True:
            try:
                pubsub = redis.Redis.from_url(
                    self._url,
                    socket_timeout=_SOCKET_TIMEOUT,
                    socket_connect_timeout=_SOCKET_TIMEOUT,
                    health_check_interval=_HEALTH_CHECK_INTERVAL,
                ).pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(CHANNEL)
                pause = 0.5
                while True:
                    message = pubsub.get_message(timeout=5.0)
                    if message is not None:
                        with self._condition:
                            self._count += 1
                            self._condition.notify_all()
            except Exception:  # noqa: BLE001 - reconnect; callers poll meanwhile
                logger.debug("Tool call notifications lost their Redis connection", exc_info=True)
                time.sleep(pause)
                pause = min(pause * 2, 10.0)


_listener: Listener | None = None


def listener() -> Listener | None:
    """The process's listener (started on first use), or ``None`` without a Redis broker."""
    global _listener
    url = _redis_url()
    if url is None:
        return None
    with _clients_lock:
        if _listener is None or _listener._url != url:
            _listener = Listener(url)
        return _listener
