"""The user's confirmation over ``/mcp/``: asked through ``input_required``, audited.

The example project's ASGI app under uvicorn, driven by the official ``mcp`` client: at the
sessionless revision (2026-07-28) the call answers ``input_required`` with a question for the
user and a sealed request state bound to the call; the client's answer decides it. Over a
2025-11-25 session the server asks on the call's own stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from django.contrib.auth.models import User
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from rest_framework.authtoken.models import Token

from tests.django._tools import registered
from tool_calling import ToolContext, models, tool
from tool_calling.asgi import get_asgi_application, with_mcp
from tool_calling.calls.gate import confirmation_refusal_text
from tool_calling.calls.policies import forget_policies
from tool_calling.core.tools.context import (
    CLIENT_CAPABILITIES_KEY,
    INPUT_RESPONSES_KEY,
    REQUEST_STATE_KEY,
)
from tool_calling.core.tools.result import InputRequired
from tool_calling.mcp.serving import (
    CONFIRMATION_KEY,
    McpPrincipal,
    _call_tool,
    approval_text,
    declined_text,
)

from ._client import client, run
from ._servers import UvicornThread

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

S = models.ExecutionStatus

RAN: list[str] = []


@tool(requires_confirmation=True)
def close_account(account: str) -> str:
    """Close an account (the user confirms each call)."""
    RAN.append(account)
    return f"closed {account}"


NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@tool(requires_confirmation=True)
def rename_account(ctx: ToolContext, account: str) -> str:
    """Rename an account (the user confirms, then the tool asks for the new name)."""
    answer = ctx.input_responses.get("name")
    if answer is None or ctx.request_state != f"naming {account}":
        ask = InputRequired.elicitation("New name?", NAME_FORM)
        return InputRequired({"name": ask}, request_state=f"naming {account}")
    RAN.append(f"{account} -> {answer['content']['name']}")
    return f"renamed {account}"


@pytest.fixture(autouse=True)
def _tools() -> Iterator[None]:
    RAN.clear()
    forget_policies()  # a flushed database sends no signal: the process's copy goes here
    with registered(close_account, rename_account):
        yield
    forget_policies()


@pytest.fixture
def token() -> str:
    return Token.objects.create(user=User.objects.create_user("carol")).key


@pytest.fixture
def site() -> Iterator[str]:
    with UvicornThread(with_mcp(get_asgi_application())) as server:
        yield f"http://127.0.0.1:{server.port}/mcp/"


async def _never(context: Any, params: Any) -> Any:
    raise AssertionError("the test drives the rounds itself")


def _call(
    url: str,
    token: str,
    arguments: dict[str, Any],
    *,
    state: str | None = None,
    answer: dict[str, Any] | None = None,
    name: str = "close_account",
    **callbacks: Any,
) -> Any:
    """One ``tools/call`` at 2026-07-28, the rounds driven by hand (the elicitation declared)."""

    async def use(opened: Client) -> Any:
        assert opened.protocol_version == "2026-07-28"
        try:
            return await opened.session.call_tool(
                name,
                arguments,
                input_responses={CONFIRMATION_KEY: answer} if answer is not None else None,  # type: ignore[dict-item]
                request_state=state,
                allow_input_required=True,
            )
        except MCPError as exc:  # raised as is below, not in an exception group
            return exc

    outcome = run(client(url, token, use, **{"elicitation_callback": _never, **callbacks}))
    if isinstance(outcome, MCPError):
        raise outcome
    return outcome


ACCEPT = {"action": "accept", "content": {"confirm": True}}


def test_a_confirmed_call_runs_once_and_is_audited_with_the_users_confirmation(
    site: str, token: str
) -> None:
    asked = _call(site, token, {"account": "A1"})
    assert asked.result_type == "input_required"
    question = asked.input_requests[CONFIRMATION_KEY].params
    assert question.message == 'Confirm: call close_account with {"account": "A1"}?'
    assert question.requested_schema["properties"]["confirm"]["type"] == "boolean"
    assert "close_account" not in asked.request_state  # sealed: the client cannot read it
    assert RAN == [] and not models.ToolExecution.objects.exists()

    done = _call(site, token, {"account": "A1"}, state=asked.request_state, answer=ACCEPT)
    assert (done.content[0].text, done.is_error) == ("closed A1", False)
    assert RAN == ["A1"]
    row = models.ToolExecution.objects.get()
    assert (row.tool_name, row.status, row.user.username) == ("close_account", S.SUCCEEDED, "carol")
    assert (row.approval, row.deciders) == (models.ApprovalDecision.APPROVED, "user")
    assert row.confirmed_by.username == "carol" and row.decided_by.username == "carol"
    assert row.confirmed_at is not None and row.approved_arguments_sha256
    assert row.definition_sha256 and row.decision_basis


def test_the_sdk_clients_elicitation_callback_confirms_and_the_call_runs(
    site: str, token: str
) -> None:
    from mcp_types import ElicitResult

    asked: list[str] = []

    async def confirm(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async def use(opened: Client) -> Any:
        return await opened.call_tool("close_account", {"account": "A7"})

    result = run(client(site, token, use, elicitation_callback=confirm))
    assert (result.content[0].text, result.is_error) == ("closed A7", False)
    assert asked == ['Confirm: call close_account with {"account": "A7"}?']
    assert RAN == ["A7"]


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "decline"},
        {"action": "cancel"},
        {"action": "accept", "content": {"confirm": False}},
    ],
)
def test_a_declined_call_is_an_error_result_never_runs_and_is_audited_as_declined(
    site: str, token: str, answer: dict[str, Any]
) -> None:
    asked = _call(site, token, {"account": "A2"})
    declined = _call(site, token, {"account": "A2"}, state=asked.request_state, answer=answer)
    assert (declined.content[0].text, declined.is_error) == (declined_text("close_account"), True)
    assert declined_text("close_account") == (
        "The user declined the call of tool 'close_account': it was not run."
    )
    assert RAN == []
    row = models.ToolExecution.objects.get()
    assert (row.status, row.approval, row.decided_by.username) == (
        S.DENIED,
        models.ApprovalDecision.DENIED,
        "carol",
    )
    assert row.confirmed_at is None


def test_a_confirmation_never_runs_other_arguments_another_tool_or_changed_rules(
    site: str, token: str
) -> None:
    """The sealed state is bound to the tool and the exact arguments (by the SDK, and by the
    server's own state with the definition and the rules too): replayed for other arguments or
    another tool it is refused, under changed rules the user is asked again; nothing runs."""
    asked = _call(site, token, {"account": "A3"})
    state = asked.request_state
    models.DecisionPolicy.objects.create(
        name="confirm sums", tool_pattern="add_numbers", requires_confirmation=True
    )
    for name, arguments in (("close_account", {"account": "EVERYTHING"}), ("add_numbers", {})):
        with pytest.raises(MCPError) as refused:
            _call(site, token, arguments, state=state, answer=ACCEPT, name=name)
        assert refused.value.error.message == "Invalid or expired requestState"
    # The rules changed after the question (a policy now asks for the user's confirmation too).
    models.DecisionPolicy.objects.create(
        name="accounts", tool_pattern="close_*", requires_confirmation=True
    )
    changed = _call(site, token, {"account": "A3"}, state=state, answer=ACCEPT)
    assert changed.result_type == "input_required"
    assert RAN == []
    assert not models.ToolExecution.objects.exists()
    # Asked again, under the rules as they are now: confirmed, it runs.
    again = _call(site, token, {"account": "A3"}, state=changed.request_state, answer=ACCEPT)
    assert again.content[0].text == "closed A3"
    assert RAN == ["A3"]


def test_the_servers_own_state_binds_the_arguments_and_the_definition(token: str) -> None:
    """Behind the SDK's seal, the state itself names the call: given (as the server passes it
    on) with other arguments, or after the tool's definition changed, it asks again."""
    user = Token.objects.get(key=token).user
    principal = McpPrincipal(user, client="client-test")
    capabilities = {CLIENT_CAPABILITIES_KEY: {"elicitation": {}}}
    asked = _call_tool(principal, "close_account", {"account": "B1"}, capabilities)
    assert isinstance(asked, InputRequired)
    answered = {
        **capabilities,
        REQUEST_STATE_KEY: asked.request_state,
        INPUT_RESPONSES_KEY: {CONFIRMATION_KEY: ACCEPT},
    }
    other = _call_tool(principal, "close_account", {"account": "B2"}, answered)
    assert isinstance(other, InputRequired)
    assert other.request_state != asked.request_state
    models.Tool.objects.filter(name="close_account").update(schema_hash="0" * 64)
    redefined = _call_tool(principal, "close_account", {"account": "B1"}, answered)
    assert isinstance(redefined, InputRequired)
    assert RAN == []
    assert not models.ToolExecution.objects.exists()
    fresh = {**answered, REQUEST_STATE_KEY: redefined.request_state}
    assert _call_tool(principal, "close_account", {"account": "B1"}, fresh) == "closed B1"
    assert RAN == ["B1"]


