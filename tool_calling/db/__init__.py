"""Database support: a SQLite backend for many threads (``backends.sqlite3``) and its fixes."""

from __future__ import annotations

from typing import Any

from tool_calling.db.backends.sqlite3.base import json_supported

__all__ = ["sqlite_connection_created"]


def sqlite_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On a new connection of Django's own SQLite backend, ask JSON support outside a transaction.

    Django asks in a transaction; with ``transaction_mode`` ``"IMMEDIATE"`` a busy database
    makes that answer "no" for the rest of the connection's life (``JSONObject() is not
    supported``). ``ToolCallingConfig.ready()`` connects it to ``connection_created``.
    """
    if connection.vendor != "sqlite" or "supports_json_field" in connection.features.__dict__:
        return
    connection.features.supports_json_field = json_supported(connection.connection)
