"""OpenAIChatModel against the real openai SDK over an httpx2 MockTransport (no network).

The SDK (openai 3.x) sends through ``httpx2``, so the transport and client come from there.
Responses replay recorded-shape JSON from tests/fixtures/openai/.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from tool_calling.core import _settings
from tool_calling.core._settings import CoreSettings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.prompt import ChatOptions, Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition
from tool_calling.exceptions import (
    ChatModelAuthenticationError,
    ChatModelError,
    ChatModelNotFoundError,
    ChatModelRateLimitError,
    ChatModelResponseError,
    ChatModelTimeoutError,
    ToolResolutionError,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openai"
API_KEY = "sk-test-secret-key-1234"
BASE_URL = "https://api.example.test/v1"

WEATHER = ToolDefinition(
    "get_weather",
    "Return the current weather for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
)
TIME = ToolDefinition(
    "get_time",
    "Return the current time in a timezone.",
    {
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
)


class StaticCallback(ToolCallback):
    def __init__(self, definition: ToolDefinition) -> None:
        self._definition = definition

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        raise AssertionError("the chat model never runs tools")


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None):
    return httpx2.Response(
        status, json=data, headers={"x-request-id": "req_123", **(headers or {})}
    )


def sse_response(chunks: list[Any]) -> httpx2.Response:
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(
        200,
        content=body.encode(),
        headers={"content-type": "text/event-stream", "x-request-id": "req_123"},
    )


class Replay:
    """A MockTransport handler answering each request with the next scripted response."""

    def __init__(self, *responses: httpx2.Response | Exception | Callable[..., Any]) -> None:
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        response = self.responses.pop(0)
        if isinstance(response, Exception):
            raise response
        return response

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(request.content) for request in self.requests]


def make_model(replay: Replay, *, max_retries: int = 0, **defaults: Any) -> OpenAIChatModel:
    client = openai.OpenAI(
        api_key=API_KEY,
        base_url=BASE_URL,
        max_retries=max_retries,
        http_client=httpx2.Client(transport=httpx2.MockTransport(replay)),
    )
    return OpenAIChatModel("gpt-4o-mini", client=client, **defaults)


@pytest.fixture(autouse=True)
def isolated_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Django settings provider and no OPENAI_* variables leak into these tests."""
    monkeypatch.setattr(_settings, "_provider", None)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)


def use_chat_model_settings(monkeypatch: pytest.MonkeyPatch, **chat_model: Any) -> None:
    settings = CoreSettings(chat_model=chat_model)
    monkeypatch.setattr(_settings, "_provider", lambda: settings)


# -- request body --------------------------------------------------------------------------------


def test_messages_of_a_tool_round_trip_become_chat_completions_messages() -> None:
    replay = Replay(json_response(load("chat_completion_text.json")))
    model = make_model(replay)
    prompt = Prompt(
        [
            SystemMessage("Be brief."),
            UserMessage("Weather and time in Oslo?"),
            AssistantMessage(
                None,
                [
                    ToolCall("call_A1", "get_weather", '{"city":"Oslo"}'),
                    ToolCall("call_B2", "get_time", '{"timezone":"Europe/Oslo"}'),
                ],
            ),
            ToolResponseMessage(
                [
                    ToolResponse("call_A1", "get_weather", "Sunny, 21C"),
                    ToolResponse("call_B2", "get_time", "Unknown timezone", is_error=True),
                ]
            ),
            AssistantMessage("Sunny."),
            UserMessage("Thanks"),
        ]
    )

    model.call(prompt)

    assert replay.bodies == [
        {
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather and time in Oslo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_A1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        },
                        {
                            "id": "call_B2",
                            "type": "function",
                            "function": {
                                "name": "get_time",
                                "arguments": '{"timezone":"Europe/Oslo"}',
                            },
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_A1", "content": "Sunny, 21C"},
                {"role": "tool", "tool_call_id": "call_B2", "content": "Unknown timezone"},
                {"role": "assistant", "content": "Sunny."},
                {"role": "user", "content": "Thanks"},
            ],
        }
    ]
    assert replay.requests[0].url == "https://api.example.test/v1/chat/completions"


