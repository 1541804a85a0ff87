"""Resolving tool names to callbacks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from tool_calling.core.tools.callback import ToolCallback, check_unique_names

__all__ = ["DelegatingToolCallbackResolver", "StaticToolCallbackResolver", "ToolCallbackResolver"]


class ToolCallbackResolver(ABC):
    """Finds the callback of a tool by name."""

    @abstractmethod
    def resolve(self, tool_name: str) -> ToolCallback | None:
        """Return the callback named ``tool_name``, or ``None`` if this resolver has none."""


class StaticToolCallbackResolver(ToolCallbackResolver):
    """Resolves names against a fixed list of callbacks (exact, case-sensitive match)."""

    def __init__(self, callbacks: Iterable[ToolCallback]) -> None:
        callbacks = list(callbacks)
        check_unique_names(callbacks)
        self._callbacks = {cb.definition.name: cb for cb in callbacks}

    def resolve(self, tool_name: str) -> ToolCallback | None:
        """Return the callback named ``tool_name``, or ``None``."""
        return self._callbacks.get(tool_name)

    @property
    def tool_names(self) -> list[str]:
        """The names this resolver knows, in the order given."""
        return list(self._callbacks)


class DelegatingToolCallbackResolver(ToolCallbackResolver):
    """Asks each resolver in turn and returns the first callback found."""

    def __init__(self, resolvers: Iterable[ToolCallbackResolver]) -> None:
        self._resolvers = list(resolvers)

    def resolve(self, tool_name: str) -> ToolCallback | None:
        """Return the first resolver's callback for ``tool_name``, or ``None``."""
        for resolver in self._resolvers:
            callback = resolver.resolve(tool_name)
            if callback is not None:
                return callback
        return None
