"""Celery's Redis transport, with one Redis client per channel instead of one per command.

kombu's Redis channel builds a new ``redis.Redis`` object for every command it sends on its own
(each publish, and each delivered message's bookkeeping: the unacknowledged-message index when
it arrives, again when it is acknowledged). redis-py's constructor fills a table of some 170
reply callbacks each time, so a worker's consumer thread, which delivers and acknowledges every
message one after another, spent about a quarter of its time building clients; with 1,000 tool
calls queued at once it was the bottleneck, with threads of the pool idle. Here a channel builds
one client on its connection pool and reuses it (a ``redis.Redis`` is safe to share between
threads; each command, and each pipeline, takes its own connection from the pool), and builds a
new one when the pool changes (kombu replaces it when the channel reconnects).

Use it as the transport of a ``redis://`` or ``rediss://`` broker::

    CELERY_BROKER_TRANSPORT = "tool_calling.calls.transport:RedisTransport"

Everything else is kombu's own Redis transport.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["RedisChannel", "RedisTransport"]


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel; its synchronous commands share one client per connection pool."""

    _shared_client: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the consumer's BRPOP and pub/sub clients: kombu keeps those itself
            return super()._create_client(asynchronous=True)
        pool = self.pool
        shared = self._shared_client
        if shared is None or shared[0] is not pool:
            shared = (pool, super()._create_client(asynchronous=False))
            self._shared_client = shared
        return shared[1]


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`RedisChannel`."""

    Channel = RedisChannel
