"""Wake-ups for callers waiting on tool calls: a Redis channel the workers publish to.

The database stays the record; a notification only tells a waiting caller to read it now
instead of at its next poll. Without a Redis broker (tests, other brokers) nothing is
published and callers poll as before.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger("tool_calling.execution")

CHANNEL = "tool_calling:calls_ended"

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
                client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
                _clients[url] = client
    return client


def call_ended(execution_id: int) -> None:
    """Tell waiting callers that a call ended (best effort: they poll anyway)."""
    url = _redis_url()
    if url is None:
        return
    try:
        _client(url).publish(CHANNEL, str(execution_id))
    except Exception:  # noqa: BLE001 - a lost wake-up only costs the caller one poll
        logger.debug("Could not publish the end of tool call %s", execution_id, exc_info=True)


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
                pubsub = redis.Redis.from_url(self._url, socket_connect_timeout=2).pubsub(
                    ignore_subscribe_messages=True
                )
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
