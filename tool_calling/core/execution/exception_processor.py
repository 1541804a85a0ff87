"""Deciding what a tool's exception becomes: text for the model, or an exception for the caller."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from tool_calling.core.tools.callback import ToolExecutionException

__all__ = ["DefaultToolExecutionExceptionProcessor", "ToolExecutionExceptionProcessor"]


class ToolExecutionExceptionProcessor(ABC):
    """Turns a ``ToolExecutionException`` into text for the model, or re-raises."""

    @abstractmethod
    def process(self, exception: ToolExecutionException) -> str:
        """Return the text the model sees for ``exception``, or raise."""


class DefaultToolExecutionExceptionProcessor(ToolExecutionExceptionProcessor):
    """Sends the exception's message to the model unless told to raise.

    In order: a cause that is a ``BaseException`` but not an ``Exception`` re-raises the
    ``ToolExecutionException``; a cause of a ``rethrown`` type re-raises the cause itself;
    ``always_throw`` re-raises the ``ToolExecutionException``; otherwise the cause's message goes
    to the model (a blank one becomes ``"Exception occurred in tool: NAME (ExceptionType)"``).
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
        cause = exception.cause
        if not isinstance(cause, Exception):
            raise exception
        if self.rethrown and isinstance(cause, self.rethrown):
            raise cause
        if self.always_throw:
            raise exception
        message = str(cause).strip()
        if not message:
            return (
                f"Exception occurred in tool: {exception.tool_definition.name} "
                f"({type(cause).__name__})"
            )
        return message