def test_tools_go_out_as_functions_with_tool_choice_and_parallel_tool_calls() -> None:
    replay = Replay(json_response(load("chat_completion_tool_call.json")))
    model = make_model(replay, temperature=0.2)
    options = ToolCallingChatOptions(
        tool_callbacks=[StaticCallback(WEATHER), StaticCallback(TIME)],
        tool_choice="required",
        parallel_tool_calls=False,
    )

    model.call(Prompt("Weather?", options))

    assert replay.bodies[0] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Weather?"}],
        "temperature": 0.2,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Return the current weather for a city.",
                    "parameters": WEATHER.input_schema,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "get_time",
                    "description": "Return the current time in a timezone.",
                    "parameters": TIME.input_schema,
                },
            },
        ],
    }


def test_tool_choice_and_parallel_tool_calls_are_dropped_without_tools() -> None:
    replay = Replay(json_response(load("chat_completion_text.json")))
    model = make_model(replay, tool_choice="auto", parallel_tool_calls=True, strict=True)

    model.call(Prompt("Hi", ToolCallingChatOptions(temperature=0)))

    assert replay.bodies[0] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0,
    }


def test_strict_option_sends_strict_schemas() -> None:
    from tool_calling.core.tools.schema import to_strict_json_schema

    replay = Replay(json_response(load("chat_completion_tool_call.json")))
    model = make_model(replay, strict=True)

    model.call(Prompt("Weather?", ToolCallingChatOptions(tool_callbacks=[StaticCallback(WEATHER)])))

    strict_schema = to_strict_json_schema(WEATHER.input_schema)
    assert strict_schema != WEATHER.input_schema  # 'unit' is optional, so the transform shows
    assert replay.bodies[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Return the current weather for a city.",
                "parameters": strict_schema,
                "strict": True,
            },
        }
    ]
    assert "strict" not in replay.bodies[0]


def test_prompt_options_override_defaults_which_override_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_chat_model_settings(
        monkeypatch, OPTIONS={"temperature": 0.1, "max_tokens": 100, "seed": 7, "top_p": 0.5}
    )
    replay = Replay(json_response(load("chat_completion_text.json")))
    model = make_model(replay, temperature=0.5, seed=8)

    model.call(Prompt("Hi", ChatOptions("gpt-4.1", temperature=0.9, seed=None)))

    assert replay.bodies[0] == {
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.9,
        "max_tokens": 100,
        "top_p": 0.5,
    }


def test_options_unknown_to_the_sdk_are_sent_in_the_body() -> None:
    replay = Replay(json_response(load("chat_completion_text.json")))
    model = make_model(replay, top_k=40)

    model.call(Prompt("Hi", ChatOptions(repetition_penalty=1.1)))

    assert replay.bodies[0]["top_k"] == 40
    assert replay.bodies[0]["repetition_penalty"] == 1.1


def test_tool_names_without_a_manager_raise() -> None:
    model = make_model(Replay())
    options = ToolCallingChatOptions(tool_names=["get_weather", "get_time"])

    message = (
        "OpenAIChatModel cannot resolve the tool names ['get_weather', 'get_time']: it has no "
        "tool calling manager. Pass tool_calling_manager=... or offer the tools as tool_callbacks."
    )
    with pytest.raises(ToolResolutionError, match=re.escape(message)):
        model.call(Prompt("Hi", options))


def test_the_tool_calling_manager_resolves_the_definitions() -> None:
    class Manager:
        def __init__(self) -> None:
            self.seen: list[Any] = []

        def resolve_tool_definitions(self, options: Any) -> list[ToolDefinition]:
            self.seen.append(options)
            return [TIME]

    manager = Manager()
    replay = Replay(json_response(load("chat_completion_text.json")))
    client = openai.OpenAI(
        api_key=API_KEY,
        base_url=BASE_URL,
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(replay)),
    )
    model = OpenAIChatModel(client=client, tool_calling_manager=manager)  # type: ignore[arg-type]
    options = ToolCallingChatOptions(tool_names=["get_time"])

    model.call(Prompt("Time?", options))

    assert manager.seen == [options]
    assert [tool["function"]["name"] for tool in replay.bodies[0]["tools"]] == ["get_time"]


