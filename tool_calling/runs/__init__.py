"""Durable turns, driven as Celery steps: the only writer of ``Run`` and ``RunEvent``.

``lifecycle`` holds the run's states, its transitions and its step lease; ``steps`` what a
step does; ``events`` the run's event log; ``receivers`` how the run hears of its tool calls;
``sweeper`` the recovery of lost steps. The names most callers need are here.
"""

from tool_calling.runs.lifecycle import (
    CeleryUnavailableError,
    RunQueueError,
    cancel_run,
    retry_run,
    start_turn,
)
from tool_calling.runs.steps import advance_run
from tool_calling.runs.sweeper import sweep_runs

__all__ = [
    "CeleryUnavailableError",
    "RunQueueError",
    "advance_run",
    "cancel_run",
    "retry_run",
    "start_turn",
    "sweep_runs",
]
