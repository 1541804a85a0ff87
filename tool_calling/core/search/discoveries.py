"""Where the tools a conversation found through search are kept between model calls and turns."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["DiscoveryStore", "InMemoryDiscoveryStore"]


class DiscoveryStore(ABC):
    """Keeps, per conversation, the names of the tools its searches found (oldest first).

    The ``ToolSearchToolCallingAdvisor`` reads it before every model call and adds to it after
    every search, so what a conversation found survives the next turn, a memory advisor that
    replaces the history, and history being off. A Django project can keep it in its database;
    a store must be safe to call from several threads (searches of one batch run concurrently).
    """

    @abstractmethod
    def get(self, conversation_id: str) -> list[str]:
        """Return the tool names found in ``conversation_id``, oldest first (``[]`` if none)."""

    @abstractmethod
    def add(self, conversation_id: str, names: Sequence[str]) -> None:
        """Record that ``names`` were found; a name found again moves to the end."""

    @abstractmethod
    def clear(self, conversation_id: str) -> None:
        """Forget what ``conversation_id`` found."""


class InMemoryDiscoveryStore(DiscoveryStore):
    """A process-local store: bounded in conversations and in names per conversation.

    Args:
        max_conversations: Conversations kept; the least recently used is forgotten first.
        max_names: Names kept per conversation; the oldest finds are forgotten first.
    """

    def __init__(self, *, max_conversations: int = 10_000, max_names: int = 100) -> None:
        for label, value in (("max_conversations", max_conversations), ("max_names", max_names)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        self.max_conversations = max_conversations
        """Conversations kept at most."""
        self.max_names = max_names
        """Names kept per conversation at most."""
        self._found: OrderedDict[str, dict[str, None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> list[str]:
        """Return the names found in ``conversation_id``, oldest first."""
        with self._lock:
            names = self._found.get(conversation_id)
            if names is None:
                return []
            self._found.move_to_end(conversation_id)
            return list(names)

    def add(self, conversation_id: str, names: Sequence[str]) -> None:
        """Record ``names`` as the newest finds of ``conversation_id``."""
        if not names:
            return
        with self._lock:
            found = self._found.get(conversation_id)
            if found is None:
                found = self._found[conversation_id] = {}
                while len(self._found) > self.max_conversations:
                    self._found.popitem(last=False)
            self._found.move_to_end(conversation_id)
            for name in names:
                found.pop(name, None)
                found[name] = None
            while len(found) > self.max_names:
                del found[next(iter(found))]

    def clear(self, conversation_id: str) -> None:
        """Forget what ``conversation_id`` found."""
        with self._lock:
            self._found.pop(conversation_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._found)
