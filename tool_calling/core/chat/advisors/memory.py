"""MessageChatMemoryAdvisor: adds a conversation's memory to the prompt and stores the turn."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tool_calling.core.chat._stream import FINAL_RESPONSE, aggregate
from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.memory import ChatMemory, drop_unanswered_tool_calls
from tool_calling.core.chat.messages import AssistantMessage, Message, SystemMessage
from tool_calling.core.chat.prompt import Prompt
from tool_calling.core.chat.response import ChatResponse

__all__ = ["MessageChatMemoryAdvisor"]


def _without_usage(message: Message) -> Message:
    """``message`` less the token usage memory adds to a stored answer (see ``_with_usage``)."""
    if isinstance(message, AssistantMessage) and "usage" in message.metadata:
        metadata = {k: v for k, v in message.metadata.items() if k != "usage"}
        return AssistantMessage(message.text, message.tool_calls, metadata)
    return message


def _overlap(memory: Sequence[Message], messages: Sequence[Message]) -> int:
    """Return the length of the longest suffix of ``memory`` that starts ``messages``.

    A stored answer carries its token usage and the caller's copy may not: usage is not
    compared.
    """
    largest = min(len(memory), len(messages))
    remembered = [_without_usage(m) for m in memory[len(memory) - largest :]]
    given = [_without_usage(m) for m in messages[:largest]]
    for size in range(largest, 0, -1):
        if remembered[-size:] == given[:size]:
            return size
    return 0


def _with_usage(answers: list[Message], usage: Any) -> list[Message]:
    """``answers`` with the response's token usage on the first (once per model response).

    The model reports usage per response (``ChatResponse.metadata["usage"]``); a stored answer
    keeps it in its metadata, where ``ChatMemoryRepository`` implementations find it. Outside
    the tool loop the response's usage is the sum over the turn's model calls, whose tool-call
    messages are not stored, so the stored messages always add up to what the turn spent.
    """
    first = answers[0]
    if not isinstance(usage, Mapping) or not usage or not isinstance(first, AssistantMessage):
        return answers
    if first.metadata.get("usage") == usage:
        return answers
    metadata = {**first.metadata, "usage": dict(usage)}
    return [AssistantMessage(first.text, first.tool_calls, metadata), *answers[1:]]


class MessageChatMemoryAdvisor(Advisor):
    """Puts the conversation's remembered messages before the request's and stores new ones.

    Outside the tool loop (the default order) it sees one request per turn: it stores the user
    message and the final answer. With an order after the ``ToolCallingAdvisor`` it sits inside
    the loop and stores every tool call and tool response too. Messages already in memory (a
    caller resending history) are neither added to the prompt twice nor stored twice.

    A stored answer carries the token usage of the response it came from in its metadata
    (``"usage"``): its own model call's inside the loop, the whole turn's outside it.

    The conversation id comes from the request context (``ChatMemory.CONVERSATION_ID``, set by
    ``.conversation_id(...)``), else ``conversation_id`` given here, else ``"default"``.
    """

    order = HIGHEST_PRECEDENCE + 200

    def __init__(
        self,
        chat_memory: ChatMemory,
        order: int = HIGHEST_PRECEDENCE + 200,
        conversation_id: str = ChatMemory.DEFAULT_CONVERSATION_ID,
    ) -> None:
        self.chat_memory = chat_memory
        self.order = order
        self.conversation_id = conversation_id

    def _conversation_id(self, request: ChatClientRequest) -> str:
        return str(request.context.get(ChatMemory.CONVERSATION_ID) or self.conversation_id)

    def _before(self, request: ChatClientRequest) -> tuple[ChatClientRequest, str]:
        conversation_id = self._conversation_id(request)
        remembered = self.chat_memory.get(conversation_id)
        messages = request.prompt.messages
        systems = [m for m in messages if isinstance(m, SystemMessage)]
        others = [m for m in messages if not isinstance(m, SystemMessage)]
        stored = [m for m in remembered if not isinstance(m, SystemMessage)]
        new = others[_overlap(stored, others) :]
        if new:
            self.chat_memory.add(conversation_id, new)
        # A tool call left unanswered in memory (a turn that ended on return-direct or a limit
        # while this advisor sat inside the loop) would make the model API reject the prompt.
        history = drop_unanswered_tool_calls([*stored, *new])
        prompt = Prompt([*systems, *history], request.prompt.options)
        return request.with_prompt(prompt), conversation_id

    def _after(self, response: ChatResponse | None, conversation_id: str) -> None:
        if response is None:
            return
        answers: list[Message] = [
            g.output for g in response.generations if g.output.text or g.output.tool_calls
        ]
        if answers:
            self.chat_memory.add(
                conversation_id, _with_usage(answers, response.metadata.get("usage"))
            )

    def loop_ended(self, request: ChatClientRequest, messages: Sequence[Message]) -> None:
        """Store how a turn the tool loop ended itself finished (responses and answer)."""
        if messages:
            self.chat_memory.add(self._conversation_id(request), list(messages))

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Add memory to the prompt, call on, and store the answer."""
        request, conversation_id = self._before(request)
        response = chain.next_call(request)
        self._after(response.chat_response, conversation_id)
        return response

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Streaming twin: stores the answer once the stream ends, as ``advise_call`` would.

        When a ``ToolCallingAdvisor`` runs below, its last chunk carries the whole final response
        in its context, and that is what gets stored: text the model streamed during a tool round
        is not part of the answer. Otherwise the chunks are aggregated.
        """
        request, conversation_id = self._before(request)
        chunks: list[ChatResponse] = []
        final: ChatResponse | None = None
        for chunk in chain.next_stream(request):
            if chunk.chat_response is not None:
                chunks.append(chunk.chat_response)
            whole = chunk.context.get(FINAL_RESPONSE)
            if isinstance(whole, ChatResponse):
                final = whole
            yield chunk
        if final is None and chunks:
            final = aggregate(chunks)
        self._after(final, conversation_id)
