"""R9: concurrent turns on one conversation don't interleave; sequence numbers stay 1..N.

Every test runs twice (see conftest.py): on PostgreSQL (marked ``postgres``; the repository locks
the conversation row with ``SELECT ... FOR UPDATE``) and on a SQLite file in WAL mode configured
like project/settings.py (``transaction_mode="IMMEDIATE"``: every ``atomic()`` takes the write
lock up front, so writers queue instead of failing with "database is locked").

The requirement: two turns on one conversation at once are serialized or refused cleanly, with no
lost or duplicated sequence numbers.
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import Error as DatabaseError
from django.db import connections

from tool_calling import models, tool
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.exceptions import ToolCallingError
from tool_calling.governance import governed_chat_client
from tool_calling.registry import ToolRegistry
from tool_calling.repositories import DjangoChatMemoryRepository
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backend")]

TOOL_SECONDS = 0.4
"""How long the tool of a turn runs: long enough that unserialized turns overlap."""
JOIN_SECONDS = 60.0
"""A thread still running after this long is reported as a deadlock."""


@tool
def slow_lookup(key: str) -> str:
    """Look a key up slowly (it sleeps, so that two turns running at once overlap)."""
    time.sleep(TOOL_SECONDS)
    return f"value of {key}"


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(slow_lookup, source="tests")
    return registry


def _run_threads(target: Callable[[int], Any], count: int) -> dict[int, BaseException]:
    """Run ``target(index)`` in ``count`` threads; return the exceptions they raised, by index.

    Every thread closes its database connections when it ends (the test database is dropped
    later, and PostgreSQL refuses to drop a database that still has sessions).
    """
    errors: dict[int, BaseException] = {}

    def run(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,), name=f"r9-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, f"threads still running after {JOIN_SECONDS}s (deadlock?): {stuck}"
    return errors


def _format_errors(errors: dict[Any, BaseException]) -> str:
    return "\n".join(
        f"--- {key}:\n" + "".join(traceback.format_exception(exc)) for key, exc in errors.items()
    )


def _assert_sequences(conversation_id: Any) -> list[int]:
    sequences = list(
        models.Message.objects.filter(conversation_id=conversation_id)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert sequences == list(range(1, len(sequences) + 1)), f"gaps or duplicates: {sequences}"
    return sequences


# --- The repository alone ----------------------------------------------------------------------


@pytest.mark.parametrize("new_conversation", [False, True], ids=["existing", "first-write"])
def test_concurrent_appends_get_sequences_1_to_n(new_conversation: bool) -> None:
    """N threads append k batches of two messages each to one conversation at once."""
    threads, appends = 8, 15
    conversation_id = uuid.uuid4()
    if not new_conversation:
        models.Conversation.objects.create(pk=conversation_id)
    # first-write: every thread's first add() races to create the conversation row.
    repository = DjangoChatMemoryRepository()
    barrier = threading.Barrier(threads, timeout=30)

    def append(index: int) -> None:
        barrier.wait()
        for j in range(appends):
            repository.add(
                str(conversation_id),
                [UserMessage(f"{index}:{j}:a"), UserMessage(f"{index}:{j}:b")],
            )

    errors = _run_threads(append, threads)
    assert not errors, "appends failed:\n" + _format_errors(errors)

    assert models.Conversation.objects.filter(pk=conversation_id).count() == 1
    rows = list(
        models.Message.objects.filter(conversation_id=conversation_id)
        .order_by("sequence")
        .values_list("sequence", "text")
    )
    total = threads * appends * 2
    assert len(rows) == total, f"expected {total} rows, got {len(rows)}"
    assert [seq for seq, _ in rows] == list(range(1, total + 1))
    assert len({message for _, message in rows}) == total, "a message was stored twice"
    # Each add() is atomic: its two messages are adjacent, a before b.
    by_text = {message: seq for seq, message in rows}
    for index in range(threads):
        previous = 0
        for j in range(appends):
            a, b = by_text[f"{index}:{j}:a"], by_text[f"{index}:{j}:b"]
            assert b == a + 1, f"batch {index}:{j} was split: a at {a}, b at {b}"
            assert a > previous, f"thread {index}'s batches are out of order"
            previous = a


# --- Whole turns through the governed client ----------------------------------------------------


def _label(row: models.Message) -> str:
    """Which turn stored ``row``: every message of turn X names X (text, call id or answer)."""
    if row.role == models.MessageRole.USER:
        return str(row.text).removeprefix("question ")
    if row.role == models.MessageRole.TOOL:
        return str(row.tool_responses[0]["id"]).removeprefix("call_")
    if row.tool_calls:
        return str(row.tool_calls[0]["id"]).removeprefix("call_")
    return str(row.text).removeprefix("answer ")


def _describe(message: Message) -> str:
    """``user A``, ``calls A``, ``tool A`` or ``answer A``: a chat message and its turn."""
    if isinstance(message, UserMessage):
        return f"user {message.text.removeprefix('question ')}"
    if isinstance(message, ToolResponseMessage):
        return f"tool {message.responses[0].id.removeprefix('call_')}"
    if isinstance(message, AssistantMessage) and message.tool_calls:
        return f"calls {message.tool_calls[0].id.removeprefix('call_')}"
    return f"{type(message).__name__} {str(getattr(message, 'text', '')).removeprefix('answer ')}"


def _transcript(rows: list[models.Message]) -> str:
    lines = []
    for row in rows:
        if row.role == models.MessageRole.TOOL:
            what = f"tool_responses={[r['id'] for r in row.tool_responses]}"
        elif row.tool_calls:
            what = f"tool_calls={[c['id'] for c in row.tool_calls]}"
        else:
            what = repr(row.text)
        lines.append(f"  #{row.sequence:<3} turn {_label(row)}  {row.role:<9} {what}")
    return "\n".join(lines)


class TurnsInterleaved(AssertionError):
    """The messages of concurrent turns were mixed, or one turn's model saw the other's."""


@pytest.mark.parametrize("turns", [2])
def test_concurrent_turns_on_one_conversation_are_serialized_or_refused(turns: int) -> None:
    """Two turns (user → tool call → slow tool → answer) start on one conversation at once."""
    registry = _registry()
    sync_tools(registry)
    conversation = models.Conversation.objects.create(title="R9")
    labels = [chr(ord("A") + i) for i in range(turns)]
    scripted = {
        label: ScriptedChatModel(
            [tool_call("slow_lookup", id=f"call_{label}", key=label), text(f"answer {label}")],
            name=label,
        )
        for label in labels
    }
    replies: dict[str, str | None] = {}
    barrier = threading.Barrier(turns, timeout=30)

    def turn(index: int) -> None:
        label = labels[index]
        client = governed_chat_client(
            conversation=conversation, model=scripted[label], tool_registry=registry
        )
        barrier.wait()
        replies[label] = client.prompt(f"question {label}").call().content()

    errors = {labels[i]: exc for i, exc in _run_threads(turn, turns).items()}

    rows = list(models.Message.objects.filter(conversation=conversation).order_by("sequence"))
    transcript = _transcript(rows)
    sequences = [row.sequence for row in rows]
    assert sequences == list(range(1, len(rows) + 1)), f"gaps or duplicates:\n{transcript}"

    # Refused cleanly: the framework's own error (no database error or crash escaping), and
    # nothing of the refused turn stored.
    leaked = {label: exc for label, exc in errors.items() if isinstance(exc, DatabaseError)}
    assert not leaked, "database errors escaped a turn:\n" + _format_errors(leaked)
    crashed = {label: exc for label, exc in errors.items() if not isinstance(exc, ToolCallingError)}
    assert not crashed, "a turn failed with something else than a refusal:\n" + _format_errors(
        crashed
    )
    done = [label for label in labels if label not in errors]
    assert done, "every turn failed:\n" + _format_errors(errors)

    problems: list[str] = []
    for label in done:
        if replies[label] != f"answer {label}":
            problems.append(f"turn {label} answered {replies[label]!r}")
    stored = [_label(row) for row in rows]
    for label, exc in errors.items():
        assert label not in stored, f"turn {label} was refused ({exc!r}) but left messages behind"
    # No lost message: user, assistant tool call, tool response, answer for every finished turn.
    for label in done:
        assert stored.count(label) == 4, f"turn {label} lost messages:\n{transcript}"
    # Serialized: each turn's messages are contiguous.
    runs = [label for i, label in enumerate(stored) if i == 0 or stored[i - 1] != label]
    if len(runs) != len(set(stored)):
        problems.append(f"the turns interleaved (runs of turns: {'-'.join(runs)})")
    # Each model request of a turn held only complete earlier turns plus the turn's own messages:
    # after the turn's user message, nothing from another turn.
    for label in done:
        for number, request in enumerate(scripted[label].requests, start=1):
            seen = [_describe(message) for message in request.messages]
            own = f"user {label}"
            after = seen[seen.index(own) + 1 :] if own in seen else None
            foreign = after is None or any(not item.endswith(f" {label}") for item in after)
            # From the second request on, the model must get its tool call's result back.
            unanswered = number > 1 and f"tool {label}" not in (after or [])
            if foreign or unanswered:
                problems.append(f"turn {label}'s model request {number} was {seen}")
    # The audit points every execution at the assistant message that asked for it.
    for execution in models.ToolExecution.objects.filter(conversation=conversation):
        if execution.status != models.ExecutionStatus.SUCCEEDED:
            problems.append(f"execution {execution.as_dict()} did not succeed")
        message = execution.assistant_message
        asked = [c["id"] for c in message.tool_calls] if message is not None else []
        if execution.tool_call_id not in asked:
            problems.append(
                f"the audit of {execution.tool_call_id} points at message "
                f"#{message.sequence if message else None}, whose calls are {asked}"
            )
    if problems:
        raise TurnsInterleaved("\n".join(["R9 violated:", *problems, "transcript:", transcript]))
