"""Tools served by McpToolServer in the server-side tests, and a stdio entry point for them.

Run ``python tests/mcp/served_tools.py PRINCIPAL`` to serve them over stdio as PRINCIPAL.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tool_calling import ToolCallback, ToolContext, ToolDefinition, tool, tool_callbacks
from tool_calling.exceptions import ToolFailure, ToolResolutionError


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    raise ToolFailure(f"Order {order_id!r} is already shipped; it cannot be cancelled.")


@tool
def crash() -> str:
    """Fail unexpectedly."""
    raise RuntimeError("connection string postgres://admin:hunter2@db/prod")


@tool
def drop_tables() -> str:
    """Drop every table (administrators only)."""
    return "dropped"


@tool
def whoami(ctx: ToolContext) -> str:
    """Say who is calling."""
    return f"{ctx['principal']} (tenant {ctx.get('tenant') or '-'})"


CALLBACKS = {cb.name: cb for cb in tool_callbacks(add, cancel_order, crash, drop_tables, whoami)}
ADMIN_ONLY = {"drop_tables"}
TOKENS = {"alice-token": "alice", "bob-token": "bob"}
ADMINS = {"alice"}


def authenticate(headers: Mapping[str, str]) -> str | None:
    """The principal of a ``Authorization: Bearer <token>`` header."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return TOKENS.get(token) if scheme.lower() == "bearer" else None


def list_tools(principal: str) -> list[ToolDefinition]:
    """Everything for administrators, all but the admin tools for others."""
    return [
        cb.definition
        for name, cb in CALLBACKS.items()
        if principal in ADMINS or name not in ADMIN_ONLY
    ]


AUDIT: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []


def call_tool(principal: str, name: str, arguments: dict[str, Any], meta: Mapping[str, Any]) -> str:
    """Run a call as ``principal`` (sync: the adapter runs it in a worker thread)."""
    AUDIT.append((principal, name, arguments, dict(meta)))
    callback: ToolCallback | None = CALLBACKS.get(name)
    if callback is None:
        raise ToolResolutionError(name)
    context = ToolContext(principal=principal, tenant=meta.get("tenant"))
    return callback.call(json.dumps(arguments), context)


def build_server(**options: Any) -> Any:
    from tool_calling.core.mcp import McpToolServer

    return McpToolServer(list_tools=list_tools, call_tool=call_tool, name="served-tools", **options)


if __name__ == "__main__":
    build_server(page_size=2).serve_stdio(sys.argv[1])
