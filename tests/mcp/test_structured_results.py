"""A result a server sends as structured content plus a text copy is read once.

The official SDK's ``MCPServer`` (tests/mcp/structured_server.py, as most Python servers are
written) sends both, as the MCP specification recommends. A 40 kB file reached the model as
80 kB (the text, then ``{"result": <the text again>}``), which ``MAX_RESULT_CHARS`` then cut
at 64 kB; served again over our ``/mcp/``, MCP clients got the doubled text too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User
from mcp import ClientSession
from rest_framework.authtoken.models import Token

from tool_calling import models
from tool_calling.asgi import get_asgi_application, with_mcp
from tool_calling.core.mcp import McpConnection, McpToolCallbackProvider, StdioTransport
from tool_calling.mcp import clients
from tool_calling.testing import ScriptedChatModel, text, tool_call

from ._client import run, session
from ._django import enable, responses, synced, turn
from ._servers import UvicornThread
from .structured_server import FILE_TEXT

pytestmark = pytest.mark.integration

SERVER = Path(__file__).resolve().parent / "structured_server.py"


def test_the_file_is_40_kb() -> None:
    assert len(FILE_TEXT) == 40_000


@pytest.fixture(scope="module")
def provider() -> Iterator[McpToolCallbackProvider]:
    connection = McpConnection(
        StdioTransport(sys.executable, [str(SERVER)]), name="structured", request_timeout=15
    )
    provider = McpToolCallbackProvider(connection)
    try:
        yield provider
    finally:
        provider.close()


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("read_file", {}, FILE_TEXT),
        ("names", {}, "Ada\nGrace\nBarbara"),
        ("answer", {}, "42"),
        (
            "forecast",
            {"city": "Oslo"},
            '{\n  "city": "Oslo",\n  "temperature": 21,\n'
            '  "conditions": "Sunny, a light breeze"\n}',
        ),
        # A sentence for people with data for programs: both reach the model.
        ("summary", {}, 'Found 2 orders.\n{"orders":[{"id":"A1"},{"id":"B2"}]}'),
    ],
)
def test_the_model_reads_a_result_once(
    provider: McpToolCallbackProvider, name: str, arguments: dict[str, str], expected: str
) -> None:
    tools = {callback.name: callback for callback in provider.refresh()}
    assert tools[name].call(json.dumps(arguments)) == expected


@pytest.fixture
def structured_tools(db: None) -> Iterator[None]:
    """The server as an ``McpServer`` row, synced, its ``read_file`` enabled by an operator."""
    clients.close_all()
    server = models.McpServer.objects.create(
        alias="structured",
        transport=models.McpTransport.STDIO,
        command=sys.executable,
        args=[str(SERVER)],
    )
    synced(server)
    enable("structured_read_file")
    yield
    clients.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_governed_turn_gets_the_40_kb_file_whole(structured_tools: None) -> None:
    """Once, so under MAX_RESULT_CHARS (65,536): nothing is cut."""
    model = ScriptedChatModel([tool_call("structured_read_file", id="f1"), text("Read.")])
    assert turn(model) == "Read."
    [answer] = responses(model)
    assert (answer.is_error, answer.response_data) == (False, FILE_TEXT)


@pytest.mark.django_db(transaction=True)
def test_served_again_over_our_mcp_endpoint_the_file_is_sent_once(
    structured_tools: None,
) -> None:
    token = Token.objects.create(user=User.objects.create_user("reader")).key
    with UvicornThread(with_mcp(get_asgi_application())) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/"

        async def read(opened: ClientSession) -> object:
            return await opened.call_tool("structured_read_file", {})

        result = run(session(url, token, read))
        body = _raw_call(url, token, "structured_read_file")
    assert [(block.type, block.text) for block in result.content] == [("text", FILE_TEXT)]
    assert result.structured_content is None
    # What crossed the wire: the file once (JSON-escaped newlines: 1,600 more characters), plus
    # the envelope; a copy would have made it twice as long.
    assert len(FILE_TEXT) < len(body) < len(FILE_TEXT) + 1_600 + 200


def _raw_call(url: str, token: str, name: str) -> bytes:
    """The bytes of one ``tools/call`` answer, from a fresh session opened by hand."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    opened = httpx.post(url, json=initialize, headers=headers, timeout=20)
    headers |= {
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name}}
    return httpx.post(url, json=call, headers=headers, timeout=20).content
