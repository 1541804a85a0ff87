"""ToolSearchToolCallingAdvisor: progressive disclosure of a request's tools through search."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence

import pytest

from tool_calling import (
    ChatClient,
    DefaultToolCallingManager,
    DiscoveryStore,
    FunctionToolCallback,
    InMemoryChatMemoryRepository,
    InMemoryDiscoveryStore,
    LexicalToolIndex,
    MessageChatMemoryAdvisor,
    MessageWindowChatMemory,
    RegexToolIndex,
    ToolCallback,
    ToolCallingAdvisor,
    ToolCallingChatOptions,
    ToolCallLimitBehavior,
    ToolCallLimitExceededException,
    ToolCallLimits,
    ToolContext,
    ToolDefinition,
    ToolDefinitionError,
    ToolExecutionResult,
    ToolIndex,
    ToolMetadata,
    ToolResponseMessage,
    ToolSearchToolCallingAdvisor,
    tool,
)
from tool_calling.core.chat.advisors import tool_search
from tool_calling.core.chat.advisors.tool_calling import TOOL_ROUNDS_EXCEEDED
from tool_calling.core.chat.advisors.tool_search import (
    SEARCH_TOOL,
    SEARCH_TOOL_NAME,
    tool_set_fingerprint,
)
from tool_calling.core.search.base import Tags
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clean() -> None:
    ran.clear()


@tool
def get_weather(city: str) -> str:
    """Return today's weather for a city."""
    ran.append(f"get_weather({city})")
    return f"Sunny in {city}"


@tool
def send_email(to: str, body: str) -> str:
    """Send an email message to a recipient."""
    ran.append(f"send_email({to})")
    return "sent"


@tool
def list_invoices() -> str:
    """List the unpaid invoices."""
    ran.append("list_invoices")
    return "[]"


@tool
def create_github_issue(title: str) -> str:
    """Open an issue in the GitHub repository."""
    ran.append(f"create_github_issue({title})")
    return "issue 1"


@tool(return_direct=True)
def track_parcel(tracking_number: str) -> str:
    """Track a parcel shipment by its tracking number."""
    ran.append(f"track_parcel({tracking_number})")
    return f"Parcel {tracking_number}: out for delivery"


TOOLS = [get_weather, send_email, list_invoices, create_github_issue, track_parcel]


def responses_of(model: ScriptedChatModel, request: int) -> list[tuple[str, str, bool]]:
    """The tool responses at the end of the prompt of request number ``request`` (1-based)."""
    last = model.requests[request - 1].messages[-1]
    assert isinstance(last, ToolResponseMessage)
    return [(r.name, r.response_data, r.is_error) for r in last.responses]


def run(
    model: ScriptedChatModel,
    advisor: ToolCallingAdvisor,
    *,
    conversation_id: str | None = None,
    question: str = "Weather in Oslo?",
    tools: Sequence[object] = TOOLS,
) -> str | None:
    spec = ChatClient.create(model).prompt(question).tools(*tools).advisors(advisor)
    if conversation_id is not None:
        spec = spec.conversation_id(conversation_id)
    return spec.call().content()


# -- disclosure ----------------------------------------------------------------------------


def test_the_first_call_offers_only_the_search_tool_and_search_adds_what_it_found() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather in a city"),
            tool_call("get_weather", city="Oslo"),
            text("Sunny."),
        ]
    )
    assert run(model, ToolSearchToolCallingAdvisor(max_results=1)) == "Sunny."
    assert model.tool_names_seen == [
        ["tool_search"],
        ["tool_search", "get_weather"],
        ["tool_search", "get_weather"],
    ]
    assert responses_of(model, 2) == [
        ("tool_search", "Found 1 tool, now available to call: get_weather.", False)
    ]
    assert ran == ["get_weather(Oslo)"]
    # The search tool's definition is the same on every call (prompt caches keep it).
    options = model.requests[0].options
    assert isinstance(options, ToolCallingChatOptions)
    assert options.tool_callbacks[0].definition is SEARCH_TOOL


