"""The real openai SDK over HTTP against ReplayServer: what users run against a local server."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tool_calling.core import _settings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition
from tool_calling.exceptions import (
    ChatModelRateLimitError,
    ChatModelResponseError,
    ChatModelTimeoutError,
)
from tool_calling.testing import ReplayServer, text, tool_call, tool_calls
from tool_calling.testing.server import CREATED

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def definition(name: str, properties: dict[str, Any], required: list[str]) -> ToolDefinition:
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return ToolDefinition(name, f"The {name} tool.", schema)


WEATHER = definition("get_weather", {"city": {"type": "string"}}, ["city"])
TIME = definition("get_time", {"timezone": {"type": "string"}}, ["timezone"])
ADD = definition("add", {"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a", "b"])


class StaticCallback(ToolCallback):
    def __init__(self, definition: ToolDefinition) -> None:
        self._definition = definition

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        raise AssertionError("the chat model never runs tools")


def with_tools(text: str, *definitions: ToolDefinition) -> Prompt:
    callbacks = [StaticCallback(d) for d in definitions]
    return Prompt(text, ToolCallingChatOptions(tool_callbacks=callbacks))


def model_for(server: ReplayServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("max_retries", 0)
    return OpenAIChatModel("replay-model", base_url=server.base_url + "/v1", **kwargs)


@pytest.fixture(autouse=True)
def isolated_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_settings, "_provider", None)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


# -- scripted answers ----------------------------------------------------------------------------


def test_a_tool_call_then_a_text_answer() -> None:
    steps = [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"text": "Sunny in Oslo."},
    ]
    with ReplayServer(steps) as server:
        model = model_for(server)
        first = model.call(with_tools("Weather in Oslo?", WEATHER))
        history = [
            UserMessage("Weather in Oslo?"),
            first.generations[0].output,
            ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny")]),
        ]
        second = model.call(Prompt(history))
        requests = server.requests

    assert first == ChatResponse(
        [
            Generation(
                AssistantMessage(
                    None,
                    [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')],
                    {"id": "chatcmpl-replay-1", "role": "assistant"},
                ),
                finish_reason="tool_calls",
            )
        ],
        metadata={
            "id": "chatcmpl-replay-1",
            "model": "replay-model",
            "created": CREATED,
            "system_fingerprint": "fp_replay",
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    )
    assert second.result is not None and second.result.output.text == "Sunny in Oslo."
    assert requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The get_weather tool.",
                "parameters": WEATHER.input_schema,
            },
        }
    ]
    assert requests[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]


def test_streamed_parallel_tool_calls_are_reassembled() -> None:
    steps = [
        tool_calls(
            tool_call("get_weather", city="Oslo, Norway"),
            tool_call("get_time", timezone="Europe/Oslo"),
        )
    ]
    with ReplayServer(steps) as server:
        chunks = list(model_for(server).stream(with_tools("Weather and time?", WEATHER, TIME)))
        request = server.requests[0]

    assert chunks == [
        ChatResponse(
            [
                Generation(
                    AssistantMessage(
                        None,
                        [
                            ToolCall("call_1", "get_weather", '{"city":"Oslo, Norway"}'),
                            ToolCall("call_2", "get_time", '{"timezone":"Europe/Oslo"}'),
                        ],
                        {"id": "chatcmpl-replay-1", "role": "assistant"},
                    ),
                    finish_reason="tool_calls",
                )
            ],
            metadata={
                "id": "chatcmpl-replay-1",
                "model": "replay-model",
                "created": CREATED,
                "system_fingerprint": "fp_replay",
                "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
            },
        )
    ]
    assert (request["stream"], request["stream_options"]) == (True, {"include_usage": True})


def test_streamed_text_matches_the_non_streamed_text() -> None:
    answer = "It is sunny in Oslo today, 21 degrees and a light breeze."
    with ReplayServer([text(answer), text(answer)]) as server:
        model = model_for(server)
        chunks = list(model.stream(Prompt("Weather?")))
        whole = model.call(Prompt("Weather?"))

    texts = [chunk.result.output.text for chunk in chunks if chunk.result]
    assert texts == ["It is sunny ", "in Oslo today, ", "21 degrees and ", "a light breeze.", None]
    assert whole.result is not None and "".join(t or "" for t in texts) == whole.result.output.text
    assert chunks[-1].result is not None and chunks[-1].result.finish_reason == "stop"
    assert chunks[-1].metadata["usage"] == whole.metadata["usage"]


def test_the_sdk_retries_a_500_and_succeeds() -> None:
    steps = [{"status": 500, "headers": {"retry-after-ms": "10"}}, {"text": "recovered"}]
    with ReplayServer(steps) as server:
        response = model_for(server, max_retries=2).call(Prompt("Hi"))
        assert len(server.requests) == 2

    assert response.result is not None and response.result.output.text == "recovered"


def test_the_sdk_retries_a_429_with_retry_after_zero_and_succeeds() -> None:
    steps = [{"status": 429, "headers": {"retry-after": "0"}}, {"text": "after the limit"}]
    with ReplayServer(steps) as server:
        response = model_for(server, max_retries=1).call(Prompt("Hi"))
        assert server.remaining_steps == 0

    assert response.result is not None and response.result.output.text == "after the limit"


def test_a_429_without_retries_left_is_a_rate_limit_error() -> None:
    with ReplayServer([{"status": 429, "headers": {"retry-after": "1"}}]) as server:
        with pytest.raises(ChatModelRateLimitError) as caught:
            model_for(server).call(Prompt("Hi"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned 429 Too Many Requests for model 'replay-model' "
        "(request id req_replay_1): Scripted 429 Too Many Requests"
    )
    assert (caught.value.retry_after, caught.value.request_id) == (1.0, "req_replay_1")


@pytest.mark.parametrize("stream", [False, True])
def test_a_malformed_body_is_a_response_error(stream: bool) -> None:
    with ReplayServer([{"malformed": True}]) as server:
        model = model_for(server)
        with pytest.raises(ChatModelResponseError) as caught:
            if stream:
                list(model.stream(Prompt("Hi")))
            else:
                model.call(Prompt("Hi"))

    assert str(caught.value) == (
        "OpenAI-compatible API returned a malformed response for model 'replay-model' "
        "(request id req_replay_1): the body is not valid JSON."
    )


def test_an_exhausted_script_answers_500_with_an_explanation() -> None:
    with ReplayServer([text("only")]) as server:
        model = model_for(server, max_retries=2)
        model.call(Prompt("1"))
        with pytest.raises(ChatModelResponseError) as caught:
            model.call(Prompt("2"))
        assert len(server.requests) == 2  # x-should-retry: false stops the SDK's retries

    assert str(caught.value) == (
        "OpenAI-compatible API returned 500 Internal Server Error for model 'replay-model' "
        "(request id req_replay_2): ReplayServer script exhausted: request 2 arrived but the "
        "script has only 1 step(s)."
    )


def test_a_slow_answer_times_out() -> None:
    with ReplayServer([{"delay": 2, "text": "too late"}]) as server:
        model = model_for(server, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(ChatModelTimeoutError) as caught:
            model.call(Prompt("Hi"))

    assert time.monotonic() - started < 1.5
    assert str(caught.value) == (
        f"OpenAI-compatible API at {server.base_url}/v1 timed out for model 'replay-model'."
    )


def test_async_calls_go_over_http_too() -> None:
    with ReplayServer([tool_call("add", a=1, b=2), text("3")]) as server:
        model = model_for(server)

        async def run() -> tuple[ChatResponse, list[ChatResponse]]:
            first = await model.acall(with_tools("add 1 and 2", ADD))
            chunks = [chunk async for chunk in model.astream(Prompt("x"))]
            return first, chunks

        first, chunks = asyncio.run(run())

    assert first.result is not None
    assert first.result.output.tool_calls == [ToolCall("call_1", "add", '{"a":1,"b":2}')]
    assert [c.result.output.text for c in chunks if c.result] == ["3", None]


def test_models_and_recorded_requests_endpoints() -> None:
    with ReplayServer([text("hi")], model="local-llm") as server:
        model_for(server).call(Prompt("Hi"))
        raw = {"model": "m", "messages": [{"role": "user", "content": "no key"}]}
        request = urllib.request.Request(
            server.base_url + "/v1/chat/completions",
            data=json.dumps(raw).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as caught:  # the script is exhausted
            urllib.request.urlopen(request, timeout=10)
        with caught.value:
            error_body = json.loads(caught.value.read())
        models = get_json(server.base_url + "/v1/models")
        recorded = get_json(server.base_url + "/_requests")

    assert caught.value.code == 500
    assert error_body == {
        "error": {
            "message": "ReplayServer script exhausted: request 2 arrived but the script has "
            "only 1 step(s).",
            "type": "replay_script_exhausted",
            "param": None,
            "code": None,
        }
    }
    assert models == {
        "object": "list",
        "data": [
            {
                "id": "local-llm",
                "object": "model",
                "created": CREATED,
                "owned_by": "tool_calling-replay",
            }
        ],
    }
    assert recorded == {
        "requests": [
            {"model": "replay-model", "messages": [{"role": "user", "content": "Hi"}]},
            raw,
        ],
        "authorization": [True, False],
    }


# -- demo mode -----------------------------------------------------------------------------------


def test_demo_mode_calls_a_named_tool_with_arguments_from_json_in_the_message() -> None:
    with ReplayServer(mode="demo") as server:
        response = model_for(server).call(
            with_tools('Please use add with {"a": 2, "b": 40}', ADD, WEATHER)
        )

    assert response.result is not None
    assert response.result.output.tool_calls == [ToolCall("call_1", "add", '{"a":2,"b":40}')]


def test_demo_mode_fills_arguments_from_the_words_of_the_message() -> None:
    with ReplayServer(mode="demo") as server:
        model = model_for(server)
        weather = model.call(with_tools("Get weather in Oslo please", WEATHER, ADD))
        total = model.call(with_tools("add 2 and 40", ADD, WEATHER))

    assert weather.result is not None and total.result is not None
    assert weather.result.output.tool_calls == [
        ToolCall("call_1", "get_weather", '{"city":"Oslo"}')
    ]
    assert total.result.output.tool_calls == [ToolCall("call_2", "add", '{"a":2,"b":40}')]


def test_demo_mode_answers_tool_results_in_sentences() -> None:
    weather = '{"city": "Oslo", "temperature": 12, "unit": "celsius", "conditions": "rainy"}'
    prompt = Prompt(
        [
            UserMessage("get_weather and get_time for Oslo"),
            AssistantMessage(
                None,
                [
                    ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
                    ToolCall("call_2", "get_time", '{"timezone":"Europe/Oslo"}'),
                ],
            ),
            ToolResponseMessage(
                [
                    ToolResponse("call_1", "get_weather", weather),
                    ToolResponse("call_2", "get_time", "2026-12-04T14:05:00+01:00"),
                ]
            ),
        ]
    )
    with ReplayServer(mode="demo") as server:
        response = model_for(server).call(prompt)
        chunks = list(model_for(server).stream(prompt))

    assert response.result is not None
    assert response.result.output.text == (
        "In Oslo it is rainy and 12 °C. It is 14:05 on Friday 4 December 2026 in Europe/Oslo."
    )
    assert response.result.finish_reason == "stop"
    # Streamed word by word: one chunk per word (and its trailing space).
    pieces = [c.result.output.text for c in chunks if c.result and c.result.output.text]
    assert "".join(pieces) == response.result.output.text
    assert pieces[:4] == ["In ", "Oslo ", "it ", "is "]
    assert all(len(piece.split()) == 1 for piece in pieces)


def test_demo_mode_echoes_when_no_tool_is_named() -> None:
    with ReplayServer(mode="demo") as server:
        response = model_for(server).call(with_tools("Hello there", WEATHER))

    assert response.result is not None
    assert response.result.output.text == (
        "[scripted demo answer, not a real model] You said: 'Hello there'. Name one of the "
        "offered tools in your message and this demo server will call it."
    )


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_demo_mode_answers_a_message_holding_deeply_nested_json(depth: int) -> None:
    """The server's thread used to die on it, which the app reported as a model timeout."""
    deep = '{"a": ' * depth + "1" + "}" * depth
    with ReplayServer(mode="demo") as server:
        model = model_for(server, timeout=10)
        response = model.call(with_tools(f"get_weather in Oslo {deep}", WEATHER))
        after = model.call(with_tools("Hello there", WEATHER))  # and it still serves

    assert response.result is not None
    # Too deep to be the arguments: the demo fills them from the words instead.
    assert response.result.output.tool_calls == [
        ToolCall("call_1", "get_weather", '{"city":"Oslo"}')
    ]
    assert after.result is not None and after.result.output.text


