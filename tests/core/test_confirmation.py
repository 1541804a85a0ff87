"""Tool call confirmation in the core: a reply with a call to confirm runs nothing until decided."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tool_calling import (
    ChatClient,
    DefaultToolCallingManager,
    PendingToolCall,
    Prompt,
    ToolCallConfirmationRequiredError,
    ToolCallDecision,
    ToolCallLimitBehavior,
    ToolCallLimits,
    ToolMetadata,
    ToolNameConfirmationPolicy,
    ToolResponseMessage,
    UserMessage,
    tool,
    tool_callbacks,
)
from tool_calling.exceptions import ToolArgumentsError, ToolDefinitionError
from tool_calling.testing import ScriptedChatModel, text, tool_call

from ._builders import call, prompt_with, response_with

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> Iterator[None]:
    ran.clear()
    yield
    ran.clear()


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(f"delete_file({path})")
    return f"deleted {path}"


@tool(requires_confirmation=lambda args: args["amount"] > 100)
def refund_order(order_id: str, amount: int) -> str:
    """Refund an order."""
    ran.append(f"refund_order({order_id}, {amount})")
    return f"refunded {amount} on {order_id}"


@tool
def get_invoice(order_id: str) -> str:
    """Return an order's invoice."""
    ran.append(f"get_invoice({order_id})")
    return f"invoice of {order_id}"


TOOLS = tool_callbacks(delete_file, refund_order, get_invoice)


def _texts(result: Any) -> list[tuple[str, str, bool]]:
    last = result.conversation_history[-1]
    assert isinstance(last, ToolResponseMessage)
    return [(r.id, r.response_data, r.is_error) for r in last.responses]


def test_a_call_to_confirm_stops_the_whole_reply_before_anything_runs() -> None:
    """No call of the reply runs, not even the ones that need no confirmation."""
    reply = response_with(
        call("get_invoice", '{"order_id": "A1"}', id="c1"),
        call("delete_file", '{"path": "/tmp/x"}', id="c2"),
    )
    with pytest.raises(ToolCallConfirmationRequiredError) as info:
        DefaultToolCallingManager().execute_tool_calls(prompt_with(TOOLS), reply)
    assert ran == []
    assert [p.tool_call.id for p in info.value.pending] == ["c2"]
    assert info.value.pending[0].definition == delete_file.__tool_spec__.definition
    assert str(info.value) == ("Tool calls wait for the user's confirmation: 'delete_file' (c2)")
    assert info.value.assistant == reply.result.output


def test_the_condition_reads_the_arguments() -> None:
    """``amount > 100`` asks for 250 and lets 50 run."""
    manager = DefaultToolCallingManager()
    small = response_with(call("refund_order", '{"order_id": "A1", "amount": 50}', id="s"))
    result = manager.execute_tool_calls(prompt_with(TOOLS), small)
    assert _texts(result) == [("s", "refunded 50 on A1", False)]
    big = response_with(call("refund_order", '{"order_id": "A1", "amount": 250}', id="b"))
    with pytest.raises(ToolCallConfirmationRequiredError) as info:
        manager.execute_tool_calls(prompt_with(TOOLS), big)
    assert [p.tool_call.id for p in info.value.pending] == ["b"]
    assert ran == ["refund_order(A1, 50)"]


def test_a_condition_that_raises_asks_for_confirmation() -> None:
    """A test that cannot be answered does not let the call through."""

    @tool(requires_confirmation=lambda args: args["missing"] > 1)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append("pay")
        return "paid"

    with pytest.raises(ToolCallConfirmationRequiredError):
        DefaultToolCallingManager().execute_tool_calls(
            prompt_with(tool_callbacks(pay)), response_with(call("pay", '{"amount": 1}'))
        )
    assert ran == []


def test_decisions_run_the_batch_as_decided_in_call_order() -> None:
    """Allow, allow with edited arguments, deny with a message: one decision per call."""
    prompt = prompt_with(TOOLS)
    reply = response_with(
        call("delete_file", '{"path": "/a"}', id="c1"),
        call("get_invoice", '{"order_id": "A1"}', id="c2"),
        call("refund_order", '{"order_id": "A1", "amount": 500}', id="c3"),
        call("delete_file", '{"path": "/b"}', id="c4"),
    )
    decisions = [
        ToolCallDecision.deny("c4", "Keep /b: the user needs it."),
        ToolCallDecision.allow("c3", {"order_id": "A1", "amount": 120}),
        ToolCallDecision.allow("c1"),
    ]
    result = DefaultToolCallingManager().execute_tool_calls(prompt, reply, decisions)
    assert _texts(result) == [
        ("c1", "deleted /a", False),
        ("c2", "invoice of A1", False),
        ("c3", "refunded 120 on A1", False),
        ("c4", "Keep /b: the user needs it.", True),
    ]
    assert sorted(ran) == ["delete_file(/a)", "get_invoice(A1)", "refund_order(A1, 120)"]
    # The history shows the arguments the call ran with, so the model is not misled.
    assistant = result.conversation_history[-2]
    assert [c.arguments for c in assistant.tool_calls] == [
        '{"path": "/a"}',
        '{"order_id": "A1"}',
        '{"order_id":"A1","amount":120}',
        '{"path": "/b"}',
    ]
    assert result.return_direct is False


