"""ToolCallPlan and ToolOutcome: JSON values, and failures decided the same wherever they ran."""

from __future__ import annotations

import json
import re

import pytest

from tool_calling import (
    AssistantMessage,
    ChatResponse,
    DefaultToolCallingManager,
    DefaultToolExecutionExceptionProcessor,
    Generation,
    Prompt,
    ToolCall,
    ToolCallingChatOptions,
    ToolCallLimits,
    ToolDefinition,
    ToolExecutionException,
    UserMessage,
    tool,
    tool_callbacks,
)
from tool_calling.core.execution.plan import ToolCallPlan, ToolOutcome, ToolOutcomeKind
from tool_calling.exceptions import RemoteToolError, ToolArgumentsError, ToolFailure


class PaymentDeclined(Exception):
    """A user's exception type, listed in ``rethrown`` by a project."""


class CardExpired(PaymentDeclined):
    pass


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(return_direct=True)
def shout(text: str) -> str:
    """Say it loudly."""
    return text.upper()


@tool
def charge(amount: int) -> str:
    """Charge the card."""
    raise CardExpired(f"card expired for {amount}")


DEFINITION = ToolDefinition("charge", "Charge the card.", {"type": "object", "properties": {}})


def _response(*calls: ToolCall) -> ChatResponse:
    return ChatResponse([Generation(AssistantMessage(None, list(calls)))])


def _prompt(*tools: object) -> Prompt:
    return Prompt(
        [UserMessage("go")], ToolCallingChatOptions(tool_callbacks=tool_callbacks(*tools))
    )


def _remote(outcome: ToolOutcome) -> ToolOutcome:
    """The outcome as another process sees it: through JSON, without the exception object."""
    return ToolOutcome.from_json(json.loads(json.dumps(outcome.to_json())))


def test_a_plan_survives_json_and_completes_like_the_original() -> None:
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded="RETURN_ERROR_RESPONSE")
    )
    prompt = _prompt(add, shout)
    response = _response(
        ToolCall("c1", "add", '{"a": 1, "b": 2}'),
        ToolCall("c2", "nope", "{}"),
        ToolCall("c3", "add", '{"a": 3, "b": 4}'),
        ToolCall("c4", "shout", '{"text": "hi"}'),
    )
    plan = manager.plan_tool_calls(prompt, response)
    stored = ToolCallPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert stored == plan
    assert [job.index for job in stored.jobs] == [0, 3]
    assert [job.return_direct for job in stored.jobs] == [False, True]
    outcomes = [ToolOutcome.ok("3"), ToolOutcome.ok("HI")]
    result = manager.complete_tool_calls(prompt, stored, outcomes)
    assert result == manager.execute_tool_calls(prompt, response)
    texts = [r.response_data for r in result.tool_responses.responses]  # type: ignore[union-attr]
    assert texts[0] == "3" and texts[3] == "HI"
    assert texts[1].startswith("Unknown or disabled tool 'nope'.")
    assert texts[2].startswith("Tool call limit (1) exceeded for tool 'add'.")


def test_a_breach_with_throw_is_kept_in_the_json_plan() -> None:
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_total_tool_calls=1))
    prompt = _prompt(add)
    response = _response(ToolCall("c1", "add", '{"a": 1, "b": 2}'), ToolCall("c2", "add", "{}"))
    plan = ToolCallPlan.from_json(manager.plan_tool_calls(prompt, response).to_json())
    assert plan.breach == (1, None, 1)
    with pytest.raises(Exception, match=re.escape("Total tool call limit (1) exceeded")):
        manager.complete_tool_calls(prompt, plan, [ToolOutcome.ok("3")])


@pytest.mark.parametrize("data", [{}, {"kind": "maybe"}, {"kind": "ok", "text": 5}, []])
def test_from_json_refuses_what_is_not_an_outcome(data: object) -> None:
    with pytest.raises(ValueError, match="Not a tool outcome"):
        ToolOutcome.from_json(data)  # type: ignore[arg-type]


def test_from_json_refuses_what_is_not_a_plan() -> None:
    with pytest.raises(ValueError, match="Not a tool call plan"):
        ToolCallPlan.from_json({"assistant": {}})


def test_an_outcome_names_the_exception_and_its_bases() -> None:
    try:
        raise CardExpired("card expired")
    except CardExpired as exc:
        outcome = ToolOutcome.from_exception(ToolExecutionException(DEFINITION, exc))
    name = f"{__name__}.CardExpired"
    assert outcome.kind is ToolOutcomeKind.ERROR
    assert outcome.text == "card expired"
    assert outcome.error_type == name
    assert outcome.error_types[:2] == (name, f"{__name__}.PaymentDeclined")
    assert "builtins.Exception" in outcome.error_types
    assert "raise CardExpired" in outcome.traceback
    remote = _remote(outcome)
    assert remote.exception is None
    assert remote.is_a(PaymentDeclined) and remote.is_a(Exception)
    assert not remote.is_a(ValueError)


