"""ToolCallLimits: validation, per-turn counting, both behaviours (S7)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tool_calling import (
    AssistantMessage,
    DefaultToolCallingManager,
    FunctionToolCallback,
    SystemMessage,
    ToolCall,
    ToolCallLimitBehavior,
    ToolCallLimitExceededException,
    ToolCallLimits,
    ToolExecutionResult,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core import _settings
from tool_calling.core.execution.limits import breach_text, count_turn_calls

from ._builders import call, responses, run, texts

RETURN = ToolCallLimitBehavior.RETURN_ERROR_RESPONSE
THROW = ToolCallLimitBehavior.THROW


def per_tool_text(name: str, limit: int) -> str:
    return (
        f"Tool call limit ({limit}) exceeded for tool '{name}'. "
        "No further calls to this tool are allowed in this turn."
    )


def total_text(limit: int) -> str:
    return (
        f"Total tool call limit ({limit}) exceeded for this turn. "
        "No further tool calls are allowed."
    )


class Recorder:
    """Tools that record every run, in the order they ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def tool(self, name: str) -> FunctionToolCallback:
        def run_tool() -> str:
            self.ran.append(name)
            return f"{name} ok"

        return FunctionToolCallback(run_tool, name=name)


def history(*names: str) -> list[Any]:
    """A turn so far: the user message, then one earlier batch answering ``names``."""
    calls = [ToolCall(f"h{i}", n, "{}") for i, n in enumerate(names)]
    return [
        UserMessage("go"),
        AssistantMessage(tool_calls=calls),
        ToolResponseMessage([ToolResponse(c.id, c.name, "ok") for c in calls]),
    ]


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, "3"])
@pytest.mark.parametrize("field", ["max_calls_per_tool", "max_total_tool_calls"])
def test_limits_must_be_positive_integers(field: str, value: Any) -> None:
    message = f"{field} must be a positive integer or None (unlimited), got {value!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        ToolCallLimits(**{field: value})


@pytest.mark.parametrize("value", [0, -5, True])
def test_per_tool_limits_must_be_positive_integers(value: Any) -> None:
    message = f"per_tool['search'] must be a positive integer or None (unlimited), got {value!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        ToolCallLimits(per_tool={"search": value})


def test_none_means_unlimited() -> None:
    limits = ToolCallLimits(max_calls_per_tool=None, max_total_tool_calls=None)
    assert limits.is_unlimited is True
    assert ToolCallLimits(max_calls_per_tool=1, max_total_tool_calls=None).is_unlimited is False
    assert (
        ToolCallLimits(
            max_calls_per_tool=None, max_total_tool_calls=None, per_tool={"a": 1}
        ).is_unlimited
        is False
    )


def test_behaviour_accepts_its_value_and_rejects_others() -> None:
    assert ToolCallLimits(on_limit_exceeded="RETURN_ERROR_RESPONSE").on_limit_exceeded is RETURN  # type: ignore[arg-type]
    message = "on_limit_exceeded must be one of THROW, RETURN_ERROR_RESPONSE, got 'explode'"
    with pytest.raises(ValueError, match=re.escape(message)):
        ToolCallLimits(on_limit_exceeded="explode")  # type: ignore[arg-type]


def test_limit_for_each_tool() -> None:
    limits = ToolCallLimits(
        max_calls_per_tool=5, per_tool={"search": 2, "free": None}, excluded_tools="ping"
    )
    assert limits.excluded_tools == ("ping",)
    assert limits.limit_for("other") == 5
    assert limits.limit_for("search") == 2
    assert limits.limit_for("free") is None
    assert limits.limit_for("ping") is None


def test_limits_are_frozen_and_copy_their_inputs() -> None:
    per_tool = {"search": 2}
    limits = ToolCallLimits(per_tool=per_tool)
    per_tool["search"] = 99
    assert limits.limit_for("search") == 2


def test_breach_texts() -> None:
    assert breach_text("search", 3) == per_tool_text("search", 3)
    assert breach_text(None, 7) == total_text(7)


# -- counting the turn -------------------------------------------------------------------------


def test_count_covers_only_the_current_turn() -> None:
    earlier_turn = history("search", "search", "fetch")
    current_turn = history("search")[1:]  # after the last user message
    messages = [SystemMessage("sys"), *earlier_turn, UserMessage("again"), *current_turn]
    assert count_turn_calls(messages) == {"search": 1}


