"""A streamable-HTTP MCP server on the official SDK's ``MCPServer`` (FastMCP in mcp 1.x).

The tests restart it mid-use (SIGKILL, then the same command on the same port) and check what
a client that held a session sees. Its sessions live in its memory, as FastMCP's do, so a
restarted server answers the old session id with 404 "Session not found".

Tools (text results only, no structured copy): ``echo``; ``record`` appends its ``key`` to
``STATE_DIR/record.log`` (a side effect the tests count, to prove a call ran once); ``slow``
records its ``key`` to ``STATE_DIR/slow.log``, then sleeps ``seconds``. A ``tools/call`` of
``refused_over_http`` never reaches the server: it is answered with HTTP 400 and a JSON-RPC
error (as a gateway or a strict server may refuse a request) and counted in
``STATE_DIR/refused.log``, while the session stays valid. Each log line is ``<pid> <key>``; the
process writes its pid to ``STATE_DIR/pid``.

Run: python tests/mcp/http_server.py PORT STATE_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

PORT = int(sys.argv[1])
STATE = Path(sys.argv[2])

server = MCPServer("restartable")


def _append(name: str, key: str) -> None:
    with (STATE / name).open("a") as log:
        log.write(f"{os.getpid()} {key}\n")


@server.tool(structured_output=False)
def echo(message: str) -> str:
    """Echo the message."""
    return f"Echo: {message}"


@server.tool(structured_output=False)
def record(key: str) -> str:
    """Record the key (a side effect), once per call."""
    _append("record.log", key)
    return f"recorded {key}"


@server.tool(structured_output=False)
async def slow(key: str, seconds: float) -> str:
    """Record the key, then sleep."""
    _append("slow.log", key)
    await anyio.sleep(seconds)
    return f"slept {seconds:g} s"


def refusing(app: Any) -> Any:
    """``app``, except that a call of ``refused_over_http`` is answered 400 at the HTTP level."""

    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        request = json.loads(body or b"null")
        params = request.get("params") if isinstance(request, dict) else None
        if isinstance(params, dict) and params.get("name") == "refused_over_http":
            _append("refused.log", str(params.get("arguments", {}).get("key")))
            error = {
                "jsonrpc": "2.0",
                "id": request.get("id"),
                "error": {"code": -32602, "message": "Refused over HTTP"},
            }
            payload = json.dumps(error).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return middleware


if __name__ == "__main__":
    (STATE / "pid").write_text(str(os.getpid()))
    uvicorn.run(
        refusing(server.streamable_http_app()),
        host="127.0.0.1",
        port=PORT,
        log_level="warning",
        lifespan="on",
    )
