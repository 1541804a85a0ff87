"""Chat memory: where conversations are kept between turns."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolResponseMessage,
)

__all__ = [
    "ChatMemory",
    "ChatMemoryRepository",
    "InMemoryChatMemoryRepository",
    "MessageWindowChatMemory",
    "drop_unanswered_tool_calls",
    "window",
]


class ChatMemoryRepository(ABC):
    """Stores the messages of conversations, in order."""

    @abstractmethod
    def find_conversation_ids(self) -> list[str]:
        """Return the ids of every stored conversation."""

    @abstractmethod
    def find_by_conversation_id(
        self, conversation_id: str, limit: int | None = None
    ) -> list[Message]:
        """Return the conversation's messages, oldest first (only the last ``limit`` if given)."""

    @abstractmethod
    def save_all(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Replace the conversation's messages with ``messages``."""

    @abstractmethod
    def delete_by_conversation_id(self, conversation_id: str) -> None:
        """Forget the conversation."""

    def add(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Append ``messages``; repositories that can append cheaply override this."""
        self.save_all(conversation_id, [*self.find_by_conversation_id(conversation_id), *messages])


class InMemoryChatMemoryRepository(ChatMemoryRepository):
    """Keeps conversations in a dict in this process (tests, scripts, single-process apps)."""

    def __init__(self) -> None:
        self._store: dict[str, list[Message]] = {}
        self._lock = threading.Lock()

    def find_conversation_ids(self) -> list[str]:
        """Return the stored conversation ids."""
        with self._lock:
            return list(self._store)

    def find_by_conversation_id(
        self, conversation_id: str, limit: int | None = None
    ) -> list[Message]:
        """Return a copy of the conversation's messages (the last ``limit`` if given)."""
        with self._lock:
            messages = self._store.get(conversation_id, [])
            return list(messages[-limit:] if limit else messages)

    def save_all(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Replace the conversation's messages."""
        with self._lock:
            self._store[conversation_id] = list(messages)

    def add(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the conversation."""
        with self._lock:
            self._store.setdefault(conversation_id, []).extend(messages)

    def delete_by_conversation_id(self, conversation_id: str) -> None:
        """Forget the conversation."""
        with self._lock:
            self._store.pop(conversation_id, None)


class ChatMemory(ABC):
    """The messages a conversation remembers, as the model should see them."""

    DEFAULT_CONVERSATION_ID = "default"
    """Conversation id used when a request names none."""
    CONVERSATION_ID = "chat_memory_conversation_id"
    """Advisor context key holding the conversation id."""

    @abstractmethod
    def add(self, conversation_id: str, messages: Message | Sequence[Message]) -> None:
        """Remember ``messages`` (one message or several) at the end of the conversation."""

    @abstractmethod
    def get(self, conversation_id: str) -> list[Message]:
        """Return the messages to send to the model, oldest first."""

    @abstractmethod
    def clear(self, conversation_id: str) -> None:
        """Forget the conversation."""


def window(messages: Sequence[Message], max_messages: int) -> list[Message]:
    """Return the last ``max_messages`` messages without splitting a tool call from its responses.

    The newest system message is kept (at the front) even when it is older than the window. The
    window never starts with tool responses whose call fell outside it, and never holds tool
    calls whose responses are missing (see :func:`drop_unanswered_tool_calls`).
    """
    system = next((m for m in reversed(messages) if isinstance(m, SystemMessage)), None)
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    budget = max_messages - (1 if system is not None else 0)
    kept = rest[-budget:] if budget > 0 else []
    return ([system] if system is not None else []) + drop_unanswered_tool_calls(kept)


def drop_unanswered_tool_calls(messages: Sequence[Message]) -> list[Message]:
    """Return ``messages`` as a history a model accepts: every tool call next to its responses.

    An assistant message whose tool calls are not all answered by the tool responses right after
    it loses its tool calls (and the message goes, unless it has text), together with those
    responses; tool responses without their assistant message go too. Such gaps appear when a
    turn ends without sending the tool results back to the model (return-direct, a limit) while
    a memory advisor inside the loop stored each step, or when a turn fails halfway. An assistant
    message with tool calls at the very end is kept: its calls are still running.
    """
    result: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if isinstance(message, ToolResponseMessage):
            continue  # its assistant message is not right before it
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            result.append(message)
            continue
        responses: list[ToolResponseMessage] = []
        while index < len(messages):
            following = messages[index]
            if not isinstance(following, ToolResponseMessage):
                break
            responses.append(following)
            index += 1
        if not responses and index == len(messages):
            result.append(message)
            continue
        answered = {response.id for batch in responses for response in batch.responses}
        if all(call.id in answered for call in message.tool_calls):
            result += [message, *responses]
        elif message.text:
            result.append(AssistantMessage(message.text, [], message.metadata))
    return result


class MessageWindowChatMemory(ChatMemory):
    """Remembers everything in the repository; gives the model the last ``max_messages``."""

    def __init__(
        self, repository: ChatMemoryRepository | None = None, max_messages: int = 20
    ) -> None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise ValueError(f"max_messages must be a positive integer, got {max_messages!r}")
        self.repository = repository if repository is not None else InMemoryChatMemoryRepository()
        """Where the messages are stored."""
        self.max_messages = max_messages
        """How many messages the model sees at most."""

    def add(self, conversation_id: str, messages: Message | Sequence[Message]) -> None:
        """Append ``messages`` (one message or several) to the stored conversation."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        if batch:
            self.repository.add(conversation_id, batch)

    def get(self, conversation_id: str) -> list[Message]:
        """Return the window of the conversation the model should see."""
        # A few more than the window: room for a stored system message and for the tool
        # exchange window() may drop at the cut. Reading more costs time on every model call.
        stored = self.repository.find_by_conversation_id(
            conversation_id, limit=self.max_messages + 8
        )
        return window(stored, self.max_messages)

    def clear(self, conversation_id: str) -> None:
        """Forget the conversation."""
        self.repository.delete_by_conversation_id(conversation_id)
