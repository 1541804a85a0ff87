"""ToolContext: data for tools that never reaches the model."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "CLIENT_CAPABILITIES_KEY",
    "INPUT_RESPONSES_KEY",
    "PROGRESS_KEY",
    "REQUEST_STATE_KEY",
    "ProgressReporter",
    "ToolContext",
]

ProgressReporter = Callable[[float, "float | None", "str | None"], None]
"""``reporter(progress, total, message)``: tells whoever asked how far a call has come."""

PROGRESS_KEY = "tool_calling.progress"
"""The context key of the call's :data:`ProgressReporter`, set by a caller that wants progress
(an MCP client that sent a progress token); read through :meth:`ToolContext.report_progress`."""

INPUT_RESPONSES_KEY = "tool_calling.input_responses"
"""The context key of the answers an MCP client gives to a tool's earlier ``InputRequired``
(read through :attr:`ToolContext.input_responses`)."""

REQUEST_STATE_KEY = "tool_calling.request_state"
"""The context key of the state a tool's earlier ``InputRequired`` asked the client to send
back, checked as the server's own (read through :attr:`ToolContext.request_state`)."""

CLIENT_CAPABILITIES_KEY = "tool_calling.client_capabilities"
"""The context key of what the calling MCP client said it can do (``elicitation``,
``sampling``, ``roots``; read through :attr:`ToolContext.client_capabilities`)."""


class ToolContext(Mapping[str, Any]):
    """A read-only mapping of data passed to tools (tenant, user, request ids).

    A tool receives it by declaring a parameter annotated ``ToolContext``; that parameter never
    appears in the tool's schema, so nothing in it is sent to the model. Writing raises
    ``TypeError``.
    """

    __slots__ = ("_data",)
    _data: MappingProxyType[str, Any]

    def __init__(self, mapping: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        object.__setattr__(self, "_data", MappingProxyType({**(mapping or {}), **kwargs}))

    @property
    def context(self) -> Mapping[str, Any]:
        """The data as a read-only mapping (Spring AI's ``getContext()``)."""
        return self._data

    @property
    def input_responses(self) -> Mapping[str, Any]:
        """The client's answers to this tool's earlier ``InputRequired``, by request key.

        Each value is the JSON of the answer (``{"action": "accept", "content": {...}}`` for
        an elicitation, a sampling result, ``{"roots": [...]}``); empty on a first call.
        """
        return self._data.get(INPUT_RESPONSES_KEY) or {}

    @property
    def request_state(self) -> str | None:
        """The ``request_state`` this tool's earlier ``InputRequired`` gave, sent back.

        The MCP server seals what a tool gives and refuses what it did not seal, so this is
        the tool's own text, unchanged; ``None`` on a first call.
        """
        return self._data.get(REQUEST_STATE_KEY)

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        """What the calling MCP client can do (its ``capabilities`` as JSON); empty otherwise."""
        return self._data.get(CLIENT_CAPABILITIES_KEY) or {}

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the caller how far this call has come, if the caller asked; else do nothing.

        An MCP client that sent a progress token gets a ``notifications/progress`` for each
        report; other callers (a model's turn, a Celery worker) ask for none, so a tool can
        report unconditionally. ``progress`` should grow from one report to the next.
        """
        reporter = self._data.get(PROGRESS_KEY)
        if reporter is not None:
            reporter(progress, total, message)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("ToolContext is read-only")

    def __delattr__(self, name: str) -> None:
        raise TypeError("ToolContext is read-only")

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("ToolContext is read-only")

    def __delitem__(self, key: str) -> None:
        raise TypeError("ToolContext is read-only")

    def __repr__(self) -> str:
        # Values may be secrets; show only the keys.
        return f"ToolContext(keys={sorted(self._data)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolContext, (dict(self._data),))
