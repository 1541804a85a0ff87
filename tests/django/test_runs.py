"""Durable turns: a turn driven as Celery steps, eager tier.

Celery runs eagerly (tests.settings), so a whole run happens inside ``start_turn``: the steps,
and the tool-call tasks that queue the next step, run as they are published. The tests compare
runs with the in-process loop (``governed_chat_client``) on the same script: same transcript,
same audit, same endings.
"""

import json
import re
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import override_settings
from kombu.exceptions import OperationalError

from tests.django._tools import registered, tool_calling_settings
from tool_calling import models, runs, tasks, tool
from tool_calling.conversations import ConversationBusyError
from tool_calling.governance import governed_chat_client
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, str]] = []
"""Side effects of the tools below, one entry per run."""


@tool
def counted(key: str) -> str:
    """Count the calls, per key."""
    RAN.append(("counted", key))
    return f"counted {key}"


@tool(return_direct=True)
def direct(key: str) -> str:
    """Answer the user directly."""
    RAN.append(("direct", key))
    return f"direct {key}"


@tool
def explode(reason: str) -> str:
    """Raise an unexpected exception."""
    RAN.append(("explode", reason))
    raise ValueError(reason)


TOOLS = (counted, direct, explode)


@pytest.fixture(autouse=True)
def worker_tools():
    RAN.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


ERROR_ID = re.compile(r"error id [0-9a-f]{12}")


def _same_ids(value):
    """``value`` (JSON) with every error id replaced: each call gets its own (S13)."""
    return json.loads(ERROR_ID.sub("error id <id>", json.dumps(value)))


def transcript(conversation):
    return [
        (m.role, m.text, _same_ids(m.tool_calls), _same_ids(m.tool_responses))
        for m in conversation.messages.order_by("sequence")
    ]


def audit(conversation):
    return [
        (e.tool_call_id, e.tool_name, e.status, e.is_error, bool(e.error_id))
        for e in models.ToolExecution.objects.filter(conversation=conversation).order_by(
            "tool_call_id"
        )
    ]


def in_process(steps, user, text_="Go"):
    """The same turn through the in-process loop, for comparison."""
    from django.conf import settings
    from django.test import override_settings

    conversation = models.Conversation.objects.create(owner=user)
    model = ScriptedChatModel(list(steps))
    # One call at a time: the in-memory test database locks a table that two pool threads
    # write at once ("database table is locked"); the order of the responses is the same.
    current = getattr(settings, "TOOL_CALLING", {})
    one_at_a_time = {
        **current,
        "EXECUTION": {**current.get("EXECUTION", {}), "MAX_CONCURRENT_CALLS": 1},
    }
    with override_settings(TOOL_CALLING=one_at_a_time):
        client = governed_chat_client(user=user, conversation=conversation, model=model)
        answer = client.prompt(text_).call().content()
    return conversation, answer


ONE_ROUND = (
    tool_calls(tool_call("counted", key="a"), tool_call("counted", key="b")),
    text("Done"),
)


