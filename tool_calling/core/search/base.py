"""ToolIndex: finds the tools of a request that fit a query, best first."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["Tags", "ToolIndex", "check_max_results", "check_unique"]

Tags = Mapping[str, Sequence[str]]
"""Extra search words per tool name (keywords an operator or a tool's metadata adds)."""


class ToolIndex(ABC):
    """Finds tools by a query: ``index()`` a tool set once, then ``search()`` it many times.

    ``search`` may be called from several threads at once once ``index`` has returned; ``index``
    and ``clear`` are never called while a search runs on the same index (the
    ``ToolSearchToolCallingAdvisor`` keeps one index per tool set, or locks a shared one).
    """

    @abstractmethod
    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        """Index ``definitions``, replacing whatever was indexed before.

        Args:
            definitions: The tools to search; their names must be unique.
            tags: Extra search words per tool name; names not in ``definitions`` are ignored.

        Raises:
            ValueError: two definitions share a name.
        """

    @abstractmethod
    def search(self, query: str, max_results: int = 5) -> list[str]:
        """Return the names of the tools that fit ``query``, best first.

        At most ``max_results`` names, only names that were indexed, none twice; an empty list
        when nothing fits.

        Raises:
            ToolSearchQueryError: the index cannot use the query (an invalid pattern); the
                message is written for the model.
            ValueError: ``max_results`` is not a positive integer.
        """

    @abstractmethod
    def clear(self) -> None:
        """Forget every indexed tool (``search`` then finds nothing)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


def check_max_results(max_results: object) -> int:
    """Return ``max_results`` if it is a positive integer (``bool`` refused), else raise."""
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise ValueError(f"max_results must be a positive integer, got {max_results!r}")
    return max_results


def check_unique(definitions: Sequence[ToolDefinition]) -> None:
    """Raise ``ValueError`` naming the first tool name that appears twice."""
    seen: set[str] = set()
    for definition in definitions:
        if definition.name in seen:
            raise ValueError(
                f"Tool {definition.name!r} appears twice in the tools to index; "
                "tool names must be unique."
            )
        seen.add(definition.name)
