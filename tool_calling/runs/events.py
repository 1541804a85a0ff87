"""The events of a durable run: the only writer of ``RunEvent`` (and of the run's event count).

Events are numbered per run from 1, in the order they were stored (on SQLite by the INSERT
itself, elsewhere by the run's event count under its row lock); the run's event streams
(``tool_calling.api.events``) follow them by number. Once an event commits, it is announced
with its content (``_notify.run_event``): a stream sends it as it is when it has the event
before it, and reads the database otherwise.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Field
from django.utils import timezone

from tool_calling import _notify, models

__all__ = ["append", "as_json", "as_text"]


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


def as_json(event: Mapping[str, Any]) -> dict[str, Any]:
    """An event as clients get it: ``sequence``, ``kind``, ``data`` and ``created_at`` (ISO 8601).

    ``event`` has the ``RunEvent`` fields of those names (a row's ``values()``, or the row).
    """
    return {
        "sequence": event["sequence"],
        "kind": event["kind"],
        "data": event["data"],
        "created_at": event["created_at"].isoformat(),
    }


def as_text(event: Mapping[str, Any]) -> str:
    """:func:`as_json` as compact JSON text."""
    return json.dumps(as_json(event), separators=(",", ":"), ensure_ascii=False)


def append(
    run_id: uuid.UUID,
    kind: str,
    data: dict[str, Any] | None = None,
    *,
    rounds: int | None = None,
    finish_reason: str | None = None,
    batch_answered: bool = False,
) -> int:
    """Store an event of run ``run_id`` and return its number.

    The keywords are what an event may change of the run in the same write, so that what the
    event reports and what the run records change together; only ``runs.lifecycle`` passes
    them (it writes the run). Once the event commits, it is announced with its content, so a
    stream that has every earlier event sends it as it is.

    Args:
        run_id: The run.
        kind: What happened.
        data: What the event says (JSON).
        rounds: The model calls the turn made so far.
        finish_reason: The finish reason of the model's last message.
        batch_answered: The batch of calls the run waited for is answered: its plan goes.
    """
    fields: dict[str, Any] = {}
    if rounds is not None:
        fields["rounds"] = rounds
    if finish_reason is not None:
        fields["finish_reason"] = finish_reason
    if batch_answered:
        fields.update(plan={}, waiting_for=None)
    data = data or {}
    created_at = timezone.now()
    one_statement = connection.vendor == "sqlite" and _update_returns()
    if one_statement and not fields:
        # One statement numbers and stores the event: SQLite runs writes one at a time, so the
        # next number is always free (no transaction held across two statements).
        sequence = _insert(run_id, None, kind, data, created_at)
    else:
        with transaction.atomic():
            if one_statement:
                _set_run_fields(run_id, fields)
                sequence = _insert(run_id, None, kind, data, created_at)
            else:
                sequence = _insert(run_id, _next_sequence(run_id, fields), kind, data, created_at)
    text = as_text({"sequence": sequence, "kind": kind, "data": data, "created_at": created_at})
    transaction.on_commit(lambda: _notify.run_event(run_id, text))
    return sequence


def _set_run_fields(run_id: uuid.UUID, fields: dict[str, Any]) -> None:
    if not models.Run.objects.filter(pk=run_id).update(**fields):
        raise models.Run.DoesNotExist(f"No run {run_id}")


_INSERTS: dict[tuple[str, bool], str] = {}


def _insert(
    run_id: uuid.UUID, sequence: int | None, kind: str, data: dict[str, Any], created_at: Any
) -> int:
    """INSERT the event (its SQL written once); ``sequence`` ``None``: the run's next number.

    The ORM's ``create()`` cost more CPU than SQLite took to store the row, for every event.
    """
    meta = models.RunEvent._meta
    numbered = sequence is not None
    key = (connection.vendor, numbered)
    sql = _INSERTS.get(key)
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    columns = {name: quote(str(meta.get_field(name).column)) for name in _COLUMNS}  # type: ignore[union-attr]
    if sql is None:
        names = ", ".join(columns[name] for name in _COLUMNS)
        if numbered:
            sql = f"INSERT INTO {table} ({names}) VALUES (%s, %s, %s, %s, %s)"
        else:
            sql = (
                f"INSERT INTO {table} ({names}) "
                f"SELECT %s, COALESCE(MAX({columns['sequence']}), 0) + 1, %s, %s, %s "
                f"FROM {table} WHERE {columns['run']} = %s RETURNING {columns['sequence']}"
            )
        _INSERTS[key] = sql
    run = meta.get_field("run").get_db_prep_save(run_id, connection)  # type: ignore[union-attr]
    values = [
        meta.get_field("kind").get_db_prep_save(kind, connection),  # type: ignore[union-attr]
        meta.get_field("data").get_db_prep_save(data, connection),  # type: ignore[union-attr]
        meta.get_field("created_at").get_db_prep_save(created_at, connection),  # type: ignore[union-attr]
    ]
    with connection.cursor() as cursor:
        if numbered:
            cursor.execute(sql, [run, sequence, *values])
            return int(sequence)  # type: ignore[arg-type]
        cursor.execute(sql, [run, *values, run])
        row = cursor.fetchone()
    return int(row[0])


_COLUMNS = ("run", "sequence", "kind", "data", "created_at")
