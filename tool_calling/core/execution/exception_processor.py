"""Deciding what a tool's exception becomes: text for the model, or an exception for the caller."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from tool_calling.core.execution.plan import ToolOutcome
from tool_calling.core.tools.callback import ToolExecutionException
from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["DefaultToolExecutionExceptionProcessor", "ToolExecutionExceptionProcessor"]


class ToolExecutionExceptionProcessor(ABC):
    """Turns a ``ToolExecutionException`` into text for the model, or re-raises."""

    @abstractmethod
    def process(self, exception: ToolExecutionException) -> str:
        """Return the text the model sees for ``exception``, or raise."""

    def process_outcome(self, definition: ToolDefinition, outcome: ToolOutcome) -> str:
        """Return the text the model sees for a failed call's ``outcome``, or raise.

        The manager calls this for every failure, wherever the call ran. By default it hands
        :meth:`process` the exception (rebuilt when the call failed in another process; see
        ``ToolOutcome.as_exception``).
        """
        return self.process(_wrapper(definition, outcome))


def _wrapper(definition: ToolDefinition, outcome: ToolOutcome) -> ToolExecutionException:
    raised = outcome.exception
    if isinstance(raised, ToolExecutionException):
        return raised
    return ToolExecutionException(definition, outcome.as_exception())


class DefaultToolExecutionExceptionProcessor(ToolExecutionExceptionProcessor):
    """Sends the exception's message to the model unless told to raise.

    In order: a cause that is a ``BaseException`` but not an ``Exception`` re-raises the
    ``ToolExecutionException``; a cause of a ``rethrown`` type re-raises the cause itself;
    ``always_throw`` re-raises the ``ToolExecutionException``; otherwise the cause's message goes
    to the model (a blank one becomes ``"Exception occurred in tool: NAME (ExceptionType)"``).

    Calls that failed on a Celery worker are decided the same way, by the exception's type
    names: a ``rethrown`` type raised there is raised here as that type.
    """

    def __init__(
        self,
        always_throw: bool = False,
        rethrown: Iterable[type[BaseException]] = (),
    ) -> None:
        self.always_throw = always_throw
        """Re-raise every tool exception instead of telling the model."""
        self.rethrown = tuple(rethrown)
        """Exception types re-raised as they are (the cause, not the wrapper)."""

    def process(self, exception: ToolExecutionException) -> str:
        """Return the cause's message for the model, or raise as configured."""
        return self._decide(exception, ToolOutcome.from_exception(exception))

    def process_outcome(self, definition: ToolDefinition, outcome: ToolOutcome) -> str:
        """Decide as :meth:`process` does, by type names when the call failed elsewhere."""
        return self._decide(_wrapper(definition, outcome), outcome)

    def _decide(self, wrapper: ToolExecutionException, outcome: ToolOutcome) -> str:
        if not outcome.is_a(Exception):
            raise wrapper
        for kind in self.rethrown:
            if outcome.is_a(kind):
                raise outcome.as_exception(kind)
        if self.always_throw:
            raise wrapper
        message = outcome.text.strip()
        if not message:
            return (
                f"Exception occurred in tool: {wrapper.tool_definition.name} ({outcome.type_name})"
            )
        return message
