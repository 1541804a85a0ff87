"""One attempt of a governed call: the gate, then the tool, timed and classified.

Shared by calls run in the turn's own process (``calls.inline``) and on Celery workers
(``calls.worker``): both ask the gate (``calls.gate``) before every attempt, run the tool the
gate admitted with the tool's own arguments, and classify how it ended the same way. Nothing
here writes the call's row: the callers record the :class:`CallOutcome` through
``calls.lifecycle``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tool_calling import models
from tool_calling.calls.gate import GateCall, Rule, Verdict, admit
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.resolvers import CallRules

__all__ = ["CallOutcome", "run_gated", "status_of_refusal"]

S = models.ExecutionStatus


@dataclass(frozen=True)
class CallOutcome:
    """How one governed call ended: its status in the audit, and the outcome for the model."""

    status: str
    """An ``ExecutionStatus`` value."""
    outcome: ToolOutcome
    """What the manager turns into the response (the text, or what the tool raised)."""
    duration_ms: int = 0
    """How long the tool ran."""
    rules: CallRules | None = None
    """The tool's rules as read for this call (retries, idempotence); ``None`` if unavailable."""

    @property
    def text(self) -> str:
        """The result, or the message of the failure."""
        return self.outcome.text


def status_of_refusal(verdict: Verdict) -> str:
    """The audit status of a call the gate refused: ``failed`` for bad arguments, else refused.

    Arguments that fail the schema are the call's own failure, recorded as such (with the
    ``ToolArgumentsError`` the model reads); the other rules refuse a call that could have run.
    """
    return S.FAILED if verdict.refused_by is Rule.VALIDATION else S.REFUSED


def run_gated(
    call: GateCall,
    run: Callable[[Verdict], str],
    *,
    on_start: Callable[[Verdict], None] | None = None,
) -> tuple[Verdict, CallOutcome]:
    """Ask the gate about ``call``; run it if admitted; say how it ended.

    Args:
        call: The call at the gate (a path that runs it cannot wait for a person).
        run: Runs the admitted call (``verdict.callback`` with ``verdict.call``) and returns its
            text (raises as ``ToolCallback.call`` does).
        on_start: Called once the gate admitted the call, just before ``run``.

    Returns:
        The gate's verdict, and the outcome: refused (``refused``, or ``failed`` for bad
        arguments; the tool did not run), else ``succeeded`` or ``failed``.
    """
    verdict = admit(call)
    if not verdict.admitted:
        assert verdict.outcome is not None, "only a path that can wait gets a waiting verdict"
        return verdict, CallOutcome(status_of_refusal(verdict), verdict.outcome, 0, verdict.rules)
    if on_start is not None:
        on_start(verdict)
    started = time.monotonic()
    try:
        result = run(verdict)
    except BaseException as exc:  # classified here; the manager decides what the model sees
        outcome = ToolOutcome.from_exception(exc)
    else:
        outcome = ToolOutcome.ok(result)
    duration = int((time.monotonic() - started) * 1000)
    status = S.SUCCEEDED if outcome.kind is ToolOutcomeKind.OK else S.FAILED
    return verdict, CallOutcome(status, outcome, duration, verdict.rules)