def test_a_tampered_state_is_refused_before_anything_runs(site: str, token: str) -> None:
    state = _call(site, token, {"account": "A4"}).request_state
    tampered = state[:-4] + ("AAAA" if state[-4:] != "AAAA" else "BBBB")
    with pytest.raises(MCPError) as refused:
        _call(site, token, {"account": "A4"}, state=tampered, answer=ACCEPT)
    assert refused.value.error.message == "Invalid or expired requestState"
    assert RAN == []


def test_the_other_rules_still_apply_after_the_confirmation(site: str, token: str) -> None:
    """A quota reached while the user was asked refuses the confirmed call."""
    models.Tool.objects.filter(name="close_account").update(quota_per_user=1)
    first = _call(site, token, {"account": "Q1"})
    assert _call(site, token, {"account": "Q1"}, state=first.request_state, answer=ACCEPT)
    second = _call(site, token, {"account": "Q2"})
    refused = _call(site, token, {"account": "Q2"}, state=second.request_state, answer=ACCEPT)
    assert refused.is_error and "quota" in refused.content[0].text
    assert RAN == ["Q1"]
    statuses = models.ToolExecution.objects.order_by("pk").values_list("status", flat=True)
    assert list(statuses) == [S.SUCCEEDED, S.REFUSED]


