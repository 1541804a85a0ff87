"""Chat memory: the repository, the window memory, and a window that keeps tool exchanges whole."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import pytest

from tool_calling import (
    AssistantMessage,
    ChatMemory,
    ChatMemoryRepository,
    InMemoryChatMemoryRepository,
    Message,
    MessageWindowChatMemory,
    SystemMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.memory import drop_unanswered_tool_calls, window


def calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(None, [ToolCall(i, "get_weather", '{"city":"Oslo"}') for i in ids])


def responses(*ids: str) -> ToolResponseMessage:
    return ToolResponseMessage([ToolResponse(i, "get_weather", "Sunny") for i in ids])


U1, A1, U2, A2, U3 = (
    UserMessage("one"),
    AssistantMessage("first answer"),
    UserMessage("two"),
    AssistantMessage("second answer"),
    UserMessage("three"),
)


# -- InMemoryChatMemoryRepository ----------------------------------------------------------------


def test_the_repository_saves_appends_finds_and_deletes() -> None:
    repository = InMemoryChatMemoryRepository()

    repository.save_all("a", [U1, A1])
    repository.add("a", [U2])
    repository.save_all("b", [U3])

    assert repository.find_by_conversation_id("a") == [U1, A1, U2]
    assert repository.find_by_conversation_id("a", limit=2) == [A1, U2]
    assert repository.find_conversation_ids() == ["a", "b"]
    repository.save_all("a", [A2])
    assert repository.find_by_conversation_id("a") == [A2]
    repository.delete_by_conversation_id("a")
    assert repository.find_by_conversation_id("a") == []
    assert repository.find_conversation_ids() == ["b"]
    repository.delete_by_conversation_id("missing")  # forgetting nothing is fine


def test_the_repository_returns_copies() -> None:
    repository = InMemoryChatMemoryRepository()
    repository.save_all("a", [U1])

    repository.find_by_conversation_id("a").append(U2)

    assert repository.find_by_conversation_id("a") == [U1]


def test_the_repository_appends_from_many_threads_without_losing_messages() -> None:
    repository = InMemoryChatMemoryRepository()

    def add(n: int) -> None:
        for i in range(50):
            repository.add("a", [UserMessage(f"{n}-{i}")])

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(repository.find_by_conversation_id("a")) == 400


def test_the_default_add_of_a_repository_appends_through_save_all() -> None:
    class DictRepository(ChatMemoryRepository):
        def __init__(self) -> None:
            self.saved: dict[str, list[Message]] = {}

        def find_conversation_ids(self) -> list[str]:
            return list(self.saved)

        def find_by_conversation_id(
            self, conversation_id: str, limit: int | None = None
        ) -> list[Message]:
            return list(self.saved.get(conversation_id, []))

        def save_all(self, conversation_id: str, messages: Sequence[Message]) -> None:
            self.saved[conversation_id] = list(messages)

        def delete_by_conversation_id(self, conversation_id: str) -> None:
            self.saved.pop(conversation_id, None)

    repository = DictRepository()
    repository.add("a", [U1])
    repository.add("a", [A1])

    assert repository.saved == {"a": [U1, A1]}


def test_repository_and_memory_are_abstract() -> None:
    with pytest.raises(TypeError):
        ChatMemoryRepository()  # type: ignore[abstract]
    with pytest.raises(TypeError):
        ChatMemory()  # type: ignore[abstract]
    assert (ChatMemory.DEFAULT_CONVERSATION_ID, ChatMemory.CONVERSATION_ID) == (
        "default",
        "chat_memory_conversation_id",
    )


# -- MessageWindowChatMemory ---------------------------------------------------------------------


def test_add_takes_one_message_or_several() -> None:
    memory = MessageWindowChatMemory()

    memory.add("a", U1)
    memory.add("a", [A1, U2])
    memory.add("a", [])

    assert memory.get("a") == [U1, A1, U2]


def test_get_returns_the_last_max_messages_and_the_repository_keeps_all() -> None:
    repository = InMemoryChatMemoryRepository()
    memory = MessageWindowChatMemory(repository, max_messages=3)

    memory.add("a", [U1, A1, U2, A2, U3])

    assert memory.get("a") == [U2, A2, U3]
    assert repository.find_by_conversation_id("a") == [U1, A1, U2, A2, U3]


def test_clear_forgets_the_conversation() -> None:
    memory = MessageWindowChatMemory()
    memory.add("a", [U1])
    memory.add("b", [U2])

    memory.clear("a")

    assert (memory.get("a"), memory.get("b")) == ([], [U2])


def test_the_default_window_is_twenty_messages() -> None:
    memory = MessageWindowChatMemory()
    messages = [UserMessage(str(i)) for i in range(25)]
    memory.add("a", messages)

    assert memory.max_messages == 20
    assert memory.get("a") == messages[5:]


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "10"])
def test_max_messages_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"max_messages must be a positive integer, got {value!r}")
    ):
        MessageWindowChatMemory(max_messages=value)  # type: ignore[arg-type]


def test_the_window_never_starts_with_responses_whose_call_it_cut() -> None:
    memory = MessageWindowChatMemory(max_messages=3)
    memory.add("a", [U1, calls("c1"), responses("c1"), A1, U2])

    # The last three would be responses("c1"), A1, U2: the orphaned responses go.
    assert memory.get("a") == [A1, U2]


def test_the_window_keeps_a_tool_call_with_its_responses() -> None:
    memory = MessageWindowChatMemory(max_messages=4)
    memory.add("a", [U1, A1, U2, calls("c1", "c2"), responses("c1", "c2"), A2])

    assert memory.get("a") == [U2, calls("c1", "c2"), responses("c1", "c2"), A2]


def test_the_window_keeps_the_newest_system_message_in_front() -> None:
    memory = MessageWindowChatMemory(max_messages=3)
    memory.add("a", [SystemMessage("old"), U1, SystemMessage("new"), A1, U2, A2, U3])

    assert memory.get("a") == [SystemMessage("new"), A2, U3]


def test_a_window_of_one_with_a_system_message_is_the_system_message() -> None:
    assert window([SystemMessage("s"), U1, A1], 1) == [SystemMessage("s")]


# -- unanswered tool calls -----------------------------------------------------------------------


def test_an_unanswered_tool_call_in_the_middle_is_dropped() -> None:
    assert drop_unanswered_tool_calls([U1, calls("c1"), U2, A2]) == [U1, U2, A2]


def test_a_tool_call_at_the_end_is_kept_while_its_calls_run() -> None:
    assert drop_unanswered_tool_calls([U1, calls("c1")]) == [U1, calls("c1")]


def test_a_partly_answered_tool_call_goes_with_its_responses() -> None:
    history = [U1, calls("c1", "c2"), responses("c1"), U2]

    assert drop_unanswered_tool_calls(history) == [U1, U2]


def test_responses_spread_over_several_messages_answer_the_call() -> None:
    history = [U1, calls("c1", "c2"), responses("c1"), responses("c2"), A1]

    assert drop_unanswered_tool_calls(history) == history


def test_the_text_of_an_unanswered_tool_call_message_is_kept() -> None:
    message = AssistantMessage("Let me check.", [ToolCall("c1", "get_weather", "{}")], {"id": "r1"})

    assert drop_unanswered_tool_calls([U1, message, U2]) == [
        U1,
        AssistantMessage("Let me check.", [], {"id": "r1"}),
        U2,
    ]


def test_orphaned_tool_responses_are_dropped() -> None:
    assert drop_unanswered_tool_calls([U1, responses("c9"), A1]) == [U1, A1]


def test_memory_get_hides_an_unanswered_tool_call_between_turns() -> None:
    memory = MessageWindowChatMemory()
    memory.add("a", [U1, calls("c1"), U2])

    assert memory.get("a") == [U1, U2]
