"""Advisors: middleware around the model call, ordered, re-entrant, stateless per request."""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tool_calling.core.chat.messages import Message
from tool_calling.core.chat.prompt import Prompt
from tool_calling.core.chat.response import ChatResponse

__all__ = [
    "HIGHEST_PRECEDENCE",
    "LOWEST_PRECEDENCE",
    "Advisor",
    "AdvisorChain",
    "ChatClientRequest",
    "ChatClientResponse",
]

HIGHEST_PRECEDENCE = -(2**31)
"""Order of the outermost advisor (runs first on the way in, last on the way out)."""
LOWEST_PRECEDENCE = 2**31 - 1
"""Order of the innermost advisor (next to the model)."""


@dataclass(frozen=True)
class ChatClientRequest:
    """What flows down the advisor chain: the prompt plus a context shared by the advisors."""

    prompt: Prompt
    """The prompt the model will receive (advisors may replace it)."""
    context: dict[str, Any] = field(default_factory=dict)
    """Advisor data for this request (conversation id, ...); never sent to the model."""

    def with_prompt(self, prompt: Prompt) -> ChatClientRequest:
        """Return a copy with ``prompt`` replaced."""
        return replace(self, prompt=prompt)


@dataclass(frozen=True)
class ChatClientResponse:
    """What flows back up the chain: the model's response plus the request context."""

    chat_response: ChatResponse | None
    """The response, or ``None`` when an advisor answered without a model call."""
    context: dict[str, Any] = field(default_factory=dict)
    """The context of the request this answers."""


class Advisor(ABC):  # noqa: B024 - every hook has a pass-through default
    """Wraps the model call, like Django middleware.

    Set up in ``__init__``; keep no per-request state on ``self``; do per-call work around a
    single ``chain.next_call(request)`` (or ``chain.next_stream``). Lower ``order`` runs first
    (outermost). The defaults pass the request through unchanged.
    """

    order: int = 0
    """Position in the chain; lower is outer."""

    @property
    def name(self) -> str:
        """A name for logs and errors (the class name by default)."""
        return type(self).__name__

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Handle a blocking call; the default passes it on."""
        return chain.next_call(request)

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Handle a streaming call; the default passes it on."""
        return chain.next_stream(request)

    def loop_ended(  # noqa: B027 - an optional hook, empty by default
        self, request: ChatClientRequest, messages: Sequence[Message]
    ) -> None:
        """Called on advisors inside a tool loop when the loop ends a turn itself.

        Return-direct results, a limit breach or the round limit end a turn without another
        model call, so advisors below the loop never see how it ended. ``messages`` are the tool
        responses (one per call of the last assistant message) and the final assistant
        message(s). ``request`` is the last request that went down the chain. Default: nothing.
        """


class AdvisorChain:
    """The advisors still to run below the current one, then the model.

    Immutable: an advisor may call ``next_call`` several times (the tool loop does), and each
    call runs the whole rest of the chain again.
    """

    __slots__ = ("_advisors", "_call", "_position", "_stream")

    def __init__(
        self,
        advisors: Sequence[Advisor],
        call: Callable[[ChatClientRequest], ChatClientResponse],
        stream: Callable[[ChatClientRequest], Iterator[ChatClientResponse]],
        position: int = 0,
    ) -> None:
        self._advisors = tuple(advisors)
        self._call = call
        self._stream = stream
        self._position = position

    @property
    def advisors(self) -> tuple[Advisor, ...]:
        """The advisors this chain still runs, outermost first."""
        return self._advisors[self._position :]

    def _rest(self) -> AdvisorChain:
        return AdvisorChain(self._advisors, self._call, self._stream, self._position + 1)

    def next_call(self, request: ChatClientRequest) -> ChatClientResponse:
        """Run the next advisor (or the model) with ``request``."""
        if self._position < len(self._advisors):
            return self._advisors[self._position].advise_call(request, self._rest())
        return self._call(request)

    def next_stream(self, request: ChatClientRequest) -> Iterator[ChatClientResponse]:
        """Streaming twin of :meth:`next_call`."""
        if self._position < len(self._advisors):
            return self._advisors[self._position].advise_stream(request, self._rest())
        return self._stream(request)


def sort_advisors(advisors: Sequence[Advisor]) -> list[Advisor]:
    """Return ``advisors`` by ``order`` (stable: equal orders keep their given order)."""
    return sorted(advisors, key=lambda a: a.order)
