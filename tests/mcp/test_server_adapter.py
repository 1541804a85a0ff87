"""McpToolServer driven by the official ``mcp`` client (S17).

The server runs under uvicorn on a thread (lifespan on, as the SDK's session manager needs);
clients are the SDK's ``ClientSession`` over ``streamable_http_client`` and plain HTTP requests
for the refusals. Every wait is bounded.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tool_calling import FunctionToolCallback, ToolDefinitionError, tool, tool_callbacks
from tool_calling.core.mcp import (
    McpConnection,
    McpToolCallbackProvider,
    McpToolServer,
    ProtectedResource,
    StdioTransport,
    StreamableHttpTransport,
)

from . import served_tools
from ._client import run, session, tool_names
from ._servers import UvicornThread

pytestmark = pytest.mark.integration

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def served() -> Iterator[UvicornThread]:
    app = served_tools.build_server().streamable_http_app(authenticate=served_tools.authenticate)
    with UvicornThread(app) as server:
        yield server


def _call(
    url: str, token: str, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
) -> Any:
    async def call(opened: ClientSession) -> Any:
        return await opened.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]

    return run(session(url, token, call))


def test_s17_principals_see_their_own_tool_lists(served: UvicornThread) -> None:
    """A low-privilege principal's tools/list excludes the admin tools."""
    bob = tool_names(served.url, "bob-token")
    alice = tool_names(served.url, "alice-token")
    assert bob == ["add", "cancel_order", "crash", "whoami"]
    assert alice == ["add", "cancel_order", "crash", "drop_tables", "whoami"]


def test_a_call_returns_the_tools_text_and_reaches_call_tool_with_principal_and_meta(
    served: UvicornThread,
) -> None:
    result = _call(served.url, "bob-token", "add", {"a": 2, "b": 3}, meta={"tenant": "acme"})
    assert result.is_error is False
    assert [c.text for c in result.content] == ["5"]
    # The client's own _meta, and what the server adds for the tool context (here: the
    # capabilities this client declared, none).
    assert served_tools.AUDIT[-1] == (
        "bob",
        "add",
        {"a": 2, "b": 3},
        {"tenant": "acme", "tool_calling.client_capabilities": {}},
    )
    who = _call(served.url, "bob-token", "whoami", {}, meta={"tenant": "acme"})
    assert who.content[0].text == "bob (tenant acme)"


def test_a_tool_failure_is_an_error_result_with_its_message(served: UvicornThread) -> None:
    result = _call(served.url, "bob-token", "cancel_order", {"order_id": "A1"})
    assert result.is_error is True
    assert result.content[0].text == "Order 'A1' is already shipped; it cannot be cancelled."


def test_an_unexpected_exception_never_leaks_its_message(served: UvicornThread) -> None:
    result = _call(served.url, "bob-token", "crash", {})
    assert result.is_error is True
    assert result.content[0].text == "Exception occurred in tool: crash (RuntimeError)"


def test_bad_arguments_are_an_error_result_the_model_can_act_on(served: UvicornThread) -> None:
    result = _call(served.url, "bob-token", "add", {"a": "2"})
    assert result.is_error is True
    assert result.content[0].text == (
        "Invalid arguments for tool 'add':\n"
        "- a: Input should be a valid integer\n"
        "- b: Field required"
    )


def test_s17_a_tool_outside_the_principals_list_is_unknown_and_never_runs(
    served: UvicornThread,
) -> None:
    before = len(served_tools.AUDIT)
    with pytest.raises(MCPError) as caught:
        _call(served.url, "bob-token", "drop_tables", {})
    assert caught.value.message == "Unknown tool: drop_tables"
    assert len(served_tools.AUDIT) == before  # call_tool was never reached
    assert _call(served.url, "alice-token", "drop_tables", {}).content[0].text == "dropped"


def _post(
    url: str, headers: dict[str, str] | None = None, body: dict[str, Any] = INITIALIZE
) -> httpx.Response:
    return httpx.post(url, json=body, headers={**MCP_HEADERS, **(headers or {})}, timeout=10)


def test_s17_a_request_without_a_valid_token_gets_401(served: UvicornThread) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic Ym9iOmJvYg=="}):
        response = _post(served.url, headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        assert response.json() == {
            "error": "invalid_token",
            "error_description": "Authentication required",
        }


def test_s17_a_foreign_origin_gets_403_even_with_a_valid_token(served: UvicornThread) -> None:
    for origin in ("http://evil.example", "https://localhost.evil.example", "null"):
        response = _post(served.url, {"Authorization": "Bearer bob-token", "Origin": origin})
        assert (response.status_code, response.text) == (403, "Invalid Origin header"), origin
    local = _post(
        served.url,
        {"Authorization": "Bearer bob-token", "Origin": f"http://localhost:{served.port}"},
    )
    assert local.status_code == 200


def test_s17_a_host_outside_the_allow_list_is_refused(served: UvicornThread) -> None:
    """DNS rebinding: a name that resolves to this machine but is not one of its names."""
    response = _post(served.url, {"Authorization": "Bearer bob-token", "Host": "evil.example"})
    assert (response.status_code, response.text) == (421, "Invalid Host header")
    ok = _post(
        served.url, {"Authorization": "Bearer bob-token", "Host": f"localhost:{served.port}"}
    )
    assert ok.status_code == 200


def test_s17_a_session_belongs_to_the_principal_that_opened_it(served: UvicornThread) -> None:
    opened = _post(served.url, {"Authorization": "Bearer bob-token"})
    session_id = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    common = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
    hijack = _post(served.url, {"Authorization": "Bearer alice-token", **common}, listing)
    assert hijack.status_code == 404
    own = _post(served.url, {"Authorization": "Bearer bob-token", **common}, listing)
    assert own.status_code == 200


def test_other_paths_go_to_the_fallback_app_and_lifespan_never_does() -> None:
    seen: list[str] = []

    async def fallback(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"django here"})

    app = served_tools.build_server().streamable_http_app(
        authenticate=served_tools.authenticate, fallback=fallback
    )
    with UvicornThread(app) as server:
        other = httpx.get(f"http://127.0.0.1:{server.port}/admin/", timeout=10)
        assert other.text == "django here"
        assert tool_names(server.url, "bob-token")[0] == "add"
    assert seen == ["http"]