def test_the_search_tool_definition() -> None:
    assert SEARCH_TOOL.input_schema == {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What the tool should do, in a few keywords.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10,
                "description": "How many tools to return (1-10).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_pinned_tools_are_offered_from_the_first_call_and_run_without_a_search() -> None:
    model = ScriptedChatModel([tool_call("list_invoices"), text("No unpaid invoices.")])
    advisor = ToolSearchToolCallingAdvisor(always_include=["list_invoices", "not_in_request"])
    assert run(model, advisor, question="Unpaid invoices?") == "No unpaid invoices."
    assert model.tool_names_seen == [["tool_search", "list_invoices"]] * 2
    assert ran == ["list_invoices"]


def test_a_tool_not_found_yet_does_not_run_and_the_model_is_told_what_is_available() -> None:
    """S1: only the tools offered to the model on that call can run."""
    model = ScriptedChatModel([tool_call("send_email", to="a@b.c", body="hi"), text("Sorry.")])
    run(model, ToolSearchToolCallingAdvisor(always_include=["list_invoices"]))
    assert ran == []
    assert responses_of(model, 2) == [
        (
            "send_email",
            "Unknown or disabled tool 'send_email'. Available tools: tool_search, "
            "list_invoices. Call one of these by its exact name.",
            True,
        )
    ]


def test_several_searches_accumulate_and_the_newest_finds_come_last() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            tool_call(SEARCH_TOOL_NAME, query="email message", max_results=1),
            tool_calls(
                tool_call("get_weather", city="Oslo"),
                tool_call("send_email", to="a@b.c", body="Sunny"),
            ),
            text("Done."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor())
    assert model.tool_names_seen == [
        ["tool_search"],
        ["tool_search", "get_weather"],
        ["tool_search", "get_weather", "send_email"],
        ["tool_search", "get_weather", "send_email"],
    ]
    assert ran == ["get_weather(Oslo)", "send_email(a@b.c)"]


def test_two_searches_in_one_batch_are_both_kept() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
                tool_call(SEARCH_TOOL_NAME, query="github issue", max_results=1),
            ),
            text("Ok."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor())
    assert sorted(model.tool_names_seen[1]) == sorted(
        ["tool_search", "get_weather", "create_github_issue"]
    )


def test_max_discovered_keeps_the_most_recent_finds() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            tool_call(SEARCH_TOOL_NAME, query="github issue", max_results=1),
            text("Ok."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor(max_discovered=1))
    assert model.tool_names_seen[2] == ["tool_search", "create_github_issue"]


# -- the search tool's arguments and errors -------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"query": "   "},
            "The search query is empty. Describe the tool you need in a few words, for "
            "example 'send an email' or 'create calendar event'.",
        ),
        (
            {"query": "x" * 501},
            "The search query is too long (501 characters). Send a few keywords, at most 500 "
            "characters.",
        ),
        (
            {"query": "?!* --"},
            "The search query '?!* --' has no words to search for. Describe the capability "
            "you need in words, for example 'list invoices'.",
        ),
        (
            {"query": "weather", "max_results": 11},
            "Invalid arguments for tool 'tool_search':\n"
            "- max_results: Input should be less than or equal to 10",
        ),
        (
            {"query": "weather", "max_results": 0},
            "Invalid arguments for tool 'tool_search':\n"
            "- max_results: Input should be greater than or equal to 1",
        ),
        (
            {"query": "weather", "max_results": "3"},
            "Invalid arguments for tool 'tool_search':\n"
            "- max_results: Input should be a valid integer",
        ),
        ({}, "Invalid arguments for tool 'tool_search':\n- query: Field required"),
        (
            {"query": 42},
            "Invalid arguments for tool 'tool_search':\n- query: Input should be a valid string",
        ),
        (
            {"query": "weather", "category": "x"},
            "Invalid arguments for tool 'tool_search':\n- category: Unknown parameter; remove it",
        ),
    ],
)
def test_bad_search_arguments_get_a_short_error_the_model_can_act_on(
    arguments: dict[str, object], expected: str
) -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, **arguments), text("Ok.")])
    run(model, ToolSearchToolCallingAdvisor())
    assert responses_of(model, 2) == [("tool_search", expected, True)]
    assert model.tool_names_seen[1] == ["tool_search"]


def test_arguments_that_are_not_json_are_an_error_too() -> None:
    from tool_calling import AssistantMessage, ToolCall

    model = ScriptedChatModel(
        [AssistantMessage(None, [ToolCall("c1", SEARCH_TOOL_NAME, "{not json")]), text("Ok.")]
    )
    run(model, ToolSearchToolCallingAdvisor())
    [(name, message, is_error)] = responses_of(model, 2)
    assert (name, is_error) == ("tool_search", True)
    assert message.startswith("Invalid arguments for tool 'tool_search': not valid JSON")


