"""ChatClient and its tool loop over HTTP: the real openai SDK against the replay server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tool_calling import (
    AssistantMessage,
    ChatClient,
    DefaultToolCallingManager,
    Generation,
    MessageChatMemoryAdvisor,
    MessageWindowChatMemory,
    ToolCallLimits,
    ToolContext,
    ToolResponse,
    UserMessage,
    tool,
)
from tool_calling.core import _settings
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.exceptions import ChatModelRateLimitError, ChatModelResponseError
from tool_calling.testing import ReplayServer

pytestmark = pytest.mark.integration

ran: list[str] = []


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_settings, "_provider", None)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    ran.clear()
    yield
    ran.clear()


@tool
def get_weather(city: str, context: ToolContext) -> str:
    """Return the weather in a city."""
    ran.append(f"get_weather({city})")
    return f"Sunny in {city}"


@tool
def get_time(timezone: str) -> str:
    """Return the time in a time zone."""
    ran.append(f"get_time({timezone})")
    return f"12:00 in {timezone}"


@tool(return_direct=True)
def lookup_order(order_id: str) -> str:
    """Return an order's status, straight to the caller."""
    ran.append(f"lookup_order({order_id})")
    return f"Order {order_id}: shipped"


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Return the weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def client_for(server: ReplayServer, **kwargs: Any) -> ChatClient:
    kwargs.setdefault("max_retries", 0)
    model = OpenAIChatModel(
        "replay-model", base_url=server.base_url + "/v1", api_key="test", **kwargs
    )
    return ChatClient.create(model)


def weather_call(call_id: str, city: str = "Oslo") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": "get_weather",
            "arguments": json.dumps({"city": city}, separators=(",", ":")),
        },
    }


def calls_step(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments} for name, arguments in calls]}


def test_a_tool_round_trip() -> None:
    steps = [calls_step(("get_weather", {"city": "Oslo"})), {"text": "It is sunny in Oslo."}]
    with ReplayServer(steps) as server:
        spec = (
            client_for(server)
            .prompt("Weather in Oslo?")
            .tools(get_weather)
            .tool_context({"api_token": "tok-secret-123"})
            .call()
        )
        requests = server.requests

    assert spec.content() == "It is sunny in Oslo."
    assert ran == ["get_weather(Oslo)"]
    assert len(requests) == 2
    assert requests[0]["messages"] == [{"role": "user", "content": "Weather in Oslo?"}]
    assert requests[0]["tools"] == requests[1]["tools"] == [WEATHER_TOOL]
    assert requests[1]["messages"] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [weather_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Oslo"},
    ]
    assert "tok-secret-123" not in json.dumps(requests)  # tool context never reaches the model
    response = spec.chat_response()
    assert response is not None
    # Usage summed over both requests (the replay server counts words): 3+2, then 8+5.
    assert response.metadata["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
    }
    assert response.metadata["id"] == "chatcmpl-replay-2"


def test_a_streamed_tool_round_trip() -> None:
    steps = [calls_step(("get_weather", {"city": "Oslo"})), {"text": "It is sunny in Oslo today."}]
    with ReplayServer(steps) as server:
        pieces = list(
            client_for(server).prompt("Weather in Oslo?").tools(get_weather).stream().content()
        )
        requests = server.requests

    assert pieces == ["It is sunny ", "in Oslo today."]
    assert ran == ["get_weather(Oslo)"]
    assert [(r["stream"], r["stream_options"]) for r in requests] == [
        (True, {"include_usage": True})
    ] * 2
    assert requests[1]["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [weather_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Oslo"},
    ]