def test_a_call_that_also_needs_an_approver_is_refused_without_a_question(
    site: str, token: str
) -> None:
    models.DecisionPolicy.objects.create(
        name="accounts", tool_pattern="close_*", requires_approval=True
    )
    refused = _call(site, token, {"account": "A5"})
    assert (refused.content[0].text, refused.is_error) == (approval_text("close_account"), True)
    assert RAN == []
    row = models.ToolExecution.objects.get()
    assert row.status == S.REFUSED


def test_a_client_without_elicitation_gets_the_confirmation_refusal(site: str, token: str) -> None:
    async def use(opened: Client) -> Any:
        return await opened.session.call_tool(
            "close_account", {"account": "A6"}, allow_input_required=True
        )

    refused = run(client(site, token, use))  # no elicitation callback: not declared
    assert (refused.content[0].text, refused.is_error) == (
        confirmation_refusal_text("close_account"),
        True,
    )
    assert RAN == []
    assert models.ToolExecution.objects.get().status == S.REFUSED


def test_a_2025_11_25_session_is_asked_on_the_calls_stream_and_the_call_runs(
    site: str, token: str
) -> None:
    from mcp_types import ElicitResult

    asked: list[str] = []

    async def confirm(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async def use() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=20) as http:
            async with streamable_http_client(site, http_client=http) as (read, write):
                async with ClientSession(read, write, elicitation_callback=confirm) as opened:
                    initialized = await opened.initialize()
                    result = await opened.call_tool("close_account", {"account": "S1"})
                    return initialized.protocol_version, result

    version, result = run(use())
    assert version == "2025-11-25"
    assert (result.content[0].text, result.is_error) == ("closed S1", False)
    assert asked == ['Confirm: call close_account with {"account": "S1"}?']
    assert RAN == ["S1"]
    row = models.ToolExecution.objects.get()
    assert (row.status, row.confirmed_by.username) == (S.SUCCEEDED, "carol")