def test_a_search_that_finds_nothing_says_so_without_an_error() -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="zebra xylophone"), text("Ok.")])
    run(model, ToolSearchToolCallingAdvisor())
    assert responses_of(model, 2) == [
        (
            "tool_search",
            "No tools match 'zebra xylophone'. Try other words: what the tool does and on what, "
            "for example 'list invoices' or 'github pull request'.",
            False,
        )
    ]


def test_max_results_defaults_to_the_advisors_and_the_model_may_ask_for_more() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="tool weather email invoices issue parcel"),
            tool_call(SEARCH_TOOL_NAME, query="weather email invoices issue parcel", max_results=4),
            text("Ok."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor(max_results=2), conversation_id="c")
    assert len(model.tool_names_seen[1]) == 1 + 2
    assert len(model.tool_names_seen[2]) >= 1 + 4


def test_an_invalid_regex_is_an_error_answer_not_an_exception() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="get_(weather"),
            tool_call(SEARCH_TOOL_NAME, query="get_(weather|time)"),
            text("Ok."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor(RegexToolIndex))
    assert responses_of(model, 2) == [
        (
            "tool_search",
            "Invalid regular expression 'get_(weather': missing ), unterminated subpattern at "
            "position 4. Send a valid Python regular expression, for example 'github.*issue'.",
            True,
        )
    ]
    assert responses_of(model, 3) == [
        ("tool_search", "Found 1 tool, now available to call: get_weather.", False)
    ]


# -- accumulation across turns ---------------------------------------------------------------


def two_turns(
    advisors: Sequence[ToolCallingAdvisor | MessageChatMemoryAdvisor],
    conversation_id: str | None = "conv-1",
) -> ScriptedChatModel:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            tool_call("get_weather", city="Oslo"),
            text("Sunny in Oslo."),
            tool_call("get_weather", city="Bergen"),  # no search needed: found last turn
            text("Sunny in Bergen."),
        ]
    )
    client = ChatClient.builder(model).default_tools(*TOOLS).default_advisors(*advisors).build()
    for city in ("Oslo", "Bergen"):
        spec = client.prompt(f"Weather in {city}?")
        if conversation_id is not None:
            spec = spec.conversation_id(conversation_id)
        spec.call()
    return model


def test_finds_survive_the_next_turn_of_the_conversation() -> None:
    model = two_turns([ToolSearchToolCallingAdvisor()])
    assert model.tool_names_seen[3] == ["tool_search", "get_weather"]
    assert ran == ["get_weather(Oslo)", "get_weather(Bergen)"]


def test_finds_survive_with_conversation_history_off() -> None:
    model = two_turns([ToolSearchToolCallingAdvisor(conversation_history_enabled=False)])
    # History off: the call after the search carries only the search's response...
    assert [type(m).__name__ for m in model.requests[1].messages] == ["ToolResponseMessage"]
    # ...and the tools it found are offered all the same, in this turn and the next.
    assert model.tool_names_seen[1:4] == [["tool_search", "get_weather"]] * 3
    assert ran == ["get_weather(Oslo)", "get_weather(Bergen)"]


def test_finds_survive_a_memory_advisor_inside_the_loop() -> None:
    """spring-ai #7034: the memory advisor replaces the history the finds were read from."""
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository(), max_messages=2)
    advisors = [
        ToolSearchToolCallingAdvisor(conversation_history_enabled=False),
        MessageChatMemoryAdvisor(memory, order=ToolSearchToolCallingAdvisor.order + 1),
    ]
    model = two_turns(advisors)
    # The window of two messages dropped the search call and its response from the prompt.
    assert all(
        r.name != SEARCH_TOOL_NAME
        for m in model.requests[3].messages
        if isinstance(m, ToolResponseMessage)
        for r in m.responses
    )
    assert model.tool_names_seen[3] == ["tool_search", "get_weather"]
    assert ran == ["get_weather(Oslo)", "get_weather(Bergen)"]


