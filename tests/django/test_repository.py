"""DjangoChatMemoryRepository: every message kind stored in order and loaded back identical."""

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tool_calling import models
from tool_calling.core.chat.memory import MessageWindowChatMemory
from tool_calling.core.chat.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.repositories import DjangoChatMemoryRepository, message_to_fields

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]

CONVERSATION = [
    SystemMessage("You are terse."),
    UserMessage("Weather in Oslo and Bergen? Ünïcödé ✓"),
    AssistantMessage(
        None,
        [
            ToolCall("call_b", "get_weather", '{"city": "Oslo"}'),
            ToolCall("call_a", "get_weather", '{"city":"Bergen","unit":"celsius"}'),
            ToolCall("call_c", "delete_all", ""),
        ],
        {"id": "chatcmpl-1", "role": "assistant", "nested": {"list": [1, 2.5, None, True]}},
    ),
    ToolResponseMessage(
        [
            ToolResponse("call_b", "get_weather", '{"temperature": 3}'),
            ToolResponse("call_a", "get_weather", "Sunny", is_error=False),
            ToolResponse("call_c", "delete_all", "Unknown or disabled tool", is_error=True),
        ],
        {"batch": 1},
    ),
    AssistantMessage("Oslo 3°C, Bergen sunny.", [], {"id": "chatcmpl-2", "refusal": None}),
    AssistantMessage("Let me check.", [ToolCall("call_d", "get_time", "{}")]),
    ToolResponseMessage([ToolResponse("call_d", "get_time", "", is_error=False)]),
    AssistantMessage(""),
    AssistantMessage(None),
]


@pytest.fixture
def repo():
    return DjangoChatMemoryRepository()


@pytest.fixture
def conversation():
    return models.Conversation.objects.create(title="test")


def test_every_message_kind_round_trips_identical(repo, conversation):
    repo.add(str(conversation.pk), CONVERSATION)
    loaded = repo.find_by_conversation_id(str(conversation.pk))
    assert loaded == CONVERSATION
    # Dataclass equality would not catch a subclass or a lost None-vs-"" distinction.
    assert [type(m) for m in loaded] == [type(m) for m in CONVERSATION]
    assert [m.text for m in loaded] == [m.text for m in CONVERSATION]


def test_rows_hold_role_sequence_calls_and_responses(repo, conversation):
    repo.add(str(conversation.pk), CONVERSATION[:4])
    rows = list(conversation.messages.order_by("sequence"))
    assert [(r.sequence, r.role) for r in rows] == [
        (1, "system"),
        (2, "user"),
        (3, "assistant"),
        (4, "tool"),
    ]
    assert rows[2].text is None
    assert rows[2].tool_calls == [
        {"id": "call_b", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"id": "call_a", "name": "get_weather", "arguments": '{"city":"Bergen","unit":"celsius"}'},
        {"id": "call_c", "name": "delete_all", "arguments": ""},
    ]
    assert rows[3].tool_responses[2] == {
        "id": "call_c",
        "name": "delete_all",
        "response_data": "Unknown or disabled tool",
        "is_error": True,
    }
    assert rows[3].metadata == {"batch": 1}


def test_appends_continue_the_sequence(repo, conversation):
    conversation_id = str(conversation.pk)
    repo.add(conversation_id, CONVERSATION[:2])
    repo.add(conversation_id, [CONVERSATION[2]])
    repo.add(conversation_id, CONVERSATION[3:])
    repo.add(conversation_id, [])
    sequences = list(conversation.messages.values_list("sequence", flat=True))
    assert sequences == list(range(1, len(CONVERSATION) + 1))
    assert repo.find_by_conversation_id(conversation_id) == CONVERSATION


def test_limit_returns_the_last_messages_in_order(repo, conversation):
    repo.add(str(conversation.pk), CONVERSATION)
    assert repo.find_by_conversation_id(str(conversation.pk), limit=3) == CONVERSATION[-3:]
    assert repo.find_by_conversation_id(str(conversation.pk), limit=1) == CONVERSATION[-1:]
    assert repo.find_by_conversation_id(str(conversation.pk), limit=100) == CONVERSATION


def test_a_uuid_object_works_like_its_text(repo, conversation):
    repo.add(conversation.pk, CONVERSATION[:2])
    assert repo.find_by_conversation_id(str(conversation.pk).upper()) == CONVERSATION[:2]


def test_a_new_uuid_creates_the_conversation_without_owner(repo):
    conversation_id = str(uuid.uuid4())
    repo.add(conversation_id, [UserMessage("hi")])
    conversation = models.Conversation.objects.get(pk=conversation_id)
    assert conversation.owner is None
    assert repo.find_conversation_ids() == [conversation_id]


