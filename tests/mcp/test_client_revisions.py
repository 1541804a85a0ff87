"""Which MCP revision the client speaks: the current one (2026-07-28) when the server does.

McpConnection probes ``server/discover`` and, when the server answers, speaks 2026-07-28: no
handshake, no session, every request on its own; the list's ``ttlMs`` decides when tools are
listed again. A server of the older revision (server-everything, on the TypeScript SDK 1.x)
gets the initialize handshake and a session, as before. The Django layer records what was
spoken on each ``McpServer`` (shown in the admin).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tool_calling import FunctionToolCallback, tool
from tool_calling.core.mcp import (
    McpConnection,
    McpToolCallbackProvider,
    McpToolServer,
    StreamableHttpTransport,
)

from ._servers import UvicornThread, everything_http, pid_from, running, sdk_server
from .test_client_restarts import lines

pytestmark = pytest.mark.integration

TOOLS: list[str] = ["alpha"]


def _listed() -> list[object]:
    @tool
    def alpha() -> str:
        """The first tool."""
        return "a"

    @tool
    def beta() -> str:
        """The second tool."""
        return "b"

    return [FunctionToolCallback(f) for f in (alpha, beta) if f.__name__ in TOOLS]


@pytest.fixture
def changing_server() -> Iterator[str]:
    """Our McpToolServer whose list is TOOLS now, fresh for 300 ms."""
    TOOLS[:] = ["alpha"]
    server = McpToolServer(
        list_tools=lambda principal: _listed(),
        call_tool=lambda principal, name, arguments, meta: name,
        list_ttl_ms=300,
    )
    app = server.streamable_http_app(authenticate=lambda headers: "anyone")
    with UvicornThread(app) as running_server:
        yield running_server.url


def test_a_current_server_is_spoken_to_sessionless_and_its_list_hint_is_honoured(
    changing_server: str,
) -> None:
    connection = McpConnection(StreamableHttpTransport(changing_server), name="ours")
    provider = McpToolCallbackProvider(connection)
    try:
        assert [cb.name for cb in provider.tool_callbacks()] == ["alpha"]
        assert connection.protocol_version == "2026-07-28"
        TOOLS[:] = ["alpha", "beta"]
        # Within the 300 ms the server allowed, the list is reused as it was...
        assert [cb.name for cb in provider.tool_callbacks()] == ["alpha"]
        time.sleep(0.4)
        # ...and listed again once it ran out: no notification needed.
        assert [cb.name for cb in provider.tool_callbacks()] == ["alpha", "beta"]
    finally:
        provider.close()


def test_an_older_server_gets_the_handshake_and_a_session() -> None:
    with everything_http() as url:
        connection = McpConnection(StreamableHttpTransport(url), name="everything")
        try:
            assert "echo" in {t.name for t in connection.list_tools()}
            assert connection.protocol_version == "2025-11-25"
            assert connection.tools_fresh_until is None  # it says when its list changes
        finally:
            connection.close()


def test_protocol_2025_11_25_forces_the_handshake_on_a_current_server(
    changing_server: str,
) -> None:
    connection = McpConnection(
        StreamableHttpTransport(changing_server), name="ours", protocol="2025-11-25"
    )
    try:
        connection.list_tools()
        assert connection.protocol_version == "2025-11-25"
    finally:
        connection.close()
    with pytest.raises(ValueError, match="protocol must be 'auto' or '2025-11-25'"):
        McpConnection(StreamableHttpTransport(changing_server), name="x", protocol="1999")  # type: ignore[arg-type]


def test_r13_sessionless_a_restarted_server_runs_the_next_call_once_without_reconnecting(
    tmp_path: Path,
) -> None:
    """Nothing to forget: the request after a restart goes through as it is, once."""
    with running(sdk_server(tmp_path)) as server:
        connection = McpConnection(StreamableHttpTransport(server.url), name="sdk")
        with connection:
            connection.call_tool("echo", {"message": "before"})
            assert connection.protocol_version == "2026-07-28"
            (tmp_path / "pid").unlink()
            server.restart()
            second_pid = pid_from(tmp_path / "pid")
            result = connection.call_tool("record", {"key": "after"})
            assert result.content[0].text == "recorded after"
            assert lines(tmp_path / "record.log") == [f"{second_pid} after"]