def test_a_denial_without_a_message_tells_the_model_what_happened() -> None:
    reply = response_with(call("delete_file", '{"path": "/a"}', id="c1"))
    result = DefaultToolCallingManager().execute_tool_calls(
        prompt_with(TOOLS), reply, [ToolCallDecision.deny("c1")]
    )
    assert _texts(result) == [
        (
            "c1",
            "The user declined this call of tool 'delete_file'; it was not made. Do not call it "
            "again with the same arguments unless the user asks for it.",
            True,
        )
    ]
    assert ran == []


def test_a_call_still_undecided_keeps_the_batch_waiting() -> None:
    """Deciding one of two waiting calls is not enough: nothing runs, the other is listed."""
    reply = response_with(
        call("delete_file", '{"path": "/a"}', id="c1"),
        call("delete_file", '{"path": "/b"}', id="c2"),
    )
    with pytest.raises(ToolCallConfirmationRequiredError) as info:
        DefaultToolCallingManager().execute_tool_calls(
            prompt_with(TOOLS), reply, [ToolCallDecision.allow("c1")]
        )
    assert [p.tool_call.id for p in info.value.pending] == ["c2"]
    assert ran == []


def test_edited_arguments_are_validated_before_anything_runs() -> None:
    reply = response_with(
        call("get_invoice", '{"order_id": "A1"}', id="c1"),
        call("refund_order", '{"order_id": "A1", "amount": 500}', id="c2"),
    )
    bad = ToolCallDecision.allow("c2", {"order_id": "A1", "amount": "lots"})
    with pytest.raises(ToolArgumentsError) as info:
        DefaultToolCallingManager().execute_tool_calls(prompt_with(TOOLS), reply, [bad])
    assert str(info.value).startswith("The edited arguments of tool call 'c2' are not valid: ")
    assert "amount" in str(info.value)
    assert ran == []


def test_decisions_must_name_calls_of_the_reply_once() -> None:
    reply = response_with(call("delete_file", '{"path": "/a"}', id="c1"))
    manager = DefaultToolCallingManager()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "The decision for tool call 'zz' names no call of the model's reply (its calls: c1)."
        ),
    ):
        manager.execute_tool_calls(prompt_with(TOOLS), reply, [ToolCallDecision.allow("zz")])
    with pytest.raises(ValueError, match=re.escape("Tool call 'c1' was decided twice.")):
        manager.execute_tool_calls(
            prompt_with(TOOLS),
            reply,
            [ToolCallDecision.allow("c1"), ToolCallDecision.deny("c1")],
        )
    assert ran == []


def test_decision_values_are_checked() -> None:
    with pytest.raises(ValueError, match="Only a denial carries a message"):
        ToolCallDecision("c1", True, message="no")
    with pytest.raises(ValueError, match="Only an allowed call carries edited arguments"):
        ToolCallDecision("c1", False, arguments="{}")
    with pytest.raises(ValueError, match="A decision needs the id of a tool call"):
        ToolCallDecision.allow("")
    assert ToolCallDecision.allow("c1", '{"a": 1}').arguments == '{"a": 1}'


def test_a_policy_adds_calls_to_confirm_by_name_pattern() -> None:
    """For tools whose code is not yours (MCP tools): ``get_*`` waits, others run."""
    manager = DefaultToolCallingManager(confirmation_policy=ToolNameConfirmationPolicy("get_*"))
    reply = response_with(call("get_invoice", '{"order_id": "A1"}', id="c1"))
    with pytest.raises(ToolCallConfirmationRequiredError):
        manager.execute_tool_calls(prompt_with(TOOLS), reply)
    small = response_with(call("refund_order", '{"order_id": "A1", "amount": 5}', id="c2"))
    assert _texts(manager.execute_tool_calls(prompt_with(TOOLS), small)) == [
        ("c2", "refunded 5 on A1", False)
    ]
    with pytest.raises(ValueError, match="non-empty strings"):
        ToolNameConfirmationPolicy("")


