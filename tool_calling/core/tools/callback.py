"""ToolCallback: what the framework calls; FunctionToolCallback wraps any Python callable."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition, ToolMetadata

__all__ = ["ToolCallback", "ToolCallbackProvider"]


class ToolCallback(ABC):
    """A tool the framework can offer to the model and call with the model's JSON arguments."""

    @property
    @abstractmethod
    def definition(self) -> ToolDefinition:
        """The name, description and input schema sent to the model."""

    @property
    def metadata(self) -> ToolMetadata:
        """How the framework treats this tool's result (return-direct or not)."""
        return ToolMetadata()

    @abstractmethod
    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Run the tool with ``tool_input`` (a JSON object as text) and return text for the model.

        Raises:
            ToolExecutionException: the tool raised.
            ToolArgumentsError: ``tool_input`` is not valid for the tool's schema.
        """

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Async twin of :meth:`call`; the default runs ``call`` in a worker thread."""
        return await asyncio.to_thread(self.call, tool_input, tool_context)

    @property
    def name(self) -> str:
        """Shortcut for ``definition.name``."""
        return self.definition.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.definition.name!r}>"


class ToolCallbackProvider(ABC):
    """A source of tool callbacks (a module of tools, an MCP server, ...)."""

    @abstractmethod
    def tool_callbacks(self) -> list[ToolCallback]:
        """Return the callbacks this provider offers."""
