"""Our governed tools at ``/mcp/`` of the example project's ASGI app, driven by the official
``mcp`` client (S17).

The app is ``tool_calling.asgi.with_mcp(get_asgi_application())``, as project/asgi.py builds
it, under uvicorn on a thread (lifespan on). Users authenticate with DRF tokens; what they list
and call is the admin's governance; every call is a ``ToolExecution`` row.
"""

from __future__ import annotations

import datetime
import http.client
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import override_settings
from django.utils import timezone
from mcp import Client, ClientSession
from mcp.shared.exceptions import MCPError
from rest_framework.authtoken.models import Token

from tests.django._tools import every_log_record_at_debug, registered, tool_calling_settings
from tool_calling import InputRequired, ToolContext, models, tool
from tool_calling.asgi import get_asgi_application, with_mcp
from tool_calling.exceptions import ToolFailure
from tool_calling.mcp.serving import (
    SESSIONLESS_WINDOW_SECONDS,
    McpPrincipal,
    _call_tool,
    approval_text,
)

from ._client import client, run, session, tool_names
from ._servers import UvicornThread

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

S = models.ExecutionStatus

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

DROPPED: list[str] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def drop_tables() -> str:
    """Drop every table (admins only)."""
    DROPPED.append("dropped")
    return "dropped"


@tool
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    raise ToolFailure(f"Order {order_id!r} is already shipped; it cannot be cancelled.")


@tool
def wire_money(amount: int) -> str:
    """Send money (a person approves each call)."""
    DROPPED.append(f"wired {amount}")
    return "sent"


@tool
def whoami(context: ToolContext) -> str:
    """Say who calls, from the tool context."""
    return f"user {context['user_id']} in {context['mcp_session'][:5]}..."


@tool
def confirm_refund(ctx: ToolContext, amount: int) -> str:
    """Refund an amount once the user confirms it."""
    answer = ctx.input_responses.get("sure")
    if answer is None or ctx.request_state != f"refund:{amount}":
        form = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        ask = InputRequired.elicitation(f"Refund {amount}?", form)
        return InputRequired({"sure": ask}, request_state=f"refund:{amount}")
    return f"refunded {amount}" if answer["content"]["ok"] else "kept"


@pytest.fixture(autouse=True)
def _tools() -> Iterator[None]:
    """This module's tools in the project registry, with their ``Tool`` rows."""
    with registered(add, drop_tables, cancel_order, wire_money, whoami, confirm_refund):
        yield


@pytest.fixture
def people() -> dict[str, str]:
    """alice (group admins) and bob (no group), with their DRF tokens; the tools governed."""
    DROPPED.clear()
    admins = Group.objects.create(name="admins")
    alice = User.objects.create_user("alice")
    alice.groups.add(admins)
    bob = User.objects.create_user("bob")
    models.Tool.objects.filter(name="drop_tables").first().allowed_groups.add(admins)
    models.Tool.objects.filter(name="wire_money").update(requires_approval=True)
    return {
        "alice": Token.objects.create(user=alice).key,
        "bob": Token.objects.create(user=bob).key,
    }


@pytest.fixture
def site() -> Iterator[str]:
    """The example project's ASGI app with /mcp/, served; yields the MCP endpoint's URL."""
    with UvicornThread(with_mcp(get_asgi_application())) as server:
        yield f"http://127.0.0.1:{server.port}/mcp/"


