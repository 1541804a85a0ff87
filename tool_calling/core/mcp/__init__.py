"""MCP adapters: servers' tools as ToolCallbacks (client), and tools served over MCP (server).

Needs the optional ``mcp`` SDK (``pip install 'django-tool-calling[mcp]'``); importing this
package without it raises ``ImportError`` with that command.
"""

from tool_calling.core.mcp.client import McpToolCallback, McpToolCallbackProvider, spec_from_tool
from tool_calling.core.mcp.connection import (
    McpConnection,
    McpTransport,
    StdioTransport,
    StreamableHttpTransport,
)
from tool_calling.core.mcp.server import (
    DEFAULT_ALLOWED_HOSTS,
    McpHttpApp,
    McpToolServer,
    ProtectedResource,
)
from tool_calling.core.mcp.spec import McpToolSpec, definition_hash, mcp_tool_name

__all__ = [
    "DEFAULT_ALLOWED_HOSTS",
    "McpConnection",
    "McpHttpApp",
    "McpToolCallback",
    "McpToolCallbackProvider",
    "McpToolServer",
    "McpToolSpec",
    "McpTransport",
    "ProtectedResource",
    "StdioTransport",
    "StreamableHttpTransport",
    "definition_hash",
    "mcp_tool_name",
    "spec_from_tool",
]
