"""Chat memory: where conversations are kept between turns."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

from tool_calling.core.chat.messages import Message, SystemMessage, ToolResponseMessage

__all__ = [
    "ChatMemory",
    "ChatMemoryRepository",
    "InMemoryChatMemoryRepository",
    "MessageWindowChatMemory",
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
    def add(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Remember ``messages`` at the end of the conversation."""

    @abstractmethod
    def get(self, conversation_id: str) -> list[Message]:
        """Return the messages to send to the model, oldest first."""

    @abstractmethod
    def clear(self, conversation_id: str) -> None:
        """Forget the conversation."""


def window(messages: Sequence[Message], max_messages: int) -> list[Message]:
    """Return the last ``max_messages`` messages without splitting a tool call from its responses.

    The newest system message is kept (at the front) even when it is older than the window. The
    window never starts with tool responses whose call fell outside it.
    """
    system = next((m for m in reversed(messages) if isinstance(m, SystemMessage)), None)
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    budget = max_messages - (1 if system is not None else 0)
    kept = rest[-budget:] if budget > 0 else []
    start = 0
    while start < len(kept) and isinstance(kept[start], ToolResponseMessage):
        start += 1
    kept = kept[start:]
    return ([system] if system is not None else []) + kept


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

    def add(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Append ``messages`` to the stored conversation."""
        if messages:
            self.repository.add(conversation_id, list(messages))

    def get(self, conversation_id: str) -> list[Message]:
        """Return the window of the conversation the model should see."""
        # Read a little more than the window so a cut tool exchange can be dropped whole.
        stored = self.repository.find_by_conversation_id(
            conversation_id, limit=self.max_messages * 2 + 8
        )
        return window(stored, self.max_messages)

    def clear(self, conversation_id: str) -> None:
        """Forget the conversation."""
        self.repository.delete_by_conversation_id(conversation_id)