def test_count_covers_the_whole_prompt_without_a_user_message() -> None:
    messages = [SystemMessage("sys"), *history("a", "b", "a")[1:], *history("a")[1:]]
    assert count_turn_calls(messages) == {"a": 3, "b": 1}


def test_count_includes_error_responses() -> None:
    messages = [
        UserMessage("go"),
        ToolResponseMessage([ToolResponse("1", "a", "boom", is_error=True)]),
    ]
    assert count_turn_calls(messages) == {"a": 1}


# -- the N-th call is allowed, the N+1-th breaches ---------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_nth_call_allowed_and_the_next_breaches_in_one_batch(limit: int) -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(max_calls_per_tool=limit, on_limit_exceeded=RETURN)
    )
    result = run(manager, [recorder.tool("search")], *[call("search") for _ in range(limit + 1)])
    assert recorder.ran == ["search"] * limit
    assert texts(result) == ["search ok"] * limit + [per_tool_text("search", limit)]
    assert [r.is_error for r in responses(result)] == [False] * limit + [True]


def test_earlier_calls_of_the_turn_count() -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(max_calls_per_tool=3, on_limit_exceeded=RETURN)
    )
    result = run(
        manager,
        [recorder.tool("search")],
        call("search"),
        call("search"),
        messages=history("search", "search"),
    )
    assert texts(result) == ["search ok", per_tool_text("search", 3)]


def test_earlier_turns_do_not_count() -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(max_calls_per_tool=2, on_limit_exceeded=RETURN)
    )
    messages = [*history("search", "search"), UserMessage("new question")]
    result = run(
        manager, [recorder.tool("search")], call("search"), call("search"), messages=messages
    )
    assert texts(result) == ["search ok", "search ok"]


def test_the_manager_keeps_no_state_between_batches() -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded=RETURN)
    )
    for _ in range(3):
        assert texts(run(manager, [recorder.tool("search")], call("search"))) == ["search ok"]


def test_total_limit() -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(max_total_tool_calls=3, on_limit_exceeded=RETURN)
    )
    result = run(
        manager,
        [recorder.tool("a"), recorder.tool("b")],
        call("a"),
        call("b"),
        call("a"),
        call("b"),
        call("a"),
    )
    assert texts(result) == ["a ok", "b ok", "a ok", total_text(3), total_text(3)]
    assert sorted(recorder.ran) == ["a", "a", "b"]  # the allowed calls ran (concurrently)


def test_per_tool_none_exempts_that_tool_only() -> None:
    recorder = Recorder()
    limits = ToolCallLimits(max_calls_per_tool=1, per_tool={"free": None}, on_limit_exceeded=RETURN)
    manager = DefaultToolCallingManager(limits=limits)
    result = run(
        manager,
        [recorder.tool("free"), recorder.tool("capped")],
        call("free"),
        call("free"),
        call("free"),
        call("capped"),
        call("capped"),
    )
    assert texts(result) == ["free ok"] * 3 + ["capped ok", per_tool_text("capped", 1)]


def test_per_tool_override_can_raise_or_lower_the_limit() -> None:
    recorder = Recorder()
    limits = ToolCallLimits(
        max_calls_per_tool=2, per_tool={"more": 3, "less": 1}, on_limit_exceeded=RETURN
    )
    result = run(
        DefaultToolCallingManager(limits=limits),
        [recorder.tool("more"), recorder.tool("less")],
        *[call("more") for _ in range(4)],
        call("less"),
        call("less"),
    )
    assert texts(result) == ["more ok"] * 3 + [
        per_tool_text("more", 3),
        "less ok",
        per_tool_text("less", 1),
    ]


def test_excluded_tools_have_no_per_tool_limit_but_count_toward_the_total() -> None:
    recorder = Recorder()
    limits = ToolCallLimits(
        max_calls_per_tool=1,
        excluded_tools=["ping"],
        max_total_tool_calls=3,
        on_limit_exceeded=RETURN,
    )
    result = run(
        DefaultToolCallingManager(limits=limits),
        [recorder.tool("ping"), recorder.tool("work")],
        call("ping"),
        call("ping"),
        call("ping"),
        call("work"),
    )
    assert texts(result) == ["ping ok"] * 3 + [total_text(3)]
    assert recorder.ran == ["ping"] * 3


