"""Quotas of calls per window, per user and for everyone, counted atomically (S8).

An operator sets them on a tool in the admin (``Tool.quota_per_user``, ``Tool.quota_total``,
``Tool.quota_window``). Each call that is about to run takes one from its window's counters
(``QuotaCounter``) with one conditional UPDATE (``count < quota``), which the database applies
to one row at a time: however many processes call at once, no more calls run than the quota
allows. That is unlike DRF's throttles, which read, decide and write in three steps and let
concurrent requests through.

Windows are fixed, aligned to multiples of their length (UTC); a call refused for a quota is
audited as refused and the model is told when the window ends. A retry of a call does not
count again. The sweeper deletes the counters of windows that ended.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from tool_calling import models

__all__ = ["consume", "purge_counters", "window_start"]

_EVERYONE = "*"


def window_start(now: datetime.datetime, seconds: int) -> datetime.datetime:
    """The start of the quota window of ``seconds`` that holds ``now`` (aligned to the epoch)."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    elapsed = int((now - epoch).total_seconds())
    return epoch + datetime.timedelta(seconds=elapsed - elapsed % seconds)


class _OverQuota(Exception):
    """Rolls back the counters already taken for a call that another quota refuses."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _take(
    tool_name: str, scope: str, start: datetime.datetime, ends: datetime.datetime, quota: int
) -> bool:
    """Count one call in the counter, unless it holds ``quota`` already (atomic)."""
    counters = models.QuotaCounter.objects.filter(
        tool_name=tool_name, scope=scope, window_start=start
    )
    for _ in range(3):
        if counters.filter(count__lt=quota).update(count=F("count") + 1):
            return True
        if counters.exists():
            return False  # full
        try:
            with transaction.atomic():
                models.QuotaCounter.objects.create(
                    tool_name=tool_name, scope=scope, window_start=start, window_end=ends, count=1
                )
            return True
        except IntegrityError:
            continue  # another call created it meanwhile: count in it
    return False


def consume(
    tool_name: str,
    user: Any,
    *,
    per_user: int | None,
    total: int | None,
    window: int,
    now: datetime.datetime | None = None,
) -> str | None:
    """Take one call of tool ``tool_name`` for ``user`` from its quotas; why not, if refused.

    Returns ``None`` when the call may run (counted), else the text for the model (nothing
    counted). A call without a user counts only toward ``total``.
    """
    if per_user is None and total is None:
        return None
    now = now or timezone.now()
    start = window_start(now, window)
    ends = start + datetime.timedelta(seconds=window)
    user_id = getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None
    try:
        with transaction.atomic():  # both counters, or neither
            if per_user is not None and user_id is not None:
                if not _take(tool_name, f"user:{user_id}", start, ends, per_user):
                    raise _OverQuota(_text(tool_name, per_user, window, "for you", ends, now))
            if total is not None and not _take(tool_name, _EVERYONE, start, ends, total):
                raise _OverQuota(_text(tool_name, total, window, "for everyone", ends, now))
    except _OverQuota as refused:
        return refused.text
    return None


def _text(
    name: str,
    quota: int,
    window: int,
    whose: str,
    ends: datetime.datetime,
    now: datetime.datetime,
) -> str:
    wait = max(1, int((ends - now).total_seconds() + 0.999))
    return (
        f"Tool {name!r} has reached its quota of {quota} calls per {window} s {whose}; the "
        f"call was not made. The quota allows calls again in {wait} s."
    )


def purge_counters(now: datetime.datetime | None = None) -> int:
    """Delete the counters of windows that ended more than an hour ago; returns how many."""
    before = (now or timezone.now()) - datetime.timedelta(hours=1)
    deleted, _ = models.QuotaCounter.objects.filter(window_end__lt=before).delete()
    return int(deleted)