def test_without_a_conversation_id_finds_last_one_turn() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            text("Ok."),
            text("Which city?"),
        ]
    )
    client = ChatClient.builder(model).default_tools(*TOOLS).build()
    advisor = ToolSearchToolCallingAdvisor()
    client.prompt("Weather?").advisors(advisor).call()
    client.prompt("Weather again?").advisors(advisor).call()
    assert model.tool_names_seen == [
        ["tool_search"],
        ["tool_search", "get_weather"],
        ["tool_search"],
    ]
    assert len(advisor.discoveries) == 0  # type: ignore[arg-type]


def test_a_shared_discovery_store_carries_finds_to_a_new_advisor() -> None:
    """The Django layer builds an advisor per turn; its store keeps the finds."""

    class RecordingStore(InMemoryDiscoveryStore):
        def __init__(self) -> None:
            super().__init__()
            self.added: list[tuple[str, list[str]]] = []

        def add(self, conversation_id: str, names: Sequence[str]) -> None:
            self.added.append((conversation_id, list(names)))
            super().add(conversation_id, names)

    store = RecordingStore()
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            text("Ok."),
            tool_call("get_weather", city="Oslo"),
            text("Sunny."),
        ]
    )
    client = ChatClient.builder(model).default_tools(*TOOLS).build()
    for question in ("Find a weather tool", "Weather in Oslo?"):
        advisor = ToolSearchToolCallingAdvisor(discoveries=store)
        client.prompt(question).conversation_id("conv-9").advisors(advisor).call()
    assert store.added == [("conv-9", ["get_weather"])]
    assert ran == ["get_weather(Oslo)"]


def test_finds_of_tools_the_next_request_lacks_are_not_offered() -> None:
    """A tool an operator disabled since it was found is not offered again."""
    store = InMemoryDiscoveryStore()
    store.add("c", ["send_email", "get_weather"])
    model = ScriptedChatModel([text("Ok.")])
    run(
        model,
        ToolSearchToolCallingAdvisor(discoveries=store),
        conversation_id="c",
        tools=[get_weather, list_invoices],
    )
    assert model.tool_names_seen == [["tool_search", "get_weather"]]


def test_the_in_memory_store_is_bounded() -> None:
    store = InMemoryDiscoveryStore(max_conversations=2, max_names=2)
    store.add("a", ["x", "y", "z"])
    assert store.get("a") == ["y", "z"]
    store.add("a", ["y"])
    assert store.get("a") == ["z", "y"]
    store.add("b", ["x"])
    store.get("a")  # a is now the most recently used
    store.add("c", ["x"])
    assert (store.get("a"), store.get("b"), store.get("c")) == (["z", "y"], [], ["x"])
    store.clear("a")
    assert store.get("a") == []
    with pytest.raises(ValueError, match="max_names must be a positive integer, got 0"):
        InMemoryDiscoveryStore(max_names=0)


def test_the_store_contract_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        DiscoveryStore()  # type: ignore[abstract]


# -- indexes per tool set ------------------------------------------------------------------


class CountingIndex(LexicalToolIndex):
    """A lexical index that counts how often it is built."""

    built: list[list[str]] = []

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        CountingIndex.built.append([d.name for d in definitions])
        super().index(definitions, tags=tags)


@pytest.fixture
def small_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool_search, "_indexes", tool_search._IndexCache(2))
    CountingIndex.built = []


def search_once(advisor: ToolSearchToolCallingAdvisor, tools: Sequence[object]) -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="weather"), text("Ok.")])
    run(model, advisor, tools=tools)


@pytest.mark.usefixtures("small_cache")
def test_a_tool_set_is_indexed_once_and_again_when_it_changes() -> None:
    advisor = ToolSearchToolCallingAdvisor(CountingIndex)
    search_once(advisor, TOOLS)
    search_once(advisor, list(reversed(TOOLS)))  # same set, other order: same fingerprint
    search_once(ToolSearchToolCallingAdvisor(CountingIndex), TOOLS)  # another advisor too
    assert len(CountingIndex.built) == 1
    renamed = FunctionToolCallback(get_weather, description="Weather today, by city.")
    search_once(advisor, [renamed, *TOOLS[1:]])  # a description changed: indexed again
    assert len(CountingIndex.built) == 2


