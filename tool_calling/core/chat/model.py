"""ChatModel: the interface every model adapter implements."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator

from tool_calling.core.chat.prompt import ChatOptions, Prompt
from tool_calling.core.chat.response import ChatResponse

__all__ = ["ChatModel"]


class ChatModel(ABC):
    """A chat model: sends a prompt (with tool definitions) and returns the model's answer.

    A chat model never runs tools; the tool calling loop (``ToolCallingAdvisor`` or the caller)
    does. ``stream`` defaults to one chunk holding the whole ``call`` result; the async twins
    default to running the sync methods in a worker thread.
    """

    @abstractmethod
    def call(self, prompt: Prompt) -> ChatResponse:
        """Send ``prompt`` and return the model's response."""

    def stream(self, prompt: Prompt) -> Iterator[ChatResponse]:
        """Yield the response in chunks; the default yields the whole ``call`` result once."""
        yield self.call(prompt)

    @property
    def default_options(self) -> ChatOptions | None:
        """Options applied to every call unless the prompt overrides them."""
        return None

    async def acall(self, prompt: Prompt) -> ChatResponse:
        """Async twin of :meth:`call`."""
        return await asyncio.to_thread(self.call, prompt)

    async def astream(self, prompt: Prompt) -> AsyncIterator[ChatResponse]:
        """Async twin of :meth:`stream`."""
        iterator = self.stream(prompt)
        sentinel = object()
        while True:
            chunk = await asyncio.to_thread(next, iterator, sentinel)
            if chunk is sentinel:
                return
            yield chunk  # type: ignore[misc]
