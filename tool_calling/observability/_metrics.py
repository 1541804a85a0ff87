"""tool_calling's metric instruments, the approval gauges, and :func:`connect`.

The instruments are made once per meter provider (:func:`_instruments`, ``None`` without
one). The approval gauges read the summary :func:`connect` was given, at most once a second;
approval decisions are counted from ``signals.approval_decided``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tool_calling import signals
from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc

logger = logging.getLogger("tool_calling.observability")


class _Instruments:
    """tool_calling's instruments on one meter (made once per meter provider)."""

    def __init__(self, meter: Any) -> None:
        self.operation_duration = _otel.histogram(
            meter,
            sc.GEN_AI_CLIENT_OPERATION_DURATION,
            "s",
            "GenAI operation duration.",
            sc.DURATION_BUCKETS,
        )
        self.token_usage = _otel.histogram(
            meter,
            sc.GEN_AI_CLIENT_TOKEN_USAGE,
            "{token}",
            "Number of input and output tokens used.",
            sc.TOKEN_BUCKETS,
        )
        self.tool_duration = _otel.histogram(
            meter,
            sc.TOOL_CALL_DURATION,
            "s",
            "Duration of one tool call, where it ran.",
            sc.DURATION_BUCKETS,
        )
        self.tool_calls = meter.create_counter(
            sc.TOOL_CALLS, unit="{call}", description="Tool calls that ended, by outcome."
        )
        self.limit_refusals = meter.create_counter(
            sc.LIMIT_REFUSALS, unit="{call}", description="Tool calls a call limit refused."
        )
        self.approval_decisions = meter.create_counter(
            sc.APPROVAL_DECISIONS, unit="{call}", description="Approval decisions."
        )
        self.approval_wait = _otel.histogram(
            meter,
            sc.APPROVAL_WAIT_DURATION,
            "s",
            "How long a call waited for its approval decision.",
            (1, 10, 60, 300, 900, 3600, 14400, 86400),
        )
        meter.create_observable_gauge(
            sc.APPROVALS_WAITING,
            callbacks=[_waiting_count],
            unit="{call}",
            description="Tool calls waiting for a person's approval.",
        )
        meter.create_observable_gauge(
            sc.APPROVALS_OLDEST_AGE,
            callbacks=[_oldest_age],
            unit="s",
            description="How long the oldest call waiting for approval has waited.",
        )


_instruments_cache: list[Any] = [None, None]


def _instruments() -> _Instruments | None:
    provider, meter = _otel.meter()
    if meter is None:
        return None
    cached = _instruments_cache
    if cached[0] is not provider:
        cached[1] = _Instruments(meter)
        cached[0] = provider
    instruments: _Instruments = cached[1]
    return instruments


_approvals: list[Any] = [None, 0.0, (0, 0.0)]
"""The summary function :func:`connect` was given, when it last ran, what it returned."""


def _approval_summary(fresh: bool) -> tuple[int, float] | None:
    summary = _approvals[0]
    if summary is None:
        return None
    # The gauges are read in one collection, the count first: its query serves the age too.
    if fresh or time.monotonic() - _approvals[1] > 1.0:
        try:
            _approvals[2] = summary()
        except Exception:
            logger.exception("Could not read the calls waiting for approval")
            return None
        _approvals[1] = time.monotonic()
    found: tuple[int, float] = _approvals[2]
    return found


def _waiting_count(options: Any) -> list[Any]:
    found = _approval_summary(fresh=True)
    return [] if found is None else [_otel.observation(found[0])]


def _oldest_age(options: Any) -> list[Any]:
    found = _approval_summary(fresh=False)
    return [] if found is None else [_otel.observation(found[1])]


def _approval_decided(sender: Any, execution: Any, decision: str = "", **kwargs: Any) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    attributes = {sc.GEN_AI_TOOL_NAME: execution.tool_name, sc.TOOL_CALLING_APPROVAL: decision}
    instruments.approval_decisions.add(1, attributes)
    created, decided = execution.created_at, execution.decided_at
    if created is not None and decided is not None:
        instruments.approval_wait.record((decided - created).total_seconds(), attributes)


def connect(*, approvals_waiting: Callable[[], tuple[int, float]] | None = None) -> None:
    """Connect the receivers of metrics (``ToolCallingConfig.ready()`` does).

    Args:
        approvals_waiting: Returns how many calls wait for approval and how many seconds the
            oldest has waited; the gauges report it (read at most once a second).
    """
    _approvals[0] = approvals_waiting
    _approvals[1] = 0.0
    signals.approval_decided.connect(
        _approval_decided, dispatch_uid="tool_calling.observability.approval_decided"
    )
    _instruments()  # registers the gauges now when a meter provider is already configured
