"""The events of a durable run: the only writer of ``RunEvent``.

Events are numbered per run from 1, in the order they were stored; the run's event streams
(``tool_calling.api.events``) follow them by number. Once an event commits, the streams are
woken (``_notify.run_event``), and read the database.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import F

from tool_calling import _notify, models

__all__ = ["append"]


def append(run_id: uuid.UUID, kind: str, data: dict[str, Any] | None = None) -> int:
    """Store an event of run ``run_id`` and return its number.

    The UPDATE of the run's counter orders concurrent appends (it holds the run's row until
    the transaction commits).
    """
    with transaction.atomic():
        models.Run.objects.filter(pk=run_id).update(event_count=F("event_count") + 1)
        sequence = models.Run.objects.filter(pk=run_id).values_list("event_count", flat=True).get()
        models.RunEvent.objects.create(run_id=run_id, sequence=sequence, kind=kind, data=data or {})
        transaction.on_commit(lambda: _notify.run_event(run_id, sequence))
    return int(sequence)