def test_per_tool_limit_is_checked_before_the_total() -> None:
    """One call breaching both limits reports the per-tool limit."""
    recorder = Recorder()
    limits = ToolCallLimits(max_calls_per_tool=2, max_total_tool_calls=2, on_limit_exceeded=RETURN)
    result = run(
        DefaultToolCallingManager(limits=limits),
        [recorder.tool("a")],
        call("a"),
        call("a"),
        call("a"),
    )
    assert texts(result)[2] == per_tool_text("a", 2)


def test_breached_calls_still_count_toward_later_checks() -> None:
    """Every call is counted, then checked: a skipped call still used up the total."""
    recorder = Recorder()
    limits = ToolCallLimits(max_calls_per_tool=1, max_total_tool_calls=3, on_limit_exceeded=RETURN)
    result = run(
        DefaultToolCallingManager(limits=limits),
        [recorder.tool("a"), recorder.tool("b")],
        call("a"),
        call("a"),
        call("a"),
        call("b"),
    )
    assert texts(result) == ["a ok", per_tool_text("a", 1), per_tool_text("a", 1), total_text(3)]


# -- RETURN_ERROR_RESPONSE -----------------------------------------------------------------------


def test_return_error_response_skips_the_call_and_goes_on() -> None:
    recorder = Recorder()
    limits = ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded=RETURN)
    calls = [call("a", id="1"), call("a", id="2"), call("b", id="3")]
    result = run(
        DefaultToolCallingManager(limits=limits), [recorder.tool("a"), recorder.tool("b")], *calls
    )
    assert responses(result) == [
        ToolResponse("1", "a", "a ok"),
        ToolResponse("2", "a", per_tool_text("a", 1), is_error=True),
        ToolResponse("3", "b", "b ok"),
    ]
    assert sorted(recorder.ran) == ["a", "b"]  # the allowed calls ran (concurrently)
    assert result.return_direct is False


# -- THROW -------------------------------------------------------------------------------------


def test_throw_raises_with_the_partial_result() -> None:
    recorder = Recorder()
    limits = ToolCallLimits(max_calls_per_tool=2)
    assert limits.on_limit_exceeded is THROW
    calls = [
        call("a", id="1"),
        call("b", id="2"),
        call("a", id="3"),
        call("a", id="4"),
        call("b", id="5"),
    ]
    manager = DefaultToolCallingManager(limits=limits)
    with pytest.raises(
        ToolCallLimitExceededException,
        match=re.escape("Tool call limit (2) exceeded for tool 'a'"),
    ) as info:
        run(manager, [recorder.tool("a"), recorder.tool("b")], *calls, messages="go")
    exc = info.value
    assert str(exc) == "Tool call limit (2) exceeded for tool 'a'"
    assert (exc.tool_name, exc.limit) == ("a", 2)
    assert sorted(recorder.ran) == ["a", "a", "b"]  # the calls after the breach never ran
    partial = exc.partial_result
    assert isinstance(partial, ToolExecutionResult)
    assert partial.return_direct is False
    assert partial.conversation_history[:2] == [
        UserMessage("go"),
        AssistantMessage(tool_calls=calls),
    ]
    assert responses(partial) == [
        ToolResponse("1", "a", "a ok"),
        ToolResponse("2", "b", "b ok"),
        ToolResponse("3", "a", "a ok"),
        ToolResponse("4", "a", per_tool_text("a", 2), is_error=True),
    ]
    assert exc.breach_text == per_tool_text("a", 2)


def test_throw_on_the_total_limit_has_no_tool_name() -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_total_tool_calls=1))
    with pytest.raises(ToolCallLimitExceededException) as info:
        run(manager, [recorder.tool("a"), recorder.tool("b")], call("a", id="1"), call("b", id="2"))
    exc = info.value
    assert str(exc) == "Total tool call limit (1) exceeded for this turn"
    assert (exc.tool_name, exc.limit) == (None, 1)
    assert responses(exc.partial_result) == [  # type: ignore[arg-type]
        ToolResponse("1", "a", "a ok"),
        ToolResponse("2", "b", total_text(1), is_error=True),
    ]


def test_throw_on_the_first_call_runs_nothing() -> None:
    recorder = Recorder()
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=1))
    with pytest.raises(ToolCallLimitExceededException) as info:
        run(manager, [recorder.tool("a")], call("a", id="9"), messages=history("a"))
    assert recorder.ran == []
    assert responses(info.value.partial_result) == [  # type: ignore[arg-type]
        ToolResponse("9", "a", per_tool_text("a", 1), is_error=True)
    ]


