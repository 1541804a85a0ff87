"""InputRequired over MCP (revision 2026-07-28): a tool asks the client's user, and finishes.

The server is McpToolServer under uvicorn; the client is the official SDK's ``Client``, which
answers ``input_required`` results with its elicitation, sampling and roots callbacks and calls
again, and its ``session.call_tool(..., allow_input_required=True)`` for driving the rounds by
hand (a changed request state, a client without a capability).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tool_calling import FunctionToolCallback, InputRequired, ToolContext, tool, tool_callbacks
from tool_calling.core.mcp import McpToolServer

from ._client import run
from ._servers import UvicornThread

pytestmark = pytest.mark.integration

RAN: list[str] = []
FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@tool
def greet(ctx: ToolContext) -> str:
    """Greet the user by name, asking for it first."""
    answer = ctx.input_responses.get("who")
    if answer is None or ctx.request_state != "asked":
        return InputRequired(
            {"who": InputRequired.elicitation("Your name?", FORM)}, request_state="asked"
        )
    RAN.append(answer["content"]["name"])
    return f"Hello, {answer['content']['name']}!"


@tool
def ask_model() -> str:
    """Ask the client's model only."""
    return InputRequired({"q": InputRequired.sampling("Say hi", 10)})


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = McpToolServer.from_callbacks(
        tool_callbacks(greet, ask_model), request_state_keys=["k" * 32]
    )
    app = server.streamable_http_app(authenticate=lambda headers: headers.get("x-user", "anon"))
    with UvicornThread(app) as running:
        yield running.url


async def _with_client(url: str, use: Any, user: str = "alice", **callbacks: Any) -> Any:
    """Run ``use`` on a ``Client`` as ``user``; its exception raised as is, not in a group."""
    outcome: list[Any] = []
    async with httpx2.AsyncClient(headers={"x-user": user}, timeout=20) as http:
        async with Client(streamable_http_client(url, http_client=http), **callbacks) as opened:
            try:
                outcome.append(await use(opened))
            except Exception as exc:
                outcome.append(exc)
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


async def _name_form(context: Any, params: Any) -> Any:
    from mcp_types import ElicitResult

    assert params.message == "Your name?"
    return ElicitResult(action="accept", content={"name": "Alice"})


def test_the_sdk_client_answers_the_form_and_the_tool_finishes(url: str) -> None:
    RAN.clear()

    async def use(opened: Client) -> Any:
        return await opened.call_tool("greet", {})

    result = run(_with_client(url, use, elicitation_callback=_name_form))
    assert result.content[0].text == "Hello, Alice!"
    assert RAN == ["Alice"]


def _first_round(url: str, user: str = "alice") -> Any:
    async def use(opened: Client) -> Any:
        return await opened.session.call_tool("greet", {}, allow_input_required=True)

    return run(_with_client(url, use, user=user, elicitation_callback=_name_form))


def test_the_request_state_is_sealed_and_a_changed_or_foreign_one_is_refused(url: str) -> None:
    RAN.clear()
    first = _first_round(url)
    assert first.result_type == "input_required"
    assert first.request_state not in (None, "asked")  # sealed: the client cannot read it
    answers = {"who": {"action": "accept", "content": {"name": "Mallory"}}}

    def again(state: str, user: str = "alice") -> Any:
        async def use(opened: Client) -> Any:
            return await opened.session.call_tool(
                "greet",
                {},
                input_responses=answers,  # type: ignore[arg-type]
                request_state=state,
                allow_input_required=True,
            )

        return run(_with_client(url, use, user=user, elicitation_callback=_name_form))

    tampered = first.request_state[:-4] + ("AAAA" if first.request_state[-4:] != "AAAA" else "BBBB")
    for state, user in ((tampered, "alice"), ("asked", "alice"), (first.request_state, "bob")):
        with pytest.raises(MCPError) as refused:
            again(state, user)
        assert refused.value.error.code == -32602
        assert refused.value.error.message == "Invalid or expired requestState"
    assert RAN == []  # the tool never ran with a state it did not give
    assert again(first.request_state).content[0].text == "Hello, Mallory!"


def test_requests_the_client_cannot_answer_are_left_out(url: str) -> None:
    async def use(opened: Client) -> Any:
        return await opened.session.call_tool("ask_model", {}, allow_input_required=True)

    # No sampling callback: the client does not declare sampling, so nothing can be asked.
    with pytest.raises(MCPError) as refused:
        run(_with_client(url, use, elicitation_callback=_name_form))
    assert refused.value.error.code == -32021
    assert refused.value.error.message == (
        "The tool needs input this client cannot give: declare sampling"
    )
    assert refused.value.error.data == {"requiredCapabilities": {"sampling": {}}}


def test_a_models_turn_reads_what_the_tool_needed() -> None:
    assert FunctionToolCallback(greet).call("{}") == (
        "The tool needs input before it can finish: Your name?"
    )
    with pytest.raises(ValueError, match="method must be one of"):
        InputRequired({"x": {"method": "tools/call"}})


def test_a_2025_11_25_session_is_asked_on_the_calls_stream_and_the_tool_finishes(
    url: str,
) -> None:
    """The older revision has no input_required: the server asks the client during the call
    (elicitation/create on the call's stream), then calls the tool again with the answer."""
    RAN.clear()
    asked: list[str] = []

    async def form(context: Any, params: Any) -> Any:
        from mcp_types import ElicitResult

        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": "Grace"})

    async def use() -> Any:
        headers = {"x-user": "alice"}
        async with httpx2.AsyncClient(headers=headers, timeout=20) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write, elicitation_callback=form) as opened:
                    initialized = await opened.initialize()
                    result = await opened.call_tool("greet", {})
                    return initialized.protocol_version, result

    version, result = run(use())
    assert version == "2025-11-25"
    assert result.content[0].text == "Hello, Grace!"
    assert asked == ["Your name?"]
    assert RAN == ["Grace"]
