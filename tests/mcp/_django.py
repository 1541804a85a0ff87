"""Helpers of the Django-level MCP tests: servers as ``McpServer`` rows, governed turns."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tool_calling import ToolResponseMessage, models
from tool_calling.governance import governed_chat_client
from tool_calling.mcp import mirror

from ._servers import EVERYTHING, PAGED_SERVER, TIME_SERVER, node, require


def everything_stdio(alias: str = "everything", **fields: Any) -> models.McpServer:
    """server-everything over stdio as an ``McpServer`` row."""
    return models.McpServer.objects.create(
        alias=alias,
        transport=models.McpTransport.STDIO,
        command=node(),
        args=[str(require(EVERYTHING)), "stdio"],
        **fields,
    )


def everything_http(url: str, alias: str = "everything", **fields: Any) -> models.McpServer:
    """server-everything over streamable HTTP (at ``url``) as an ``McpServer`` row."""
    return models.McpServer.objects.create(
        alias=alias, transport=models.McpTransport.STREAMABLE_HTTP, url=url, **fields
    )


def time_server(alias: str = "time", **fields: Any) -> models.McpServer:
    """mcp-server-time (its own virtualenv) over stdio as an ``McpServer`` row."""
    return models.McpServer.objects.create(
        alias=alias,
        transport=models.McpTransport.STDIO,
        command=str(require(TIME_SERVER)),
        args=["--local-timezone", "UTC"],
        **fields,
    )


def paged(state: Path, alias: str = "paged", **fields: Any) -> models.McpServer:
    """tests/mcp/paged_server.py (its tool list read from ``state``) as an ``McpServer`` row."""
    return models.McpServer.objects.create(
        alias=alias,
        transport=models.McpTransport.STDIO,
        command=sys.executable,
        args=[str(PAGED_SERVER), str(state)],
        **fields,
    )


def synced(server: models.McpServer) -> mirror.McpSyncReport:
    """Sync ``server``; fail the test when it could not be listed."""
    report = mirror.sync_server(server)
    assert report.ok, report.error
    return report


def enable(*names: str) -> None:
    """Enable tools in the database, as an operator would in the tools' admin."""
    assert models.Tool.objects.filter(name__in=names).update(enabled=True) == len(names)


def turn(model: Any, *, user: Any = None, message: str = "Go") -> str | None:
    """One governed turn (no conversation) with ``model``; returns the answer."""
    client = governed_chat_client(user=user, model=model)
    return client.prompt(message).call().content()


def responses(model: Any, request: int = -1) -> list[Any]:
    """The tool responses sent back to the model in ``request``."""
    message = model.requests[request].messages[-1]
    assert isinstance(message, ToolResponseMessage)
    return message.responses


def offered(model: Any, request: int = 0) -> list[str]:
    """The tool names the model was offered in ``request``."""
    return model.tool_names_seen[request]


def write_state(path: Path, tools: list[dict[str, Any]], *, label: str | None = None) -> Path:
    """The state file of a paged server: its tools, and a label its answers carry."""
    state: dict[str, Any] = {"tools": tools, "page_size": None}
    if label is not None:
        state["label"] = label
    path.write_text(json.dumps(state))
    return path
