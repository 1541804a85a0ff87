"""Statement budgets of the stored paths: each test lists every statement it allows.

Counted: every SQL statement besides transaction control (BEGIN, COMMIT, SAVEPOINT, RELEASE,
ROLLBACK), as ``(verb, table)``. A new statement on one of these paths fails its test until the
list says why it is needed. The budget for a stored turn with one tool round is 14.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from tests.django._tools import chat_model, registered, tool_calling_settings
from tool_calling import (
    AssistantMessage,
    ToolCall,
    ToolContext,
    UserMessage,
    models,
    runs,
    tasks,
    tool,
)
from tool_calling.calls import dispatch, policies
from tool_calling.calls.executors import CeleryToolExecutor
from tool_calling.governance import governed_chat_client
from tool_calling.registry import registry
from tool_calling.repositories import DjangoChatMemoryRepository
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")


@tool
def budget_add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def mask(text, *, tool_name, field):
    """An audit redactor that keeps no number a tool returned."""
    return re.sub(r"\d+", "[number]", text) if field == "result" else text


@pytest.fixture(autouse=True)
def budget_tools():
    with registered(budget_add):
        yield


@pytest.fixture(autouse=True)
def _policies_read():
    """The decision policies as a running process has them: read once, kept for seconds.

    Each budget is the steady state; the one read of the policies per process and
    ``POLICY_CACHE_SECONDS`` is counted in tests/django/test_confirmation.py.
    """
    policies.policy_deciders("budget_add", {})


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


def _statement(sql: str) -> tuple[str, str]:
    verb = sql.split(None, 1)[0].upper()
    if verb == "SELECT":
        sql = _top_level(sql)  # the table of the query, not of a subquery in its columns
    pattern = {
        "SELECT": r'\bFROM "(\w+)"',
        "INSERT": r'^INSERT INTO "(\w+)"',
        "UPDATE": r'^UPDATE "(\w+)"',
        "DELETE": r'^DELETE FROM "(\w+)"',
    }[verb]
    table = re.search(pattern, sql)
    assert table is not None, sql
    return verb, table.group(1).removeprefix("tool_calling_")


def _top_level(sql: str) -> str:
    """``sql`` without what stands in parentheses."""
    kept, depth = [], 0
    for char in sql:
        depth += char == "("
        if depth == 0:
            kept.append(char)
        depth -= char == ")"
    return "".join(kept)


@contextmanager
def statements():
    """Collects the statements run inside the block, as ``(verb, table)``, in order."""
    found: list[tuple[str, str]] = []
    with CaptureQueriesContext(connection) as captured:
        yield found
    for query in captured.captured_queries:
        sql = query["sql"].strip()
        if sql.split(None, 1)[0].upper() not in TRANSACTION_CONTROL:
            found.append(_statement(sql))


STORED_TURN = [
    ("SELECT", "tool"),  # the turn's snapshot of the tools the user may use (one query)
    ("UPDATE", "conversation"),  # the claim: two turns never interleave (R9)
    ("SELECT", "message"),  # the memory window, read once a turn
    ("INSERT", "message"),  # the user's message
    ("INSERT", "message"),  # the model's message with the tool call
    ("SELECT", "tool"),  # the re-check of the tool at call time (S2)
    ("INSERT", "toolexecution"),  # the audit row, running
    ("UPDATE", "toolexecution"),  # ... and how the call ended
    ("INSERT", "message"),  # the tool's response
    ("INSERT", "message"),  # the answer
    ("UPDATE", "conversation"),  # the claim ends
]


def _stored_turn(user, conversation):
    model = ScriptedChatModel([tool_call("budget_add", a=1, b=2), text("3")])
    with statements() as found:
        client = governed_chat_client(user=user, conversation=conversation, model=model)
        assert client.prompt("Add 1 and 2").call().content() == "3"
    return found


def test_a_stored_turn_with_one_tool_round(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    assert _stored_turn(alice, conversation) == STORED_TURN
    assert len(STORED_TURN) <= 14


def test_a_stored_turn_with_augmentation_costs_the_same_statements(alice):
    """The reason is stored in the audit row the call writes anyway."""
    models.Tool.objects.filter(name="budget_add").update(augment_arguments=True)
    conversation = models.Conversation.objects.create(owner=alice)
    reason = {"inner_thought": "The user asked.", "confidence": "high"}
    model = ScriptedChatModel([tool_call("budget_add", a=1, b=2, **reason), text("3")])
    with statements() as found:
        client = governed_chat_client(user=alice, conversation=conversation, model=model)
        assert client.prompt("Add 1 and 2").call().content() == "3"
    assert found == STORED_TURN
    assert models.ToolExecution.objects.get().augmented_arguments == reason


def test_a_stored_turn_costs_the_same_statements_however_long_the_history(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    DjangoChatMemoryRepository().add(
        str(conversation.pk),
        [UserMessage(f"q{n}") if n % 2 == 0 else AssistantMessage(f"a{n}") for n in range(300)],
    )
    assert _stored_turn(alice, conversation) == STORED_TURN


# --- a tool call on a Celery worker ---------------------------------------------------------


def _recorded_call(user):
    """A call submitted by the waiting executor; its task is not sent (the worker runs below)."""
    with mock.patch.object(dispatch, "dispatch", return_value=True):
        with statements() as web_side:
            future = CeleryToolExecutor(user=user).submit_tool_call(
                registry.get("budget_add"),
                ToolCall("call_1", "budget_add", '{"a": 1, "b": 2}'),
                ToolContext(),
            )
    return future, web_side


def test_a_celery_tool_call_on_the_web_side(alice):
    future, submitted = _recorded_call(alice)
    tasks.execute_tool_call(future.ref.execution_id)
    with statements() as waited:
        outcome = future.result()
    assert outcome.text == "3"
    assert submitted == [
        ("SELECT", "tool"),  # the tool's row (a governed turn passes its snapshot instead)
        ("INSERT", "toolexecution"),  # the call, pending, with its exact arguments
    ]
    assert waited == [
        ("SELECT", "toolexecution"),  # the poll that finds it ended, with its exact result
    ]


def test_a_celery_tool_call_whose_result_the_audit_redacts(alice):
    """The exact text waits in the working data for the caller, who then drops it."""
    with override_settings(
        TOOL_CALLING=tool_calling_settings(
            AUDIT_REDACTOR="tests.django.test_statement_budgets.mask"
        )
    ):
        future, _ = _recorded_call(alice)
        tasks.execute_tool_call(future.ref.execution_id)
        with statements() as waited:
            outcome = future.result()
    assert outcome.text == "3"
    assert models.ToolExecution.objects.get().result == "[number]"
    assert waited == [
        ("SELECT", "toolexecution"),  # the poll that finds it ended
        ("UPDATE", "toolexecution"),  # the exact result, not redacted, leaves the database
    ]


def test_a_celery_tool_call_on_the_worker_side(alice):
    future, _ = _recorded_call(alice)
    with statements() as worker_side:
        tasks.execute_tool_call(future.ref.execution_id)
    assert worker_side == [
        ("SELECT", "toolexecution"),  # the call, with the re-check of its tool at call time (S2)
        ("UPDATE", "toolexecution"),  # the claim of attempt 1
        ("UPDATE", "toolexecution"),  # the outcome, fenced by the attempt
    ]


# --- a durable run's steps --------------------------------------------------------------------

EVENT = [("INSERT", "runevent")]  # the event, numbered by the INSERT itself (SQLite)
EVENT_AND_RUN = [("UPDATE", "run"), ("INSERT", "runevent")]  # the run's fields set with it


def test_the_steps_of_a_run_with_one_tool_round(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    script = ScriptedChatModel([tool_calls(tool_call("budget_add", a=1, b=2)), text("3")])
    celery = tool_calling_settings(EXECUTION={"MODE": "celery"})
    with chat_model(script), override_settings(TOOL_CALLING=celery):
        with mock.patch.object(runs.lifecycle, "publish"), mock.patch.object(dispatch, "dispatch"):
            run = runs.start_turn(conversation, "Add 1 and 2", user=alice)
            with statements() as first:
                tasks.run_step(str(run.pk))
            (execution,) = models.ToolExecution.objects.filter(run=run)
        with mock.patch.object(runs.lifecycle, "publish"):
            tasks.execute_tool_call(execution.pk)  # the worker; its end wakes the run
        with statements() as second:
            tasks.run_step(str(run.pk))
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "3")
    step_start = [
        ("SELECT", "run"),  # where the run is
        ("UPDATE", "run"),  # the step's lease (the first step also begins the run)
    ]
    stage = [("SELECT", "run")]  # each stage reads the run again (a cancel request?)
    state = [
        ("SELECT", "tool"),  # the step's snapshot of the tools
        ("SELECT", "message"),  # the turn's messages, read once a step
    ]
    model_round = [
        *EVENT_AND_RUN,  # model_call (and the round count)
        ("SELECT", "message"),  # the memory window
        ("INSERT", "message"),  # the model's message
    ]
    model_message = EVENT_AND_RUN  # model_message (and the finish reason)
    text_delta = EVENT  # the streamed text (at most one per 0.25 s)
    assert first == [
        *step_start,
        *EVENT,  # running
        *stage,
        *state,
        *model_round,
        *model_message,
        *stage,
        ("INSERT", "toolexecution"),  # the call, pending, for a worker
        ("UPDATE", "run"),  # the batch's plan; the step lets go of the run
        *EVENT,  # tool_calls
        ("UPDATE", "run"),  # the step's lease ends
    ]
    assert second == [
        *step_start,
        *stage,
        *state,
        ("SELECT", "toolexecution"),  # the batch's outcomes
        ("UPDATE", "toolexecution"),  # their exact texts leave the database
        ("INSERT", "message"),  # the tool responses
        *EVENT_AND_RUN,  # tool_results (and the batch's plan goes)
        *stage,
        *model_round,
        *text_delta,
        *model_message,
        *stage,
        ("UPDATE", "run"),  # succeeded
        ("UPDATE", "conversation"),  # the claim ends
        *EVENT,  # succeeded
        ("UPDATE", "run"),  # the step's lease ends
    ]


# --- a stored turn with tool search ------------------------------------------------------------

STORED_TURN_WITH_SEARCH = [
    ("SELECT", "tool"),  # the turn's snapshot of the tools the user may use (one query)
    ("UPDATE", "conversation"),  # the claim: two turns never interleave (R9)
    ("SELECT", "discoveredtool"),  # what the conversation found before: read once a turn
    ("SELECT", "message"),  # the memory window, read once a turn
    ("INSERT", "message"),  # the user's message
    ("INSERT", "message"),  # the model's message with the search call
    ("INSERT", "toolexecution"),  # the search's audit row, running (it has no Tool to re-check)
    ("INSERT", "discoveredtool"),  # what it found, one upsert for all of them
    ("UPDATE", "toolexecution"),  # ... and how the search ended
    ("INSERT", "message"),  # the search's response
    ("INSERT", "message"),  # the model's message with the call of the tool found
    ("SELECT", "tool"),  # the re-check of the tool at call time (S2)
    ("INSERT", "toolexecution"),  # the audit row, running
    ("UPDATE", "toolexecution"),  # ... and how the call ended
    ("INSERT", "message"),  # the tool's response
    ("INSERT", "message"),  # the answer
    ("UPDATE", "conversation"),  # the claim ends
]
"""A stored turn with one search round, then one tool round: the search round costs the turn
six statements (its audit row twice, the finds, its two messages, the read of earlier finds)."""


def test_a_stored_turn_that_searches_then_calls_the_tool_it_found(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    model = ScriptedChatModel(
        [
            tool_call("tool_search", query="add numbers"),
            tool_call("budget_add", a=1, b=2),
            text("3"),
        ]
    )
    searching = tool_calling_settings(TOOL_SEARCH={"ENABLED": True, "THRESHOLD": 0})
    with override_settings(TOOL_CALLING=searching), statements() as found:
        client = governed_chat_client(user=alice, conversation=conversation, model=model)
        assert client.prompt("Add 1 and 2").call().content() == "3"
    assert found == STORED_TURN_WITH_SEARCH
    assert len(STORED_TURN_WITH_SEARCH) == len(STORED_TURN) + 6


def test_the_step_of_a_run_that_searches(alice):
    conversation = models.Conversation.objects.create(owner=alice)
    script = ScriptedChatModel(
        [tool_calls(tool_call("tool_search", query="add numbers")), text("found it")]
    )
    settings = tool_calling_settings(
        EXECUTION={"MODE": "celery"}, TOOL_SEARCH={"ENABLED": True, "THRESHOLD": 0}
    )
    with chat_model(script), override_settings(TOOL_CALLING=settings):
        with mock.patch.object(runs.lifecycle, "publish"), mock.patch.object(dispatch, "dispatch"):
            run = runs.start_turn(conversation, "Add 1 and 2", user=alice)
            with statements() as step:
                tasks.run_step(str(run.pk))
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "found it")
    stage = [("SELECT", "run")]
    assert step == [
        ("SELECT", "run"),  # where the run is
        ("UPDATE", "run"),  # the step's lease; the run begins
        *EVENT,  # running
        *stage,
        ("SELECT", "tool"),  # the step's snapshot of the tools
        ("SELECT", "message"),  # the turn's messages, read once a step
        *EVENT_AND_RUN,  # model_call
        ("SELECT", "discoveredtool"),  # what the conversation found: read once a step
        ("SELECT", "message"),  # the memory window
        ("INSERT", "message"),  # the model's message with the search call
        *EVENT_AND_RUN,  # model_message
        *stage,
        ("INSERT", "toolexecution"),  # the search runs in the step: its audit row, running
        ("INSERT", "discoveredtool"),  # what it found
        ("UPDATE", "toolexecution"),  # how it ended (its exact outcome kept for the batch)
        ("UPDATE", "run"),  # the batch's plan; nothing runs on a worker, the step goes on
        *EVENT,  # tool_calls
        *EVENT,  # tool_call_started (on commit)
        *EVENT,  # tool_call_ended (on commit)
        ("SELECT", "toolexecution"),  # the receiver: does a call of the batch still run?
        ("UPDATE", "run"),  # ... no: wake the run (nothing waits: the step goes on itself)
        *stage,
        ("SELECT", "toolexecution"),  # the batch's outcomes
        ("UPDATE", "toolexecution"),  # their exact texts leave the database
        ("INSERT", "message"),  # the search's response
        *EVENT_AND_RUN,  # tool_results
        *stage,
        *EVENT_AND_RUN,  # model_call
        ("INSERT", "message"),  # the answer (the finds and the window are known already)
        *EVENT,  # text_delta
        *EVENT_AND_RUN,  # model_message
        *stage,
        ("UPDATE", "run"),  # succeeded
        ("UPDATE", "conversation"),  # the claim ends
        *EVENT,  # succeeded
        ("UPDATE", "run"),  # the step's lease ends
    ]
