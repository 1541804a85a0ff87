"""Streaming through ChatClient: the final answer's text in chunks, tool rounds run in between."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tool_calling import (
    AssistantMessage,
    ChatClient,
    ChatResponse,
    DefaultToolCallingManager,
    Generation,
    MessageChatMemoryAdvisor,
    MessageWindowChatMemory,
    ToolCall,
    ToolCallingAdvisor,
    ToolCallLimits,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
    tool,
)
from tool_calling.core.chat.advisors.base import AdvisorChain, ChatClientRequest, ChatClientResponse
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

events: list[str] = []


@pytest.fixture(autouse=True)
def _clear_events() -> Iterator[None]:
    events.clear()
    yield
    events.clear()


@tool
def get_weather(city: str) -> str:
    """Return the weather in a city."""
    events.append(f"tool get_weather({city})")
    return f"Sunny in {city}"


@tool(return_direct=True)
def lookup_order(order_id: str) -> str:
    """Return an order's status, straight to the caller."""
    events.append(f"tool lookup_order({order_id})")
    return f"Order {order_id}: shipped"


ANSWER = "It is sunny in Oslo today"
PIECES = ["It is sunny ", "in Oslo today"]
WEATHER_CALL = ToolCall("call_1", "get_weather", '{"city":"Oslo"}')


def assistant(
    number: int, *calls: ToolCall, text: str | None = None, usage: tuple[int, int] | None = None
) -> AssistantMessage:
    """ScriptedChatModel's answer at call ``number``, as memory stores it with ``usage``."""
    metadata: dict[str, object] = {"id": f"chatcmpl-scripted-{number}", "role": "assistant"}
    if usage is not None:
        prompt, completion = usage
        metadata["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return AssistantMessage(text, list(calls), metadata)


def test_stream_yields_the_final_answers_text_after_the_tool_round() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text(ANSWER)])
    client = ChatClient.create(model)

    for piece in client.prompt("Weather in Oslo?").tools(get_weather).stream().content():
        events.append(f"text {piece!r}")

    assert events == ["tool get_weather(Oslo)", "text 'It is sunny '", "text 'in Oslo today'"]
    assert model.requests[1].messages == [
        UserMessage("Weather in Oslo?"),
        assistant(1, WEATHER_CALL),
        ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny in Oslo")]),
    ]
    model.assert_consumed()


def test_stream_runs_nothing_until_it_is_iterated() -> None:
    model = ScriptedChatModel([text(ANSWER)])

    stream = ChatClient.create(model).prompt("Hi").stream().content()

    assert model.requests == []
    assert list(stream) == PIECES


def test_stream_chat_response_ends_with_the_finish_reason_and_the_summed_usage() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text(ANSWER)])

    chunks = list(
        ChatClient.create(model)
        .prompt("Weather in Oslo?")
        .tools(get_weather)
        .stream()
        .chat_response()
    )

    assert chunks[:2] == [ChatResponse([Generation(AssistantMessage(piece))]) for piece in PIECES]
    assert chunks[2] == ChatResponse(
        [
            Generation(
                AssistantMessage(None, [], {"id": "chatcmpl-scripted-2", "role": "assistant"}),
                finish_reason="stop",
            )
        ],
        metadata={
            "id": "chatcmpl-scripted-2",
            "model": "scripted",
            "created": 0,
            "system_fingerprint": None,
            # Round one: 3 prompt words, 2 completion words ("get_weather" and its arguments);
            # round two: 3 + 2 + 3 prompt words ("Sunny in Oslo"), 6 completion words.
            "usage": {"prompt_tokens": 11, "completion_tokens": 8, "total_tokens": 19},
        },
    )
    assert len(chunks) == 3
    assert not any(chunk.has_tool_calls() for chunk in chunks)


def test_the_streamed_text_joins_to_the_non_streamed_answer() -> None:
    script = [tool_call("get_weather", city="Oslo"), text(ANSWER)]
    client = ChatClient.create(ScriptedChatModel([*script, *script]))

    streamed = "".join(client.prompt("Weather?").tools(get_weather).stream().content())
    called = client.prompt("Weather?").tools(get_weather).call().content()

    assert streamed == called == ANSWER


def test_a_return_direct_result_arrives_as_one_chunk() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("lookup_order", order_id="A1"), tool_call("lookup_order", order_id="B2")
            )
        ]
    )
    client = ChatClient.create(model)

    chunks = list(client.prompt("Orders?").tools(lookup_order).stream().chat_response())

    assert [chunk.generations for chunk in chunks] == [
        [
            Generation(
                AssistantMessage("Order A1: shipped"),
                finish_reason="returnDirect",
                metadata={"toolId": "call_1", "toolName": "lookup_order"},
            ),
            Generation(
                AssistantMessage("Order B2: shipped"),
                finish_reason="returnDirect",
                metadata={"toolId": "call_2", "toolName": "lookup_order"},
            ),
        ]
    ]
    assert len(model.requests) == 1


def test_a_return_direct_result_streams_as_one_text_piece() -> None:
    model = ScriptedChatModel([tool_call("lookup_order", order_id="A1")])

    pieces = list(ChatClient.create(model).prompt("A1?").tools(lookup_order).stream().content())

    assert pieces == ["Order A1: shipped"]


def test_a_limit_result_arrives_as_one_chunk() -> None:
    model = ScriptedChatModel(
        [tool_calls(tool_call("get_weather", city="Oslo"), tool_call("get_weather", city="Rome"))]
    )
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=1))
    client = ChatClient.builder(model).tool_calling_manager(manager).build()

    chunks = list(client.prompt("Weather?").tools(get_weather).stream().chat_response())

    assert [chunk.generations for chunk in chunks] == [
        [
            Generation(
                AssistantMessage(
                    "Tool call limit (1) exceeded for tool 'get_weather'. "
                    "No further calls to this tool are allowed in this turn."
                ),
                finish_reason="toolCallLimitExceeded",
                metadata={
                    "partialToolResponses": [ToolResponse("call_1", "get_weather", "Sunny in Oslo")]
                },
            )
        ]
    ]


