"""ScriptedChatModel: the fake chat model that ships in tool_calling.testing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tool_calling.core.chat.messages import (
    AssistantMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.prompt import ChatOptions, Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition
from tool_calling.testing import (
    ScriptedChatModel,
    UnconsumedModelSteps,
    UnexpectedModelCall,
    text,
    tool_call,
    tool_calls,
)

SCHEMA = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


class StaticCallback(ToolCallback):
    def __init__(self, name: str) -> None:
        self._definition = ToolDefinition(name, name, SCHEMA)

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        return "unused"


def metadata(number: int, usage: dict[str, int] | None = None) -> dict[str, object]:
    result: dict[str, object] = {
        "id": f"chatcmpl-scripted-{number}",
        "model": "scripted",
        "created": 0,
        "system_fingerprint": None,
    }
    if usage is not None:
        result["usage"] = usage
    return result


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def test_the_script_is_consumed_one_step_per_call() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny in Oslo")])

    first = model.call(Prompt("Weather in Oslo?"))
    second = model.call(Prompt("again"))

    assert first == ChatResponse(
        [
            Generation(
                AssistantMessage(
                    None,
                    [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')],
                    {"id": "chatcmpl-scripted-1", "role": "assistant"},
                ),
                finish_reason="tool_calls",
            )
        ],
        metadata=metadata(1, usage(3, 2)),
    )
    assert second == ChatResponse(
        [
            Generation(
                AssistantMessage(
                    "Sunny in Oslo", [], {"id": "chatcmpl-scripted-2", "role": "assistant"}
                ),
                finish_reason="stop",
            )
        ],
        metadata=metadata(2, usage(1, 3)),
    )
    assert model.remaining_steps == 0
    model.assert_consumed()


def test_tool_call_ids_are_unique_across_the_script_and_skip_explicit_ones() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(tool_call("a"), tool_call("b", id="call_2"), tool_call("c", x=1)),
            tool_call("d"),
        ]
    )

    first = model.call(Prompt("1"))
    second = model.call(Prompt("2"))

    assert first.result is not None and second.result is not None
    assert first.result.output.tool_calls == [
        ToolCall("call_1", "a", "{}"),
        ToolCall("call_2", "b", "{}"),
        ToolCall("call_3", "c", '{"x":1}'),
    ]
    assert second.result.output.tool_calls == [ToolCall("call_4", "d", "{}")]


def test_a_call_past_the_end_raises_unexpected_model_call() -> None:
    model = ScriptedChatModel([text("only answer")])
    model.call(Prompt("first"))
    prompt = Prompt(
        [
            UserMessage("Weather?"),
            AssistantMessage(None, [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')]),
            ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny")]),
        ]
    )

    message = (
        "ScriptedChatModel 'scripted' got call 2 but its script has only 1 step(s). The last "
        "message of the prompt was tool responses [get_weather: 'Sunny']."
    )
    with pytest.raises(UnexpectedModelCall, match=re.escape(message)) as caught:
        model.call(prompt)

    assert isinstance(caught.value, AssertionError)
    assert model.requests == [Prompt("first"), prompt]  # the overrun is recorded too


def test_unexpected_model_call_names_a_user_message() -> None:
    model = ScriptedChatModel([], name="planner")

    message = (
        "ScriptedChatModel 'planner' got call 1 but its script has only 0 step(s). The last "
        "message of the prompt was user 'Hello there'."
    )
    with pytest.raises(UnexpectedModelCall, match=re.escape(message)):
        list(model.stream(Prompt("Hello there")))


def test_assert_consumed_raises_with_the_next_step() -> None:
    model = ScriptedChatModel([text("one"), tool_call("get_weather", city="Oslo"), text("three")])
    model.call(Prompt("Hi"))

    message = (
        "ScriptedChatModel 'scripted' has 2 unconsumed step(s) of 3; the next one is "
        """tool_call('get_weather', arguments={"city":"Oslo"})."""
    )
    with pytest.raises(UnconsumedModelSteps, match=re.escape(message)):
        model.assert_consumed()
    assert model.remaining_steps == 2


def test_callable_steps_answer_from_the_prompt() -> None:
    def echo(prompt: Prompt) -> object:
        assert prompt.user_message is not None
        return text(f"You said {prompt.user_message.text}")

    model = ScriptedChatModel(
        [echo, lambda prompt: tool_call("lookup", q=prompt.messages[-1].text)]
    )

    first = model.call(Prompt("hello"))
    second = model.call(Prompt("oslo"))

    assert first.result is not None and second.result is not None
    assert first.result.output.text == "You said hello"
    assert second.result.output.tool_calls == [ToolCall("call_1", "lookup", '{"q":"oslo"}')]


def test_a_callable_returning_a_non_step_is_a_type_error() -> None:
    model = ScriptedChatModel([lambda prompt: "plain string"])

    message = (
        "The callable step of call 1 is 'plain string'; expected tool_call(...), "
        "tool_calls(...), text(...), an AssistantMessage, a ChatResponse."
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        model.call(Prompt("Hi"))


def test_a_bad_step_is_rejected_when_the_script_is_built() -> None:
    message = (
        "Step 2 of the script is 42; expected tool_call(...), tool_calls(...), text(...), an "
        "AssistantMessage, a ChatResponse or a callable (prompt) -> step."
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        ScriptedChatModel([text("ok"), 42])  # type: ignore[list-item]


def test_raw_messages_and_responses_are_returned_as_given() -> None:
    raw_response = ChatResponse([Generation(AssistantMessage("raw"), finish_reason="length")])
    raw_message = AssistantMessage(None, [ToolCall("x9", "get", "not json")])
    model = ScriptedChatModel([raw_response, raw_message])

    assert model.call(Prompt("1")) is raw_response
    second = model.call(Prompt("2"))
    assert second.result == Generation(raw_message, finish_reason="tool_calls")


def test_requests_and_tool_names_seen_are_recorded() -> None:
    model = ScriptedChatModel([text("a"), text("b"), text("c")])
    with_tools = ToolCallingChatOptions(
        tool_callbacks=[StaticCallback("get_weather"), StaticCallback("get_time")],
        tool_names=["get_time", "search"],
    )

    model.call(Prompt("1", with_tools))
    model.call(Prompt("2", ChatOptions(temperature=0)))
    model.call(Prompt("3"))

    assert [p.messages for p in model.requests] == [
        [UserMessage("1")],
        [UserMessage("2")],
        [UserMessage("3")],
    ]
    assert model.tool_names_seen == [["get_weather", "get_time", "search"], [], []]


def test_stream_yields_word_groups_then_a_final_chunk() -> None:
    model = ScriptedChatModel([text("It is sunny in Oslo today, 21 degrees.")])

    chunks = list(model.stream(Prompt("Weather?")))

    message_metadata = {"id": "chatcmpl-scripted-1", "role": "assistant"}
    assert chunks == [
        ChatResponse(
            [Generation(AssistantMessage("It is sunny ", [], message_metadata))], metadata(1)
        ),
        ChatResponse(
            [Generation(AssistantMessage("in Oslo today, ", [], message_metadata))], metadata(1)
        ),
        ChatResponse(
            [Generation(AssistantMessage("21 degrees.", [], message_metadata))], metadata(1)
        ),
        ChatResponse(
            [Generation(AssistantMessage(None, [], message_metadata), finish_reason="stop")],
            metadata(1, usage(1, 8)),
        ),
    ]
    joined = "".join(c.result.output.text or "" for c in chunks if c.result)
    assert joined == "It is sunny in Oslo today, 21 degrees."


def test_stream_of_a_tool_call_step_is_one_final_chunk() -> None:
    model = ScriptedChatModel(
        [tool_calls(tool_call("get_weather", city="Oslo"), tool_call("get_time", tz="CET"))]
    )

    chunks = list(model.stream(Prompt("Weather and time?")))

    assert chunks == [
        ChatResponse(
            [
                Generation(
                    AssistantMessage(
                        None,
                        [
                            ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
                            ToolCall("call_2", "get_time", '{"tz":"CET"}'),
                        ],
                        {"id": "chatcmpl-scripted-1", "role": "assistant"},
                    ),
                    finish_reason="tool_calls",
                )
            ],
            metadata(1, usage(3, 4)),
        )
    ]


def test_stream_and_call_agree_on_the_text() -> None:
    words = "one two three four five six seven"
    streamed = list(ScriptedChatModel([text(words)]).stream(Prompt("x")))
    called = ScriptedChatModel([text(words)]).call(Prompt("x"))

    assert len(streamed) == 4
    assert "".join(c.result.output.text or "" for c in streamed if c.result) == words
    assert called.result is not None and called.result.output.text == words
    assert streamed[-1].metadata["usage"] == called.metadata["usage"]


def test_tool_calls_needs_tool_call_steps() -> None:
    with pytest.raises(
        ValueError, match=re.escape("tool_calls() needs at least one tool_call(...) step.")
    ):
        tool_calls()
    with pytest.raises(
        TypeError, match=re.escape("tool_calls() takes tool_call(...) steps, got text('x').")
    ):
        tool_calls(text("x"))  # type: ignore[arg-type]


def test_importing_tool_calling_testing_does_not_import_django() -> None:
    code = (
        "import sys, tool_calling.testing as t; t.ScriptedChatModel; t.ReplayServer; "
        "print('django' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