def test_demo_mode_refuses_a_body_nested_too_deeply_with_a_400() -> None:
    with ReplayServer(mode="demo") as server:
        request = urllib.request.Request(
            server.base_url + "/v1/chat/completions",
            ("[" * 100_000 + "]" * 100_000).encode(),
            {"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"]["message"] == (
        "The request body is not JSON (or is nested too deeply to parse)."
    )


def test_an_unexpected_failure_answers_500_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the server answers an error the client can show, never a dropped connection."""
    from tool_calling.testing import _replay as server_module

    def broken(body: Any) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(server_module, "_demo_step", broken)
    with ReplayServer(mode="demo") as server:
        with pytest.raises(ChatModelResponseError) as failed:
            model_for(server).call(with_tools("Hello there", WEATHER))
    assert "ReplayServer failed: KeyError('boom')" in str(failed.value)


# -- the command line ----------------------------------------------------------------------------


def test_the_module_runs_as_a_server_process() -> None:
    command = [sys.executable, "-m", "tool_calling.testing.server", "--port", "0", "--quiet"]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            assert process.stdout is not None
            output = []
            for line in process.stdout:
                output.append(line)
                if line.startswith("Listening on "):
                    break
            banner = "".join(output)
            match = re.search(r"Listening on (http://127\.0\.0\.1:\d+/v1)", banner)
            assert match is not None, banner
            model = OpenAIChatModel("replay-model", base_url=match.group(1), max_retries=0)
            response = model.call(
                with_tools("What is the weather? Use get_weather for Bergen", WEATHER)
            )
            recorded = get_json(match.group(1).removesuffix("/v1") + "/_requests")
        finally:
            process.terminate()

    assert "THE ANSWERS ARE SCRIPTED. THEY DO NOT COME FROM A REAL MODEL." in banner
    assert "(demo mode)" in banner
    assert response.result is not None
    assert response.result.output.tool_calls == [
        ToolCall("call_1", "get_weather", '{"city":"Bergen"}')
    ]
    assert recorded["authorization"] == [True]
    assert recorded["requests"][0]["messages"] == [
        {"role": "user", "content": "What is the weather? Use get_weather for Bergen"}
    ]


def test_demo_mode_matches_the_meaningful_words_of_a_tool_name() -> None:
    """'weather' is enough for get_weather; a generic verb alone ('get') never matches."""
    with ReplayServer(mode="demo") as server:
        model = model_for(server)
        weather = model.call(with_tools("What's the weather in Oslo?", WEATHER, ADD))
        nothing = model.call(with_tools("Can you get me something?", WEATHER, ADD))

    assert weather.result is not None and nothing.result is not None
    assert [c.name for c in weather.result.output.tool_calls] == ["get_weather"]
    assert nothing.result.output.tool_calls == []


def test_chunk_delay_spreads_a_streamed_answer_over_time() -> None:
    answer = "one two three four five six seven eight nine"
    with ReplayServer([{"text": answer, "chunk_delay": 0.2}]) as server:
        model = model_for(server)
        started = time.monotonic()
        arrivals = []
        for chunk in model.stream(Prompt("Count")):
            if chunk.result and chunk.result.output.text:
                arrivals.append((time.monotonic() - started, chunk.result.output.text))

    pieces = [piece for _, piece in arrivals]
    assert pieces == ["one two three ", "four five six ", "seven eight nine"]
    # The role chunk comes first, then a pause before each of the three text chunks.
    assert arrivals[0][0] >= 0.2 and arrivals[-1][0] >= 0.6, arrivals


@pytest.mark.parametrize("value", [-1, "soon", True])
def test_a_bad_chunk_delay_is_refused_with_its_value(value: object) -> None:
    with pytest.raises(ValueError) as caught:
        ReplayServer([{"text": "x", "chunk_delay": value}])
    assert str(caught.value) == (
        f"ReplayServer step 1: 'chunk_delay' must be a number of seconds (0 or more), "
        f"got {value!r}."
    )


def test_a_step_reports_the_usage_it_is_given_called_or_streamed() -> None:
    step = {"text": "Sunny.", "usage": {"prompt_tokens": 52, "completion_tokens": 2}}
    total = {
        "text": "Sunny.",
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 9},
    }
    with ReplayServer([step, step, total]) as server:
        model = model_for(server)
        called = model.call(Prompt("Weather?"))
        streamed = list(model.stream(Prompt("Weather?")))
        given_total = model.call(Prompt("Weather?"))

    expected = {"prompt_tokens": 52, "completion_tokens": 2, "total_tokens": 54}
    assert called.metadata["usage"] == expected
    assert streamed[-1].metadata["usage"] == expected
    assert given_total.metadata["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "total_tokens": 9,
    }


@pytest.mark.parametrize(
    "usage", [{"prompt_tokens": -1}, {"prompt_tokens": True}, {"tokens": 3}, [52, 2]]
)
def test_a_bad_usage_is_refused_with_its_value(usage: object) -> None:
    with pytest.raises(ValueError) as caught:
        ReplayServer([{"text": "x", "usage": usage}])
    assert str(caught.value) == (
        "ReplayServer step 1: 'usage' must map prompt_tokens, completion_tokens and "
        f"total_tokens to counts (0 or more), got {usage!r}."
    )


# -- latency and concurrency (asyncio) -----------------------------------------------------------


def _threads() -> int:
    """The OS threads of this process (Python's own count where /proc is missing)."""
    try:
        return len(list(Path("/proc/self/task").iterdir()))
    except OSError:
        import threading

        return threading.active_count()


async def _raw_post(port: int, body: bytes) -> tuple[int, bytes]:
    """POST ``body`` on a connection of its own (asyncio streams: no thread, no pool)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: replay\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    answer = await reader.read()  # Connection: close, so the answer ends at EOF
    writer.close()
    await writer.wait_closed()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_two_hundred_delayed_answers_in_flight_hold_no_thread_each() -> None:
    """A delayed answer costs a coroutine: 200 at once, each waiting 1 s, add no thread."""
    weather = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": WEATHER.input_schema},
    }
    plain = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "weather in Oslo"}],
            "tools": [weather],
        }
    ).encode()
    streamed = json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Hello"}]}
    ).encode()

    async def run(port: int, before: int) -> tuple[list[tuple[int, bytes]], int]:
        peak = before
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _threads())
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        answers = await asyncio.gather(
            *(_raw_post(port, plain if n % 2 else streamed) for n in range(200))
        )
        done.set()
        await sampler
        return answers, peak

    with ReplayServer(mode="demo", delay=1.0) as server:
        before = _threads()
        answers, peak = asyncio.run(run(server.port, before))
        received = len(server.requests)

    assert received == 200
    assert [status for status, _ in answers] == [200] * 200
    completions = [json.loads(body) for _, body in answers[1::2]]
    assert {
        c["choices"][0]["message"]["tool_calls"][0]["function"]["name"] for c in completions
    } == {"get_weather"}
    assert all(body.endswith(b"data: [DONE]\n\n") for _, body in answers[0::2])
    # The server's one thread was running before the requests; the threaded server it replaces
    # started one per request (201 here).
    assert peak == before, (before, peak)


def test_delay_applies_to_every_demo_answer() -> None:
    with ReplayServer(mode="demo", delay=5) as server:
        model = model_for(server, timeout=0.3)
        with pytest.raises(ChatModelTimeoutError):
            model.call(with_tools("Hello there", WEATHER))


def test_a_step_of_its_own_overrides_the_default_delay() -> None:
    with ReplayServer([{"text": "at once", "delay": 0}], delay=30) as server:
        response = model_for(server, timeout=10).call(Prompt("Hi"))
    assert response.result is not None and response.result.output.text == "at once"


def test_the_default_chunk_delay_spreads_streamed_demo_answers() -> None:
    with ReplayServer(mode="demo", chunk_delay=0.2) as server:
        started = time.monotonic()
        arrivals = [
            time.monotonic() - started
            for chunk in model_for(server).stream(Prompt("one two three four five six"))
            if chunk.result and chunk.result.output.text
        ]
    assert len(arrivals) >= 3
    # The role chunk goes first; every later chunk waited 0.2 s after the one before it.
    assert all(b - a >= 0.15 for a, b in zip(arrivals, arrivals[1:], strict=False)), arrivals


@pytest.mark.parametrize(
    ("name", "value"), [("delay", -1), ("chunk_delay", "soon"), ("delay", True)]
)
def test_a_bad_default_delay_is_refused_with_its_value(name: str, value: object) -> None:
    with pytest.raises(ValueError) as caught:
        ReplayServer(mode="demo", **{name: value})
    assert str(caught.value) == (
        f"ReplayServer {name} must be a number of seconds (0 or more), got {value!r}."
    )


def test_a_kept_alive_connection_serves_request_after_request() -> None:
    import http.client

    with ReplayServer([text("one"), text("two")]) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        texts, sockets = [], []
        for _ in range(2):
            connection.request(
                "POST",
                "/v1/chat/completions",
                json.dumps({"messages": []}),
                {"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            texts.append(json.loads(response.read())["choices"][0]["message"]["content"])
            sockets.append(connection.sock)
        connection.close()
    assert texts == ["one", "two"]
    assert sockets[0] is sockets[1] and sockets[0] is not None


def test_a_chunked_request_body_is_read() -> None:
    import http.client

    with ReplayServer([text("chunked ok")]) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        body = [b'{"messages": ', b'[{"role": "user", "content": "Hi"}]}']
        connection.request(
            "POST",
            "/v1/chat/completions",
            iter(body),
            {"Content-Type": "application/json"},
            encode_chunked=True,
        )
        answer = json.loads(connection.getresponse().read())
        connection.close()
        recorded = server.requests
    assert answer["choices"][0]["message"]["content"] == "chunked ok"
    assert recorded == [{"messages": [{"role": "user", "content": "Hi"}]}]


def test_the_command_line_takes_a_delay() -> None:
    command = [
        sys.executable,
        "-m",
        "tool_calling.testing.server",
        "--port",
        "0",
        "--quiet",
        "--delay",
        "5",
        "--chunk-delay",
        "0.1",
    ]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            assert process.stdout is not None
            output = []
            for line in process.stdout:
                output.append(line)
                if line.startswith("Listening on "):
                    break
            banner = "".join(output)
            match = re.search(r"Listening on (http://127\.0\.0\.1:\d+/v1)", banner)
            assert match is not None, banner
            model = OpenAIChatModel(
                "replay-model", base_url=match.group(1), max_retries=0, timeout=0.3
            )
            with pytest.raises(ChatModelTimeoutError):
                model.call(with_tools("Hello", WEATHER))
        finally:
            process.terminate()
    assert "Simulated latency: 5 s before each answer, 0.1 s between the chunks" in banner


def test_the_command_line_refuses_a_negative_delay() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tool_calling.testing.server", "--delay", "-1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "argument --delay: must be a number of seconds (0 or more), got '-1'" in result.stderr
