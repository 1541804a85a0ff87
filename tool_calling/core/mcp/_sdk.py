"""The one place that imports the ``mcp`` SDK (and what it brings: anyio, httpx2, jsonschema).

Every other module of ``tool_calling.core.mcp`` takes SDK names from here, so a missing or
incompatible SDK fails in one place with the install command. One name is an SDK internal:
``negotiate_auto`` (``mcp.client._probe``), the policy the SDK's own ``Client`` connects with
(``server/discover``, else the initialize handshake); if a release moves it, only this import
changes.
"""

from __future__ import annotations

try:
    import anyio
    import anyio.from_thread
    import anyio.lowlevel
    import httpx2
    import jsonschema
    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client._probe import negotiate_auto  # the SDK Client's own connect policy
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel.server import NotificationOptions, Server
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
    from mcp.server.stdio import stdio_server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp.shared.exceptions import MCPError
    from mcp.shared.message import ServerMessageMetadata
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
except ImportError as exc:  # exercised by tests/test_public_api.py without the SDK
    # ModuleNotFoundError, naming the missing module, as importing it directly would.
    raise ModuleNotFoundError(
        "tool_calling.core.mcp needs the 'mcp' package (version 2): "
        "pip install 'django-tool-calling[mcp]' (or: pip install 'mcp>=2.3,<3' jsonschema)",
        name=exc.name,
    ) from exc

__all__ = [
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "ServerMessageMetadata",
    "AccessToken",
    "AuthenticatedUser",
    "ClientSession",
    "MCPError",
    "NotificationOptions",
    "Server",
    "RequestStateBoundary",
    "RequestStateSecurity",
    "ServerRequestContext",
    "StdioServerParameters",
    "StreamableHTTPSessionManager",
    "TransportSecuritySettings",
    "anyio",
    "httpx2",
    "jsonschema",
    "negotiate_auto",
    "stdio_client",
    "stdio_server",
    "streamable_http_client",
    "types",
]
