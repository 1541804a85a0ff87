"""The events of a durable run: the only writer of ``RunEvent``.

Events are numbered per run from 1, in the order they were stored; the run's event streams
(``tool_calling.api.events``) follow them by number. Once an event commits, the streams are
woken (``_notify.run_event``), and read the database.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Field

from tool_calling import _notify, models

__all__ = ["append"]


def _update_returns() -> bool:
    """Whether the database's UPDATE can return the new counter (PostgreSQL, SQLite 3.35+)."""
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        return bool(getattr(connection, "Database").sqlite_version_info >= (3, 35))  # noqa: B009
    return False


def _next_sequence(run_id: uuid.UUID, fields: dict[str, Any]) -> int:
    """Count one more event of the run (and set ``fields`` of it); return the new count.

    The UPDATE holds the run's row until the transaction commits, so concurrent appends take
    their numbers one after another. Where the database can, the UPDATE returns the counter
    itself (one statement instead of an UPDATE and a SELECT); Django's ``update()`` cannot.
    """
    if _update_returns():
        meta = models.Run._meta
        quote = connection.ops.quote_name
        assignments = [f"{quote('event_count')} = {quote('event_count')} + 1"]
        params: list[Any] = []
        for name, value in fields.items():
            field: Field[Any, Any] = meta.get_field(name)  # type: ignore[assignment]
            assignments.append(f"{quote(str(field.column))} = %s")
            params.append(field.get_db_prep_save(value, connection))
        pk: Field[Any, Any] = meta.pk  # type: ignore[assignment]
        params.append(pk.get_db_prep_value(run_id, connection))
        sql = (
            f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "
            f"WHERE {quote(str(pk.column))} = %s RETURNING {quote('event_count')}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            raise models.Run.DoesNotExist(f"No run {run_id}")
        return int(row[0])
    models.Run.objects.filter(pk=run_id).update(event_count=F("event_count") + 1, **fields)
    return int(models.Run.objects.filter(pk=run_id).values_list("event_count", flat=True).get())


def append(run_id: uuid.UUID, kind: str, data: dict[str, Any] | None = None, **fields: Any) -> int:
    """Store an event of run ``run_id`` and return its number.

    ``fields`` are ``Run`` fields to set in the same write (a round count, a finish reason):
    what the event reports and the run records change together.
    """
    with transaction.atomic():
        sequence = _next_sequence(run_id, fields)
        models.RunEvent.objects.create(run_id=run_id, sequence=sequence, kind=kind, data=data or {})
        transaction.on_commit(lambda: _notify.run_event(run_id, sequence))
    return sequence