# -- configuration -------------------------------------------------------------------------------


def test_model_name_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OpenAIChatModel().model == "gpt-4o-mini"
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    assert OpenAIChatModel().model == "env-model"
    use_chat_model_settings(monkeypatch, MODEL="settings-model")
    assert OpenAIChatModel().model == "settings-model"
    assert OpenAIChatModel("explicit-model").model == "explicit-model"


def test_connection_settings_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.example.test/v1")
    client = OpenAIChatModel().client
    assert (client.api_key, str(client.base_url)) == ("sk-env", "http://env.example.test/v1/")

    use_chat_model_settings(
        monkeypatch,
        API_KEY="sk-settings",
        BASE_URL="http://settings.example.test/v1",
        TIMEOUT=12.5,
        MAX_RETRIES=5,
    )
    client = OpenAIChatModel().client
    assert (client.api_key, str(client.base_url), client.timeout, client.max_retries) == (
        "sk-settings",
        "http://settings.example.test/v1/",
        12.5,
        5,
    )

    client = OpenAIChatModel(
        api_key="sk-explicit", base_url="http://explicit.test/v1", timeout=3, max_retries=0
    ).client
    assert (client.api_key, str(client.base_url), client.timeout, client.max_retries) == (
        "sk-explicit",
        "http://explicit.test/v1/",
        3,
        0,
    )


def test_a_local_base_url_without_a_key_uses_a_placeholder_key() -> None:
    client = OpenAIChatModel(base_url="http://127.0.0.1:11434/v1").client
    assert client.api_key == "not-needed"


def test_a_missing_key_fails_on_the_first_call_not_on_construction() -> None:
    model = OpenAIChatModel()  # constructing never needs the key

    message = (
        "No API key configured for model 'gpt-4o-mini': pass api_key=..., set "
        "TOOL_CALLING['CHAT_MODEL']['API_KEY'] or the OPENAI_API_KEY environment variable, or "
        "set BASE_URL to a local OpenAI-compatible server."
    )
    with pytest.raises(ChatModelAuthenticationError, match=re.escape(message)):
        model.call(Prompt("Hi"))


