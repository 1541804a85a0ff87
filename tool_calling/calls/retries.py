"""Retries of calls that failed with a transient error: which, how often, how far apart (R6).

A tool says that a failure is worth another try by raising :class:`TransientToolError` (the
upstream was busy, a lock was held: nothing happened). For a tool marked idempotent the
standard library's ``ConnectionError`` and ``TimeoutError`` count too: running it again is
harmless even if the first try got through. Nothing else is retried: bad arguments, refusals,
permission errors, a ``ToolFailure`` written for the model, a time limit.

How often is the operators' choice, per tool in the admin (``Tool.retries``,
``Tool.retry_backoff``): retries depend on the deployment (an upstream's rate limit, its
outages), not on the code, so they are not an option of ``@tool``. The pause before retry ``n``
(1, 2, ...) is ``min(RETRY_BACKOFF_MAX, retry_backoff * 2 ** (n - 1))``, of which a random half
is jitter ("equal jitter": every pause is at least half the previous one's cap, so they grow
while retries of many calls spread out). Each attempt is kept in the call's audit
(``ToolExecution.attempts``).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from tool_calling.conf import settings as app_settings
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.exceptions import ToolFailure

logger = logging.getLogger("tool_calling.calls")

__all__ = ["RetryPolicy", "TransientToolError", "is_transient", "retry_pause"]

_IDEMPOTENT_TRANSIENT = (ConnectionError, TimeoutError)
"""Standard errors worth another try for a tool that may run twice."""


class TransientToolError(ToolFailure):
    """Raise from a tool when the call failed for a passing reason and nothing happened.

    With retries set on the tool (admin), the call is run again after a backoff; once they are
    used up, the model gets this message, as with any ``ToolFailure``.
    """


def is_transient(outcome: ToolOutcome, *, idempotent: bool) -> bool:
    """Whether a failed call's ``outcome`` is worth another try (see the module's docstring)."""
    if outcome.kind is not ToolOutcomeKind.ERROR:
        return False  # a time limit or an unknown outcome: the tool may still be running
    if outcome.is_a(TransientToolError):
        return True
    return idempotent and any(outcome.is_a(kind) for kind in _IDEMPOTENT_TRANSIENT)


@dataclass(frozen=True)
class RetryPolicy:
    """How a tool's calls are retried after transient errors."""

    retries: int = 0
    """Times a call is run again; 0 = never."""
    backoff: float = 1.0
    """Seconds before the first retry; doubled for each further one."""
    backoff_max: float = 60.0
    """The longest pause (``EXECUTION["RETRY_BACKOFF_MAX"]``)."""

    @classmethod
    def of(cls, tool: Any) -> RetryPolicy:
        """The policy of a ``Tool`` row (or anything with ``retries`` and ``retry_backoff``)."""
        cap = float(app_settings.EXECUTION["RETRY_BACKOFF_MAX"])
        if tool is None:
            return cls(0, 1.0, cap)
        return cls(int(tool.retries or 0), float(tool.retry_backoff or 1.0), cap)

    @property
    def attempts(self) -> int:
        """The most times a call may start: the first try and the retries."""
        return 1 + self.retries

    def allows_retry(self, attempt: int) -> bool:
        """Whether a call whose attempt ``attempt`` (1, 2, ...) failed may run again."""
        return attempt < self.attempts

    def ceiling(self, retry: int) -> float:
        """The longest pause before retry ``retry`` (1, 2, ...): the capped exponential."""
        return float(min(self.backoff_max, self.backoff * 2 ** (retry - 1)))

    def pause(self, retry: int, rng: random.Random | None = None) -> float:
        """The pause before retry ``retry``: half its ceiling, plus up to half again at random."""
        ceiling = self.ceiling(retry)
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)

    def longest_wait(self) -> float:
        """The sum of the longest pauses of every retry (what a waiting caller must allow)."""
        return sum(self.ceiling(retry) for retry in range(1, self.retries + 1))


def retry_pause(attempt: int, outcome: ToolOutcome, rules: Any) -> float | None:
    """The pause before running again a call whose attempt ``attempt`` failed with ``outcome``.

    ``None`` when it does not run again: the failure is not transient for its tool (``rules``,
    the tool's ``CallRules``), or its retries are used up. In-process calls and calls on
    workers decide the same way here; the worker sends the call again with this countdown, the
    turn's thread waits it out.
    """
    if rules is None or outcome.kind is ToolOutcomeKind.OK:
        return None
    policy = RetryPolicy.of(rules)
    if not policy.allows_retry(attempt) or not is_transient(outcome, idempotent=rules.idempotent):
        return None
    return policy.pause(attempt)


def log_retry(ref: Any, outcome: ToolOutcome, pause: float) -> None:
    """Say that attempt ``ref.attempt`` of a call failed and when the next one runs.

    ``ref`` is the call's ``ExecutionRef``; the failure's type name only, never its text (a
    tool's error may carry argument values).
    """
    logger.warning(
        "Tool call %s (%r): attempt %s failed (%s); retrying in %.2f s",
        ref.execution_id,
        ref.tool_name,
        ref.attempt,
        outcome.type_name,
        pause,
    )
