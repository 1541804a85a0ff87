"""Running one governed call: re-check that the user may use the tool now, run it, classify.

Shared by calls run in-process (``governance.GovernedToolCallingManager``) and calls run on
Celery workers (``calls.worker``), so both refuse, time and classify calls the same way. Nothing
here writes: the callers record the :class:`CallOutcome` through ``calls.lifecycle``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tool_calling import models
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.exceptions import ToolFailure
from tool_calling.resolvers import approval_required

__all__ = [
    "CallOutcome",
    "ToolNotAvailableError",
    "approval_refusal_text",
    "refusal_text",
    "run_governed_call",
]

S = models.ExecutionStatus


class ToolNotAvailableError(ToolFailure):
    """A tool was disabled, removed or forbidden between the model's request and the call."""


def refusal_text(name: str) -> str:
    """The text the model gets for a call of a tool an operator withdrew after it asked (S2)."""
    return (
        f"Tool {name!r} is not available: an operator disabled, removed or restricted "
        "it. Do not call it again in this conversation."
    )


def approval_refusal_text(name: str) -> str:
    """The text the model gets for a call that needs approval where no one can give it."""
    return (
        f"Tool {name!r} requires a person's approval before each call, and this conversation "
        "cannot wait for one (approvals pause background runs only). The call was not made."
    )


@dataclass(frozen=True)
class CallOutcome:
    """How one governed call ended: its status in the audit, and the outcome for the model."""

    status: str
    """An ``ExecutionStatus`` value."""
    outcome: ToolOutcome
    """What the manager turns into the response (the text, or what the tool raised)."""
    duration_ms: int = 0
    """How long the tool ran."""

    @property
    def text(self) -> str:
        """The result, or the message of the failure."""
        return self.outcome.text

    @property
    def started(self) -> bool:
        """Whether the tool ran (a refused call never did)."""
        return self.status != S.REFUSED


def run_governed_call(
    name: str,
    user: Any,
    run: Callable[[], str],
    *,
    on_start: Callable[[], None] | None = None,
    approved: bool = False,
    rechecked: tuple[bool | None] | None = None,
) -> CallOutcome:
    """Re-check that ``user`` may use tool ``name`` now, run it, and say how it ended.

    Args:
        name: The tool the model called.
        user: The user of the turn (``None`` for anonymous turns).
        run: Runs the tool and returns its text (raises as ``ToolCallback.call`` does).
        on_start: Called once the re-check passed, just before ``run``.
        approved: A person approved this call (``calls.approvals``). Without it a tool that
            requires approval is refused.
        rechecked: ``(approval_required(name, user),)`` when the caller read it already, in
            the same query as the row it claimed; left out, it is read here.

    Returns:
        ``REFUSED`` (the tool is no longer available to ``user``, or needs an approval this
        call does not have; it did not run), else ``SUCCEEDED`` or ``FAILED``.
    """
    # Read again at call time (S2): the operator may have disabled, removed or restricted the
    # tool after the model asked for it.
    needs_approval = approval_required(name, user) if rechecked is None else rechecked[0]
    if needs_approval is None or (needs_approval and not approved):
        text = refusal_text(name) if needs_approval is None else approval_refusal_text(name)
        return CallOutcome(S.REFUSED, ToolOutcome.failure(text, ToolNotAvailableError))
    if on_start is not None:
        on_start()
    started = time.monotonic()
    try:
        result = run()
    except BaseException as exc:  # classified here; the manager decides what the model sees
        outcome = ToolOutcome.from_exception(exc)
    else:
        outcome = ToolOutcome.ok(result)
    duration = int((time.monotonic() - started) * 1000)
    status = S.SUCCEEDED if outcome.kind is ToolOutcomeKind.OK else S.FAILED
    return CallOutcome(status, outcome, duration)
