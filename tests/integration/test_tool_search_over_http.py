"""Tool search and argument augmentation over HTTP: the real openai SDK, the replay server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pydantic
import pytest

from tool_calling import (
    AugmentedArguments,
    AugmentedToolCallbackProvider,
    ChatClient,
    ChatOptions,
    ToolSearchToolCallingAdvisor,
    tool,
)
from tool_calling.core import _settings
from tool_calling.core.providers.openai import OpenAIChatModel
from tool_calling.testing import ReplayServer

pytestmark = pytest.mark.integration

ran: list[str] = []
why: list[str] = []


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_settings, "_provider", None)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    ran.clear()
    why.clear()
    yield


def _make_tool(name: str, description: str) -> Any:
    def run(item: str) -> str:
        ran.append(f"{name}({item})")
        return f"{name} done for {item}"

    run.__name__ = name
    run.__doc__ = description
    return tool(run)


# A catalogue big enough that sending it whole would be wasteful.
CATALOGUE = [
    _make_tool(f"{service}_{action}_{thing}", f"{action.title()} a {thing} in {service}.")
    for service in ("github", "gitlab", "jira", "notion", "slack")
    for action in ("create", "get", "list", "update", "delete")
    for thing in ("issue", "page", "comment", "user")
]


class Reasoning(pydantic.BaseModel):
    inner_thought: str = pydantic.Field(description="Why you call this tool, in one sentence.")
    confidence: Literal["low", "medium", "high"] = pydantic.Field(description="How sure you are.")


def client_for(server: ReplayServer) -> ChatClient:
    model = OpenAIChatModel(
        "replay-model", base_url=server.base_url + "/v1", api_key="test", max_retries=0
    )
    return ChatClient.create(model)


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


@pytest.mark.parametrize("stream", [False, True])
def test_a_searched_turn_sends_only_the_search_tool_then_what_it_found(stream: bool) -> None:
    steps = [
        {"tool_calls": [{"name": "tool_search", "arguments": {"query": "create jira issue"}}]},
        {
            "tool_calls": [
                {"name": "jira_create_issue", "arguments": {"item": "Login broken on Safari"}}
            ]
        },
        {"text": "Created the Jira issue."},
    ]
    advisor = ToolSearchToolCallingAdvisor(max_results=2, always_include=["slack_list_user"])
    with ReplayServer(steps) as server:
        spec = (
            client_for(server)
            .prompt("File a Jira issue: login is broken on Safari")
            .tools(CATALOGUE)
            .advisors(advisor)
            .conversation_id("conv-http")
        )
        answer = "".join(spec.stream().content()) if stream else spec.call().content()
        requests = server.requests

    assert answer == "Created the Jira issue."
    assert ran == ["jira_create_issue(Login broken on Safari)"]
    assert [offered(r) for r in requests] == [
        ["tool_search", "slack_list_user"],
        ["tool_search", "slack_list_user", "jira_create_issue", "jira_create_page"],
        ["tool_search", "slack_list_user", "jira_create_issue", "jira_create_page"],
    ]
    assert requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Found 2 tools, now available to call: jira_create_issue, jira_create_page.",
    }


def test_augmented_tools_in_strict_mode_behind_search() -> None:
    def record(event: AugmentedArguments[Reasoning]) -> None:
        why.append(f"{event.tool_definition.name}: {event.values.inner_thought}")

    tools = AugmentedToolCallbackProvider(CATALOGUE, Reasoning, record)
    steps = [
        {"tool_calls": [{"name": "tool_search", "arguments": {"query": "notion page"}}]},
        {
            "tool_calls": [
                {
                    "name": "notion_create_page",
                    "arguments": {
                        "inner_thought": "The user wants a new page.",
                        "confidence": "high",
                        "item": "Roadmap",
                    },
                }
            ]
        },
        {"text": "Page created."},
    ]
    with ReplayServer(steps) as server:
        reply = (
            client_for(server)
            .prompt("Make a Notion page called Roadmap")
            .tools(tools)
            .options(ChatOptions(strict=True))
            .advisors(ToolSearchToolCallingAdvisor(max_results=1))
            .call()
        )
        requests = server.requests

    assert reply.content() == "Page created."
    assert ran == ["notion_create_page(Roadmap)"]
    assert why == ["notion_create_page: The user wants a new page."]
    [search, found] = requests[1]["tools"]
    assert search["function"]["strict"] is True
    assert search["function"]["parameters"]["required"] == ["query", "max_results"]
    assert found["function"]["name"] == "notion_create_page"
    assert found["function"]["strict"] is True
    parameters = found["function"]["parameters"]
    assert list(parameters["properties"]) == ["inner_thought", "confidence", "item"]
    assert parameters["required"] == ["inner_thought", "confidence", "item"]
    assert parameters["additionalProperties"] is False
    assert parameters["properties"]["confidence"] == {
        "type": "string",
        "enum": ["low", "medium", "high"],
        "description": "How sure you are.",
    }
