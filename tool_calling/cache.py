"""What Django's ``RedisCache`` is given here: one shared connection pool, and JSON, never pickle.

:class:`SharedConnectionPool`: Django keeps a cache object per request context, and each builds
its own redis-py connection pool: under ASGI, or a Celery worker's threads, every request or
task opened a new connection to Redis (and redis-py reads its own package metadata for each new
connection: a few ms of CPU). Named as the cache's ``pool_class``, one pool per URL and process
serves them all.

:class:`JSONSerializer` (S21): Django's ``RedisCache`` pickles what it stores and unpickles what
it reads. A Redis shared with others (the Celery broker, whose every client may write to it)
then lets whoever can write one key run code in every process that reads it. With this
serializer the cache stores JSON text and integers (which Redis increments itself), and what is
not JSON is refused when read. Values must have a JSON form: dicts, lists (tuples come back as
lists), strings, numbers, booleans and ``None``; dates, decimals and UUIDs are stored as their
text (``DjangoJSONEncoder``). The check ``tool_calling.W003`` warns when a pickling Redis cache
shares the broker's database. ::

    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:6379/1",
            "OPTIONS": {
                "pool_class": "tool_calling.cache.SharedConnectionPool",
                "serializer": "tool_calling.cache.JSONSerializer",
            },
        },
    }
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import redis
from django.core.serializers.json import DjangoJSONEncoder

__all__ = ["JSONSerializer", "SharedConnectionPool"]


class SharedConnectionPool(redis.ConnectionPool):
    """A ``redis.ConnectionPool`` whose ``from_url`` returns one pool per URL, options and process.

    redis-py's pools are thread-safe; a forked process (a Celery pool child) gets pools of its
    own, never its parent's sockets.
    """

    _shared: dict[tuple[Any, ...], SharedConnectionPool] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SharedConnectionPool:
        """The process's pool for ``url`` and ``kwargs``, built on first use."""
        key = (os.getpid(), url, *sorted((name, repr(value)) for name, value in kwargs.items()))
        pool = cls._shared.get(key)
        if pool is None:
            with cls._shared_lock:
                pool = cls._shared.get(key)
                if pool is None:
                    pool = cls._shared[key] = super().from_url(url, **kwargs)
        return pool


class JSONSerializer:
    """``dumps`` and ``loads`` of a ``RedisCache`` (its ``OPTIONS["serializer"]``), in JSON."""

    def dumps(self, obj: Any) -> bytes | int:
        """JSON text; an integer as itself, so that ``incr`` and ``decr`` stay atomic."""
        if type(obj) is int:  # not bool, as Django's own serializer does
            return obj
        return json.dumps(obj, cls=DjangoJSONEncoder, separators=(",", ":")).encode()

    def loads(self, data: bytes | str | int) -> Any:
        """The value of JSON text (or an integer).

        Raises:
            ValueError: ``data`` is not JSON (a pickle, say): it is never unpickled.
        """
        if isinstance(data, int):
            return data
        try:
            return int(data)
        except ValueError:
            pass
        try:
            return json.loads(data)
        except ValueError:  # UnicodeDecodeError and JSONDecodeError among them
            raise ValueError("The cache holds a value that is not JSON; it was not read.") from None