def test_without_lifespan_the_endpoint_says_what_is_missing() -> None:
    app = served_tools.build_server().streamable_http_app(authenticate=served_tools.authenticate)
    with UvicornThread(app, lifespan="off") as server:
        response = _post(server.url, {"Authorization": "Bearer bob-token"})
    assert response.status_code == 503
    assert "must send lifespan events" in response.text


def test_our_client_reads_our_server_across_pages() -> None:
    """McpToolCallbackProvider against McpToolServer(page_size=2): 5 tools on 3 pages."""
    app = served_tools.build_server(page_size=2).streamable_http_app(
        authenticate=served_tools.authenticate
    )
    with UvicornThread(app) as server:
        transport = StreamableHttpTransport(
            server.url, headers={"Authorization": "Bearer alice-token"}
        )
        with McpConnection(transport, name="ours", request_timeout=10) as connection:
            provider = McpToolCallbackProvider(connection, prefix="ours")
            callbacks = {cb.name: cb for cb in provider.refresh()}
            assert list(callbacks) == [
                "ours_add",
                "ours_cancel_order",
                "ours_crash",
                "ours_drop_tables",
                "ours_whoami",
            ]
            assert callbacks["ours_add"].call('{"a": 40, "b": 2}') == "42"


def test_the_server_over_stdio_serves_one_principal() -> None:
    script = Path(served_tools.__file__)
    connection = McpConnection(
        StdioTransport(sys.executable, [str(script), "bob"]), name="stdio-ours", request_timeout=15
    )
    with connection:
        provider = McpToolCallbackProvider(connection)
        callbacks = {cb.name: cb for cb in provider.refresh()}
        assert list(callbacks) == ["add", "cancel_order", "crash", "whoami"]  # 2 pages, bob's
        assert callbacks["whoami"].call("{}") == "bob (tenant -)"


def test_from_callbacks_serves_fixed_tools_and_refuses_duplicates() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    server = McpToolServer.from_callbacks(tool_callbacks(echo))
    app = server.streamable_http_app(authenticate=lambda headers: "anyone")
    with UvicornThread(app) as running:
        result = _call(running.url, "", "echo", {"text": "hi"})
        assert result.content[0].text == "hi"
    with pytest.raises(ToolDefinitionError):
        McpToolServer.from_callbacks(
            [FunctionToolCallback(echo), FunctionToolCallback(lambda: "x", name="echo")]
        )
    with pytest.raises(ValueError, match="page_size must be a positive integer, got 0"):
        McpToolServer.from_callbacks([], page_size=0)


def test_a_protected_resource_names_its_metadata_and_challenges_with_it() -> None:
    resource = ProtectedResource(
        resource="https://example.com/mcp/",
        authorization_servers=("https://auth.example.com",),
        scopes_supported=("mcp", "mcp:books"),
        scope="mcp",
    )
    assert resource.metadata_url == "https://example.com/.well-known/oauth-protected-resource/mcp/"
    assert resource.metadata_paths() == (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    )
    assert resource.challenge() == (
        'Bearer resource_metadata="https://example.com/.well-known/oauth-protected-resource/mcp/", '
        'scope="mcp"'
    )
    assert resource.challenge("insufficient_scope", "mcp:books") == (
        'Bearer error="insufficient_scope", '
        'resource_metadata="https://example.com/.well-known/oauth-protected-resource/mcp/", '
        'scope="mcp:books"'
    )
    assert resource.document() == {
        "resource": "https://example.com/mcp/",
        "authorization_servers": ["https://auth.example.com"],
        "scopes_supported": ["mcp", "mcp:books"],
        "bearer_methods_supported": ["header"],
    }


@pytest.mark.parametrize("url", ["example.com/mcp/", "ftp://example.com/mcp/", "https://x/#f"])
def test_a_protected_resource_must_be_an_http_url(url: str) -> None:
    message = f"ProtectedResource: resource must be an http(s) URL without a fragment, got {url!r}."
    with pytest.raises(ValueError, match=re.escape(message)):
        ProtectedResource(resource=url, authorization_servers=())


def test_insufficient_scope_answers_403_before_the_call_and_passes_the_body_on() -> None:
    seen: list[Any] = []

    def insufficient_scope(principal: Any, message: Any) -> list[str]:
        seen.append(message.get("method"))
        params = message.get("params") or {}
        return ["mcp:admin"] if params.get("name") == "add" else []

    app = served_tools.build_server().streamable_http_app(
        authenticate=served_tools.authenticate, insufficient_scope=insufficient_scope
    )
    with UvicornThread(app) as served:
        assert tool_names(served.url, "bob-token")  # the body reached the SDK intact
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
        }
        response = httpx.post(
            served.url,
            json=call,
            headers={
                "Authorization": "Bearer bob-token",
                "Accept": "application/json, text/event-stream",
            },
            timeout=20,
        )
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", scope="mcp:admin"'
    )
    assert response.json()["error"] == "insufficient_scope"
    assert "initialize" in seen and "tools/list" in seen and "tools/call" in seen
