"""S22, the ``mcp_imported`` column of the rule x path matrix: a real MCP server's tool.

tests/django/test_gate_matrix.py has the other paths. Here the tool is one of
tests/mcp/paged_server.py (a stdio MCP server; its tool answers with what it received), synced
and enabled as an operator would, and called by the model of a governed turn: every rule of the
gate holds for it as for a local tool, its validation being its own JSON Schema. Each cell
injects its rule's violation; the server is never sent a call the gate refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from tests.django._tools import tool_calling_settings
from tool_calling import models
from tool_calling.calls import quotas
from tool_calling.calls.gate import approval_refusal_text, refusal_text
from tool_calling.core.execution.limits import breach_text
from tool_calling.governance import governed_chat_client
from tool_calling.mcp import clients
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

from . import _servers
from ._django import enable, paged, synced

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NAME = "paged_lookup"
SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
    "additionalProperties": False,
}
KEEP_GOING = tool_calling_settings(LIMITS={"ON_LIMIT_EXCEEDED": "RETURN_ERROR_RESPONSE"})


@pytest.fixture(autouse=True)
def _fresh_sessions() -> Iterator[None]:
    clients.close_all()
    yield
    clients.close_all()


@pytest.fixture
def server(tmp_path: Path) -> models.McpServer:
    state = _servers.write_state(
        tmp_path / "state.json", [{"name": "lookup", "description": "Look up.", "schema": SCHEMA}]
    )
    made = paged(state)
    synced(made)
    enable(NAME)
    return made


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


def ask(user: User, *arguments: dict[str, Any], inject: Callable[[], object] = lambda: None):
    """A governed turn whose model calls the server's tool with each of ``arguments``."""

    def asks(prompt: Any) -> Any:
        inject()
        return tool_calls(*(tool_call(NAME, **each) for each in arguments))

    model = ScriptedChatModel([asks, text("ok")])
    with override_settings(TOOL_CALLING=KEEP_GOING):
        client = governed_chat_client(user=user, model=model)
        assert client.prompt("Go").call().content() == "ok"
    return model.requests[1].messages[-1].responses


def reached_the_server(response: Any) -> bool:
    try:
        return json.loads(response.response_data)["tool"] == "lookup"
    except (ValueError, KeyError, TypeError):
        return False


def test_s22_mcp_imported_validation_with_its_json_schema_before_anything_is_counted(
    server: models.McpServer, alice: User
) -> None:
    models.Tool.objects.filter(name=NAME).update(quota_per_user=1, requires_approval=True)
    [answer] = ask(alice, {"key": 5})
    assert answer.response_data == (
        f"Invalid arguments for tool '{NAME}':\n- key: Input should be a valid string"
    )
    assert not models.QuotaCounter.objects.exists()
    row = models.ToolExecution.objects.get()
    assert (row.status, row.error_type) == ("failed", "tool_calling.core.errors.ToolArgumentsError")


def test_s22_mcp_imported_availability_a_server_disabled_after_the_offer(
    server: models.McpServer, alice: User
) -> None:
    disable = lambda: models.McpServer.objects.filter(pk=server.pk).update(enabled=False)  # noqa: E731
    [answer] = ask(alice, {"key": "a"}, inject=disable)
    assert (answer.response_data, reached_the_server(answer)) == (refusal_text(NAME), False)
    assert models.ToolExecution.objects.get().status == "refused"


def test_s22_mcp_imported_permission_an_operators_permission_the_user_lacks(
    server: models.McpServer, alice: User
) -> None:
    require = lambda: models.Tool.objects.filter(name=NAME).update(permission="auth.view_user")  # noqa: E731
    [answer] = ask(alice, {"key": "a"}, inject=require)
    assert answer.response_data == (
        f"Tool '{NAME}' needs the permission 'auth.view_user', which the user of this "
        "conversation does not have. The call was not made; do not try it again."
    )
    assert models.ToolExecution.objects.get().status == "refused"


def test_s22_mcp_imported_approval_the_rows_flag(server: models.McpServer, alice: User) -> None:
    models.Tool.objects.filter(name=NAME).update(requires_approval=True)
    [answer] = ask(alice, {"key": "a"})
    assert (answer.response_data, reached_the_server(answer)) == (
        approval_refusal_text(NAME),
        False,
    )


def test_s22_mcp_imported_quota(server: models.McpServer, alice: User) -> None:
    models.Tool.objects.filter(name=NAME).update(quota_per_user=1)
    used = lambda: quotas.consume(NAME, alice, per_user=1, total=None, window=60)  # noqa: E731
    [answer] = ask(alice, {"key": "a"}, inject=used)
    assert answer.response_data.startswith(f"Tool '{NAME}' has reached its quota of 1 calls")
    assert not reached_the_server(answer)


def test_s22_mcp_imported_limit(server: models.McpServer, alice: User) -> None:
    tool_row = models.Tool.objects.get(name=NAME)
    models.ToolLimitOverride.objects.create(tool=tool_row, max_calls_per_turn=1)
    first, second = ask(alice, {"key": "a"}, {"key": "b"})
    assert reached_the_server(first)
    assert (second.response_data, reached_the_server(second)) == (breach_text(NAME, 1), False)
