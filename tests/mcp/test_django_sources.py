"""MCP servers nobody here wrote as governed tool sources.

@modelcontextprotocol/server-everything (stdio and streamable HTTP) and mcp-server-time are
configured as ``McpServer`` rows, synced into ``Tool`` rows, enabled as an operator would, and
called through governed turns: every call is audited, governed and bounded; a server that dies
or is down gives the model an ``is_error`` answer and the audit a clear error, never a failed
turn.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.django._api import client_for, url
from tests.django._tools import chat_model
from tool_calling import ToolResponse, models
from tool_calling.calls import approvals, lifecycle
from tool_calling.core.chat.messages import ToolCall
from tool_calling.exceptions import ToolArgumentsError
from tool_calling.mcp import clients, mirror
from tool_calling.resolvers import GovernedTools, installed_callback
from tool_calling.testing import ScriptedChatModel, text, tool_call

from . import _servers
from ._django import (
    enable,
    everything_http,
    everything_stdio,
    offered,
    paged,
    responses,
    synced,
    time_server,
    turn,
)
from ._servers import EVERYTHING, free_port, kill, node, pid_from, require

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

S = models.ExecutionStatus


@pytest.fixture(autouse=True)
def _fresh_sessions() -> Iterator[None]:
    """Every test opens its own sessions; none outlives it."""
    clients.close_all()
    yield
    clients.close_all()


@pytest.fixture(scope="module")
def everything_url() -> Iterator[str]:
    with _servers.everything_http() as url:
        yield url


@pytest.fixture(params=["stdio", "streamable_http"])
def everything(request: pytest.FixtureRequest) -> models.McpServer:
    if request.param == "stdio":
        return everything_stdio()
    return everything_http(request.getfixturevalue("everything_url"))


def test_sync_mirrors_the_tools_disabled_with_source_and_pinned_hash(
    everything: models.McpServer,
) -> None:
    out = StringIO()
    call_command("mcp", "sync", "everything", stdout=out)
    rows = {t.name: t for t in models.Tool.objects.filter(source="mcp:everything")}
    assert {"everything_echo", "everything_get-sum", "everything_get-env"} <= set(rows)
    assert not any(row.enabled for row in rows.values())  # until an operator enables them
    echo = rows["everything_echo"]
    assert echo.input_schema["properties"]["message"]["type"] == "string"
    assert len(echo.schema_hash) == 64
    link = echo.mcp
    assert (link.server, link.server_name, link.changed) == (everything, "echo", False)
    assert link.annotations["readOnlyHint"] is True
    assert clients.pinned_spec(link).definition_hash == echo.schema_hash
    lines = out.getvalue().splitlines()
    assert lines[0] == "everything: 0 unchanged"
    assert lines[1].startswith("everything: new (disabled until enabled): everything_")
    # A second sync changes nothing.
    again = synced(everything)
    assert (again.created, again.changed, sorted(again.unchanged)) == ([], [], sorted(rows))
    everything.refresh_from_db()
    assert everything.last_synced_at is not None and everything.last_sync_error == ""
    # server-everything (TypeScript SDK 1.x) does not answer server/discover: the handshake.
    assert everything.protocol_version == "2025-11-25"


def test_an_enabled_tool_runs_in_a_governed_turn_and_is_audited(
    everything: models.McpServer,
) -> None:
    synced(everything)
    alice = User.objects.create_user("alice")
    model = ScriptedChatModel([tool_call("everything_get-sum", a=2, b=40, id="c0"), text("no")])
    # Not enabled yet: not offered, and a call of it is refused (audited, never sent).
    assert turn(model, user=alice) == "no"
    assert not any(name.startswith("everything_") for name in offered(model))
    [answer] = responses(model)
    assert answer.is_error and answer.response_data.startswith(
        "Unknown or disabled tool 'everything_get-sum'."
    )
    refused = models.ToolExecution.objects.get(tool_call_id="c0")
    assert (refused.tool_name, refused.status) == ("everything_get-sum", S.REFUSED)

    enable("everything_get-sum")
    model = ScriptedChatModel([tool_call("everything_get-sum", a=2, b=40, id="c1"), text("42!")])
    assert turn(model, user=alice) == "42!"
    assert "everything_get-sum" in offered(model)
    assert "everything_echo" not in offered(model)
    assert responses(model) == [
        ToolResponse("c1", "everything_get-sum", "The sum of 2 and 40 is 42.")
    ]
    row = models.ToolExecution.objects.get(tool_call_id="c1")
    assert (row.status, row.user, row.tool.name, row.is_error) == (
        S.SUCCEEDED,
        alice,
        "everything_get-sum",
        False,
    )
    assert row.result == "The sum of 2 and 40 is 42."
    assert json.loads(row.arguments) == {"a": 2, "b": 40}


def test_mcp_server_time_from_its_own_virtualenv_answers_a_governed_call() -> None:
    server = time_server()
    report = synced(server)
    assert sorted(report.created) == ["time_convert_time", "time_get_current_time"]
    enable("time_get_current_time")
    model = ScriptedChatModel(
        [tool_call("time_get_current_time", timezone="Europe/Oslo", id="t1"), text("ok")]
    )
    assert turn(model) == "ok"
    [answer] = responses(model)
    assert not answer.is_error, answer.response_data
    assert json.loads(answer.response_data)["timezone"] == "Europe/Oslo"
    assert models.ToolExecution.objects.get(tool_call_id="t1").status == S.SUCCEEDED


def test_arguments_are_checked_against_the_pinned_schema_before_anything_is_sent() -> None:
    server = time_server()
    synced(server)
    enable("time_get_current_time")
    model = ScriptedChatModel([tool_call("time_get_current_time", id="t1"), text("ok")])
    assert turn(model) == "ok"
    [answer] = responses(model)
    assert answer.is_error
    assert "timezone" in answer.response_data and "required" in answer.response_data
    row = models.ToolExecution.objects.get(tool_call_id="t1")
    assert row.status == S.FAILED
    assert row.error_type == "tool_calling.core.errors.ToolArgumentsError"


def test_the_servers_groups_bound_who_may_use_its_tools() -> None:
    server = time_server()
    synced(server)
    enable("time_get_current_time")
    ops = Group.objects.create(name="ops")
    server.allowed_groups.add(ops)
    member, outsider = User.objects.create_user("member"), User.objects.create_user("outsider")
    member.groups.add(ops)
    assert "time_get_current_time" in GovernedTools(member).available
    assert "time_get_current_time" not in GovernedTools(outsider).available
    assert "time_get_current_time" not in GovernedTools(None).available
    # A disabled server's tools are neither offered nor run, whatever their own state.
    models.McpServer.objects.filter(pk=server.pk).update(enabled=False)
    assert "time_get_current_time" not in GovernedTools(member).available


def test_environment_values_come_from_the_named_variables_and_nothing_else_leaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TC_TEST_MCP_VALUE", "from-the-environment")
    monkeypatch.setenv("TC_TEST_NOT_FOR_SERVERS", "private")
    server = everything_stdio(env={"SERVER_SETTING": "TC_TEST_MCP_VALUE"})
    synced(server)
    enable("everything_get-env")
    model = ScriptedChatModel([tool_call("everything_get-env", id="e1"), text("ok")])
    turn(model)
    [answer] = responses(model)
    environment = json.loads(answer.response_data)
    assert environment["SERVER_SETTING"] == "from-the-environment"
    assert "TC_TEST_NOT_FOR_SERVERS" not in environment
    assert "DJANGO_SETTINGS_MODULE" not in environment


def test_a_missing_environment_variable_is_a_clear_error_for_sync_model_and_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TC_TEST_MCP_UNSET", raising=False)
    server = everything_stdio(env={"API_KEY": "TC_TEST_MCP_UNSET"})
    out = StringIO()
    with pytest.raises(CommandError, match=r"^Could not sync: everything \(see above\)\.$"):
        call_command("mcp", "sync", stdout=out)
    expected = (
        "MCP server 'everything' cannot be reached: environment variable 'TC_TEST_MCP_UNSET' "
        "(for its variable 'API_KEY') is not set in this process. Set it in the environment of "
        "the web and worker processes; the call was not sent."
    )
    assert out.getvalue().startswith(f"everything: not synced: {expected}")
    server.refresh_from_db()
    assert server.last_sync_error.startswith(expected)
    # Tools synced earlier (when the variable was set) fail clearly instead of vanishing.
    monkeypatch.setenv("TC_TEST_MCP_UNSET", "set")
    synced(server)
    enable("everything_echo")
    monkeypatch.delenv("TC_TEST_MCP_UNSET")
    clients.close_all()
    model = ScriptedChatModel([tool_call("everything_echo", message="x", id="m1"), text("ok")])
    assert turn(model) == "ok"
    assert responses(model) == [ToolResponse("m1", "everything_echo", expected, is_error=True)]
    row = models.ToolExecution.objects.get(tool_call_id="m1")
    assert (row.status, row.result) == (S.FAILED, expected)


def test_a_server_killed_mid_call_gives_an_error_not_a_failed_turn_then_reconnects(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    script = f'echo $$ > "{pidfile}"; exec "{node()}" "{require(EVERYTHING)}" stdio'
    server = models.McpServer.objects.create(
        alias="everything", command="sh", args=["-c", script], timeout=20
    )
    synced(server)
    enable("everything_trigger-long-running-operation", "everything_echo")
    first = pid_from(pidfile)
    pidfile.unlink()
    threading.Timer(1.0, kill, [first]).start()
    model = ScriptedChatModel(
        [
            tool_call(
                "everything_trigger-long-running-operation", duration=10, steps=10, id="long"
            ),
            tool_call("everything_echo", message="back", id="again"),
            text("done"),
        ]
    )
    started = time.monotonic()
    assert turn(model) == "done"
    assert time.monotonic() - started < 9  # the kill is noticed, not the 10 s operation
    lost = (
        "MCP server 'everything' closed the connection during tool "
        "'everything_trigger-long-running-operation'; its outcome is unknown. Try again later."
    )
    assert responses(model, 1) == [
        ToolResponse("long", "everything_trigger-long-running-operation", lost, is_error=True)
    ]
    assert responses(model, 2) == [ToolResponse("again", "everything_echo", "Echo: back")]
    row = models.ToolExecution.objects.get(tool_call_id="long")
    assert (row.status, row.result, row.is_error) == (S.FAILED, lost, True)
    assert row.error_type == "tool_calling.core.errors.McpServerUnavailableError"
    assert pid_from(pidfile) != first  # the next call started a new server process


def test_r13_sync_and_calls_reconnect_after_the_http_server_restarted(tmp_path: Path) -> None:
    """A long-lived process (web, worker) keeps its session; the restarted server forgot it."""
    with _servers.running(_servers.sdk_server(tmp_path)) as process:
        server = models.McpServer.objects.create(
            alias="sdk", transport=models.McpTransport.STREAMABLE_HTTP, url=process.url
        )
        synced(server)
        enable("sdk_record")
        (tmp_path / "pid").unlink()
        process.restart()
        second_pid = pid_from(tmp_path / "pid")

        report = synced(server)  # before the fix: "refused tools/list: Session not found"
        model = ScriptedChatModel([tool_call("sdk_record", key="k1", id="r1"), text("done")])
        answer = turn(model)

    assert report.error == ""
    assert answer == "done"
    assert responses(model) == [ToolResponse("r1", "sdk_record", "recorded k1")]
    assert (tmp_path / "record.log").read_text() == f"{second_pid} k1\n"
    # The SDK's server speaks the current revision: sessionless, nothing to reopen.
    assert clients.provider(server).connection.connects == 1
    server.refresh_from_db()
    assert server.protocol_version == "2026-07-28"


def test_a_server_that_is_down_answers_within_its_timeout_and_the_turn_goes_on() -> None:
    server = everything_http(f"http://127.0.0.1:{free_port()}/mcp", timeout=2)
    report = mirror.sync_server(server)
    unavailable = (
        "MCP server 'everything' is unavailable; tools/list was not sent. Try again later."
    )
    assert report.error.startswith(unavailable)
    assert report.lines() == [f"everything: not synced: {report.error}"]
    assert not models.Tool.objects.filter(source="mcp:everything").exists()  # nothing changed
    # A tool approved while the server was up is still offered; a call answers is_error in time.
    tool = models.Tool.objects.create(
        name="everything_echo",
        description="Echoes back the input string",
        input_schema={"type": "object", "properties": {"message": {"type": "string"}}},
        source="mcp:everything",
    )
    link = models.McpServerTool.objects.create(server=server, tool=tool, server_name="echo")
    models.Tool.objects.filter(pk=tool.pk).update(
        schema_hash=clients.pinned_spec(link).definition_hash
    )
    model = ScriptedChatModel([tool_call("everything_echo", message="x", id="d1"), text("sorry")])
    started = time.monotonic()
    assert turn(model) == "sorry"
    assert time.monotonic() - started < 8
    down = (
        "MCP server 'everything' is unavailable; tool 'everything_echo' was not sent. "
        "Try again later."
    )
    assert responses(model) == [ToolResponse("d1", "everything_echo", down, is_error=True)]
    row = models.ToolExecution.objects.get(tool_call_id="d1")
    assert (row.status, row.result) == (S.FAILED, down)
    assert "McpServerUnavailableError" in row.error


def test_a_changed_configuration_reconnects_with_the_new_one() -> None:
    server = time_server()
    synced(server)
    first = clients.provider(server)
    assert clients.provider(server) is first  # one session per server and process
    server.args = ["--local-timezone", "Europe/Oslo"]
    server.save()
    second = clients.provider(server)
    assert second is not first
    deadline = time.monotonic() + 10
    while first.connection.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.connection.connected  # the old session was closed


def test_mcp_sync_names_unknown_aliases_and_lists_the_servers() -> None:
    time_server()
    with pytest.raises(CommandError) as raised:
        call_command("mcp", "sync", "nope", stdout=StringIO())
    assert str(raised.value) == "Unknown MCP server 'nope'. Known servers: time."
    out = StringIO()
    call_command("mcp", "list", stdout=out)
    assert out.getvalue().splitlines() == [
        "ALIAS                TRANSPORT        STATE     TOOLS CHANGED",
        "time                 stdio            enabled       0 0",
    ]


def _ours(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` less the protocol's own envelope (``io.modelcontextprotocol/...``)."""
    return {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/")}


def test_the_tool_context_reaches_the_server_only_for_its_listed_keys(tmp_path: Path) -> None:
    state = _servers.write_state(tmp_path / "state.json", [{"name": "search"}])
    server = paged(state)
    synced(server)
    enable("paged_search")
    alice = User.objects.create_user("alice")
    model = ScriptedChatModel([tool_call("paged_search", id="s1"), text("ok")])
    turn(model, user=alice)
    [answer] = responses(model)
    assert _ours(json.loads(answer.response_data)["meta"]) == {}  # no user unless configured
    server.context_keys = ["user_id"]
    server.save()
    model = ScriptedChatModel([tool_call("paged_search", id="s2"), text("ok")])
    turn(model, user=alice)
    [answer] = responses(model)
    assert _ours(json.loads(answer.response_data)["meta"]) == {"user_id": alice.pk}


def test_manage_py_chat_offers_an_mcp_tool_by_name() -> None:
    synced(time_server())
    enable("time_get_current_time")
    model = ScriptedChatModel(
        [tool_call("time_get_current_time", timezone="UTC"), text("It is late.")]
    )
    out = StringIO()
    with chat_model(model):
        call_command(
            "chat",
            "What time is it?",
            "--tool",
            "time_get_current_time",
            stdout=out,
            stderr=StringIO(),
        )
    assert out.getvalue().strip() == "It is late."
    assert offered(model) == ["time_get_current_time"]
    [answer] = responses(model)
    assert not answer.is_error, answer.response_data


def test_the_api_lists_an_enabled_mcp_tool_with_its_approved_definition() -> None:
    synced(time_server())
    enable("time_get_current_time")
    models.Tool.objects.filter(name="time_get_current_time").update(requires_approval=True)
    alice = User.objects.create_user("alice")
    listed = {t["name"]: t for t in client_for(alice).get(url("tool-list")).json()}
    entry = listed["time_get_current_time"]
    stored = models.Tool.objects.get(name="time_get_current_time")
    assert (entry["description"], entry["input_schema"], entry["requires_approval"]) == (
        stored.description,
        stored.input_schema,
        True,
    )
    assert "time_convert_time" not in listed  # not enabled


def test_a_turns_snapshot_with_mcp_tools_is_one_query_and_connects_nothing() -> None:
    server = time_server()
    synced(server)
    enable("time_get_current_time", "time_convert_time")
    server.allowed_groups.add(Group.objects.create(name="ops"))
    member = User.objects.create_user("member")
    member.groups.add(Group.objects.get(name="ops"))
    clients.close_all()
    with CaptureQueriesContext(connection) as queries:
        governed = GovernedTools(member)
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert {"time_get_current_time", "time_convert_time"} <= set(governed.available)
    assert not clients.provider(server).connection.connected  # sessions open on first call
    with CaptureQueriesContext(connection) as queries:
        callback = installed_callback("time_get_current_time")  # what a worker resolves
    assert len(queries) == 1 and callback is not None
    assert callback.definition == governed.available["time_get_current_time"].definition


def test_edited_arguments_of_an_mcp_tool_are_checked_against_its_json_schema() -> None:
    """An approver's edit is held to the tool's own schema, as the model's call is (types too)."""
    synced(time_server())
    enable("time_get_current_time")
    models.Tool.objects.filter(name="time_get_current_time").update(requires_approval=True)
    alice = User.objects.create_user("alice")
    rita = User.objects.create_user("rita")
    row = lifecycle.record_for_worker(
        ToolCall("t1", "time_get_current_time", '{"timezone": "UTC"}'),
        {},
        tool=models.Tool.objects.get(name="time_get_current_time"),
        user=alice,
        needs_approval=True,
    )
    with pytest.raises(ToolArgumentsError) as raised:
        approvals.approve(row, user=rita, arguments={"timezone": 5})
    assert str(raised.value) == (
        "Invalid arguments for tool 'time_get_current_time':\n"
        "- timezone: Input should be a valid string"
    )
    row.refresh_from_db()
    assert (row.status, row.approval, row.payload["arguments"]) == (
        S.AWAITING_APPROVAL,
        "pending",
        '{"timezone": "UTC"}',
    )