def test_a_client_cannot_be_combined_with_connection_arguments() -> None:
    client = openai.OpenAI(api_key=API_KEY)
    message = (
        "OpenAIChatModel: pass either a client or api_key, base_url, not both; the client "
        "already carries its own configuration."
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        OpenAIChatModel(client=client, api_key="sk-other", base_url="http://x.test/v1")


def test_default_options_carry_the_model_and_merged_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_chat_model_settings(monkeypatch, OPTIONS={"temperature": 0.1, "max_tokens": 10})
    options = OpenAIChatModel("gpt-4.1", temperature=0.3).default_options

    assert options == ToolCallingChatOptions("gpt-4.1", temperature=0.3, max_tokens=10)


# -- responses -----------------------------------------------------------------------------------

METADATA_TEXT = {
    "id": "chatcmpl-AbC123text",
    "model": "gpt-4o-mini-2024-07-18",
    "created": 1727000000,
    "system_fingerprint": "fp_0ba0d124f1",
    "usage": {"prompt_tokens": 52, "completion_tokens": 11, "total_tokens": 63},
}


def test_a_text_answer_is_parsed() -> None:
    model = make_model(Replay(json_response(load("chat_completion_text.json"))))

    response = model.call(Prompt("Weather in Oslo?"))

    assert response == ChatResponse(
        [
            Generation(
                AssistantMessage(
                    "It is sunny in Oslo today, 21 degrees.",
                    [],
                    {"id": "chatcmpl-AbC123text", "role": "assistant"},
                ),
                finish_reason="stop",
            )
        ],
        metadata=METADATA_TEXT,
    )


def test_a_tool_call_is_parsed() -> None:
    model = make_model(Replay(json_response(load("chat_completion_tool_call.json"))))

    response = model.call(Prompt("Weather in Oslo?"))

    assert response == ChatResponse(
        [
            Generation(
                AssistantMessage(
                    None,
                    [ToolCall("call_Vx8Zp1", "get_weather", '{"city":"Oslo"}')],
                    {"id": "chatcmpl-AbC123tool", "role": "assistant"},
                ),
                finish_reason="tool_calls",
            )
        ],
        metadata={
            "id": "chatcmpl-AbC123tool",
            "model": "gpt-4o-mini-2024-07-18",
            "created": 1727000001,
            "system_fingerprint": "fp_0ba0d124f1",
            "usage": {"prompt_tokens": 80, "completion_tokens": 15, "total_tokens": 95},
        },
    )
    assert response.has_tool_calls()


def test_parallel_tool_calls_are_parsed_in_order() -> None:
    model = make_model(Replay(json_response(load("chat_completion_parallel_tool_calls.json"))))

    response = model.call(Prompt("Weather and time in Oslo?"))

    assert response.result is not None
    assert response.result.output.tool_calls == [
        ToolCall("call_A1", "get_weather", '{"city":"Oslo"}'),
        ToolCall("call_B2", "get_time", '{"timezone":"Europe/Oslo"}'),
    ]
    assert response.result.finish_reason == "tool_calls"
    assert response.metadata["usage"] == {
        "prompt_tokens": 95,
        "completion_tokens": 48,
        "total_tokens": 143,
    }


def test_a_refusal_is_kept_in_the_message_metadata() -> None:
    model = make_model(Replay(json_response(load("chat_completion_refusal.json"))))

    response = model.call(Prompt("Something bad"))

    assert response.result is not None
    assert response.result.output == AssistantMessage(
        None,
        [],
        {
            "id": "chatcmpl-AbC123ref",
            "role": "assistant",
            "refusal": "I'm sorry, I can't help with that.",
        },
    )


# -- streaming -----------------------------------------------------------------------------------


def test_streamed_text_chunks_concatenate_to_the_non_streamed_text() -> None:
    replay = Replay(sse_response(load("stream_text.json")))
    model = make_model(replay)

    chunks = list(model.stream(Prompt("Weather in Oslo?")))

    texts = [chunk.result.output.text for chunk in chunks if chunk.result is not None]
    assert texts == ["It is", " sunny in", " Oslo today,", " 21 degrees.", None]
    expected_text = load("chat_completion_text.json")["choices"][0]["message"]["content"]
    assert "".join(text or "" for text in texts) == expected_text
    assert [chunk.result.finish_reason for chunk in chunks if chunk.result] == [None] * 4 + ["stop"]
    assert chunks[-1] == ChatResponse(
        [
            Generation(
                AssistantMessage(None, [], {"id": "chatcmpl-AbC123text", "role": "assistant"}),
                finish_reason="stop",
            )
        ],
        metadata=METADATA_TEXT,
    )
    assert chunks[0].metadata == {
        key: METADATA_TEXT[key] for key in METADATA_TEXT if key != "usage"
    }
    body = replay.bodies[0]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


def test_interleaved_parallel_tool_call_deltas_are_joined_by_index() -> None:
    model = make_model(Replay(sse_response(load("stream_parallel_tool_calls.json"))))

    chunks = list(model.stream(Prompt("Weather and time in Oslo?")))

    assert chunks == [
        ChatResponse(
            [
                Generation(
                    AssistantMessage(
                        None,
                        [
                            ToolCall("call_A1", "get_weather", '{"city":"Oslo"}'),
                            ToolCall("call_B2", "get_time", '{"timezone":"Europe/Oslo"}'),
                        ],
                        {"id": "chatcmpl-AbC123par", "role": "assistant"},
                    ),
                    finish_reason="tool_calls",
                )
            ],
            metadata={
                "id": "chatcmpl-AbC123par",
                "model": "gpt-4o-mini-2024-07-18",
                "created": 1727000002,
                "system_fingerprint": "fp_0ba0d124f1",
                "usage": {"prompt_tokens": 95, "completion_tokens": 48, "total_tokens": 143},
            },
        )
    ]


def test_usage_in_the_finish_chunk_and_a_missing_usage_chunk_are_both_handled() -> None:
    chunks = load("stream_text.json")
    usage_in_finish = [*chunks[:-2], {**chunks[-2], "usage": chunks[-1]["usage"]}]
    no_usage = chunks[:-1]
    model = make_model(Replay(sse_response(usage_in_finish), sse_response(no_usage)))

    with_usage = list(model.stream(Prompt("Hi")))
    without_usage = list(model.stream(Prompt("Hi")))

    assert with_usage[-1].metadata["usage"] == METADATA_TEXT["usage"]
    assert with_usage[-1].result is not None and with_usage[-1].result.finish_reason == "stop"
    assert without_usage[-1].metadata["usage"] is None
    assert without_usage[-1].result is not None and without_usage[-1].result.finish_reason == "stop"


def test_tool_call_pieces_without_an_id_after_the_first_keep_the_first_id() -> None:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def delta(**fields: Any) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": fields, "finish_reason": None}]}

    chunks = [
        delta(content="Let me check. "),
        delta(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "get_weather"}}]),
        delta(tool_calls=[{"index": 0, "id": "call_1", "function": {"arguments": '{"city"'}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": ':"Oslo"}'}}]),
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    model = make_model(Replay(sse_response(chunks)))

    result = list(model.stream(Prompt("Hi")))

    assert [chunk.result.output.text for chunk in result if chunk.result] == [
        "Let me check. ",
        None,
    ]
    assert result[-1].result is not None
    assert result[-1].result.output.tool_calls == [
        ToolCall("call_1", "get_weather", '{"city":"Oslo"}')
    ]


# -- errors --------------------------------------------------------------------------------------


def assert_secrets_absent(error: BaseException) -> None:
    assert API_KEY not in str(error)
    assert "secret prompt" not in str(error)


def test_401_is_an_authentication_error_without_the_key() -> None:
    model = make_model(Replay(json_response(load("error_401.json"), 401)))

    with pytest.raises(ChatModelAuthenticationError) as caught:
        model.call(Prompt("my secret prompt"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned 401 Unauthorized for model 'gpt-4o-mini' (request id "
        "req_123): Incorrect API key provided: sk-***. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )
    assert (caught.value.status_code, caught.value.request_id) == (401, "req_123")
    assert isinstance(caught.value.__cause__, openai.AuthenticationError)
    assert_secrets_absent(caught.value)


def test_403_is_an_authentication_error() -> None:
    body = {"error": {"message": "You are not allowed to use this model.", "type": "x"}}
    model = make_model(Replay(json_response(body, 403)))

    with pytest.raises(ChatModelAuthenticationError) as caught:
        model.call(Prompt("Hi"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned 403 Forbidden for model 'gpt-4o-mini' (request id "
        "req_123): You are not allowed to use this model."
    )


def test_a_server_message_echoing_the_key_is_masked() -> None:
    body = {"error": {"message": f"Key {API_KEY} was revoked; header Bearer abc.def"}}
    model = make_model(Replay(json_response(body, 401)))

    with pytest.raises(ChatModelAuthenticationError) as caught:
        model.call(Prompt("Hi"))

    assert str(caught.value).endswith(
        "(request id req_123): Key *** was revoked; header Bearer ***"
    )


def test_404_is_a_not_found_error() -> None:
    model = make_model(Replay(json_response(load("error_404.json"), 404)))

    with pytest.raises(ChatModelNotFoundError) as caught:
        model.call(Prompt("my secret prompt"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned 404 Not Found for model 'gpt-4o-mini' (request id "
        "req_123): The model `gpt-4o-mini` does not exist or you do not have access to it."
    )
    assert caught.value.status_code == 404
    assert_secrets_absent(caught.value)


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [({"retry-after": "20"}, 20.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)],
)
def test_429_is_a_rate_limit_error_with_retry_after(
    headers: dict[str, str], retry_after: float | None
) -> None:
    model = make_model(Replay(json_response(load("error_429.json"), 429, headers)))

    with pytest.raises(ChatModelRateLimitError) as caught:
        model.call(Prompt("my secret prompt"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned 429 Too Many Requests for model 'gpt-4o-mini' (request id "
        "req_123): Rate limit reached for gpt-4o-mini in organization org-test on requests per "
        "min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s."
    )
    assert (caught.value.status_code, caught.value.retry_after) == (429, retry_after)
    assert_secrets_absent(caught.value)


def test_500_is_a_response_error_after_the_sdk_retries() -> None:
    fast_retry = {"retry-after-ms": "1"}
    replay = Replay(
        json_response(load("error_500.json"), 500, fast_retry),
        json_response(load("error_500.json"), 500, fast_retry),
    )
    model = make_model(replay, max_retries=1)

    with pytest.raises(ChatModelResponseError) as caught:
        model.call(Prompt("my secret prompt"))

    assert len(replay.requests) == 2  # the SDK retried once before giving up
    assert str(caught.value) == (
        "OpenAI-compatible API returned 500 Internal Server Error for model 'gpt-4o-mini' "
        "(request id req_123): The server had an error while processing your request. Sorry "
        "about that!"
    )
    assert caught.value.status_code == 500
    assert_secrets_absent(caught.value)


def test_a_500_then_success_is_retried_by_the_sdk() -> None:
    replay = Replay(
        json_response(load("error_500.json"), 500, {"retry-after-ms": "1"}),
        json_response(load("chat_completion_text.json")),
    )
    model = make_model(replay, max_retries=1)

    response = model.call(Prompt("Hi"))

    assert response.result is not None
    assert response.result.output.text == "It is sunny in Oslo today, 21 degrees."
    assert len(replay.requests) == 2


def test_other_4xx_are_plain_chat_model_errors() -> None:
    body = {"error": {"message": "Invalid value for 'temperature'.", "type": "x"}}
    model = make_model(Replay(json_response(body, 400)))

    with pytest.raises(ChatModelError) as caught:
        model.call(Prompt("Hi"))

    assert type(caught.value) is ChatModelError
    assert str(caught.value) == (
        "OpenAI-compatible API returned 400 Bad Request for model 'gpt-4o-mini' (request id "
        "req_123): Invalid value for 'temperature'."
    )


def test_a_timeout_is_a_timeout_error() -> None:
    model = make_model(Replay(httpx2.ReadTimeout("read timed out")))

    with pytest.raises(ChatModelTimeoutError) as caught:
        model.call(Prompt("my secret prompt"))

    assert str(caught.value) == (
        "OpenAI-compatible API at https://api.example.test/v1 timed out for model 'gpt-4o-mini'."
    )
    assert isinstance(caught.value.__cause__, openai.APITimeoutError)


def test_a_connection_failure_is_a_timeout_error() -> None:
    model = make_model(Replay(httpx2.ConnectError("connection refused")))

    with pytest.raises(ChatModelTimeoutError) as caught:
        model.call(Prompt("Hi"))

    assert str(caught.value) == (
        "Could not connect to the OpenAI-compatible API at https://api.example.test/v1 for model "
        "'gpt-4o-mini' (ConnectError)."
    )


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (
            httpx2.Response(
                200,
                content=b'{"id": "chatcmpl-1", "choices": [',
                headers={"content-type": "application/json", "x-request-id": "req_123"},
            ),
            "the body is not valid JSON",
        ),
        (
            json_response({"id": "chatcmpl-1", "object": "chat.completion"}),
            "'choices' is missing or empty",
        ),
        (json_response({"choices": [{"index": 0}]}), "choice 0 has no 'message' object"),
        (
            json_response(
                {"choices": [{"message": {"tool_calls": [{"id": "c", "function": {}}]}}]}
            ),
            "choice 0 tool call 0 has no function name",
        ),
        (
            json_response(
                {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": "many"}}
            ),
            "'usage.prompt_tokens' is not an integer",
        ),
        (
            httpx2.Response(
                200,
                content=b"<html>Bad gateway</html>",
                headers={"content-type": "text/html", "x-request-id": "req_123"},
            ),
            "the body is not a JSON object",
        ),
    ],
)
def test_a_malformed_body_is_a_response_error(response: httpx2.Response, reason: str) -> None:
    model = make_model(Replay(response))

    with pytest.raises(ChatModelResponseError) as caught:
        model.call(Prompt("my secret prompt"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned a malformed response for model 'gpt-4o-mini' "
        f"(request id req_123): {reason}."
    )
    assert caught.value.request_id == "req_123"
    assert_secrets_absent(caught.value)


def test_a_malformed_stream_event_is_a_response_error() -> None:
    body = b'data: {"id": "chatcmpl-1", "choices": [\n\ndata: [DONE]\n\n'
    response = httpx2.Response(
        200, content=body, headers={"content-type": "text/event-stream", "x-request-id": "req_9"}
    )
    model = make_model(Replay(response))

    with pytest.raises(ChatModelResponseError) as caught:
        list(model.stream(Prompt("Hi")))

    assert str(caught.value) == (
        "OpenAI-compatible API returned a malformed response for model 'gpt-4o-mini' "
        "(request id req_9): the body is not valid JSON."
    )


def test_an_error_event_in_a_stream_is_a_response_error() -> None:
    chunks = load("stream_text.json")[:2] + [{"error": {"message": "The model overloaded."}}]
    model = make_model(Replay(sse_response(chunks)))

    received: list[ChatResponse] = []
    with pytest.raises(ChatModelResponseError) as caught:
        for chunk in model.stream(Prompt("Hi")):
            received.append(chunk)

    assert [chunk.result.output.text for chunk in received if chunk.result] == ["It is"]
    assert str(caught.value) == (
        "OpenAI-compatible API reported an error for model 'gpt-4o-mini' (request id req_123): "
        "The model overloaded."
    )


def test_an_error_status_on_a_stream_request_is_translated() -> None:
    model = make_model(Replay(json_response(load("error_429.json"), 429, {"retry-after": "2"})))

    with pytest.raises(ChatModelRateLimitError) as caught:
        list(model.stream(Prompt("Hi")))

    assert caught.value.retry_after == 2.0


# -- async ---------------------------------------------------------------------------------------


def make_async_model(replay: Replay) -> OpenAIChatModel:
    client = openai.AsyncOpenAI(
        api_key=API_KEY,
        base_url=BASE_URL,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(replay)),
    )
    return OpenAIChatModel("gpt-4o-mini", async_client=client)


def test_acall_parses_like_call() -> None:
    replay = Replay(json_response(load("chat_completion_tool_call.json")))
    sync_model = make_model(Replay(json_response(load("chat_completion_tool_call.json"))))
    prompt = Prompt("Weather?", ToolCallingChatOptions(tool_callbacks=[StaticCallback(WEATHER)]))

    response = asyncio.run(make_async_model(replay).acall(prompt))

    assert response == sync_model.call(prompt)
    assert replay.bodies[0]["tools"][0]["function"]["name"] == "get_weather"


def test_astream_yields_like_stream() -> None:
    replay = Replay(sse_response(load("stream_parallel_tool_calls.json")))
    sync_model = make_model(Replay(sse_response(load("stream_parallel_tool_calls.json"))))

    async def collect() -> list[ChatResponse]:
        return [chunk async for chunk in make_async_model(replay).astream(Prompt("Hi"))]

    chunks = asyncio.run(collect())

    assert chunks == list(sync_model.stream(Prompt("Hi")))
    assert chunks[-1].metadata["usage"] == {
        "prompt_tokens": 95,
        "completion_tokens": 48,
        "total_tokens": 143,
    }


def test_async_errors_are_translated() -> None:
    model = make_async_model(Replay(json_response(load("error_404.json"), 404)))

    with pytest.raises(ChatModelNotFoundError) as caught:
        asyncio.run(model.acall(Prompt("Hi")))

    assert caught.value.request_id == "req_123"


def test_models_of_one_configuration_share_one_client() -> None:
    """A governed turn builds its model anew: the client (its SSL context, its connections) is
    built once per configuration and process, not once per model."""
    first = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5)
    second = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5)
    other_key = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", api_key="other", timeout=5)
    other_timeout = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=6)
    assert first.client is second.client
    assert other_key.client is not first.client
    assert other_timeout.client is not first.client
    assert (str(first.client.base_url), first.client.api_key) == ("http://127.0.0.1:9/v1/", "k")