def calls(url: str, token: str, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Make ``requests`` (name, arguments) in one session; their results, in order."""

    async def make(opened: ClientSession) -> list[Any]:
        return [await opened.call_tool(name, arguments) for name, arguments in requests]

    return run(session(url, token, make))


def text_of(result: Any) -> tuple[str, bool]:
    return result.content[0].text, bool(result.is_error)


def post(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **(headers or {})}, timeout=20)


def test_s17_a_low_privilege_principals_tools_list_excludes_admin_tools(
    site: str, people: dict[str, str]
) -> None:
    demo = sorted(models.Tool.objects.filter(source="demo").values_list("name", flat=True))
    ours = ["add", "cancel_order", "confirm_refund", "drop_tables", "wire_money", "whoami"]
    assert sorted(tool_names(site, people["alice"])) == sorted([*demo, *ours])
    bob = tool_names(site, people["bob"])
    assert "drop_tables" not in bob
    assert sorted(bob) == sorted(
        [*demo, "add", "cancel_order", "confirm_refund", "wire_money", "whoami"]
    )
    # A tool an operator disables leaves every list at once.
    models.Tool.objects.filter(name="add").update(enabled=False)
    assert "add" not in tool_names(site, people["alice"])


def test_s22_tools_list_leaves_out_a_tool_whose_permission_the_principal_lacks(
    site: str, people: dict[str, str]
) -> None:
    """An operator's permission on a tool: only principals who hold it are shown the tool."""
    models.Tool.objects.filter(name="add").update(permission="auth.view_user")
    User.objects.get(username="alice").user_permissions.add(
        Permission.objects.get(content_type__app_label="auth", codename="view_user")
    )
    assert "add" in tool_names(site, people["alice"])
    assert "add" not in tool_names(site, people["bob"])


def test_a_call_runs_governed_and_is_audited_with_the_user_and_the_mcp_session(
    site: str, people: dict[str, str]
) -> None:
    first, second = calls(site, people["bob"], ("add", {"a": 40, "b": 2}), ("whoami", {}))
    assert text_of(first) == ("42", False)
    bob = User.objects.get(username="bob")
    assert text_of(second)[0].startswith(f"user {bob.pk} in ")
    rows = list(models.ToolExecution.objects.order_by("pk"))
    assert [(r.tool_name, r.status, r.user) for r in rows] == [
        ("add", S.SUCCEEDED, bob),
        ("whoami", S.SUCCEEDED, bob),
    ]
    session = rows[0].tool_call_id.split(":")[1]
    assert len(session) == 32  # the MCP session id the SDK issued
    assert [r.tool_call_id for r in rows] == [f"mcp:{session}:1", f"mcp:{session}:2"]
    assert rows[0].result == "42" and rows[0].conversation is None


def test_a_failing_tool_is_an_error_result_and_an_audited_failure(
    site: str, people: dict[str, str]
) -> None:
    [result] = calls(site, people["bob"], ("cancel_order", {"order_id": "A1"}))
    assert text_of(result) == ("Order 'A1' is already shipped; it cannot be cancelled.", True)
    [bad] = calls(site, people["bob"], ("add", {"a": "x"}))
    assert text_of(bad) == (  # field by field, as the model gets it
        "Invalid arguments for tool 'add':\n- a: Input should be a valid integer\n"
        "- b: Field required",
        True,
    )
    statuses = list(models.ToolExecution.objects.order_by("pk").values_list("status", flat=True))
    assert statuses == [S.FAILED, S.FAILED]


def test_an_approval_gated_tool_answers_with_a_clear_error_and_never_runs(
    site: str, people: dict[str, str]
) -> None:
    [result] = calls(site, people["alice"], ("wire_money", {"amount": 100}))
    assert text_of(result) == (approval_text("wire_money"), True)
    assert approval_text("wire_money") == (
        "Tool 'wire_money' requires a person's approval before each call, and a call over MCP "
        "cannot wait for one: it was not run. Use it from a conversation of this project, "
        "whose background runs wait for approvals."
    )
    assert DROPPED == []
    row = models.ToolExecution.objects.get()
    assert (row.tool_name, row.status, row.user.username) == ("wire_money", S.REFUSED, "alice")


def test_s22_the_codes_approval_flag_is_a_floor_when_the_rows_is_off(
    site: str, people: dict[str, str]
) -> None:
    """The example project's refund_order requires approval in its code; its row says False
    (a deploy that added the flag, before the next sync; or a row edited in the shell)."""
    models.Tool.objects.filter(name="refund_order").update(requires_approval=False)
    [result] = calls(site, people["bob"], ("refund_order", {"order_id": "X", "amount": 500}))
    assert text_of(result) == (approval_text("refund_order"), True)
    row = models.ToolExecution.objects.get()
    assert (row.tool_name, row.status, row.result) == (
        "refund_order",
        S.REFUSED,
        approval_text("refund_order"),
    )


def test_a_call_needing_the_users_confirmation_or_a_policys_approval_is_refused_over_mcp(
    site: str, people: dict[str, str]
) -> None:
    """An MCP client cannot be asked: the gate refuses as it does for approvals."""
    from tool_calling.calls.gate import confirmation_refusal_text

    [confirm] = calls(site, people["bob"], ("cancel_booking", {"booking_id": "B7"}))
    assert text_of(confirm) == (confirmation_refusal_text("cancel_booking"), True)
    models.DecisionPolicy.objects.create(name="sums", tool_pattern="add_*", requires_approval=True)
    [policed] = calls(site, people["bob"], ("add_numbers", {"a": 1, "b": 2}))
    assert text_of(policed) == (approval_text("add_numbers"), True)
    assert list(models.ToolExecution.objects.values_list("status", flat=True)) == [
        S.REFUSED,
        S.REFUSED,
    ]


def test_failures_over_mcp_log_no_argument_values_or_key_names(
    site: str, people: dict[str, str]
) -> None:
    """The client reads what was wrong; the log says which tool failed and how, nothing more."""
    with every_log_record_at_debug() as logs:
        rejected, refused = calls(
            site,
            people["alice"],
            ("add", {"a": 1, "b": 2, "zz_key_name": "vv_value_one"}),
            ("cancel_order", {"order_id": "vv_value_two"}),
        )
    assert text_of(rejected) == (
        "Invalid arguments for tool 'add':\n- zz_key_name: Unknown parameter; remove it",
        True,
    )
    assert text_of(refused) == (
        "Order 'vv_value_two' is already shipped; it cannot be cancelled.",
        True,
    )
    # This project's log records (at DEBUG, the MCP SDK's and the HTTP libraries' aside).
    logged = "\n".join(
        line for line in logs.getvalue().splitlines() if line.startswith("tool_calling")
    )
    assert "MCP call of 'add' answered with an error (ToolFailure)" in logged
    assert "MCP call of 'cancel_order' answered with an error (ToolFailure)" in logged
    assert "zz_key_name" not in logged and "vv_value" not in logged


def test_s17_no_token_gets_401(site: str, people: dict[str, str]) -> None:
    Token.objects.create(user=User.objects.create_user("gone", is_active=False), key="inactive")
    for headers in (
        {},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": f"Token {people['bob']}"},  # DRF's scheme is for /api/, not here
        {"Authorization": "Bearer inactive"},
    ):
        response = post(site, headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert post(site, {"Authorization": f"Bearer {people['bob']}"}).status_code == 200


def test_s17_origin_evil_example_gets_403(site: str, people: dict[str, str]) -> None:
    token = {"Authorization": f"Bearer {people['bob']}"}
    for origin in ("http://evil.example", "https://evil.example", "null"):
        response = post(site, {**token, "Origin": origin})
        assert (response.status_code, response.text) == (403, "Invalid Origin header"), origin
    port = site.split(":")[2].split("/")[0]
    assert post(site, {**token, "Origin": f"http://localhost:{port}"}).status_code == 200


def test_s17_a_host_outside_the_allow_list_is_refused(site: str, people: dict[str, str]) -> None:
    token = {"Authorization": f"Bearer {people['bob']}"}
    response = post(site, {**token, "Host": "evil.example"})
    assert (response.status_code, response.text) == (421, "Invalid Host header")


def test_s17_another_users_token_never_sees_the_first_users_tools(
    site: str, people: dict[str, str]
) -> None:
    alice, bob = people["alice"], people["bob"]
    opened = post(site, {"Authorization": f"Bearer {alice}"})
    common = {
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    hijack = httpx.post(
        site, json=listing, headers={**MCP_HEADERS, **common, "Authorization": f"Bearer {bob}"}
    )
    assert hijack.status_code == 404  # alice's session is not bob's
    with pytest.raises(MCPError, match="^Unknown tool: drop_tables$"):
        calls(site, bob, ("drop_tables", {}))
    assert DROPPED == []
    assert "drop_tables" not in tool_names(site, bob)


@pytest.mark.parametrize("behaviour", ["RETURN_ERROR_RESPONSE", "THROW"])
def test_limits_count_per_mcp_session(site: str, people: dict[str, str], behaviour: str) -> None:
    """An MCP session is one turn for LIMITS (and the operators' overrides)."""
    limits = {"MAX_CALLS_PER_TOOL": {"add": 2}, "ON_LIMIT_EXCEEDED": behaviour}
    breach = (
        "Tool call limit (2) exceeded for tool 'add'. No further calls to this tool are allowed "
        "in this turn."
    )
    with override_settings(TOOL_CALLING=tool_calling_settings(LIMITS=limits)):
        one = {"a": 1, "b": 1}
        results = calls(site, people["bob"], *[("add", one)] * 4)
        assert [text_of(r) for r in results] == [
            ("2", False),
            ("2", False),
            (breach, True),
            (breach, True),
        ]
        # A new session starts from zero.
        assert [text_of(r) for r in calls(site, people["bob"], ("add", one))] == [("2", False)]
    refused = models.ToolExecution.objects.filter(status=S.REFUSED)
    assert list(refused.values_list("tool_name", flat=True)) == ["add", "add"]


def client_calls(url: str, token: str, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Make ``requests`` with the SDK's ``Client`` at its default (sessionless) revision."""

    async def make(opened: Client) -> list[Any]:
        assert opened.protocol_version == "2026-07-28"
        return [await opened.call_tool(name, arguments) for name, arguments in requests]

    return run(client(url, token, make))


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_r14_every_revision_meets_the_same_limits_and_distinct_audit_ids(
    site: str, people: dict[str, str], revision: str
) -> None:
    """A client of the sessionless revision is one client for LIMITS, as a session is."""
    limits = {"MAX_CALLS_PER_TOOL": {"add": 2}, "ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE"}
    breach = (
        "Tool call limit (2) exceeded for tool 'add'. No further calls to this tool are allowed "
        "in this turn."
    )
    make = calls if revision == "2025-11-25" else client_calls
    with override_settings(TOOL_CALLING=tool_calling_settings(LIMITS=limits)):
        results = make(site, people["bob"], *[("add", {"a": 1, "b": 1})] * 4)
    assert [text_of(r) for r in results] == [
        ("2", False),
        ("2", False),
        (breach, True),
        (breach, True),
    ]
    rows = list(models.ToolExecution.objects.order_by("pk"))
    assert [row.status for row in rows] == [S.SUCCEEDED, S.SUCCEEDED, S.REFUSED, S.REFUSED]
    ids = [row.tool_call_id for row in rows]
    assert len(set(ids)) == 4, ids
    # One client (the session, or the principal's sessionless calls) prefixes every id.
    assert len({call_id.rsplit(":", 1)[0] for call_id in ids}) == 1, ids


def test_r14_a_sessionless_clients_calls_count_for_the_window_then_start_afresh(
    people: dict[str, str],
) -> None:
    """Its calls are read from the audit: another process serving /mcp/ counts the same ones."""
    bob = User.objects.get(username="bob")
    limits = {"MAX_CALLS_PER_TOOL": {"add": 1}, "ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE"}

    def call() -> str:
        # A principal as each request builds it (no session; the credential's digest).
        principal = McpPrincipal(bob, "", "client-0123456789abcdef")
        try:
            return _call_tool(principal, "add", {"a": 1, "b": 1}, {})
        except ToolFailure as refused:
            return str(refused)

    with override_settings(TOOL_CALLING=tool_calling_settings(LIMITS=limits)):
        assert call() == "2"
        assert call().startswith("Tool call limit (1) exceeded for tool 'add'.")
        models.ToolExecution.objects.update(
            created_at=timezone.now() - datetime.timedelta(seconds=SESSIONLESS_WINDOW_SECONDS + 1)
        )
        assert call() == "2"
    assert all(
        row.startswith("mcp:client-0123456789abcdef:")
        for row in models.ToolExecution.objects.values_list("tool_call_id", flat=True)
    )


def test_other_paths_are_served_by_django(site: str, people: dict[str, str]) -> None:
    base = site.removesuffix("mcp/")
    page = httpx.get(f"{base}admin/login/", timeout=20)
    assert page.status_code == 200 and "Django" in page.text
    api = httpx.get(
        f"{base}api/tools/", headers={"Authorization": f"Token {people['bob']}"}, timeout=20
    )
    assert api.status_code == 200


def _app_with(**mcp: Any) -> Any:
    """The ASGI app built under ``TOOL_CALLING["MCP"]`` = ``mcp`` (read when it is built)."""
    with override_settings(TOOL_CALLING=tool_calling_settings(MCP=mcp)):
        return with_mcp(get_asgi_application())


def test_setting_mcp_allowed_hosts_decides_which_host_headers_pass(people: dict[str, str]) -> None:
    token = {"Authorization": f"Bearer {people['bob']}"}
    with UvicornThread(_app_with(ALLOWED_HOSTS=["mcp.example.com"])) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/"
        assert post(url, {**token, "Host": "mcp.example.com"}).status_code == 200
        refused = post(url, token)  # Host: 127.0.0.1:PORT, allowed by default, not now
        assert (refused.status_code, refused.text) == (421, "Invalid Host header")


def test_setting_mcp_allowed_origins_decides_which_origins_pass(people: dict[str, str]) -> None:
    token = {"Authorization": f"Bearer {people['bob']}"}
    app = _app_with(ALLOWED_ORIGINS=["https://ide.example.com"])
    with UvicornThread(app) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/"
        assert post(url, {**token, "Origin": "https://ide.example.com"}).status_code == 200
        local = post(url, {**token, "Origin": f"http://localhost:{server.port}"})
        assert (local.status_code, local.text) == (403, "Invalid Origin header")


def test_setting_mcp_list_ttl_ms_is_each_users_tools_list_freshness_in_a_stable_order(
    people: dict[str, str],
) -> None:
    async def listed(opened: Client) -> Any:
        return await opened.session.list_tools()

    with UvicornThread(_app_with(LIST_TTL_MS=45_000)) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/"
        first = run(client(url, people["alice"], listed))
        again = run(client(url, people["alice"], listed))
    assert (first.ttl_ms, first.cache_scope) == (45_000, "private")
    names = [t.name for t in first.tools]
    assert names == sorted(names) == [t.name for t in again.tools]
    with UvicornThread(with_mcp(get_asgi_application())) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/"
        default = run(client(url, people["alice"], listed))
    assert (default.ttl_ms, default.cache_scope) == (0, "private")


def test_an_input_required_round_trip_spans_processes_governed_and_audited(
    people: dict[str, str],
) -> None:
    """State sealed by one process of the site is read by another (keys from SECRET_KEY)."""

    async def first(opened: Client) -> Any:
        return await opened.session.call_tool(
            "confirm_refund", {"amount": 30}, allow_input_required=True
        )

    def second(state: str) -> Any:
        async def use(opened: Client) -> Any:
            return await opened.session.call_tool(
                "confirm_refund",
                {"amount": 30},
                input_responses={"sure": {"action": "accept", "content": {"ok": True}}},  # type: ignore[dict-item]
                request_state=state,
                allow_input_required=True,
            )

        return use

    async def never(context: Any, params: Any) -> Any:
        raise AssertionError("the test drives the rounds itself")

    forms = {"elicitation_callback": never}  # declares the elicitation capability
    with UvicornThread(with_mcp(get_asgi_application())) as one:
        asked = run(client(f"http://127.0.0.1:{one.port}/mcp/", people["bob"], first, **forms))
    assert asked.result_type == "input_required"
    assert asked.input_requests["sure"].params.message == "Refund 30?"
    with UvicornThread(with_mcp(get_asgi_application())) as other:
        url = f"http://127.0.0.1:{other.port}/mcp/"
        done = run(client(url, people["bob"], second(asked.request_state), **forms))
        with pytest.raises(Exception) as refused:  # not hers: alice's token, bob's state
            run(client(url, people["alice"], second(asked.request_state), **forms))
    assert done.content[0].text == "refunded 30"
    assert "Invalid or expired requestState" in repr(refused.value)
    rows = models.ToolExecution.objects.filter(tool_name="confirm_refund").order_by("pk")
    assert [(row.user.username, row.status) for row in rows] == [
        ("bob", S.SUCCEEDED),
        ("bob", S.SUCCEEDED),
    ]


def _modern(method: str, params: dict[str, Any], **headers: str) -> tuple[dict[str, str], Any]:
    """Headers and body of a 2026-07-28 request (no session: it carries its own _meta)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}
    sent = {**MCP_HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, **headers}
    return sent, body


def test_server_discover_and_header_checks_of_the_sessionless_revision_over_the_wire(
    site: str, people: dict[str, str]
) -> None:
    token = {"Authorization": f"Bearer {people['bob']}"}
    headers, body = _modern("server/discover", {})
    found = httpx.post(site, json=body, headers={**headers, **token}, timeout=20)
    assert found.status_code == 200
    result = found.json()["result"]
    assert "2026-07-28" in result["supportedVersions"]  # 2025-11-25 is the handshake's
    assert "tools" in result["capabilities"]
    assert "mcp-session-id" not in found.headers  # sessionless

    call = {"name": "add", "arguments": {"a": 2, "b": 3}}
    # Whitespace around a field value is not part of it (RFC 9110 5.5); httpx will not send it,
    # http.client does.
    headers, body = _modern("tools/call", call, **{"Mcp-Name": "  add "})
    where = httpx.URL(site)
    connection = http.client.HTTPConnection(where.host, where.port, timeout=20)
    try:
        connection.request("POST", where.path, json.dumps(body), {**headers, **token})
        ran = connection.getresponse()
        ran_text = ran.read().decode()
    finally:
        connection.close()
    assert ran.status == 200, ran_text
    assert "5" in ran_text
    for wrong in ({"Mcp-Name": "drop_tables"}, {"Mcp-Method": "tools/list"}):
        headers, body = _modern("tools/call", call, **{"Mcp-Name": "add", **wrong})
        refused = httpx.post(site, json=body, headers={**headers, **token}, timeout=20)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == -32020
    assert models.ToolExecution.objects.filter(tool_name="add").count() == 1
    assert DROPPED == []
