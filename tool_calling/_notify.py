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
import weakref
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
    return f"{_RUN_CHANNEL_PREFIX}{run_id}"


_RUN_CHANNEL_PREFIX = "tool_calling:run_events:"


def run_event(run_id: object, event: str) -> None:
    """Announce a stored event of run ``run_id`` to its streams (best effort).

    ``event`` is the event as the streams send it (JSON with its ``sequence``): a stream that
    has every event before it sends it as it is, without reading the database.
    """
    _publish(run_channel(run_id), event)


RESYNC = "resync"
"""What a subscription hands out when announcements may have been missed (read the database)."""


class RunEventSubscription:
    """One stream's interest in one run's announcements, served by its event loop's hub.

    ``next`` returns the announcements that arrived (event JSON texts, oldest first), or
    :data:`RESYNC` when some may have been lost (Redis reconnected), or an empty list when
    ``timeout`` passed. Without a Redis broker, or while Redis is unreachable, it just waits
    ``fallback`` seconds at most: the stream reads the database after each wait, so it only
    gets slower, never loses events.
    """

    def __init__(self, run_id: object) -> None:
        self._channel = run_channel(run_id)
        self._hub: _RunEventHub | None = None
        self._queue: Any = None

    async def open(self) -> None:
        """Subscribe now (before the first read, so nothing stored meanwhile goes unheard)."""
        import asyncio

        if self._queue is not None:
            return
        url = _redis_url()
        if url is None:
            return
        self._hub = _RunEventHub.of(asyncio.get_running_loop(), url)
        self._queue = await self._hub.add(self._channel)

    async def next(self, timeout: float, fallback: float) -> list[str] | str:
        """The announcements that arrived, :data:`RESYNC`, or ``[]`` after ``timeout``."""
        import asyncio

        queue = self._queue
        if queue is None or self._hub is None or not self._hub.connected:
            await asyncio.sleep(min(timeout, fallback))
            return RESYNC if queue is not None else []
        try:
            first = await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            return []
        items = [first]
        while not queue.empty():
            items.append(queue.get_nowait())
        if RESYNC in items:
            return RESYNC
        return items

    async def close(self) -> None:
        """Drop the interest; the hub unsubscribes once nobody follows the run."""
        hub, queue = self._hub, self._queue
        self._hub = self._queue = None
        if hub is not None and queue is not None:
            await hub.remove(self._channel, queue)


class _RunEventHub:
    """One Redis subscription per event loop, shared by every stream the loop serves.

    A stream used to open a connection of its own (and redis-py reads its package metadata for
    each: milliseconds of CPU per stream). Here channels are subscribed while someone follows
    them and unsubscribed after; announcements go to the followers' queues. When the connection
    fails, every follower is told :data:`RESYNC` and the hub reconnects, resubscribing.
    """

    _hubs: Any = None

    @classmethod
    def of(cls, loop: Any, url: str) -> _RunEventHub:
        if cls._hubs is None:
            cls._hubs = weakref.WeakKeyDictionary()
        hub: _RunEventHub | None = cls._hubs.get(loop)
        if hub is None or hub.url != url:
            hub = cls._hubs[loop] = cls(url)
        return hub

    def __init__(self, url: str) -> None:
        self.url = url
        # Weak: a stream that was never iterated (its client left first) drops out by itself.
        self.followers: dict[str, weakref.WeakSet[Any]] = {}
        self.subscribed: set[str] = set()
        self.pubsub: Any = None
        self.client: Any = None
        self.connected = False
        self.task: Any = None

    async def add(self, channel: str) -> Any:
        import asyncio

        queue: asyncio.Queue[str] = asyncio.Queue()
        followers = self.followers.setdefault(channel, weakref.WeakSet())
        followers.add(queue)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._listen())
        if self.connected:
            await self._subscribe()
        return queue

    async def remove(self, channel: str, queue: Any) -> None:
        followers = self.followers.get(channel)
        if followers is None:
            return
        followers.discard(queue)
        if not followers:
            del self.followers[channel]
            if self.connected and channel in self.subscribed:
                self.subscribed.discard(channel)
                try:
                    await self.pubsub.unsubscribe(channel)
                except Exception:  # noqa: BLE001 - the listener reconnects
                    logger.debug("Run events: unsubscribing failed", exc_info=True)

    async def _subscribe(self) -> None:
        """Subscribe the channels followed and not subscribed yet."""
        missing = [channel for channel in self.followers if channel not in self.subscribed]
        if not missing:
            return
        self.subscribed.update(missing)
        try:
            await self.pubsub.subscribe(*missing)
        except Exception:  # noqa: BLE001 - the listener reconnects and resubscribes
            logger.debug("Run events: subscribing failed", exc_info=True)

    async def _forget_the_unfollowed(self) -> None:
        """Unsubscribe channels whose followers are all gone."""
        gone = [channel for channel, followers in self.followers.items() if not followers]
        for channel in gone:
            del self.followers[channel]
        gone = [channel for channel in gone if channel in self.subscribed]
        if gone and self.connected:
            self.subscribed.difference_update(gone)
            try:
                await self.pubsub.unsubscribe(*gone)
            except Exception:  # noqa: BLE001 - the listener reconnects
                logger.debug("Run events: unsubscribing failed", exc_info=True)

    def _tell_everyone(self, item: str) -> None:
        for followers in self.followers.values():
            for queue in list(followers):
                queue.put_nowait(item)

    async def _listen(self) -> None:
        import asyncio

        import redis.asyncio

        pause = 0.5
        while self.followers or not self.connected:
            try:
                self.client = redis.asyncio.Redis.from_url(
                    self.url,
                    socket_timeout=None,  # a subscription waits for as long as it is quiet
                    socket_connect_timeout=_SOCKET_TIMEOUT,
                    health_check_interval=_HEALTH_CHECK_INTERVAL,
                )
                self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                self.subscribed = set()
                # A channel to hold the connection open while nobody follows a run yet.
                await self.pubsub.subscribe(f"{_RUN_CHANNEL_PREFIX}hub")
                self.connected = True
                await self._subscribe()
                pause = 0.5
                # Reconnected: announcements made meanwhile are lost, read the database.
                self._tell_everyone(RESYNC)
                while True:
                    message = await self.pubsub.get_message(timeout=_HEALTH_CHECK_INTERVAL)
                    if message is None:
                        await self._forget_the_unfollowed()
                        if not self.followers:
                            break  # nobody follows a run: close until the next stream
                        continue
                    channel = message.get("channel")
                    if isinstance(channel, bytes):
                        channel = channel.decode()
                    data = message.get("data")
                    text = data.decode() if isinstance(data, bytes) else str(data)
                    for queue in list(self.followers.get(channel, ())):
                        queue.put_nowait(text)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - followers poll the database meanwhile
                logger.debug("Run events: Redis subscription lost", exc_info=True)
                self.connected = False
                self._tell_everyone(RESYNC)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
            finally:
                self.connected = False
                await self._close()
            if not self.followers:
                return

    async def _close(self) -> None:
        pubsub, client = self.pubsub, self.client
        self.pubsub = self.client = None
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
