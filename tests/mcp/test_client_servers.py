"""McpToolCallbackProvider against real servers nobody here wrote.

@modelcontextprotocol/server-everything (Node, the TypeScript SDK) over stdio and streamable
HTTP, and mcp-server-time (PyPI, the Python SDK's 1.x generation) over stdio in its own
virtualenv; both installed by scripts/setup_mcp.sh.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator

import pytest

from tool_calling import ChatClient, DefaultToolCallingManager, ToolResponse, tool_callbacks
from tool_calling.core.mcp import (
    McpConnection,
    McpToolCallback,
    McpToolCallbackProvider,
    StdioTransport,
    StreamableHttpTransport,
)
from tool_calling.testing import ScriptedChatModel, text, tool_call

from ..core._builders import call, responses, run
from ._servers import EVERYTHING, TIME_SERVER, everything_http, node, require

pytestmark = pytest.mark.integration


def _everything_stdio(name: str = "everything", **options: object) -> McpToolCallbackProvider:
    connection = McpConnection(
        StdioTransport(node(), [str(require(EVERYTHING)), "stdio"]),
        name=name,
        request_timeout=15,
    )
    return McpToolCallbackProvider(connection, **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stdio() -> Iterator[McpToolCallbackProvider]:
    provider = _everything_stdio(prefix="everything")
    try:
        yield provider
    finally:
        provider.close()


@pytest.fixture(scope="module")
def http() -> Iterator[McpToolCallbackProvider]:
    with everything_http() as url:
        connection = McpConnection(
            StreamableHttpTransport(url), name="everything-http", request_timeout=15
        )
        provider = McpToolCallbackProvider(connection)
        try:
            yield provider
        finally:
            provider.close()


def _by_name(provider: McpToolCallbackProvider) -> dict[str, McpToolCallback]:
    return {cb.name: cb for cb in provider.refresh()}


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> tuple[McpToolCallbackProvider, str]:
    provider: McpToolCallbackProvider = request.getfixturevalue(request.param)
    return provider, "everything_" if request.param == "stdio" else ""


def test_tools_are_listed_with_the_server_schema_and_the_mapping_kept(
    everything: tuple[McpToolCallbackProvider, str],
) -> None:
    provider, prefix = everything
    tools = _by_name(provider)
    assert {f"{prefix}echo", f"{prefix}get-sum", f"{prefix}get-tiny-image"} <= set(tools)
    echo = tools[f"{prefix}echo"]
    assert echo.definition.input_schema["properties"]["message"]["type"] == "string"
    assert echo.definition.input_schema["required"] == ["message"]
    assert provider.tool_names[f"{prefix}echo"] == "echo"
    assert provider.rejected == {}
    # Annotations are kept for operators, and never lift approval (S18).
    gzip = tools[f"{prefix}gzip-file-as-resource"]
    assert gzip.spec.annotations["idempotentHint"] is True
    assert len(gzip.spec.definition_hash) == 64


def test_a_call_returns_the_servers_text(everything: tuple[McpToolCallbackProvider, str]) -> None:
    provider, prefix = everything
    tools = _by_name(provider)
    assert tools[f"{prefix}echo"].call('{"message": "hello"}') == "Echo: hello"
    assert tools[f"{prefix}get-sum"].call('{"a": 2, "b": 40}') == "The sum of 2 and 40 is 42."


def test_structured_content_and_images_become_text(
    everything: tuple[McpToolCallbackProvider, str],
) -> None:
    provider, prefix = everything
    tools = _by_name(provider)
    weather = tools[f"{prefix}get-structured-content"].call('{"location": "Chicago"}')
    assert json.loads(weather) == {
        "temperature": 36,
        "conditions": "Light rain / drizzle",
        "humidity": 82,
    }
    image = tools[f"{prefix}get-tiny-image"].call("{}")
    assert "[image: image/png, " in image and " bytes]" in image
    assert "iVBOR" not in image  # never the raw base64 bytes
    assert len(image) < 500


def test_an_error_result_is_an_is_error_response(
    everything: tuple[McpToolCallbackProvider, str],
) -> None:
    provider, prefix = everything
    name = f"{prefix}gzip-file-as-resource"
    result = run(
        DefaultToolCallingManager(),
        provider.tool_callbacks(),
        call(name, '{"name": "x.gz", "data": "ftp://example.com/x"}', id="1"),
    )
    assert responses(result) == [
        ToolResponse(
            "1",
            name,
            "Error processing file ftp://example.com/x: Unsupported URL protocol for "
            "ftp://example.com/x. Only http, https, and data URLs are supported.",
            is_error=True,
        )
    ]


def test_bad_arguments_are_refused_before_the_call(
    everything: tuple[McpToolCallbackProvider, str],
) -> None:
    provider, prefix = everything
    name = f"{prefix}get-sum"
    result = run(
        DefaultToolCallingManager(),
        provider.tool_callbacks(),
        call(name, '{"a": "2"}', id="1"),
    )
    assert responses(result) == [
        ToolResponse(
            "1",
            name,
            f"Invalid arguments for tool '{name}':\n"
            "- a: Input should be a valid number\n"
            "- b: Field required",
            is_error=True,
        )
    ]


def test_a_slow_call_times_out_with_an_error_text_then_the_session_still_works(
    everything: tuple[McpToolCallbackProvider, str],
) -> None:
    provider, prefix = everything
    slow = _by_name(provider)[f"{prefix}trigger-long-running-operation"]
    pinned = McpToolCallback(slow.spec, provider.connection, timeout=1)
    started = time.monotonic()
    result = run(
        DefaultToolCallingManager(),
        [pinned],
        call(pinned.name, '{"duration": 5, "steps": 5}', id="1"),
    )
    assert time.monotonic() - started < 4
    assert responses(result) == [
        ToolResponse(
            "1",
            pinned.name,
            f"MCP server {provider.connection.name!r} did not answer tool {pinned.name!r} within "
            "1 seconds; its outcome is unknown. Try again later or use another tool.",
            is_error=True,
        )
    ]
    assert (
        _by_name(provider)[f"{prefix}echo"].call('{"message": "still here"}') == "Echo: still here"
    )


def test_a_turn_uses_mcp_tools_like_local_ones(stdio: McpToolCallbackProvider) -> None:
    """A whole chat turn: the model calls an MCP tool, gets its text, answers."""
    model = ScriptedChatModel([tool_call("everything_get-sum", a=20, b=22), text("It is 42.")])
    reply = ChatClient.create(model).prompt("What is 20 + 22?").tools(stdio).call()
    assert reply.content() == "It is 42."
    sent = model.requests[1].messages[-1]
    assert sent.responses[0].response_data == "The sum of 20 and 22 is 42."  # type: ignore[attr-defined]


def test_s18_two_servers_with_one_tool_name_are_both_kept_namespaced(
    stdio: McpToolCallbackProvider,
) -> None:
    other = _everything_stdio("everything-2", prefix="second")
    try:
        callbacks = tool_callbacks(stdio, other)  # raises on a duplicate name
        names = [cb.name for cb in callbacks]
        assert "everything_echo" in names and "second_echo" in names
        by_name = {cb.name: cb for cb in callbacks}
        assert by_name["second_echo"].call('{"message": "b"}') == "Echo: b"
        assert by_name["everything_echo"].call('{"message": "a"}') == "Echo: a"
    finally:
        other.close()


def test_mcp_server_time_in_its_own_virtualenv() -> None:
    """A server on the Python SDK's 1.x generation, spoken to by this 2.x client."""
    connection = McpConnection(
        StdioTransport(str(require(TIME_SERVER)), ["--local-timezone", "UTC"]), name="time"
    )
    with connection:
        provider = McpToolCallbackProvider(connection, prefix="time")
        tools = {cb.name: cb for cb in provider.refresh()}
        assert set(tools) == {"time_get_current_time", "time_convert_time"}
        now = json.loads(tools["time_get_current_time"].call('{"timezone": "Europe/Oslo"}'))
        assert now["timezone"] == "Europe/Oslo"
        converted = json.loads(
            tools["time_convert_time"].call(
                '{"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}'
            )
        )
        assert converted["target"]["datetime"].endswith("T21:00:00+09:00")
        bad = run(
            DefaultToolCallingManager(),
            list(tools.values()),
            call("time_get_current_time", '{"timezone": "Mars/Olympus"}', id="1"),
        )
        (response,) = responses(bad)
        assert response.is_error is True
        assert "Mars/Olympus" in response.response_data