def test_build_generation_carries_the_breach_and_the_successful_responses() -> None:
    def fails() -> str:
        raise RuntimeError("broken")

    recorder = Recorder()
    callbacks = [recorder.tool("a"), FunctionToolCallback(fails, name="bad")]
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=1))
    with pytest.raises(ToolCallLimitExceededException) as info:
        run(manager, callbacks, call("a", id="1"), call("bad", id="2"), call("a", id="3"))
    generation = info.value.build_generation()
    assert generation.finish_reason == "toolCallLimitExceeded"
    assert generation.finish_reason == ToolCallLimitExceededException.FINISH_REASON
    assert generation.output == AssistantMessage(per_tool_text("a", 1))
    assert generation.metadata == {
        "partialToolResponses": [ToolResponse("1", "a", "a ok")]  # the failed call is left out
    }


def test_exception_without_partial_result_builds_an_empty_generation() -> None:
    generation = ToolCallLimitExceededException(None, 5).build_generation()
    assert generation.output.text == total_text(5)
    assert generation.metadata == {"partialToolResponses": []}


# -- the check runs before lookup --------------------------------------------------------------


def test_an_unknown_tool_breaching_a_limit_gets_the_limit_text() -> None:
    recorder = Recorder()
    limits = ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded=RETURN)
    result = run(
        DefaultToolCallingManager(limits=limits),
        [recorder.tool("a")],
        call("ghost"),
        call("ghost"),
    )
    first, second = texts(result)
    assert first.startswith("Unknown or disabled tool 'ghost'.")
    assert second == per_tool_text("ghost", 1)


def test_an_unknown_tool_breaching_a_limit_throws_the_limit() -> None:
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_total_tool_calls=1))
    with pytest.raises(
        ToolCallLimitExceededException, match=re.escape("Total tool call limit (1)")
    ):
        run(manager, [], call("ghost"), call("ghost"))


# -- defaults ----------------------------------------------------------------------------------


def test_default_limits_are_40_per_tool() -> None:
    recorder = Recorder()
    with pytest.raises(ToolCallLimitExceededException) as info:
        run(DefaultToolCallingManager(), [recorder.tool("a")], *[call("a") for _ in range(41)])
    assert (info.value.tool_name, info.value.limit) == ("a", 40)
    assert len(recorder.ran) == 40


def test_default_limits_are_150_in_total() -> None:
    recorder = Recorder()
    callbacks = [recorder.tool(f"t{i}") for i in range(4)]
    calls = [call(f"t{i % 4}") for i in range(151)]
    with pytest.raises(ToolCallLimitExceededException) as info:
        run(DefaultToolCallingManager(max_concurrent_calls=16), callbacks, *calls)
    assert (info.value.tool_name, info.value.limit) == (None, 150)


def test_limits_come_from_the_core_settings_when_not_given() -> None:
    recorder = Recorder()
    settings = _settings.CoreSettings(
        limits=ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded=RETURN)
    )
    provider: Callable[[], _settings.CoreSettings] = lambda: settings  # noqa: E731
    _settings.set_core_settings_provider(provider)
    result = run(DefaultToolCallingManager(), [recorder.tool("a")], call("a"), call("a"))
    assert texts(result) == ["a ok", per_tool_text("a", 1)]
    explicit = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=5))
    assert texts(run(explicit, [recorder.tool("a")], call("a"), call("a"))) == ["a ok", "a ok"]


class AuditingManager(DefaultToolCallingManager):
    """Records what ``on_limit_exceeded`` is told (the Django layer audits it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.refused: list[tuple[str, str]] = []

    def on_limit_exceeded(self, tool_call: ToolCall, response_text: str) -> None:
        self.refused.append((tool_call.id, response_text))


@pytest.mark.parametrize("behavior", [RETURN, THROW])
def test_each_refused_call_reaches_the_on_limit_exceeded_hook(behavior: Any) -> None:
    recorder = Recorder()
    manager = AuditingManager(
        limits=ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded=behavior)
    )
    calls = [call("a", id="1"), call("a", id="2"), call("a", id="3")]
    try:
        run(manager, [recorder.tool("a")], *calls)
    except ToolCallLimitExceededException:
        assert behavior is THROW
    expected = [("2", per_tool_text("a", 1))]
    if behavior is RETURN:
        expected.append(("3", per_tool_text("a", 1)))  # THROW stops at the first breach
    assert manager.refused == expected
    assert recorder.ran == ["a"]
