"""What MCP clients are shown about a tool: title, hints and icons, from code and the admin.

From code: ``@tool(title=..., annotations=ToolAnnotations(...), icons=[ToolIcon(...)])``,
served by McpToolServer. From the admin: the ``Tool`` row's title, annotations and icons
replace the code's at ``/mcp/``. Imported tools: the hints an MCP server gives its tools are
passed on only when an operator trusts the server, as pinned; they never lift approval.
The clients are the official SDK's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.django._tools import registered
from tool_calling import (
    FunctionToolCallback,
    ToolAnnotations,
    ToolDefinitionError,
    ToolIcon,
    models,
    tool,
    tool_callbacks,
)
from tool_calling.asgi import get_asgi_application, with_mcp
from tool_calling.core.mcp import McpToolServer

from ._client import client, run
from ._django import enable, paged, synced
from ._servers import UvicornThread, write_state

pytestmark = pytest.mark.integration

ICON = ToolIcon("https://example.com/refund.png", "image/png", ("48x48",))


@tool(
    title="Refund an order",
    annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
    icons=[ICON],
)
def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    return order_id


def _listed(url: str, token: str | None = None) -> dict[str, Any]:
    async def use(opened: Any) -> Any:
        return {t.name: t for t in (await opened.list_tools()).tools}

    return run(client(url, token, use))


def test_title_hints_and_icons_from_code_are_served_and_absent_ones_are_not() -> None:
    server = McpToolServer.from_callbacks(tool_callbacks(refund, lookup))
    app = server.streamable_http_app(authenticate=lambda headers: "anyone")
    with UvicornThread(app) as running:
        listed = _listed(running.url)
    served = listed["refund"]
    assert served.title == "Refund an order"
    assert served.annotations.destructive_hint is True
    assert served.annotations.idempotent_hint is False
    assert served.annotations.read_only_hint is None
    [icon] = served.icons
    assert (str(icon.src), icon.mime_type, icon.sizes) == (
        "https://example.com/refund.png",
        "image/png",
        ["48x48"],
    )
    assert (listed["lookup"].title, listed["lookup"].annotations, listed["lookup"].icons) == (
        None,
        None,
        None,
    )
    metadata = FunctionToolCallback(refund).metadata
    assert (metadata.title, metadata.icons) == ("Refund an order", (ICON,))


def test_bad_presentation_values_are_refused_when_the_tool_is_defined() -> None:
    with pytest.raises(
        ToolDefinitionError,
        match=re.escape("ToolIcon src must be an https: URL or a data: URI, got 'ftp://x/i.png'."),
    ):
        ToolIcon("ftp://x/i.png")
    with pytest.raises(ToolDefinitionError, match="destructive_hint must be True, False or None"):
        ToolAnnotations(destructive_hint="yes")  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="icons must be ToolIcon values, got str"):

        @tool(icons=["https://example.com/i.png"])  # type: ignore[list-item]
        def iconic() -> str:
            """An icon given as a string."""
            return ""


@pytest.fixture
def site() -> Iterator[tuple[str, str]]:
    """/mcp/ of the example project with this module's tools; the URL and a user's token."""
    with registered(refund, lookup):
        models.Tool.objects.filter(name__in=["refund", "lookup"]).update(enabled=True)
        token = Token.objects.create(user=User.objects.create_user("carol")).key
        with UvicornThread(with_mcp(get_asgi_application())) as running:
            yield f"http://127.0.0.1:{running.port}/mcp/", token


@pytest.mark.django_db(transaction=True)
def test_an_operators_title_hints_and_icons_replace_the_codes_at_mcp(
    site: tuple[str, str],
) -> None:
    url, token = site
    assert _listed(url, token)["refund"].title == "Refund an order"
    models.Tool.objects.filter(name="refund").update(
        title="Give money back",
        annotations={"readOnlyHint": False, "destructiveHint": False},
        icons=[{"src": "https://example.com/money.svg", "mimeType": "image/svg+xml"}],
    )
    models.Tool.objects.filter(name="lookup").update(annotations={"readOnlyHint": True})
    listed = _listed(url, token)
    refund_served, lookup_served = listed["refund"], listed["lookup"]
    assert refund_served.title == "Give money back"
    assert refund_served.annotations.destructive_hint is False  # the operator's key wins
    assert refund_served.annotations.idempotent_hint is False  # the code's, kept
    assert refund_served.annotations.read_only_hint is False
    assert [str(icon.src) for icon in refund_served.icons] == ["https://example.com/money.svg"]
    assert lookup_served.annotations.read_only_hint is True
    assert lookup_served.title is None


REMOTE = {
    "name": "wipe",
    "description": "Wipe the cache.",
    "title": "Wipe everything",
    "annotations": {"readOnlyHint": True, "destructiveHint": False},
}


@pytest.mark.django_db(transaction=True)
def test_s18_an_imported_servers_hints_are_passed_on_only_when_an_operator_trusts_it(
    tmp_path: Path,
) -> None:
    server = paged(write_state(tmp_path / "state.json", [REMOTE]), alias="cache")
    synced(server)
    enable("cache_wipe")
    models.Tool.objects.filter(name="cache_wipe").update(requires_approval=True)
    token = Token.objects.create(user=User.objects.create_user("dave")).key
    with UvicornThread(with_mcp(get_asgi_application())) as running:
        url = f"http://127.0.0.1:{running.port}/mcp/"
        untrusted = _listed(url, token)["cache_wipe"]
        server.trust_annotations = True
        server.save()
        trusted = _listed(url, token)["cache_wipe"]
    assert (untrusted.title, untrusted.annotations) == (None, None)
    assert trusted.title == "Wipe everything"
    assert trusted.annotations.read_only_hint is True
    # A trusted readOnlyHint is still only a hint: the call needs its approval.
    assert models.Tool.objects.get(name="cache_wipe").requires_approval