def test_a_run_with_one_tool_round_stores_the_same_transcript_as_the_in_process_loop(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    assert (run.status, run.answer, run.rounds, run.error) == ("succeeded", "Done", 2, "")
    assert run.started_at and run.finished_at
    assert RAN == [("counted", "a"), ("counted", "b")]
    rows = models.ToolExecution.objects.filter(run=run).order_by("tool_call_id")
    assert [(r.mode, r.status, r.attempt, r.payload) for r in rows] == [
        ("celery", "succeeded", 1, {}),
        ("celery", "succeeded", 1, {}),
    ]
    RAN.clear()
    reference, answer = in_process(ONE_ROUND, alice)
    assert answer == "Done"
    assert transcript(conversation) == transcript(reference)
    assert audit(conversation) == audit(reference)
    # The conversation is free again.
    conversation.refresh_from_db()
    assert conversation.turn_token == ""


def test_events_are_ordered_and_timestamped(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Go", user=alice)
    events = list(run.events.order_by("sequence"))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.kind for e in events] == [
        "queued",
        "running",
        "model_call",
        "model_message",
        "tool_calls",
        "tool_call_started",
        "tool_call_ended",
        "tool_call_started",
        "tool_call_ended",
        "tool_results",
        "model_call",
        "text_delta",
        "model_message",
        "succeeded",
    ]
    messages = [e.data for e in events if e.kind == "model_message"]
    assert all(m["usage"]["total_tokens"] > 0 for m in messages)
    deltas = [e.data for e in events if e.kind == "text_delta"]
    assert "".join(d["text"] for d in deltas) == "Done"
    assert {d["round"] for d in deltas} == {2}
    assert [(e.data["tool_call_id"], e.data["attempt"]) for e in events[5:8:2]] == [
        ("call_1", 1),
        ("call_2", 1),
    ]
    ended = [e.data for e in events if e.kind == "tool_call_ended"]
    assert [(e["tool_call_id"], e["status"], e["is_error"]) for e in ended] == [
        ("call_1", "succeeded", False),
        ("call_2", "succeeded", False),
    ]
    assert all(isinstance(e["duration_ms"], int) for e in ended)
    assert events[-1].data == {"answer": "Done"}
    assert all(e.created_at for e in events)
    assert [e.created_at for e in events] == sorted(e.created_at for e in events)


def test_return_direct_ends_the_run_as_the_in_process_loop_does(alice, script):
    steps = (tool_calls(tool_call("direct", key="x")),)
    script(*steps)
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    assert (run.status, run.answer, run.finish_reason) == ("succeeded", "direct x", "returnDirect")
    reference, answer = in_process(steps, alice)
    assert answer == "direct x"
    assert transcript(conversation) == transcript(reference)


@override_settings(
    TOOL_CALLING=tool_calling_settings(LIMITS={"MAX_CALLS_PER_TOOL": {"counted": 1}})
)
def test_a_limit_breach_ends_the_run_as_the_in_process_loop_does(alice, script):
    steps = (tool_calls(tool_call("counted", key="a"), tool_call("counted", key="b")),)
    script(*steps)
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    breach = (
        "Tool call limit (1) exceeded for tool 'counted'. No further calls to this tool are "
        "allowed in this turn."
    )
    assert (run.status, run.answer, run.finish_reason) == (
        "succeeded",
        breach,
        "toolCallLimitExceeded",
    )
    assert RAN == [("counted", "a")]
    RAN.clear()
    reference, answer = in_process(steps, alice)
    assert answer == breach
    assert transcript(conversation) == transcript(reference)


def test_a_failing_tool_and_an_unknown_tool_reach_the_model_as_in_process(alice, script):
    steps = (
        tool_calls(tool_call("explode", reason="boom"), tool_call("nope")),
        text("Sorry"),
    )
    model = script(*steps)
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Sorry")
    reference_model = ScriptedChatModel(list(steps))
    reference = models.Conversation.objects.create(owner=alice)
    governed_chat_client(user=alice, conversation=reference, model=reference_model).prompt(
        "Go"
    ).call()
    assert transcript(conversation) == transcript(reference)
    assert audit(conversation) == audit(reference)
    # The model saw the same requests (history, tools offered), each with its own error id.
    assert [_same_ids(repr(r.messages)) for r in model.requests] == [
        _same_ids(repr(r.messages)) for r in reference_model.requests
    ]


def test_a_failed_run_retried_completes_its_recorded_calls_and_never_runs_them_again(alice, script):
    """A run that failed after its calls ran is retried from the calls it recorded (soak)."""
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    manager = "tool_calling.governance.GovernedToolCallingManager.complete_tool_calls"
    with mock.patch(manager, side_effect=RuntimeError("database went away")):
        run = runs.start_turn(conversation, "Go", user=alice)
    run.refresh_from_db()
    assert run.status == "failed" and run.error.startswith("Step 2 failed (RuntimeError)")
    assert sorted(RAN) == [("counted", "a"), ("counted", "b")]
    runs.retry_run(run)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    # Completed from the recorded calls, not planned and run again.
    assert sorted(RAN) == [("counted", "a"), ("counted", "b")]
    assert models.ToolExecution.objects.filter(run=run).count() == 2


def test_cancel_stops_the_run_at_its_next_step(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(runs.lifecycle, "publish"):  # queued, not sent yet
        run = runs.start_turn(conversation, "Go", user=alice)
    assert runs.cancel_run(run) is True
    tasks.run_step(str(run.pk))
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at
    assert RAN == []
    assert [m.role for m in conversation.messages.all()] == ["user"]
    assert runs.cancel_run(run) is False  # ended already
    conversation.refresh_from_db()
    assert conversation.turn_token == ""


def test_a_second_turn_while_a_run_holds_the_conversation_is_refused(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(runs.lifecycle, "publish"):
        runs.start_turn(conversation, "Go", user=alice)
    with pytest.raises(ConversationBusyError):
        runs.start_turn(conversation, "Again", user=alice)
    with pytest.raises(ConversationBusyError):
        in_process_client = governed_chat_client(
            user=alice, conversation=conversation, model=ScriptedChatModel([text("x")])
        )
        in_process_client.prompt("x").call()


def test_redis_down_at_start_saves_the_message_and_a_failed_run_that_can_be_retried(alice, script):
    """The broker down at the start: a clear error, nothing lost, the run retried completes."""
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(
        tasks.run_step, "apply_async", side_effect=OperationalError("Connection refused")
    ):
        with pytest.raises(runs.RunQueueError) as raised:
            runs.start_turn(conversation, "Go", user=alice)
    run = raised.value.run
    assert str(raised.value) == (
        "The turn could not be queued: the message broker is unavailable (OperationalError). "
        "The message and the run are saved; retry the run."
    )
    run.refresh_from_db()
    assert run.status == "failed" and run.error == str(raised.value)
    assert transcript(conversation) == [("user", "Go", [], [])]
    conversation.refresh_from_db()
    assert conversation.turn_token == ""  # the user is not locked out meanwhile

    runs.retry_run(run)
    run.refresh_from_db()
    assert (run.status, run.answer, run.error) == ("succeeded", "Done", "")
    assert [m.role for m in conversation.messages.order_by("sequence")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    kinds = list(run.events.order_by("sequence").values_list("kind", flat=True))
    assert kinds[:3] == ["queued", "failed", "retried"] and kinds[-1] == "succeeded"


def test_a_step_delivered_again_does_nothing_once_the_run_ended(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    run = runs.start_turn(conversation, "Go", user=alice)
    before = transcript(conversation)
    tasks.run_step(str(run.pk))
    tasks.run_step(str(run.pk))
    assert transcript(conversation) == before
    assert RAN == [("counted", "a"), ("counted", "b")]


def test_a_worker_restarted_between_steps_continues_without_rerunning_tools(alice, script):
    """Every message exactly once, every finished tool run once."""
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    # The calls ran on workers and ended, but the step they queued was lost with its worker.
    with mock.patch.object(runs.lifecycle, "publish") as publish:
        run = runs.start_turn(conversation, "Go", user=alice)
        tasks.run_step(str(run.pk))  # model round, then the calls are planned and sent
    assert publish.call_count == 2  # the first step's message (run by hand), the next one lost
    assert RAN == [("counted", "a"), ("counted", "b")]
    run.refresh_from_db()
    assert run.status == "running" and run.waiting_for_id is None
    # A redelivery (or the sweeper) runs the step again: it continues from the database.
    tasks.run_step(str(run.pk))
    tasks.run_step(str(run.pk))
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Done")
    assert RAN == [("counted", "a"), ("counted", "b")]
    assert [m.role for m in conversation.messages.order_by("sequence")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert models.ToolExecution.objects.filter(run=run).count() == 2


def test_a_step_that_died_after_the_model_call_is_taken_over_and_stores_each_message_once(
    alice, script
):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(runs.lifecycle, "publish"):
        run = runs.start_turn(conversation, "Go", user=alice)
    # The worker dies right after the model's message was stored (before planning the calls).
    with mock.patch.object(runs.steps, "_decide_and_plan", side_effect=SystemExit):
        with pytest.raises(SystemExit):
            tasks.run_step(str(run.pk))
    assert [m.role for m in conversation.messages.order_by("sequence")] == ["user", "assistant"]
    run.refresh_from_db()
    assert run.status == "running"
    tasks.run_step(str(run.pk))  # redelivered
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Done")
    assert RAN == [("counted", "a"), ("counted", "b")]
    assert [m.role for m in conversation.messages.order_by("sequence")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_a_step_held_by_a_live_lease_is_not_run_twice(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(runs.lifecycle, "publish"):
        run = runs.start_turn(conversation, "Go", user=alice)
    assert runs.lifecycle.claim_step(run.pk) == 1
    tasks.run_step(str(run.pk))  # a duplicate delivery while step 1 runs
    assert [m.role for m in conversation.messages.all()] == ["user"]


def test_the_sweeper_queues_the_step_of_a_run_whose_calls_ended(alice, script):
    script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(runs.lifecycle, "publish"):
        run = runs.start_turn(conversation, "Go", user=alice)
        with mock.patch.object(runs.lifecycle, "wake"):  # the wake-up is lost
            tasks.run_step(str(run.pk))
    run.refresh_from_db()
    assert run.waiting_for_id is not None
    tasks.sweep_tool_executions()
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Done")


def test_a_turn_started_in_a_rolled_back_transaction_never_runs(alice, script):
    model = script(*ONE_ROUND)
    conversation = models.Conversation.objects.create(owner=alice)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            runs.start_turn(conversation, "Go", user=alice)
            raise RuntimeError
    assert model.remaining_steps == 2
    assert not models.Run.objects.exists()
