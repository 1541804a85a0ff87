"""RegexToolIndex: the query is a regular expression matched against tool names, then texts."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tool_calling.core.errors import ToolSearchQueryError
from tool_calling.core.search.base import Tags, ToolIndex, check_max_results, check_unique
from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["MAX_PATTERN_LENGTH", "RegexToolIndex"]

MAX_PATTERN_LENGTH = 200
"""Longest pattern accepted, in characters."""

# A repeated group that itself repeats ("(a+)+", "(\w*)*", "(x{2,})+") can take exponential time
# in Python's backtracking engine, which cannot be interrupted: refused before compiling.
_NESTED_REPEAT = re.compile(r"\((?:[^()\\]|\\.)*(?:[*+]|\{\d*,?\d*\})\)(?:[*+]|\{\d*,?\d*\})")


class RegexToolIndex(ToolIndex):
    """Spring AI's regex index: the model sends a pattern, matched case-insensitively.

    Tools whose name matches come first, then tools whose description or tags match, each in
    the order they were indexed. An invalid pattern raises ``ToolSearchQueryError`` (the search
    tool answers it as an ``is_error`` text); so do patterns longer than
    ``MAX_PATTERN_LENGTH`` and nested repetitions such as ``(a+)+``, which could run for minutes.
    """

    def __init__(self) -> None:
        self._tools: list[tuple[str, str]] = []

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        """Index ``definitions`` (replacing the previous tools); see :class:`ToolIndex`."""
        check_unique(definitions)
        tags = tags or {}
        self._tools = [
            (d.name, " ".join([d.description, *tags.get(d.name, ())])) for d in definitions
        ]

    def _compile(self, query: str) -> re.Pattern[str]:
        if len(query) > MAX_PATTERN_LENGTH:
            raise ToolSearchQueryError(
                f"The pattern is too long ({len(query)} characters); "
                f"send at most {MAX_PATTERN_LENGTH}."
            )
        if _NESTED_REPEAT.search(query):
            raise ToolSearchQueryError(
                f"The pattern {query!r} repeats a group that itself repeats, which can take "
                "too long to match; remove the outer repetition (for example "
                "'(issue)+' instead of '(issue+)+')."
            )
        try:
            return re.compile(query, re.IGNORECASE)
        except re.error as exc:
            raise ToolSearchQueryError(
                f"Invalid regular expression {query!r}: {exc}. Send a valid Python regular "
                "expression, for example 'github.*issue'."
            ) from None

    def search(self, query: str, max_results: int = 5) -> list[str]:
        """Return the matching tool names, name matches first; see :class:`ToolIndex`."""
        check_max_results(max_results)
        pattern = self._compile(query)
        by_name: list[str] = []
        by_text: list[str] = []
        for name, text in self._tools:
            if pattern.search(name):
                by_name.append(name)
                if len(by_name) >= max_results:
                    break
            elif len(by_text) < max_results and pattern.search(text):
                by_text.append(name)
        return (by_name + by_text)[:max_results]

    def clear(self) -> None:
        """Forget every indexed tool."""
        self._tools = []

    def __repr__(self) -> str:
        return f"<RegexToolIndex: {len(self._tools)} tools>"
