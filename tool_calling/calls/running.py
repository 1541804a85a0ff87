"""Running one governed call: re-check what the user may do now, run it, classify.

Shared by calls run in-process (``governance.GovernedToolCallingManager``) and calls run on
Celery workers (``calls.worker``), so both refuse, time and classify calls the same way. Before
the tool runs, in order: the tool is still available to the user (S2), approved if it needs a
person's approval (S6), allowed for this user and these arguments (``calls.authorization``,
S4), and within its quotas (``calls.quotas``, S8). Nothing here writes the call's row: the
callers record the :class:`CallOutcome` through ``calls.lifecycle``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tool_calling import models
from tool_calling.calls import authorization, quotas
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolFailure
from tool_calling.resolvers import CallRules, call_rules

__all__ = [
    "CallOutcome",
    "ToolNotAvailableError",
    "ToolQuotaExceededError",
    "approval_refusal_text",
    "refusal_text",
    "run_governed_call",
]

logger = logging.getLogger("tool_calling.calls")

S = models.ExecutionStatus


class ToolNotAvailableError(ToolFailure):
    """A tool was disabled, removed or forbidden between the model's request and the call."""


class ToolQuotaExceededError(ToolFailure):
    """The call would exceed a quota of its tool (``calls.quotas``); it did not run."""


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
    rules: CallRules | None = None
    """The tool's rules as read for this call (retries, idempotence); ``None`` if unavailable."""

    @property
    def text(self) -> str:
        """The result, or the message of the failure."""
        return self.outcome.text

    @property
    def started(self) -> bool:
        """Whether the tool ran (a refused call never did)."""
        return self.status != S.REFUSED


def _who(user: Any) -> object:
    return getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None


def _refused(text: str, error: type[ToolFailure], rules: CallRules | None) -> CallOutcome:
    return CallOutcome(S.REFUSED, ToolOutcome.failure(text, error), rules=rules)


def run_governed_call(
    name: str,
    user: Any,
    run: Callable[[], str],
    *,
    on_start: Callable[[], None] | None = None,
    approved: bool = False,
    callback: Any = None,
    arguments: str | None = None,
    context: ToolContext | None = None,
    count_quota: bool = True,
    rechecked: tuple[CallRules | None] | None = None,
) -> CallOutcome:
    """Re-check that ``user`` may make this call of tool ``name`` now, run it, say how it ended.

    Args:
        name: The tool the model called.
        user: The user of the turn (``None`` for anonymous turns).
        run: Runs the tool and returns its text (raises as ``ToolCallback.call`` does).
        on_start: Called once every check passed, just before ``run``.
        approved: A person approved this call (``calls.approvals``). Without it a tool that
            requires approval is refused.
        callback: The tool's callback: what its code declares about who may call it.
        arguments: The call's arguments (JSON text), for the tool's authorization check.
        context: The call's tool context, for the tool's authorization check.
        count_quota: Count the call toward its tool's quotas (not again for a retry).
        rechecked: ``(call_rules(name, user),)`` when the caller read them already, in the
            same query as the row it claimed; left out, they are read here.

    Returns:
        ``REFUSED`` (the tool is no longer available to ``user``, needs an approval this call
        does not have, is not allowed for this user or these arguments, or is over a quota; it
        did not run), else ``SUCCEEDED`` or ``FAILED``.
    """
    # Read again at call time (S2): the operator may have disabled, removed or restricted the
    # tool after the model asked for it.
    rules = call_rules(name, user) if rechecked is None else rechecked[0]
    if rules is None:
        return _refused(refusal_text(name), ToolNotAvailableError, None)
    if rules.requires_approval and not approved:
        return _refused(approval_refusal_text(name), ToolNotAvailableError, rules)
    denied = authorization.refusal(
        name,
        user,
        callback=callback,
        permission=rules.permission,
        arguments=arguments,
        context=context,
    )
    if denied is not None:
        logger.warning("Refused a call of tool %r for user %s: %s", name, _who(user), denied)
        return _refused(denied, authorization.ToolPermissionError, rules)
    if count_quota:
        try:
            over = quotas.consume(
                name,
                user,
                per_user=rules.quota_per_user,
                total=rules.quota_total,
                window=rules.quota_window,
            )
        except Exception:  # the database did not count it: fail closed, the call does not run
            logger.exception("Could not count a call of tool %r toward its quotas", name)
            over = (
                f"Tool {name!r} could not check its quota just now; the call was not made. "
                "Try again shortly."
            )
        if over is not None:
            logger.warning("Refused a call of tool %r for user %s: %s", name, _who(user), over)
            return _refused(over, ToolQuotaExceededError, rules)
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
    return CallOutcome(status, outcome, duration, rules)