@pytest.mark.usefixtures("small_cache")
def test_the_least_recently_used_tool_set_is_evicted() -> None:
    advisor = ToolSearchToolCallingAdvisor(CountingIndex)
    sets = [TOOLS[:2], TOOLS[:3], TOOLS[:4]]
    for tools in (sets[0], sets[1], sets[0], sets[2], sets[0], sets[1]):
        search_once(advisor, tools)
    # sets[0] stayed in use; sets[1] was evicted by sets[2], so it is built a second time.
    assert [len(b) for b in CountingIndex.built] == [2, 3, 4, 3]
    assert len(tool_search._indexes) == 2


@pytest.mark.usefixtures("small_cache")
def test_an_index_instance_is_indexed_again_whenever_the_tool_set_changes() -> None:
    shared = CountingIndex()
    advisor = ToolSearchToolCallingAdvisor(shared)
    for tools in (TOOLS, TOOLS, TOOLS[:3], TOOLS):
        search_once(advisor, tools)
    assert [len(b) for b in CountingIndex.built] == [5, 3, 5]
    assert advisor.tool_index is shared


def test_the_fingerprint_covers_names_descriptions_schemas_and_tags() -> None:
    base = [get_weather.__tool_spec__.definition]  # type: ignore[attr-defined]
    other_schema = [ToolDefinition("get_weather", base[0].description, {"type": "object"})]
    assert tool_set_fingerprint(base) == tool_set_fingerprint(list(base))
    assert tool_set_fingerprint(base) != tool_set_fingerprint(other_schema)
    assert tool_set_fingerprint(base) != tool_set_fingerprint(base, {"get_weather": ("sky",)})


class WideningIndex(ToolIndex):
    """A faulty index that answers names it was never given."""

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        self.names = [d.name for d in definitions]

    def search(self, query: str, max_results: int = 5) -> list[str]:
        return ["delete_everything", *self.names][:max_results]

    def clear(self) -> None:
        self.names = []


def test_an_index_can_never_offer_a_tool_the_request_does_not_have() -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="x", max_results=2), text("Ok.")])
    run(model, ToolSearchToolCallingAdvisor(WideningIndex))
    assert model.tool_names_seen[1] == ["tool_search", "get_weather"]


# -- when search stays out of the way ---------------------------------------------------------


def test_up_to_the_threshold_every_tool_is_offered_directly() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])
    run(model, ToolSearchToolCallingAdvisor(search_threshold=5))
    assert model.tool_names_seen[0] == [t.__name__ for t in TOOLS]  # type: ignore[attr-defined]
    model = ScriptedChatModel([text("Ok.")])
    run(model, ToolSearchToolCallingAdvisor(search_threshold=4))
    assert model.tool_names_seen[0] == ["tool_search"]


def test_a_request_without_tools_gets_no_search_tool() -> None:
    model = ScriptedChatModel([text("Hello.")])
    run(model, ToolSearchToolCallingAdvisor(), tools=[])
    assert model.tool_names_seen == [[]]


def test_with_internal_execution_off_the_caller_gets_the_tools_unchanged() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo")])
    options = ToolCallingChatOptions(internal_tool_execution_enabled=False)
    response = (
        ChatClient.create(model)
        .prompt("Weather?")
        .tools(*TOOLS)
        .options(options)
        .advisors(ToolSearchToolCallingAdvisor())
        .call()
        .chat_response()
    )
    assert response is not None and response.has_tool_calls()
    assert model.tool_names_seen[0] == [t.__name__ for t in TOOLS]  # type: ignore[attr-defined]


def test_a_tool_named_like_the_search_tool_is_refused() -> None:
    @tool(name="tool_search")
    def clash(query: str) -> str:
        """Search something else."""
        return ""

    model = ScriptedChatModel([text("Ok.")])
    with pytest.raises(ToolDefinitionError) as caught:
        run(model, ToolSearchToolCallingAdvisor(), tools=[clash, get_weather])
    assert str(caught.value) == (
        "A tool of the request is named 'tool_search', the name of the search tool of "
        "ToolSearchToolCallingAdvisor; rename it with @tool(name=...)."
    )