def test_an_unknown_conversation_has_no_messages(repo):
    assert repo.find_by_conversation_id(str(uuid.uuid4())) == []


def test_conversations_do_not_mix(repo):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    repo.add(first, [UserMessage("one")])
    repo.add(second, [UserMessage("two")])
    repo.add(first, [AssistantMessage("uno")])
    assert repo.find_by_conversation_id(first) == [UserMessage("one"), AssistantMessage("uno")]
    assert repo.find_by_conversation_id(second) == [UserMessage("two")]
    assert sorted(repo.find_conversation_ids()) == sorted([first, second])


def test_save_all_replaces_and_delete_keeps_the_conversation(repo, conversation):
    conversation_id = str(conversation.pk)
    repo.add(conversation_id, CONVERSATION)
    repo.save_all(conversation_id, [UserMessage("again")])
    assert repo.find_by_conversation_id(conversation_id) == [UserMessage("again")]
    assert list(conversation.messages.values_list("sequence", flat=True)) == [1]

    repo.delete_by_conversation_id(conversation_id)
    assert repo.find_by_conversation_id(conversation_id) == []
    assert models.Conversation.objects.filter(pk=conversation.pk).exists()


def test_appending_touches_updated_at(repo, conversation):
    before = conversation.updated_at
    repo.add(str(conversation.pk), [UserMessage("hi")])
    conversation.refresh_from_db()
    assert conversation.updated_at > before


@pytest.mark.parametrize("bad", ["default", "not-a-uuid", "", "123"])
def test_an_id_that_is_not_a_uuid_raises_a_clear_value_error(repo, bad):
    message = (
        f"Conversation id {bad!r} is not a UUID; conversations stored in the database are "
        "identified by their UUID (Conversation.id)."
    )
    for call in (
        lambda: repo.find_by_conversation_id(bad),
        lambda: repo.add(bad, [UserMessage("hi")]),
        lambda: repo.save_all(bad, []),
        lambda: repo.delete_by_conversation_id(bad),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            call()
    assert models.Message.objects.count() == 0


def test_an_unknown_message_type_is_refused():
    class Strange(UserMessage):
        pass

    class Other:
        pass

    assert message_to_fields(Strange("x"))["role"] == "user"
    with pytest.raises(TypeError, match=re.escape("Cannot store a Other")):
        message_to_fields(Other())


def test_window_memory_over_the_repository_keeps_tool_exchanges_whole(repo, conversation):
    memory = MessageWindowChatMemory(repo, max_messages=4)
    memory.add(str(conversation.pk), CONVERSATION[1:7])
    # The last four start with tool responses whose call fell outside: they are dropped.
    assert memory.get(str(conversation.pk)) == CONVERSATION[4:7]


R9_SCRIPT = """
import threading, uuid
import django
django.setup()
from django.core.management import call_command
from django.db import connection
from tool_calling import models
from tool_calling.core.chat.messages import UserMessage
from tool_calling.repositories import DjangoChatMemoryRepository

call_command("migrate", verbosity=0)
repo = DjangoChatMemoryRepository()
conversation_id = str(models.Conversation.objects.create().pk)
connection.close()
errors = []
start = threading.Barrier(4)

def append(n):
    try:
        start.wait()
        for i in range(10):
            repo.add(conversation_id, [UserMessage(f"{n}-{i}"), UserMessage(f"{n}-{i}b")])
    except Exception as exc:
        errors.append(repr(exc))
    finally:
        connection.close()

threads = [threading.Thread(target=append, args=(n,)) for n in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
rows = list(models.Message.objects.filter(conversation_id=conversation_id).order_by("sequence"))
print(errors)
print([row.sequence for row in rows] == list(range(1, 81)))
# Each add() is one block: a thread's two messages are never split by another thread's.
print(len(rows) == 80 and all(rows[i].text + "b" == rows[i + 1].text for i in range(0, 80, 2)))
"""


def test_concurrent_appends_on_file_sqlite_never_interleave(tmp_path):
    """R9: appends from four threads to one conversation are serialized.

    Runs the example project's own SQLite configuration (a file, WAL, BEGIN IMMEDIATE) in a
    subprocess: the in-memory test database shares one cache between threads and reports
    "table is locked" instead of waiting. PostgreSQL is covered by tests/postgres.
    """
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_DEBUG": "true",
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [sys.executable, "-c", R9_SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "True", "True"]
