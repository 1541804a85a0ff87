"""What differs between the Django versions the package supports (4.2 LTS, 5.1, 5.2).

One place for each difference, so that the rest of the code is written for the newest one.
"""

from __future__ import annotations

from typing import Any

import django
from django.db import models

__all__ = ["DJANGO_5_0", "DJANGO_5_1", "check_constraint", "log_actions"]

DJANGO_5_0 = django.VERSION >= (5, 0)
"""Admin facets (``ModelAdmin.show_facets``), ``URLField``'s form ``assume_scheme``."""

DJANGO_5_1 = django.VERSION >= (5, 1)
"""``CheckConstraint(condition=...)`` (``check=`` before, removed in 6.0), SQLite's
``transaction_mode`` option, PostgreSQL connection pools."""


def check_constraint(*, condition: Any, name: str, **options: Any) -> models.CheckConstraint:
    """A ``CheckConstraint`` of ``condition``, under the keyword this Django version takes."""
    if DJANGO_5_1:
        return models.CheckConstraint(condition=condition, name=name, **options)
    # django-stubs describes the newest Django, whose CheckConstraint has no check= any more.
    return models.CheckConstraint(check=condition, name=name, **options)  # type: ignore[call-arg]


def log_actions(
    *,
    user_id: Any,
    queryset: Any,
    action_flag: int,
    change_message: str = "",
    single_object: bool = False,
) -> None:
    """``LogEntry.objects.log_actions()`` (Django 5.1+): one admin history entry per object."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    if DJANGO_5_1:
        LogEntry.objects.log_actions(  # type: ignore[call-overload]
            user_id=user_id,
            queryset=queryset,
            action_flag=action_flag,
            change_message=change_message,
            single_object=single_object,
        )
        return
    for obj in queryset:  # what log_actions() does, one log_action() per object
        LogEntry.objects.log_action(  # type: ignore[attr-defined]
            user_id=user_id,
            content_type_id=ContentType.objects.get_for_model(obj, for_concrete_model=False).pk,
            object_id=obj.pk,
            object_repr=str(obj),
            action_flag=action_flag,
            change_message=change_message,
        )
