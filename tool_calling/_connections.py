"""Database connections around waits on the network (a model's answer, a tool's call).

A thread that waits a second on a model holds its database connection all that while unless
it lets it go. With hundreds of such threads (a Celery thread pool), a PostgreSQL server runs
out of connections, or a connection pool of its slots. Before such a wait, :func:`give_back`
does what Django does at the end of a request: a connection whose ``CONN_MAX_AGE`` is 0
(pooled connections must be) goes back to its pool, a persistent one stays open (SQLite's:
cheap to keep, costly to reopen), a broken one is dropped.
"""

from __future__ import annotations

from django.db import connections

__all__ = ["give_back"]


def give_back() -> None:
    """Let this thread's idle database connections go, as at the end of a request.

    Connections inside a transaction (``atomic()``) are left alone: the wait belongs to it.
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