def test_a_policy_cannot_waive_the_tools_own_flag() -> None:
    """A policy matching nothing still leaves ``delete_file`` waiting."""
    manager = DefaultToolCallingManager(confirmation_policy=ToolNameConfirmationPolicy("x_*"))
    with pytest.raises(ToolCallConfirmationRequiredError):
        manager.execute_tool_calls(
            prompt_with(TOOLS), response_with(call("delete_file", '{"path": "/a"}'))
        )


def test_nobody_is_asked_about_a_call_that_cannot_run() -> None:
    """Bad arguments, an unknown tool and a call over its limit are answered, not held."""
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(
            max_calls_per_tool=None,
            per_tool={"delete_file": 2},
            on_limit_exceeded=ToolCallLimitBehavior.RETURN_ERROR_RESPONSE,
        )
    )
    reply = response_with(
        call("delete_file", '{"wrong": 1}', id="c1"),  # counted toward the limit, invalid
        call("drop_database", "{}", id="c2"),
        call("delete_file", '{"path": "/a"}', id="c3"),
        call("delete_file", '{"path": "/b"}', id="c4"),  # the third: over the limit of 2
    )
    with pytest.raises(ToolCallConfirmationRequiredError) as info:
        manager.execute_tool_calls(prompt_with(TOOLS), reply)
    assert [p.tool_call.id for p in info.value.pending] == ["c3"]
    result = manager.execute_tool_calls(prompt_with(TOOLS), reply, [ToolCallDecision.allow("c3")])
    assert [(i, error) for i, _, error in _texts(result)] == [
        ("c1", True),
        ("c2", True),
        ("c3", False),
        ("c4", True),
    ]
    assert ran == ["delete_file(/a)"]


def test_the_advisor_loop_pauses_with_the_waiting_calls_and_resumes_statelessly() -> None:
    """The pause is an ordinary response; the resumption an ordinary call of the manager."""
    model = ScriptedChatModel(
        [
            tool_call("refund_order", order_id="A1", amount=250),
            text("Refunded 250 on A1."),
        ]
    )
    client = ChatClient.builder(model).default_tools(refund_order).build()
    paused = client.prompt("Refund A1 in full").call().chat_response()
    assert ran == []
    generation = paused.result
    assert generation.finish_reason == ToolCallConfirmationRequiredError.FINISH_REASON
    pending = generation.metadata[ToolCallConfirmationRequiredError.METADATA_PENDING_TOOL_CALLS]
    assert [type(p) for p in pending] == [PendingToolCall]
    (waiting,) = pending
    assert waiting.tool_call.name == "refund_order"
    assert json.loads(waiting.tool_call.arguments) == {"order_id": "A1", "amount": 250}

    # Later, maybe in another process: the same prompt and reply, and the user's decision.
    options = prompt_with(tool_callbacks(refund_order)).options
    prompt = Prompt([UserMessage("Refund A1 in full")], options)
    result = DefaultToolCallingManager().execute_tool_calls(
        prompt, paused, [ToolCallDecision.allow(waiting.tool_call.id)]
    )
    assert ran == ["refund_order(A1, 250)"]
    answer = client.prompt().messages(result.conversation_history).call().content()
    assert answer == "Refunded 250 on A1."
    assert model.remaining_steps == 0


def test_the_streaming_loop_pauses_too() -> None:
    model = ScriptedChatModel([tool_call("delete_file", path="/a")])
    client = ChatClient.builder(model).default_tools(delete_file).build()
    chunks = list(client.prompt("Delete /a").stream().chat_response())
    assert ran == []
    assert chunks[-1].result.finish_reason == ToolCallConfirmationRequiredError.FINISH_REASON


def test_plan_tool_calls_waits_and_takes_decisions_like_execute() -> None:
    manager = DefaultToolCallingManager()
    reply = response_with(
        call("delete_file", '{"path": "/a"}', id="c1"),
        call("get_invoice", '{"order_id": "A1"}', id="c2"),
    )
    with pytest.raises(ToolCallConfirmationRequiredError):
        manager.plan_tool_calls(prompt_with(TOOLS), reply)
    plan = manager.plan_tool_calls(prompt_with(TOOLS), reply, [ToolCallDecision.deny("c1", "No.")])
    assert [job.call.id for job in plan.jobs] == ["c2"]
    assert [(r.id, r.response_data) for r in plan.responses if r is not None] == [("c1", "No.")]


def test_bad_flags_are_rejected_when_the_tool_is_defined() -> None:
    with pytest.raises(ToolDefinitionError, match="requires_confirmation must be a bool"):

        @tool(requires_confirmation="yes")  # type: ignore[call-overload]
        def nope() -> str:
            return ""

    with pytest.raises(ToolDefinitionError, match="requires_confirmation must be a bool"):
        ToolMetadata(requires_confirmation="yes")  # type: ignore[arg-type]