def test_the_advisor_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match=re.escape("max_results must be an integer from 1 to 10")):
        ToolSearchToolCallingAdvisor(max_results=11)
    with pytest.raises(ValueError, match="search_threshold must be an integer >= 0, got -1"):
        ToolSearchToolCallingAdvisor(search_threshold=-1)
    with pytest.raises(TypeError, match="got the class dict"):
        ToolSearchToolCallingAdvisor(dict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int"):
        ToolSearchToolCallingAdvisor(3)  # type: ignore[arg-type]


def test_a_factory_that_returns_no_index_fails_the_search_loudly() -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="weather"), text("Ok.")])
    run(model, ToolSearchToolCallingAdvisor(lambda: "not an index"))  # type: ignore[arg-type,return-value]
    [(name, message, is_error)] = responses_of(model, 2)
    assert (name, is_error) == ("tool_search", True)
    assert "not a ToolIndex" in message


# -- tags -----------------------------------------------------------------------------------


class TaggedCallback(ToolCallback):
    """A tool whose metadata carries search tags."""

    def __init__(self, name: str, tags: tuple[str, ...]) -> None:
        self._definition = ToolDefinition(name, "Does a thing.", {"type": "object"})
        self._metadata = ToolMetadata(tags=tags)

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def metadata(self) -> ToolMetadata:
        return self._metadata

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        ran.append(self._definition.name)
        return "done"


def test_tags_from_metadata_and_from_the_advisor_are_searched() -> None:
    tools = [*TOOLS, TaggedCallback("thing_a", ("payroll",)), TaggedCallback("thing_b", ())]
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="payroll", max_results=1),
            tool_call(SEARCH_TOOL_NAME, query="kudos", max_results=1),
            text("Ok."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor(tags={"thing_b": ["kudos"]}), tools=tools)
    assert model.tool_names_seen[2] == ["tool_search", "thing_a", "thing_b"]


def test_metadata_tags_must_be_strings() -> None:
    with pytest.raises(ToolDefinitionError, match="tags must be a sequence of strings"):
        ToolMetadata(tags="payroll")  # type: ignore[arg-type]
    assert ToolMetadata(tags=["a", "b"]).tags == ("a", "b")  # type: ignore[arg-type]


# -- return-direct, limits, rounds, streaming -----------------------------------------------


def test_return_direct_ends_the_turn_as_with_the_plain_advisor() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="track parcel", max_results=1),
            tool_call("track_parcel", tracking_number="1Z"),
        ]
    )
    response = (
        ChatClient.create(model)
        .prompt("Where is 1Z?")
        .tools(*TOOLS)
        .advisors(ToolSearchToolCallingAdvisor())
        .call()
        .chat_response()
    )
    assert response is not None and response.result is not None
    assert response.result.output.text == "Parcel 1Z: out for delivery"
    assert response.result.finish_reason == ToolExecutionResult.FINISH_REASON
    model.assert_consumed()


def test_a_search_and_a_return_direct_call_in_one_batch_go_back_to_the_model() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="track parcel", max_results=1),
            tool_calls(
                tool_call(SEARCH_TOOL_NAME, query="weather"),
                tool_call("track_parcel", tracking_number="1Z"),
            ),
            text("Out for delivery."),
        ]
    )
    assert run(model, ToolSearchToolCallingAdvisor()) == "Out for delivery."


def test_search_calls_count_toward_the_call_limits() -> None:
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(per_tool={SEARCH_TOOL_NAME: 2}, max_total_tool_calls=None)
    )
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query=q) for q in ("a", "b", "c")])
    advisor = ToolSearchToolCallingAdvisor(tool_calling_manager=manager)
    response = (
        ChatClient.create(model).prompt("?").tools(*TOOLS).advisors(advisor).call().chat_response()
    )
    assert response is not None and response.result is not None
    assert response.result.finish_reason == ToolCallLimitExceededException.FINISH_REASON
    assert response.result.output.text == (
        "Tool call limit (2) exceeded for tool 'tool_search'. No further calls to this tool "
        "are allowed in this turn."
    )


def test_a_found_tool_over_its_limit_gets_the_breach_text() -> None:
    manager = DefaultToolCallingManager(
        limits=ToolCallLimits(
            per_tool={"get_weather": 1},
            on_limit_exceeded=ToolCallLimitBehavior.RETURN_ERROR_RESPONSE,
        )
    )
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            tool_call("get_weather", city="Oslo"),
            tool_call("get_weather", city="Bergen"),
            text("Ok."),
        ]
    )
    run(model, ToolSearchToolCallingAdvisor(tool_calling_manager=manager))
    assert ran == ["get_weather(Oslo)"]
    assert responses_of(model, 4)[0][2] is True


