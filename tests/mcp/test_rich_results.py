"""Structured results, content blocks, progress and list cache hints over MCP, at both revisions.

McpToolServer runs under uvicorn; the clients are the official SDK's: ``ClientSession`` with
the initialize handshake (2025-11-25) and ``Client`` at its default, the sessionless
2026-07-28 revision. What the model would get from the same tools stays text (the last test).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pydantic
import pytest

from tool_calling import (
    FunctionToolCallback,
    ImageBlock,
    ResourceBlock,
    ToolContext,
    ToolResult,
    tool,
    tool_callbacks,
)
from tool_calling.core.mcp import McpToolServer

from ._client import client, run, session
from ._servers import UvicornThread

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 60


class Forecast(pydantic.BaseModel):
    city: str
    celsius: float


@tool
def forecast(city: str) -> Forecast:
    """Forecast the weather of a city."""
    return Forecast(city=city, celsius=3.5)


@tool
def picture() -> ToolResult:
    """Return a picture and where it came from."""
    return ToolResult(
        "A red pixel.",
        ImageBlock.from_bytes(PNG, "image/png"),
        ResourceBlock("test://source", mime_type="text/plain", text="camera 1"),
    )


@tool
def slow(ctx: ToolContext) -> str:
    """Take three steps, reporting each."""
    for step in (1, 2, 3):
        ctx.report_progress(step, 3, f"step {step}")
        time.sleep(0.02)
    return "done"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = McpToolServer.from_callbacks(
        tool_callbacks(forecast, picture, slow), list_ttl_ms=60_000
    )
    app = server.streamable_http_app(authenticate=lambda headers: "anyone")
    with UvicornThread(app) as running:
        yield running.url


Use = Callable[[Any], Awaitable[Any]]


def at(revision: str, url: str, use: Use) -> Any:
    """Run ``use`` on a client of ``revision`` (the handshake, or sessionless)."""
    if revision == "2025-11-25":
        return run(session(url, None, use))
    return run(client(url, None, use))


REVISIONS = ["2025-11-25", "2026-07-28"]


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_structured_result_has_its_schema_its_value_and_a_text_copy(
    url: str, revision: str
) -> None:
    async def use(opened: Any) -> Any:
        listed = {t.name: t for t in (await opened.list_tools()).tools}
        return listed, await opened.call_tool("forecast", {"city": "Oslo"})

    listed, result = at(revision, url, use)
    assert listed["forecast"].output_schema["properties"].keys() == {"city", "celsius"}
    assert listed["picture"].output_schema is None
    assert result.structured_content == {"city": "Oslo", "celsius": 3.5}
    assert [block.type for block in result.content] == ["text"]
    assert json.loads(result.content[0].text) == {"city": "Oslo", "celsius": 3.5}
    assert not result.is_error


@pytest.mark.parametrize("revision", REVISIONS)
def test_content_blocks_reach_the_client_as_blocks(url: str, revision: str) -> None:
    async def use(opened: Any) -> Any:
        return await opened.call_tool("picture", {})

    result = at(revision, url, use)
    assert [block.type for block in result.content] == ["text", "image", "resource"]
    text, image, resource = result.content
    assert text.text == "A red pixel."
    assert image.mime_type == "image/png"
    assert image.data == ImageBlock.from_bytes(PNG, "image/png").data
    assert str(resource.resource.uri) == "test://source"
    assert resource.resource.text == "camera 1"
    assert result.structured_content is None


@pytest.mark.parametrize("revision", REVISIONS)
def test_progress_reaches_a_client_that_asked_for_it(url: str, revision: str) -> None:
    async def use(opened: Any) -> Any:
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        result = await opened.call_tool("slow", {}, progress_callback=on_progress)
        plain = await opened.call_tool("slow", {})  # no token: the tool's reports go nowhere
        return seen, result, plain

    seen, result, plain = at(revision, url, use)
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert result.content[0].text == "done"
    assert plain.content[0].text == "done"


def test_a_tools_list_answer_says_how_long_it_stays_fresh_and_for_whom(url: str) -> None:
    async def use(opened: Any) -> Any:
        return await opened.session.list_tools()

    listed = run(client(url, None, use))
    assert listed.ttl_ms == 60_000
    assert listed.cache_scope == "private"


def test_the_model_gets_text_from_the_same_tools() -> None:
    assert FunctionToolCallback(forecast).call('{"city": "Oslo"}') == (
        '{"city":"Oslo","celsius":3.5}'
    )
    assert FunctionToolCallback(picture).call("{}") == (
        "A red pixel.\n[image image/png, 68 bytes]\ncamera 1"
    )
