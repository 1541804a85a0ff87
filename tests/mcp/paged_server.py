"""A stdio MCP server on the official SDK's low-level ``Server``, for what no public server does.

server-everything and mcp-server-time never paginate ``tools/list``, never change their list
and use tame names, so this one does, driven by a JSON state file the test rewrites:

    {"tools": [{"name": ..., "description": ..., "schema": {...}}], "page_size": 10}

(each tool may also have a "title" and "annotations", e.g. {"readOnlyHint": true}; a "label"
is added to the answers as "server").

Its tools answer with the arguments and the ``_meta`` they received, so a test can see exactly
what crossed the wire. ``add_tool`` appends a tool to the state file and sends
``notifications/tools/list_changed``. ``sleep`` waits ``seconds``.
Run: python tests/mcp/paged_server.py STATE_FILE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server

STATE = Path(sys.argv[1])


def _state() -> dict[str, Any]:
    return json.loads(STATE.read_text())  # type: ignore[no-any-return]


def _tools() -> list[types.Tool]:
    tools = [
        types.Tool(
            name=t["name"],
            title=t.get("title"),
            description=t.get("description", ""),
            input_schema=t.get("schema", {"type": "object"}),
            annotations=(
                types.ToolAnnotations.model_validate(t["annotations"])
                if t.get("annotations")
                else None
            ),
        )
        for t in _state()["tools"]
    ]
    tools.append(
        types.Tool(
            name="add_tool",
            description="Add a tool to this server's list.",
            input_schema={
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        )
    )
    tools.append(
        types.Tool(
            name="sleep",
            description="Wait, then answer.",
            input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
        )
    )
    return tools


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tools = _tools()
    size = _state().get("page_size") or len(tools)
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + size
    return types.ListToolsResult(
        tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
    )


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "add_tool":
        state = _state()
        state["tools"].append({"name": arguments["name"], "description": "Added at run time."})
        STATE.write_text(json.dumps(state))
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(type="text", text="added")])
    if params.name == "sleep":
        await anyio.sleep(float(arguments.get("seconds", 1)))
        return types.CallToolResult(content=[types.TextContent(type="text", text="awake")])
    received = {"tool": params.name, "arguments": arguments, "meta": dict(params.meta or {})}
    if "label" in _state():
        received["server"] = _state()["label"]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(received, sort_keys=True))]
    )


server = Server("paged-fixture", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