def test_the_gate_lets_a_confirmation_decide_only_its_own_call_under_its_own_rules(
    token: str,
) -> None:
    """Rule 4 with the user's confirmation: for its tool, arguments, definition and rules only,
    and never instead of an approver."""
    from django.utils import timezone

    from tool_calling import ToolCall
    from tool_calling.calls import gate
    from tool_calling.registry import registry

    user = Token.objects.get(key=token).user
    callback = registry.get("close_account")
    call = ToolCall("c1", "close_account", '{"account": "G1"}')
    rules = gate.call_rules("close_account", user)
    who, basis = gate.decision_rules(callback, call.arguments, rules)
    assert who == models.Deciders.USER

    def confirmation(**changed: Any) -> gate.Confirmation:
        fields = {
            "user": user,
            "tool_name": "close_account",
            "arguments_sha256": gate.arguments_sha256(call.arguments),
            "definition_sha256": rules.schema_hash,
            "basis": basis,
            "at": timezone.now(),
            **changed,
        }
        return gate.Confirmation(**fields)

    def verdict(given: gate.Confirmation | None, tool_call: ToolCall = call) -> gate.Verdict:
        return gate.admit(gate.GateCall(tool_call, callback, user, confirmed=given))

    given = confirmation()
    admitted = verdict(given)
    assert admitted.admitted and admitted.confirmed is given
    other = ToolCall("c2", "close_account", '{"account": "G2"}')
    for refused in (
        verdict(None),
        verdict(confirmation(), other),
        verdict(confirmation(basis="0" * 64)),
        verdict(confirmation(definition_sha256="0" * 64)),
        verdict(confirmation(tool_name="add_numbers")),
    ):
        assert refused.refused_by is gate.Rule.APPROVAL
    models.DecisionPolicy.objects.create(
        name="accounts", tool_pattern="close_*", requires_approval=True
    )
    rules = gate.call_rules("close_account", user)
    who, basis = gate.decision_rules(callback, call.arguments, rules)
    assert who == models.Deciders.USER_THEN_APPROVER
    both = verdict(confirmation(basis=basis))
    assert both.refused_by is gate.Rule.APPROVAL
    assert RAN == []


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
def test_a_confirmed_tool_that_asks_for_input_in_turn_is_not_asked_to_confirm_again(
    site: str, token: str, revision: str
) -> None:
    from mcp_types import ElicitResult

    asked: list[str] = []

    async def answer(context: Any, params: Any) -> Any:
        asked.append(params.message)
        if params.message == "New name?":
            return ElicitResult(action="accept", content={"name": "Savings"})
        return ElicitResult(action="accept", content={"confirm": True})

    async def modern(opened: Client) -> Any:
        return await opened.call_tool("rename_account", {"account": "R1"})

    async def older() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=20) as http:
            async with streamable_http_client(site, http_client=http) as (read, write):
                async with ClientSession(read, write, elicitation_callback=answer) as opened:
                    await opened.initialize()
                    return await opened.call_tool("rename_account", {"account": "R1"})

    if revision == "2026-07-28":
        result = run(client(site, token, modern, elicitation_callback=answer))
    else:
        result = run(older())
    assert (result.content[0].text, result.is_error) == ("renamed R1", False)
    assert asked == ['Confirm: call rename_account with {"account": "R1"}?', "New name?"]
    assert RAN == ["R1 -> Savings"]
    rows = models.ToolExecution.objects.order_by("pk")
    assert [(row.status, row.confirmed_by.username) for row in rows] == [
        (S.SUCCEEDED, "carol"),
        (S.SUCCEEDED, "carol"),
    ]
