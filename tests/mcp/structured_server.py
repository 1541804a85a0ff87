"""A stdio MCP server written as most Python servers are: the official SDK's ``MCPServer``.

``MCPServer`` (FastMCP's successor in the SDK) sends the result of a tool with a return type
twice, as the MCP specification recommends: as structured content (``{"result": ...}`` for a
value that is not an object) and as a text copy of it, for clients that read only text.
``summary`` sends a text that is not a copy of its structured content.

Run: python tests/mcp/structured_server.py
"""

from __future__ import annotations

import mcp_types as types
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

FILE_TEXT = "".join(f"line {n:05d} of this file.\n" for n in range(1600))
"""What ``read_file`` returns: 40,000 characters."""

server = MCPServer("structured")


class Forecast(BaseModel):
    """A weather forecast."""

    city: str
    temperature: int
    conditions: str


@server.tool()
def read_file() -> str:
    """Return a 40,000-character file."""
    return FILE_TEXT


@server.tool()
def names() -> list[str]:
    """Return three names."""
    return ["Ada", "Grace", "Barbara"]


@server.tool()
def answer() -> int:
    """Return a number."""
    return 42


@server.tool()
def forecast(city: str) -> Forecast:
    """Return the forecast of a city."""
    return Forecast(city=city, temperature=21, conditions="Sunny, a light breeze")


@server.tool()
def summary() -> types.CallToolResult:
    """Return a sentence for people and the data for programs."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="Found 2 orders.")],
        structured_content={"orders": [{"id": "A1"}, {"id": "B2"}]},
    )


if __name__ == "__main__":
    server.run("stdio")