def test_hooks_run_1_2_2_1_times_when_streaming() -> None:
    hooks: list[str] = []

    class Hooked(ToolCallingAdvisor):
        def initialize_loop(
            self, request: ChatClientRequest, chain: AdvisorChain
        ) -> ChatClientRequest:
            hooks.append("initialize_loop")
            return request

        def before_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
            hooks.append("before_call")
            return request

        def after_call(
            self, response: ChatClientResponse, chain: AdvisorChain
        ) -> ChatClientResponse:
            assert response.chat_response is not None
            hooks.append(f"after_call tool_calls={response.chat_response.has_tool_calls()}")
            return response

        def finalize_loop(
            self, response: ChatClientResponse, chain: AdvisorChain
        ) -> ChatClientResponse:
            hooks.append("finalize_loop")
            return response

    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text(ANSWER)])

    pieces = list(
        ChatClient.create(model)
        .prompt("Weather?")
        .tools(get_weather)
        .advisors(Hooked())
        .stream()
        .content()
    )

    assert pieces == PIECES
    assert hooks == [
        "initialize_loop",
        "before_call",
        "after_call tool_calls=True",  # after_call sees the whole (aggregated) response
        "before_call",
        "after_call tool_calls=False",
        "finalize_loop",
    ]


# -- memory --------------------------------------------------------------------------------------


def remembered(stream: bool, *, inside: bool, script: list[object]) -> MessageWindowChatMemory:
    memory = MessageWindowChatMemory()
    order = ToolCallingAdvisor.order + 1 if inside else MessageChatMemoryAdvisor.order
    model = ScriptedChatModel(script)  # type: ignore[arg-type]
    client = (
        ChatClient.builder(model)
        .default_advisors(MessageChatMemoryAdvisor(memory, order=order))
        .build()
    )
    request = client.prompt("Weather in Oslo?").tools(get_weather, lookup_order)
    if stream:
        list(request.stream().content())
    else:
        request.call()
    model.assert_consumed()
    return memory


WEATHER_SCRIPT: list[object] = [tool_call("get_weather", city="Oslo"), text(ANSWER)]


def test_a_streamed_answer_is_stored_as_the_non_streamed_one_with_memory_outside() -> None:
    streamed = remembered(True, inside=False, script=WEATHER_SCRIPT).get("default")
    called = remembered(False, inside=False, script=WEATHER_SCRIPT).get("default")

    # The turn's usage, summed over its two model calls.
    assert (
        streamed
        == called
        == [
            UserMessage("Weather in Oslo?"),
            assistant(2, text=ANSWER, usage=(11, 8)),
        ]
    )


def test_a_streamed_turn_is_stored_as_the_non_streamed_one_with_memory_inside() -> None:
    streamed = remembered(True, inside=True, script=WEATHER_SCRIPT).get("default")
    called = remembered(False, inside=True, script=WEATHER_SCRIPT).get("default")

    assert (
        streamed
        == called
        == [
            UserMessage("Weather in Oslo?"),
            assistant(1, WEATHER_CALL, usage=(3, 2)),
            ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny in Oslo")]),
            assistant(2, text=ANSWER, usage=(8, 6)),
        ]
    )


def test_text_streamed_during_a_tool_round_is_shown_but_not_stored_as_the_answer() -> None:
    # The model writes a preamble alongside its tool call. It cannot be told apart from an
    # answer until the round ends, so it streams; memory stores the answer as .call() does.
    preamble = AssistantMessage(
        "Let me check. ", [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')]
    )
    script: list[object] = [preamble, text(ANSWER)]
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel(script)  # type: ignore[arg-type]
    client = ChatClient.builder(model).default_advisors(MessageChatMemoryAdvisor(memory)).build()

    pieces = list(client.prompt("Weather in Oslo?").tools(get_weather).stream().content())

    assert pieces == ["Let me check. ", *PIECES]
    assert memory.get("default") == remembered(False, inside=False, script=script).get("default")
    assert memory.get("default") == [
        UserMessage("Weather in Oslo?"),
        assistant(2, text=ANSWER, usage=(14, 11)),
    ]


def test_a_streamed_return_direct_result_is_stored_as_the_non_streamed_one() -> None:
    script: list[object] = [tool_call("lookup_order", order_id="A1")]

    streamed = remembered(True, inside=False, script=script).get("default")
    called = remembered(False, inside=False, script=script).get("default")

    assert (
        streamed
        == called
        == [
            UserMessage("Weather in Oslo?"),
            # The loop's result, with the usage of the one model call that led to it.
            AssistantMessage(
                "Order A1: shipped",
                metadata={"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
            ),
        ]
    )


@pytest.mark.parametrize("inside", [False, True])
def test_a_stream_never_stores_a_tool_call_without_its_responses(inside: bool) -> None:
    stored = remembered(True, inside=inside, script=WEATHER_SCRIPT).repository
    messages = stored.find_by_conversation_id("default")  # what was stored, not a window of it

    tool_call_messages = [m for m in messages if isinstance(m, AssistantMessage) and m.tool_calls]
    assert len(tool_call_messages) == (1 if inside else 0)
    for message in tool_call_messages:
        following = messages[messages.index(message) + 1]
        assert isinstance(following, ToolResponseMessage)
        assert [r.id for r in following.responses] == [c.id for c in message.tool_calls]