def test_s18_annotations_never_lift_approval(stdio: McpToolCallbackProvider) -> None:
    """A tool that says readOnlyHint still needs approval when its server requires it."""
    gated = McpToolCallbackProvider(stdio.connection, prefix="gated", requires_approval=True)
    tools = {cb.name: cb for cb in gated.refresh()}
    structured = tools["gated_get-structured-content"]
    assert structured.spec.annotations["readOnlyHint"] is True
    assert structured.metadata.requires_approval is True
    assert all(cb.metadata.requires_approval for cb in tools.values())
    assert all(not cb.metadata.requires_approval for cb in stdio.tool_callbacks())


def test_s18_a_pinned_definition_is_what_the_model_sees(stdio: McpToolCallbackProvider) -> None:
    """callback_for(spec) offers the stored (approved) text, whatever the server says now."""
    live = {cb.name: cb for cb in stdio.refresh()}["everything_echo"]
    approved = dataclasses.replace(live.spec, description="Echo a message (approved text).")
    pinned = stdio.callback_for(approved)
    assert pinned.definition.description == "Echo a message (approved text)."
    assert pinned.spec.definition_hash != live.spec.definition_hash
    assert pinned.call('{"message": "pinned"}') == "Echo: pinned"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"transport": "stdio"}, "MCP server 'x': the stdio transport needs a 'command'."),
        (
            {"transport": "streamable_http"},
            "MCP server 'x': the streamable_http transport needs a 'url'.",
        ),
        (
            {"transport": "sse", "url": "http://h"},
            "MCP server 'x': unknown transport 'sse'; use 'stdio' or 'streamable_http'.",
        ),
        (
            {"transport": "stdio", "command": "c", "request_timeout": 0},
            "McpConnection 'x': request_timeout must be a positive number of seconds, got 0.",
        ),
    ],
)
def test_bad_configuration_is_refused_with_the_fix(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        McpToolCallbackProvider.from_config("x", **config)  # type: ignore[arg-type]
    assert str(caught.value) == message