def test_a_remote_exception_is_rebuilt_as_its_class_with_the_remote_traceback() -> None:
    try:
        raise CardExpired("card expired")
    except CardExpired as exc:
        remote = _remote(ToolOutcome.from_exception(exc))
    rebuilt = remote.as_exception(PaymentDeclined)
    assert type(rebuilt) is CardExpired
    assert str(rebuilt) == "card expired"
    assert "raise CardExpired" in rebuilt.__notes__[0]


def test_a_remote_exception_of_a_class_not_imported_here_is_a_remote_tool_error() -> None:
    remote = ToolOutcome.from_json(
        {"kind": "error", "text": "boom", "error_type": "gone.module.Boom", "error_types": []}
    )
    rebuilt = remote.as_exception()
    assert isinstance(rebuilt, RemoteToolError)
    assert rebuilt.error_type == "gone.module.Boom"
    assert isinstance(remote.as_exception(PaymentDeclined), PaymentDeclined)


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "remote"])
def test_rethrown_types_are_raised_wherever_the_call_ran(remote: bool) -> None:
    """A user's ``rethrown`` type raised on a worker is raised here as that type, as inline."""
    manager = DefaultToolCallingManager(
        exception_processor=DefaultToolExecutionExceptionProcessor(rethrown=[PaymentDeclined])
    )
    prompt = _prompt(charge)
    response = _response(ToolCall("c1", "charge", '{"amount": 5}'))
    plan = manager.plan_tool_calls(prompt, response)
    try:
        raise CardExpired("card expired for 5")
    except CardExpired as exc:
        outcome = ToolOutcome.from_exception(exc)
    with pytest.raises(CardExpired, match="card expired for 5"):
        manager.complete_tool_calls(prompt, plan, [_remote(outcome) if remote else outcome])
    with pytest.raises(CardExpired, match="card expired for 5"):
        manager.execute_tool_calls(prompt, response)


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "remote"])
def test_always_throw_and_blank_messages_behave_the_same_wherever_the_call_ran(
    remote: bool,
) -> None:
    outcome = ToolOutcome.from_exception(ToolExecutionException(DEFINITION, KeyError()))
    if remote:
        outcome = _remote(outcome)
    processor = DefaultToolExecutionExceptionProcessor()
    text = processor.process_outcome(DEFINITION, outcome)
    assert text == "Exception occurred in tool: charge (KeyError)"
    with pytest.raises(ToolExecutionException) as raised:
        DefaultToolExecutionExceptionProcessor(always_throw=True).process_outcome(
            DEFINITION, outcome
        )
    assert raised.value.tool_definition is DEFINITION
    # KeyError is importable everywhere, so the remote one is rebuilt as a KeyError too.
    assert type(raised.value.cause) is KeyError


def test_a_remote_base_exception_is_re_raised() -> None:
    outcome = _remote(ToolOutcome.from_exception(SystemExit(3)))
    with pytest.raises(ToolExecutionException):
        DefaultToolExecutionExceptionProcessor().process_outcome(DEFINITION, outcome)


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        (ToolOutcome(ToolOutcomeKind.TIMEOUT, "Tool 'charge' timed out after 30 s."), None),
        (ToolOutcome(ToolOutcomeKind.UNKNOWN, "The outcome of this call is unknown."), None),
        (_remote(ToolOutcome.from_exception(ToolFailure("Card declined; ask for another."))), None),
    ],
    ids=["timeout", "unknown", "tool-failure"],
)
def test_texts_written_for_the_model_reach_it_as_they_are(
    outcome: ToolOutcome, text: str | None
) -> None:
    manager = DefaultToolCallingManager(
        exception_processor=DefaultToolExecutionExceptionProcessor(always_throw=True)
    )
    prompt = _prompt(charge)
    plan = manager.plan_tool_calls(prompt, _response(ToolCall("c1", "charge", "{}")))
    result = manager.complete_tool_calls(prompt, plan, [outcome])
    response = result.tool_responses.responses[0]  # type: ignore[union-attr]
    assert (response.response_data, response.is_error) == (outcome.text, True)


def test_remote_bad_arguments_raise_in_strict_mode_and_end_return_direct() -> None:
    prompt = _prompt(shout)
    outcome = _remote(ToolOutcome.from_exception(ToolArgumentsError("shout", "Invalid: text")))
    manager = DefaultToolCallingManager(strict_tool_calls=True)
    plan = manager.plan_tool_calls(prompt, _response(ToolCall("c1", "shout", "{}")))
    with pytest.raises(ToolArgumentsError, match="Invalid: text"):
        manager.complete_tool_calls(prompt, plan, [outcome])
    lenient = DefaultToolCallingManager(strict_tool_calls=False)
    plan = lenient.plan_tool_calls(prompt, _response(ToolCall("c1", "shout", "{}")))
    result = lenient.complete_tool_calls(prompt, plan, [outcome])
    assert result.return_direct is False
    assert lenient.complete_tool_calls(prompt, plan, [ToolOutcome.ok("HI")]).return_direct