def test_a_streamed_answer_is_stored_in_memory_as_a_non_streamed_one() -> None:
    steps = [calls_step(("get_weather", {"city": "Oslo"})), {"text": "It is sunny in Oslo today."}]
    stored = []
    for stream in (True, False):
        memory = MessageWindowChatMemory()
        with ReplayServer(steps) as server:
            client = (
                client_for(server)
                .mutate()
                .default_advisors(MessageChatMemoryAdvisor(memory))
                .build()
            )
            request = client.prompt("Weather in Oslo?").tools(get_weather)
            if stream:
                list(request.stream().content())
            else:
                request.call()
        stored.append(memory.get("default"))

    assert (
        stored[0]
        == stored[1]
        == [
            UserMessage("Weather in Oslo?"),
            # With the turn's usage as the server reported it, summed: 3 + 8 and 2 + 6 words.
            AssistantMessage(
                "It is sunny in Oslo today.",
                [],
                {
                    "id": "chatcmpl-replay-2",
                    "role": "assistant",
                    "usage": {"prompt_tokens": 11, "completion_tokens": 8, "total_tokens": 19},
                },
            ),
        ]
    )


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_run_and_answer_in_call_order(stream: bool) -> None:
    steps = [
        calls_step(("get_weather", {"city": "Oslo"}), ("get_time", {"timezone": "Europe/Oslo"})),
        {"text": "Sunny in Oslo at noon."},
    ]
    with ReplayServer(steps) as server:
        request = client_for(server).prompt("Weather and time?").tools(get_weather, get_time)
        answer = "".join(request.stream().content()) if stream else request.call().content()
        requests = server.requests

    assert answer == "Sunny in Oslo at noon."
    assert sorted(ran) == ["get_time(Europe/Oslo)", "get_weather(Oslo)"]
    assert requests[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                weather_call("call_1"),
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"timezone":"Europe/Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Oslo"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00 in Europe/Oslo"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_return_direct_answers_without_a_second_request(stream: bool) -> None:
    with ReplayServer([calls_step(("lookup_order", {"order_id": "A1"}))]) as server:
        request = client_for(server).prompt("Where is A1?").tools(lookup_order)
        if stream:
            chunks = list(request.stream().chat_response())
            assert len(chunks) == 1
            response = chunks[0]
        else:
            response = request.call().chat_response()
        requests = server.requests

    assert response is not None
    assert response.generations == [
        Generation(
            AssistantMessage("Order A1: shipped"),
            finish_reason="returnDirect",
            metadata={"toolId": "call_1", "toolName": "lookup_order"},
        )
    ]
    assert len(requests) == 1


def test_a_limit_breach_ends_the_turn_with_the_limit_generation() -> None:
    steps = [
        calls_step(("get_weather", {"city": "Oslo"})),
        calls_step(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})),
    ]
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=2))
    with ReplayServer(steps) as server:
        client = client_for(server).mutate().tool_calling_manager(manager).build()
        response = client.prompt("Weather?").tools(get_weather).call().chat_response()
        requests = server.requests

    assert response is not None
    assert response.generations == [
        Generation(
            AssistantMessage(
                "Tool call limit (2) exceeded for tool 'get_weather'. "
                "No further calls to this tool are allowed in this turn."
            ),
            finish_reason="toolCallLimitExceeded",
            metadata={
                "partialToolResponses": [ToolResponse("call_2", "get_weather", "Sunny in Paris")]
            },
        )
    ]
    assert ran == ["get_weather(Oslo)", "get_weather(Paris)"]
    assert len(requests) == 2


def test_a_500_then_ok_is_retried_by_the_sdk_inside_the_loop() -> None:
    steps = [
        calls_step(("get_weather", {"city": "Oslo"})),
        {"status": 500, "headers": {"retry-after-ms": "10"}},
        {"text": "Sunny."},
    ]
    with ReplayServer(steps) as server:
        reply = (
            client_for(server, max_retries=2).prompt("Weather?").tools(get_weather).call().content()
        )
        requests = server.requests

    assert reply == "Sunny."
    assert ran == ["get_weather(Oslo)"]  # the retry resends the request; the tool runs once
    assert len(requests) == 3
    assert requests[1] == requests[2]


def test_a_429_with_retry_after_is_waited_out() -> None:
    steps = [{"status": 429, "headers": {"retry-after": "0"}}, {"text": "After the limit."}]
    with ReplayServer(steps) as server:
        reply = client_for(server, max_retries=1).prompt("Hi").call().content()
        assert server.remaining_steps == 0

    assert reply == "After the limit."


def test_a_429_without_retries_left_escapes_with_its_retry_after() -> None:
    steps = [
        calls_step(("get_weather", {"city": "Oslo"})),
        {"status": 429, "headers": {"retry-after": "7"}},
    ]
    with ReplayServer(steps) as server:
        with pytest.raises(ChatModelRateLimitError) as caught:
            client_for(server).prompt("Weather?").tools(get_weather).call()

    assert str(caught.value) == (
        "OpenAI-compatible API returned 429 Too Many Requests for model 'replay-model' "
        "(request id req_replay_2): Scripted 429 Too Many Requests"
    )
    assert (caught.value.status_code, caught.value.retry_after) == (429, 7.0)
    assert ran == ["get_weather(Oslo)"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_malformed_response_body_is_a_response_error(stream: bool) -> None:
    steps = [calls_step(("get_weather", {"city": "Oslo"})), {"malformed": True}]
    with ReplayServer(steps) as server:
        request = client_for(server).prompt("Weather?").tools(get_weather)
        with pytest.raises(ChatModelResponseError) as caught:
            if stream:
                list(request.stream().content())
            else:
                request.call()

    assert str(caught.value) == (
        "OpenAI-compatible API returned a malformed response for model 'replay-model' "
        "(request id req_replay_2): the body is not valid JSON."
    )
    assert ran == ["get_weather(Oslo)"]


def test_an_unknown_tool_the_model_invents_is_answered_with_an_error_it_can_fix() -> None:
    steps = [
        calls_step(("get_wether", {"city": "Oslo"})),
        calls_step(("get_weather", {"city": "Oslo"})),
        {"text": "Sunny in Oslo."},
    ]
    with ReplayServer(steps) as server:
        reply = client_for(server).prompt("Weather?").tools(get_weather, get_time).call().content()
        requests = server.requests

    assert reply == "Sunny in Oslo."
    assert ran == ["get_weather(Oslo)"]
    assert requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Unknown or disabled tool 'get_wether'. Available tools: get_weather, "
        "get_time. Call one of these by its exact name.",
    }
    assert requests[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": "Sunny in Oslo",
    }
