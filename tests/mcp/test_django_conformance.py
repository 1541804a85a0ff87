"""The MCP conformance suite (@modelcontextprotocol/conformance) against our ``/mcp/``.

The server is the example project's ASGI app (``with_mcp(get_asgi_application())``) under
uvicorn: the conformance tools are ordinary governed tools (registry, ``Tool`` rows, enabled),
listed and called through the governed path and audited like any other. The suite's client
sends no credentials, so a small ASGI wrapper adds a real DRF token of a real user to every
request; authentication still runs for each one (``tool_calling.mcp.serving.authenticate``),
and Host and Origin are checked as the ``dns-rebinding-protection`` scenario verifies. It runs
once per protocol revision the endpoint speaks (``--requirements 2025-11-25``: handshake and
sessions; ``--requirements 2026-07-28``: sessionless), with governance on. The expected failures,
each with its reason, are those of the core's run (conformance-baseline-<revision>.yml: ``/mcp/``
is the same McpToolServer, fed by governance); the suite fails the run on an unexpected failure
or on a listed scenario that passes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tool_calling import models
from tool_calling.asgi import get_asgi_application, with_mcp
from tool_calling.registry import registry
from tool_calling.sync import sync_tools

from . import conformance_tools
from ._servers import (
    CONFORMANCE,
    CONFORMANCE_REVISIONS,
    NODE22,
    UvicornThread,
    require,
    run_conformance,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def with_token(app: Any, token: str) -> Any:
    """``app``, with ``Authorization: Bearer <token>`` on every HTTP request."""
    header = (b"authorization", f"Bearer {token}".encode())

    async def authenticated(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            kept = [(k, v) for k, v in scope.get("headers", []) if k != b"authorization"]
            scope = {**scope, "headers": [*kept, header]}
        await app(scope, receive, send)

    return authenticated


@pytest.fixture
def conformance_tools_governed() -> Iterator[None]:
    callbacks = conformance_tools.callbacks()
    registry.register(*callbacks, source="conformance")
    sync_tools()
    models.Tool.objects.filter(source="conformance").update(enabled=True)
    try:
        yield
    finally:
        for callback in callbacks:
            registry.unregister(callback.name)


@pytest.mark.parametrize("revision", CONFORMANCE_REVISIONS)
def test_the_conformance_suite_passes_against_our_mcp_endpoint_but_for_the_listed_failures(
    tmp_path: Path, conformance_tools_governed: None, revision: str
) -> None:
    require(CONFORMANCE)
    require(NODE22)
    token = Token.objects.create(user=User.objects.create_user("conformance")).key
    app = with_token(with_mcp(get_asgi_application()), token)
    with UvicornThread(app) as running:
        run_conformance(f"http://localhost:{running.port}/mcp/", tmp_path, revision)
    # The suite's calls went through the governed path: audited as the token's user.
    calls = models.ToolExecution.objects.filter(tool_name="test_simple_text")
    assert calls.exists()
    assert {row.user.username for row in calls} == {"conformance"}
    assert all(row.tool_call_id.startswith("mcp:") for row in calls)