def test_the_round_limit_applies() -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="weather")] * 2)
    response = (
        ChatClient.create(model)
        .prompt("?")
        .tools(*TOOLS)
        .advisors(ToolSearchToolCallingAdvisor(max_tool_rounds=2))
        .call()
        .chat_response()
    )
    assert response is not None and response.result is not None
    assert response.result.finish_reason == TOOL_ROUNDS_EXCEEDED


def test_streaming_narrows_the_tools_the_same_way() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="weather", max_results=1),
            tool_call("get_weather", city="Oslo"),
            text("It is sunny in Oslo today."),
        ]
    )
    pieces = list(
        ChatClient.create(model)
        .prompt("Weather?")
        .tools(*TOOLS)
        .advisors(ToolSearchToolCallingAdvisor())
        .stream()
        .content()
    )
    assert "".join(pieces) == "It is sunny in Oslo today."
    assert model.tool_names_seen == [
        ["tool_search"],
        ["tool_search", "get_weather"],
        ["tool_search", "get_weather"],
    ]
    assert ran == ["get_weather(Oslo)"]


def test_streamed_return_direct_arrives_as_one_chunk() -> None:
    model = ScriptedChatModel(
        [
            tool_call(SEARCH_TOOL_NAME, query="track parcel", max_results=1),
            tool_call("track_parcel", tracking_number="1Z"),
        ]
    )
    chunks = list(
        ChatClient.create(model)
        .prompt("Where is 1Z?")
        .tools(*TOOLS)
        .advisors(ToolSearchToolCallingAdvisor())
        .stream()
        .chat_response()
    )
    assert [c.result.output.text for c in chunks if c.result] == ["Parcel 1Z: out for delivery"]


def test_the_client_uses_the_search_advisor_instead_of_the_automatic_one() -> None:
    model = ScriptedChatModel([text("Ok.")])
    client = ChatClient.builder(model).default_advisors(ToolSearchToolCallingAdvisor()).build()
    client.prompt("?").tools(*TOOLS).call()
    assert model.tool_names_seen == [["tool_search"]]


def test_concurrent_turns_of_one_advisor_keep_their_finds_apart() -> None:
    advisor = ToolSearchToolCallingAdvisor(max_results=1)
    results: dict[str, list[list[str]]] = {}

    def turn(conversation: str, query: str, tool_name: str, arguments: dict[str, str]) -> None:
        model = ScriptedChatModel(
            [
                tool_call(SEARCH_TOOL_NAME, query=query),
                tool_call(tool_name, **arguments),
                text("Ok."),
            ]
        )
        run(model, advisor, conversation_id=conversation)
        results[conversation] = model.tool_names_seen

    threads = [
        threading.Thread(target=turn, args=("a", "weather", "get_weather", {"city": "Oslo"})),
        threading.Thread(
            target=turn, args=("b", "github issue", "create_github_issue", {"title": "x"})
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["a"][2] == ["tool_search", "get_weather"]
    assert results["b"][2] == ["tool_search", "create_github_issue"]
    assert sorted(ran) == ["create_github_issue(x)", "get_weather(Oslo)"]


def test_search_results_are_json_free_text_with_the_tool_names() -> None:
    model = ScriptedChatModel([tool_call(SEARCH_TOOL_NAME, query="issue invoices"), text("Ok.")])
    run(model, ToolSearchToolCallingAdvisor())
    [(_, message, _)] = responses_of(model, 2)
    assert message == "Found 2 tools, now available to call: list_invoices, create_github_issue."
    with pytest.raises(json.JSONDecodeError):
        json.loads(message)


def test_a_tool_calling_advisor_runs_only_the_tools_its_before_call_offered() -> None:
    """The hook the search advisor relies on: execution uses the options the model saw."""

    class OnlyWeather(ToolCallingAdvisor):
        def before_call(self, request, chain):  # type: ignore[no-untyped-def]
            options = request.prompt.options
            narrowed = options.copy(
                tool_callbacks=[c for c in options.tool_callbacks if c.name == "get_weather"]
            )
            return request.with_prompt(request.prompt.copy(options=narrowed))

    model = ScriptedChatModel([tool_call("send_email", to="x@y.z", body="hi"), text("Ok.")])
    run(model, OnlyWeather())
    assert ran == []
    assert responses_of(model, 2)[0][2] is True
