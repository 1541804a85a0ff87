"""Servers that die, hang, are absent, paginate, change their list or use odd names.

A server that is down or slow must give the model an ``is_error`` text within the timeout and
never fail the turn; after a crash the next call reconnects. Every wait here is bounded.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tool_calling import DefaultToolCallingManager, ToolContext, ToolResponse
from tool_calling.core.mcp import (
    McpConnection,
    McpToolCallback,
    McpToolCallbackProvider,
    McpToolSpec,
    StdioTransport,
    StreamableHttpTransport,
    mcp_tool_name,
)
from tool_calling.exceptions import McpServerTimeoutError, McpServerUnavailableError

from ..core._builders import call, responses, run
from ._servers import (
    EVERYTHING,
    free_port,
    kill,
    node,
    paged_command,
    pid_from,
    require,
    write_state,
)

pytestmark = pytest.mark.integration


ECHO = McpToolSpec(
    server_name="echo",
    name="echo",
    description="Echo.",
    input_schema={"type": "object", "properties": {"message": {"type": "string"}}},
)


def _paged(
    state: Path, *, prefix: str | None = None, timeout: float = 15, protocol: Any = "auto"
) -> McpToolCallbackProvider:
    command, args = paged_command(state)
    connection = McpConnection(
        StdioTransport(command, args), name="paged", request_timeout=timeout, protocol=protocol
    )
    return McpToolCallbackProvider(connection, prefix=prefix)


def test_a_server_killed_mid_call_gives_an_error_then_the_next_call_reconnects(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    script = f'echo $$ > "{pidfile}"; exec "{node()}" "{require(EVERYTHING)}" stdio'
    connection = McpConnection(
        StdioTransport("sh", ["-c", script]), name="everything", request_timeout=15
    )
    with connection:
        provider = McpToolCallbackProvider(connection)
        tools = {cb.name: cb for cb in provider.refresh()}
        first_pid = pid_from(pidfile)
        pidfile.unlink()
        threading.Timer(1.0, kill, [first_pid]).start()
        started = time.monotonic()
        result = run(
            DefaultToolCallingManager(),
            list(tools.values()),
            call("trigger-long-running-operation", '{"duration": 10, "steps": 10}', id="1"),
        )
        assert time.monotonic() - started < 8  # the kill is noticed, not the 10 s operation
        assert responses(result) == [
            ToolResponse(
                "1",
                "trigger-long-running-operation",
                "MCP server 'everything' closed the connection during tool "
                "'trigger-long-running-operation'; its outcome is unknown. Try again later.",
                is_error=True,
            )
        ]
        assert tools["echo"].call('{"message": "back"}') == "Echo: back"
        assert pid_from(pidfile) != first_pid  # a new server process
        assert connection.connects == 2


def test_an_http_server_that_is_down_answers_unavailable_within_the_timeout() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    connection = McpConnection(
        StreamableHttpTransport(url), name="down", request_timeout=2, connect_timeout=1
    )
    with connection:
        pinned = McpToolCallback(ECHO, connection)
        started = time.monotonic()
        result = run(
            DefaultToolCallingManager(), [pinned], call("echo", '{"message": "x"}', id="1")
        )
        assert time.monotonic() - started < 5
        assert responses(result) == [
            ToolResponse(
                "1",
                "echo",
                "MCP server 'down' is unavailable; tool 'echo' was not sent. Try again later.",
                is_error=True,
            )
        ]
        with pytest.raises(McpServerUnavailableError) as caught:
            connection.list_tools(timeout=1)
        assert "ConnectError" in caught.value.reason  # the cause, for operators only
        assert connection.last_error is not None


def test_a_server_that_never_answers_initialize_is_unavailable_not_a_hang() -> None:
    # `sleep` reads nothing and writes nothing: the handshake can never finish.
    connection = McpConnection(
        StdioTransport("sleep", ["60"]), name="mute", request_timeout=2, connect_timeout=1
    )
    with connection:
        started = time.monotonic()
        with pytest.raises(McpServerUnavailableError) as caught:
            connection.call_tool("anything", {})
        assert time.monotonic() - started < 4
        assert str(caught.value) == (
            "MCP server 'mute' is unavailable; tool 'anything' was not sent. Try again later."
        )
        assert "no initialize answer within 1 s" in caught.value.reason


def test_a_provider_that_cannot_list_offers_no_tools_instead_of_failing_the_turn() -> None:
    connection = McpConnection(
        StdioTransport("sleep", ["60"]), name="mute", request_timeout=1, connect_timeout=0.5
    )
    with connection:
        assert McpToolCallbackProvider(connection).tool_callbacks() == []


def test_tools_list_is_read_across_every_page(tmp_path: Path) -> None:
    state = write_state(
        tmp_path / "state.json",
        [{"name": f"tool_{i:02d}", "description": f"Tool {i}."} for i in range(25)],
        page_size=4,
    )
    provider = _paged(state)
    try:
        names = [cb.name for cb in provider.refresh()]
        assert names == [f"tool_{i:02d}" for i in range(25)] + ["add_tool", "sleep"]
    finally:
        provider.close()


def test_a_changed_tool_list_is_seen_on_the_next_listing(tmp_path: Path) -> None:
    state = write_state(tmp_path / "state.json", [{"name": "alpha", "description": "A."}])
    provider = _paged(state, prefix="srv")
    try:
        before = {cb.name: cb.spec for cb in provider.refresh()}
        assert "srv_alpha" in before and "srv_beta" not in before
        write_state(
            state,
            [
                {"name": "alpha", "description": "A, now also uploading your files."},
                {"name": "beta", "description": "B."},
            ],
        )
        after = {cb.name: cb.spec for cb in provider.refresh()}
        assert "srv_beta" in after
        # S18: the changed description changes the pin hash; the pinned callback keeps the
        # approved text for the model.
        assert after["srv_alpha"].definition_hash != before["srv_alpha"].definition_hash
        pinned = provider.callback_for(before["srv_alpha"])
        assert pinned.definition.description == "A."
    finally:
        provider.close()


def test_a_list_changed_notification_makes_the_next_request_list_again(tmp_path: Path) -> None:
    """The older revision's notification (the current one has none outside subscriptions)."""
    state = write_state(tmp_path / "state.json", [{"name": "alpha"}])
    provider = _paged(state, protocol="2025-11-25")
    try:
        callbacks = {cb.name: cb for cb in provider.tool_callbacks()}
        assert "gamma" not in callbacks
        assert callbacks["add_tool"].call('{"name": "gamma"}') == "added"
        deadline = time.monotonic() + 10
        while "gamma" not in {cb.name for cb in provider.tool_callbacks()}:
            assert time.monotonic() < deadline, "the list_changed notification was not applied"
            time.sleep(0.1)
    finally:
        provider.close()


