"""Unexpected tool errors in governed turns: the model gets a generic text and an error id (S13).

A tool that raises something nobody wrote for the model (a ``KeyError``, a driver's error with a
DSN in its message) must not hand that message to the model, nor through it to the user: it can
carry paths, hosts, credentials. In governed turns such an error is recorded with an *error
id* (``ToolExecution.error_id``, with the traceback in ``error`` and a log line naming the id),
and the model reads only ``Tool 'NAME' failed with an unexpected error (error id ...)``.

What is written for the model still goes through as written: a ``ToolFailure`` (and its
subclasses: refusals, denials, ``TransientToolError``), bad arguments, time limits. The
processor re-raises what the core's default re-raises (``rethrown`` types, ``always_throw``,
non-``Exception`` causes).

The core's ``DefaultToolExecutionExceptionProcessor`` keeps Spring AI's behaviour (the
exception's message goes to the model): it is what plain ``ChatClient`` code gets, and what
``TOOL_CALLING["EXCEPTION_PROCESSOR"]`` can choose for governed turns again.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass

from tool_calling.core.execution.exception_processor import (
    DefaultToolExecutionExceptionProcessor,
)
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.callback import ToolExecutionException
from tool_calling.core.tools.definition import ToolDefinition
from tool_calling.exceptions import ToolArgumentsError, ToolFailure

__all__ = [
    "ERROR_ID_ATTRIBUTE",
    "GovernedToolExecutionExceptionProcessor",
    "RecordedOutcome",
    "error_id_of",
    "generic_text",
    "is_unexpected",
    "log_unexpected",
    "new_error_id",
    "with_error_id",
]

logger = logging.getLogger("tool_calling.calls")

ERROR_ID_ATTRIBUTE = "tool_calling_error_id"
"""Attribute of a ``ToolExecutionException`` raised in this process that holds its error id."""


def new_error_id() -> str:
    """A fresh error id: 12 hex digits, unique enough to find one failure in the log."""
    return uuid.uuid4().hex[:12]


def is_unexpected(outcome: ToolOutcome) -> bool:
    """Whether a call failed with an error nobody wrote for the model (it gets an error id)."""
    return (
        outcome.kind is ToolOutcomeKind.ERROR
        and not outcome.is_a(ToolFailure)
        and not outcome.is_a(ToolArgumentsError)
    )


def log_unexpected(execution_id: int, name: str, outcome: ToolOutcome) -> str:
    """The error id of a call's unexpected error, logged with its traceback; blank if none.

    For the audit row and the model (S13); a failure written for the model has none.
    """
    if not is_unexpected(outcome):
        return ""
    error_id = new_error_id()
    cause = outcome.cause
    logger.error(
        "Tool call %s (%r) failed with an unexpected error (error id %s): %s%s",
        execution_id,
        name,
        error_id,
        outcome.error_type,
        "" if cause is not None else f"\n{outcome.traceback}",
        exc_info=(type(cause), cause, cause.__traceback__) if cause is not None else None,
    )
    return error_id


def generic_text(name: str, error_id: str) -> str:
    """What the model reads about an unexpected error of tool ``name``."""
    return (
        f"Tool {name!r} failed with an unexpected error (error id {error_id}). The details are "
        "in the server's log; do not retry the same call, and give the user this error id if "
        "it matters to them."
    )


@dataclass(frozen=True)
class RecordedOutcome(ToolOutcome):
    """The outcome of a call read back from its audit row: with the row's error id."""

    error_id: str = ""
    """The id the audit and the log know the failure by; blank when it had none."""


def with_error_id(outcome: ToolOutcome, error_id: str) -> ToolOutcome:
    """``outcome`` carrying ``error_id`` for the exception processor, wherever it ran.

    A call that failed in this process keeps its exception: the id goes on the wrapper the
    manager reads (a ``ToolExecutionException``); one read back from its row gets a copy.
    """
    if not error_id:
        return outcome
    exception = outcome.exception
    if isinstance(exception, ToolExecutionException):
        setattr(exception, ERROR_ID_ATTRIBUTE, error_id)
        return outcome
    values = {f.name: getattr(outcome, f.name) for f in dataclasses.fields(ToolOutcome)}
    return RecordedOutcome(**values, error_id=error_id)


def error_id_of(outcome: ToolOutcome | None, exception: BaseException | None = None) -> str:
    """The error id an outcome (or the exception a manager was given) carries; blank if none."""
    found = getattr(outcome, "error_id", "") if isinstance(outcome, RecordedOutcome) else ""
    for holder in (getattr(outcome, "exception", None), exception):
        found = found or getattr(holder, ERROR_ID_ATTRIBUTE, "")
    return str(found or "")


class GovernedToolExecutionExceptionProcessor(DefaultToolExecutionExceptionProcessor):
    """The exception processor of governed turns: generic text with an error id for the model.

    Decides as ``DefaultToolExecutionExceptionProcessor`` does (what it re-raises is re-raised,
    ``rethrown`` and ``always_throw`` included); what it would send to the model becomes
    :func:`generic_text` with the call's error id. A failure that reached it without one (a
    call outside the audit) gets a new id, logged here with its message.
    """

    def process(self, exception: ToolExecutionException) -> str:
        """The generic text for ``exception``, or raise as the default processor would."""
        super().process(exception)
        return self._generic(exception.tool_definition, None, exception)

    def process_outcome(self, definition: ToolDefinition, outcome: ToolOutcome) -> str:
        """The generic text for a failed call's ``outcome``, or raise as the default would."""
        super().process_outcome(definition, outcome)
        return self._generic(definition, outcome, None)

    def _generic(
        self,
        definition: ToolDefinition,
        outcome: ToolOutcome | None,
        exception: BaseException | None,
    ) -> str:
        error_id = error_id_of(outcome, exception)
        if not error_id:
            error_id = new_error_id()
            cause = outcome.cause if outcome is not None else getattr(exception, "cause", None)
            logger.error(
                "Tool %r failed with an unexpected error (error id %s): %s",
                definition.name,
                error_id,
                outcome.text if outcome is not None else exception,
                exc_info=(type(cause), cause, cause.__traceback__) if cause is not None else None,
            )
        return generic_text(definition.name, error_id)
