"""The MCP conformance suite (@modelcontextprotocol/conformance) against McpToolServer.

The scenarios each supported protocol revision requires (``--requirements 2025-11-25`` and
``--requirements 2026-07-28``) run against the streamable-HTTP app served by uvicorn; the
expected failures, each with its reason, are in conformance-baseline-<revision>.yml, and the
suite itself fails the run on an unexpected failure or on a listed scenario that passes. The
suite's client sends no credentials, so this app's authentication hook admits every request
(the scenario dns-rebinding-protection is about exactly such a localhost server); Host and
Origin are still checked, as that scenario verifies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tool_calling.core.mcp import McpToolServer

from . import conformance_tools
from ._servers import (
    CONFORMANCE,
    CONFORMANCE_REVISIONS,
    NODE22,
    UvicornThread,
    require,
    run_conformance,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("revision", CONFORMANCE_REVISIONS)
def test_the_conformance_suite_passes_but_for_the_listed_expected_failures(
    tmp_path: Path, revision: str
) -> None:
    require(CONFORMANCE)
    require(NODE22)
    server = McpToolServer.from_callbacks(
        conformance_tools.callbacks(), name="tool-calling-conformance"
    )
    app = server.streamable_http_app(authenticate=lambda headers: "conformance")
    with UvicornThread(app) as running:
        run_conformance(f"http://localhost:{running.port}/mcp", tmp_path, revision)