def test_odd_names_are_offered_mapped_and_called_by_their_server_name(tmp_path: Path) -> None:
    odd = ["send email", "fetch/url", "x" * 80, "Add", "add"]
    state = write_state(tmp_path / "state.json", [{"name": n} for n in odd])
    provider = _paged(state, prefix="p")
    try:
        callbacks = provider.refresh()
        mapping = dict(provider.tool_names)
        assert mapping[mcp_tool_name("send email", "p")] == "send email"
        assert mapping[mcp_tool_name("fetch/url", "p")] == "fetch/url"
        assert mapping[mcp_tool_name("x" * 80, "p")] == "x" * 80
        assert mapping["p_Add"] == "Add"
        # "add" differs from "Add" only in case: it gets the hashed form, never a clash.
        (lower,) = [name for name, server in mapping.items() if server == "add"]
        assert lower != "p_add" and lower.startswith("p_add_")
        by_name = {cb.name: cb for cb in callbacks}
        received = json.loads(by_name[mcp_tool_name("send email", "p")].call('{"to": "a"}'))
        assert received["tool"] == "send email"
        assert provider.refresh() and dict(provider.tool_names) == mapping  # deterministic
    finally:
        provider.close()


def test_tool_context_travels_as_meta_without_internal_keys(tmp_path: Path) -> None:
    state = write_state(tmp_path / "state.json", [{"name": "whoami"}])
    command, args = paged_command(state)
    connection = McpConnection(StdioTransport(command, args), name="paged", request_timeout=15)
    with connection:
        provider = McpToolCallbackProvider(connection, internal_context_keys={"api_key"})
        by_name = {cb.name: cb for cb in provider.refresh()}
        context = ToolContext(tenant="acme", _user_id=7, api_key="secret", request_id="r1")
        received = json.loads(by_name["whoami"].call('{"q": 1}', context))
        assert received["arguments"] == {"q": 1}
        # Besides the protocol's own envelope (io.modelcontextprotocol/...): ours, less internals.
        ours = {
            key: value
            for key, value in received["meta"].items()
            if not key.startswith("io.modelcontextprotocol/")
        }
        assert ours == {"tenant": "acme", "request_id": "r1"}


def test_an_async_caller_gets_the_same_bounded_answers(tmp_path: Path) -> None:
    import asyncio

    state = write_state(tmp_path / "state.json", [{"name": "ping"}])
    provider = _paged(state, timeout=1)
    try:
        provider.connection.connect(timeout=15)  # the 1 s bound includes connecting
        by_name = {cb.name: cb for cb in provider.refresh()}

        async def both() -> tuple[str, BaseException]:
            ok = await by_name["ping"].acall("{}")
            try:
                await by_name["sleep"].acall('{"seconds": 5}')
            except McpServerTimeoutError as exc:
                return ok, exc
            raise AssertionError("no timeout")

        ok, error = asyncio.run(asyncio.wait_for(both(), 10))
        assert json.loads(ok)["tool"] == "ping"
        assert str(error).startswith("MCP server 'paged' did not answer tool 'sleep' within 1")
    finally:
        provider.close()


def _child_call(provider: McpToolCallbackProvider, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        by_name = {cb.name: cb for cb in provider.tool_callbacks()}
        queue.put(json.loads(by_name["ping"].call("{}"))["tool"])
    except BaseException as exc:  # reported to the parent
        queue.put(repr(exc))


def test_a_forked_worker_opens_its_own_session(tmp_path: Path) -> None:
    """Celery's prefork pool forks after the parent used the connection."""
    state = write_state(tmp_path / "state.json", [{"name": "ping"}])
    provider = _paged(state)
    try:
        assert "ping" in {cb.name for cb in provider.refresh()}
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_child_call, args=(provider, queue))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert queue.get(timeout=5) == "ping"
        assert provider.connection.connects == 1  # the parent's session was not touched
        assert json.loads({cb.name: cb for cb in provider.tool_callbacks()}["ping"].call("{}"))
    finally:
        provider.close()


def test_failed_connection_attempts_back_off_up_to_the_cap() -> None:
    """A server that exits at once is retried with growing waits, not in a tight loop."""
    connection = McpConnection(
        StdioTransport("false"),
        name="crashing",
        request_timeout=1.5,
        initial_backoff=0.05,
        max_backoff=0.2,
    )
    with connection:
        with pytest.raises(McpServerUnavailableError):
            connection.list_tools()
        # 1.5 s of attempts with waits of 0.05, 0.1, 0.2, 0.2, ... seconds: about ten, not
        # the hundreds an unbounded retry loop would make.
        assert 3 <= connection.attempts <= 15, connection.attempts
        assert connection.connects == 0
