"""MCP in real processes: a remote tool run by a Celery worker, /mcp/ of the example project
served by uvicorn, and ``manage.py mcp_serve`` over stdio.

The worker resolves the MCP tool from its ``Tool`` row like any other (``installed_callback``)
and opens its own session with the server; the web process's ``/mcp/`` and ``mcp_serve`` read
the same database as this test.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import httpx2
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from rest_framework.authtoken.models import Token

from tests.mcp._servers import TIME_SERVER, require
from tool_calling import ToolResponse, models
from tool_calling.core.mcp import McpConnection, McpToolCallbackProvider, StdioTransport
from tool_calling.governance import governed_chat_client
from tool_calling.mcp import mirror
from tool_calling.sync import sync_tools
from tool_calling.testing import ScriptedChatModel, text, tool_call

from .conftest import ROOT, start_web_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

S = models.ExecutionStatus


@pytest.fixture(autouse=True)
def tool_rows() -> None:
    sync_tools()


def _time_server() -> models.McpServer:
    server = models.McpServer.objects.create(
        alias="time", command=str(require(TIME_SERVER)), args=["--local-timezone", "UTC"]
    )
    report = mirror.sync_server(server)
    assert report.ok, report.error
    return server


def test_an_mcp_tool_in_celery_mode_runs_on_a_worker_with_its_own_session() -> None:
    _time_server()
    models.Tool.objects.filter(name="time_get_current_time").update(
        enabled=True, execution_mode=models.ExecutionMode.CELERY
    )
    model = ScriptedChatModel(
        [tool_call("time_get_current_time", timezone="Asia/Tokyo", id="w1"), text("ok")]
    )
    client = governed_chat_client(model=model)
    assert client.prompt("Go").call().content() == "ok"
    [answer] = model.requests[-1].messages[-1].responses
    assert not answer.is_error, answer.response_data
    assert '"timezone": "Asia/Tokyo"' in answer.response_data
    row = models.ToolExecution.objects.get(tool_call_id="w1")
    assert (row.status, row.mode, row.attempt) == (S.SUCCEEDED, "celery", 1)
    assert row.worker and f"(pid {os.getpid()})" not in row.worker  # another process ran it


def test_a_disabled_mcp_tool_is_refused_by_the_worker_too() -> None:
    """The worker re-checks governance: an operator disabling the server stops the call."""
    server = _time_server()
    models.Tool.objects.filter(name="time_get_current_time").update(
        enabled=True, execution_mode=models.ExecutionMode.CELERY
    )
    models.McpServer.objects.filter(pk=server.pk).update(enabled=False)
    model = ScriptedChatModel(
        [tool_call("time_get_current_time", timezone="UTC", id="w2"), text("ok")]
    )
    governed_chat_client(model=model).prompt("Go").call()
    [answer] = model.requests[-1].messages[-1].responses
    assert answer == ToolResponse(
        "w2",
        "time_get_current_time",
        "Unknown or disabled tool 'time_get_current_time'. Available tools: "
        + ", ".join(model.tool_names_seen[0])
        + ". Call one of these by its exact name.",
        is_error=True,
    )


def _run(coroutine: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def test_the_example_projects_asgi_app_serves_mcp_with_lifespan() -> None:
    """``uvicorn project.asgi:application``: /mcp/ with a DRF token, per-user tool lists."""
    ops = Group.objects.create(name="ops")
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    alice.groups.add(ops)
    tokens = {user.username: Token.objects.create(user=user).key for user in (alice, bob)}
    _time_server()
    models.Tool.objects.filter(name__startswith="time_").update(enabled=True)
    models.Tool.objects.get(name="time_convert_time").allowed_groups.add(ops)
    web = start_web_server("web-mcp")
    try:

        async def use(token: str) -> tuple[list[str], str]:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                async with streamable_http_client(f"{web.url}/mcp/", http_client=http) as (r, w):
                    async with ClientSession(r, w) as session:
                        await session.initialize()
                        names = [t.name for t in (await session.list_tools()).tools]
                        result = await session.call_tool(
                            "time_get_current_time", {"timezone": "UTC"}
                        )
                        return names, result.content[0].text

        alice_names, answer = _run(use(tokens["alice"]))
        bob_names, _ = _run(use(tokens["bob"]))
    finally:
        web.stop()
    assert {"time_get_current_time", "time_convert_time"} <= set(alice_names)
    assert "time_get_current_time" in bob_names and "time_convert_time" not in bob_names
    assert '"timezone": "UTC"' in answer
    users = models.ToolExecution.objects.filter(tool_name="time_get_current_time")
    assert sorted(users.values_list("user__username", flat=True)) == ["alice", "bob"]


def test_mcp_serve_serves_one_users_tools_over_stdio() -> None:
    bob = User.objects.create_user("bob")
    admins = Group.objects.create(name="admins")
    _time_server()
    models.Tool.objects.filter(name__startswith="time_").update(enabled=True)
    models.Tool.objects.get(name="time_convert_time").allowed_groups.add(admins)
    environment = {
        key: os.environ[key]
        for key in ("TC_CELERY_STATE_DIR", "TC_CELERY_REDIS_PORT", "TC_CELERY_MODEL_PORT")
    }
    environment["DJANGO_SETTINGS_MODULE"] = "tests.settings_celery"
    transport = StdioTransport(
        sys.executable,
        [str(ROOT / "manage.py"), "mcp_serve", "--user", "bob"],
        env=environment,
        cwd=str(ROOT),
    )
    with McpConnection(transport, name="ours", request_timeout=60, connect_timeout=60) as conn:
        provider = McpToolCallbackProvider(conn)
        tools = {callback.name: callback for callback in provider.refresh()}
        assert "time_get_current_time" in tools and "time_convert_time" not in tools
        assert '"timezone": "UTC"' in tools["time_get_current_time"].call('{"timezone": "UTC"}')
    row = models.ToolExecution.objects.get(tool_name="time_get_current_time")
    assert (row.status, row.user) == (S.SUCCEEDED, bob)
    assert row.tool_call_id.startswith("mcp:stdio-") and row.tool_call_id.endswith(":1")
    assert settings.STATE_DIR.exists()
