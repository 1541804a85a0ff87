"""Whether this process can send the API's turns to Celery, and if not, why.

A turn started through the API (a durable run) always runs as Celery tasks, whatever
``EXECUTION["MODE"]`` says about tool calls: the system checks (``tool_calling.E017``,
``E018``) and the API's 503 ask :func:`problem`, so both name the same cause.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

__all__ = ["CeleryProblem", "installed", "problem"]

_SET_UP = (
    "define the project's Celery app as Celery's Django guide does "
    "(app.config_from_object('django.conf:settings', namespace='CELERY') in <project>/celery.py, "
    "imported by <project>/__init__.py), set CELERY_BROKER_URL (e.g. "
    "'redis://127.0.0.1:6379/0') and start a worker: celery -A <project> worker -Q "
    "tool_calling,celery. In development, CELERY_TASK_ALWAYS_EAGER = True runs each turn inside "
    "the request that starts it instead (no broker, no worker)."
)


@dataclass(frozen=True)
class CeleryProblem:
    """Why turns cannot be sent to Celery workers."""

    check_id: str
    """The system check that reports it."""
    text: str
    """What is wrong, as a clause: ``"Celery is not installed"``."""
    hint: str
    """What to do about it."""


def installed() -> bool:
    """Whether the ``celery`` package can be imported."""
    return importlib.util.find_spec("celery") is not None


def problem() -> CeleryProblem | None:
    """Why the current Celery app cannot take a turn's tasks; ``None`` when it can.

    Celery must be installed, and its current app (the project's, once ``<project>/celery.py``
    is imported) must have a broker, unless it runs tasks eagerly in the sender's process.
    """
    if not installed():
        return CeleryProblem(
            "tool_calling.E017",
            "Celery is not installed",
            "Install it (pip install 'celery[redis]'), then " + _SET_UP,
        )
    from celery import current_app  # Celery is optional: imported only once it is known there

    conf = current_app.conf
    if conf.task_always_eager or conf.broker_write_url or conf.broker_url:
        return None
    return CeleryProblem(
        "tool_calling.E018",
        f"the current Celery app ({current_app.main!r}) has no broker URL",
        "Celery's default app does not read the Django settings: " + _SET_UP,
    )
