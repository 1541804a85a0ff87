"""R13: a remote MCP server that restarts mid-use is reconnected within a bounded time.

Real servers, restarted for real (SIGKILL, then the same command; HTTP ones on the same port):
tests/mcp/http_server.py on the official SDK (a restarted one answers the old session id with
404 "Session not found", as FastMCP does), @modelcontextprotocol/server-everything over
streamable HTTP (which answers 400 "No valid session ID provided") and tests/mcp/paged_server.py
over stdio. A request refused because the server forgot the session never ran, so it is sent
once more on a new session; a call in flight when the server died is never sent again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tool_calling.core.mcp import McpConnection, StdioTransport, StreamableHttpTransport
from tool_calling.exceptions import McpServerRequestError, McpServerUnavailableError

from ._servers import (
    PAGED_SERVER,
    everything_server,
    pid_from,
    running,
    sdk_server,
    write_state,
)

pytestmark = pytest.mark.integration

RECONNECT_BOUND = 3.0
"""Seconds the first call after a restart may take, reconnecting included (measured: 0.55-0.6 s
here, of which 0.5 s is the first backoff, taken because these sessions are younger than 5 s;
0.05-0.15 s after an older one)."""


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def text_of(result: object) -> str:
    return "".join(getattr(part, "text", "") for part in getattr(result, "content", []))


def test_r13_an_http_server_restarted_between_calls_runs_the_next_call_once(
    tmp_path: Path,
) -> None:
    """The SDK's server (FastMCP's session manager) answers 404 "Session not found".

    Sessions belong to the older revision (the handshake), so the connection speaks it here.
    """
    with running(sdk_server(tmp_path)) as server:
        connection = McpConnection(
            StreamableHttpTransport(server.url), name="sdk", protocol="2025-11-25"
        )
        with connection:
            assert text_of(connection.call_tool("echo", {"message": "before"})) == "Echo: before"
            first_pid = pid_from(tmp_path / "pid")
            (tmp_path / "pid").unlink()
            server.restart()
            second_pid = pid_from(tmp_path / "pid")

            started = time.monotonic()
            result = connection.call_tool("record", {"key": "after"})
            elapsed = time.monotonic() - started

            assert text_of(result) == "recorded after"
            assert elapsed < RECONNECT_BOUND, elapsed
            # The refused request was sent again on the new session, and ran once.
            assert lines(tmp_path / "record.log") == [f"{second_pid} after"]
            assert second_pid != first_pid
            assert connection.connects == 2
            assert "record" in {tool.name for tool in connection.list_tools()}  # a later sync
            assert connection.connects == 2


def test_r13_server_everything_restarted_between_calls_answers_the_next_call() -> None:
    """server-everything answers a forgotten session with 400, not the 404 the spec asks."""
    with running(everything_server()) as server:
        connection = McpConnection(StreamableHttpTransport(server.url), name="everything")
        with connection:
            assert text_of(connection.call_tool("echo", {"message": "before"})) == "Echo: before"
            server.restart()

            started = time.monotonic()
            result = connection.call_tool("echo", {"message": "after"})
            elapsed = time.monotonic() - started

            assert text_of(result) == "Echo: after"
            assert elapsed < RECONNECT_BOUND, elapsed
            assert connection.connects == 2


def test_r13_a_call_in_flight_when_the_http_server_dies_fails_and_is_never_sent_again(
    tmp_path: Path,
) -> None:
    with running(sdk_server(tmp_path)) as server:
        connection = McpConnection(StreamableHttpTransport(server.url), name="sdk")
        with connection:
            connection.connect()
            first_pid = pid_from(tmp_path / "pid")

            def restart_once_the_call_runs() -> None:
                deadline = time.monotonic() + 10
                while not lines(tmp_path / "slow.log") and time.monotonic() < deadline:
                    time.sleep(0.02)
                server.restart()

            restarter = threading.Thread(target=restart_once_the_call_runs)
            restarter.start()
            started = time.monotonic()
            with pytest.raises(McpServerUnavailableError) as caught:
                connection.call_tool("slow", {"key": "k1", "seconds": 10}, timeout=20)
            failed_after = time.monotonic() - started
            restarter.join(15)

            assert str(caught.value) == (
                "MCP server 'sdk' closed the connection during tool 'slow'; its outcome is "
                "unknown. Try again later."
            )
            assert failed_after < 5, failed_after  # the death is noticed, not the 10 s sleep
            # The next call reconnects; the call that was in flight ran once, on the old server.
            assert text_of(connection.call_tool("echo", {"message": "next"})) == "Echo: next"
            assert lines(tmp_path / "slow.log") == [f"{first_pid} k1"]
            assert connection.connects == 2


def test_r13_an_idle_http_session_the_restarted_server_forgot_is_reopened_by_the_next_call(
    tmp_path: Path,
) -> None:
    """The SDK's GET stream finds the restarted server: the session is dropped at once.

    Nobody needs a session then; the next call opens one (in its own trace), without first
    sending anything on the forgotten one.
    """
    with running(sdk_server(tmp_path)) as server:
        connection = McpConnection(
            StreamableHttpTransport(server.url), name="sdk", protocol="2025-11-25"
        )
        with connection:
            connection.connect()
            server.restart()
            started = time.monotonic()
            while connection.connected and time.monotonic() - started < 10:
                time.sleep(0.05)
            dropped_after = time.monotonic() - started
            time.sleep(0.5)  # nothing reopens it in the background
            idle_connects = connection.connects

            started = time.monotonic()
            result = connection.call_tool("echo", {"message": "next"})
            elapsed = time.monotonic() - started

            assert dropped_after < 5, dropped_after
            assert idle_connects == 1
            assert text_of(result) == "Echo: next"
            assert elapsed < RECONNECT_BOUND, elapsed
            assert connection.connects == 2


def test_r13_a_refusal_by_a_server_that_still_knows_the_session_is_sent_once(
    tmp_path: Path,
) -> None:
    """A 4xx makes the connection ping the session; it answers, so the refusal stands."""
    with running(sdk_server(tmp_path)) as server:
        connection = McpConnection(StreamableHttpTransport(server.url), name="sdk")
        with connection:
            connection.connect()
            with pytest.raises(McpServerRequestError) as caught:
                connection.call_tool("refused_over_http", {"key": "r1"})

            assert str(caught.value) == (
                "MCP server 'sdk' refused tool 'refused_over_http': Refused over HTTP"
            )
            assert len(lines(tmp_path / "refused.log")) == 1
            assert connection.connects == 1  # the session was kept
            assert text_of(connection.call_tool("echo", {"message": "ok"})) == "Echo: ok"
            assert connection.connects == 1


def test_r13_a_stdio_server_that_died_between_calls_is_started_again_by_the_next_call(
    tmp_path: Path,
) -> None:
    """Its end is noticed at once (the end of its stdout); the next call starts a new process.

    A call sent before the end was noticed has an unknown outcome, as one in flight has
    (tests/mcp/test_client_failures.py kills a server mid-call).
    """
    state = write_state(tmp_path / "state.json", [{"name": "ping"}])
    pidfile = tmp_path / "pid"
    script = f'echo $$ > "{pidfile}"; exec "{sys.executable}" "{PAGED_SERVER}" "{state}"'
    connection = McpConnection(StdioTransport("sh", ["-c", script]), name="paged")
    with connection:
        assert '"tool": "ping"' in text_of(connection.call_tool("ping", {}))
        first_pid = pid_from(pidfile)
        pidfile.unlink()
        os.kill(first_pid, signal.SIGKILL)
        started = time.monotonic()
        while connection.connected and time.monotonic() - started < 10:
            time.sleep(0.02)
        noticed_after = time.monotonic() - started

        started = time.monotonic()
        result = connection.call_tool("ping", {})
        elapsed = time.monotonic() - started

        assert noticed_after < 1, noticed_after
        assert '"tool": "ping"' in text_of(result)
        assert elapsed < RECONNECT_BOUND, elapsed
        assert pid_from(pidfile) != first_pid
        assert connection.connects == 2
