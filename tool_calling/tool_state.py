"""Operators' changes to tools: enable, disable, limit. The admin's actions and ``manage.py tools``.

Each function changes the ``Tool`` rows (and their ``ToolLimitOverride``) whose primary keys it
is given, under a row lock in one transaction, and returns the tools it actually changed, in
name order, so that callers report and log only real changes. Every change takes effect on the
next turn; a call already made is re-checked when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from tool_calling import models

__all__ = ["set_excluded", "set_flag", "set_limit"]


def _locked(pks: Iterable[int]) -> list[models.Tool]:
    return list(
        models.Tool.objects.select_for_update()
        .filter(pk__in=list(pks))
        .select_related("limit_override")
        .order_by("name")
    )


def set_flag(pks: Iterable[int], field: str, value: bool) -> list[models.Tool]:
    """Set a boolean field of the tools (``enabled``, ``requires_approval``).

    Returns:
        The tools whose field had another value.
    """
    with transaction.atomic():
        changed = [tool for tool in _locked(pks) if getattr(tool, field) != value]
        models.Tool.objects.filter(pk__in=[tool.pk for tool in changed]).update(
            **{field: value, "updated_at": timezone.now()}
        )
        for tool in changed:
            setattr(tool, field, value)
    return changed


def _override(tool: models.Tool) -> models.ToolLimitOverride | None:
    try:
        return tool.limit_override
    except models.ToolLimitOverride.DoesNotExist:
        return None


def set_excluded(pks: Iterable[int], excluded: bool) -> list[models.Tool]:
    """Exclude the tools from per-tool call limits, or include them again.

    Excluded calls still count toward the total per turn.

    Returns:
        The tools whose exclusion changed.
    """
    with transaction.atomic():
        new, flipped = [], []
        for tool in _locked(pks):
            override = _override(tool)
            if override is None:
                if excluded:
                    new.append(models.ToolLimitOverride(tool=tool, excluded=True))
            elif override.excluded != excluded:
                flipped.append(tool)
        models.ToolLimitOverride.objects.bulk_create(new)
        models.ToolLimitOverride.objects.filter(tool__in=flipped).update(excluded=excluded)
    return sorted([override.tool for override in new] + flipped, key=lambda tool: tool.name)


def set_limit(pks: Iterable[int], max_calls_per_turn: int | None) -> list[models.Tool]:
    """Give the tools a per-turn call limit, or (``None``) the default of ``LIMITS`` again.

    A tool excluded from limits is included again: a number is a limit to apply.

    Returns:
        The tools whose limit changed.

    Raises:
        ValueError: ``max_calls_per_turn`` is not a positive integer or None.
    """
    if max_calls_per_turn is not None and (
        isinstance(max_calls_per_turn, bool)
        or not isinstance(max_calls_per_turn, int)
        or max_calls_per_turn < 1
    ):
        raise ValueError(f"A limit must be a positive integer, not {max_calls_per_turn!r}.")
    with transaction.atomic():
        new, changed = [], []
        for tool in _locked(pks):
            override = _override(tool)
            if override is None:
                if max_calls_per_turn is not None:
                    new.append(
                        models.ToolLimitOverride(tool=tool, max_calls_per_turn=max_calls_per_turn)
                    )
            elif override.max_calls_per_turn != max_calls_per_turn or override.excluded:
                changed.append(tool)
        models.ToolLimitOverride.objects.bulk_create(new)
        models.ToolLimitOverride.objects.filter(tool__in=changed).update(
            max_calls_per_turn=max_calls_per_turn, excluded=False
        )
        # An override that says nothing any more (default limit, not excluded) is removed.
        models.ToolLimitOverride.objects.filter(
            tool__in=changed, max_calls_per_turn__isnull=True, excluded=False
        ).delete()
    return sorted([override.tool for override in new] + changed, key=lambda tool: tool.name)
