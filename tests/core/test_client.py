"""ChatClient: builder defaults, the request spec, tools of every kind, merging and validation."""

from __future__ import annotations

import asyncio
import re
import types
from dataclasses import dataclass
from typing import Any

import pytest

from tool_calling import (
    AssistantMessage,
    ChatClient,
    ChatMemory,
    ChatOptions,
    ChatResponse,
    FunctionToolCallback,
    Generation,
    Prompt,
    StaticToolCallbackResolver,
    SystemMessage,
    ToolCall,
    ToolCallback,
    ToolCallbackProvider,
    ToolCallingChatOptions,
    ToolContext,
    ToolDefinition,
    ToolDefinitionError,
    ToolResolutionError,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
    tool,
)
from tool_calling.core.chat.advisors.base import (
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.testing import ScriptedChatModel, text, tool_call

# -- tools of every kind -------------------------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Return the weather in a city."""
    return f"Sunny in {city}"


@tool
def get_time(timezone: str = "UTC") -> str:
    """Return the time in a time zone."""
    return f"12:00 in {timezone}"


@tool(name="get_weather")
def weather_again(city: str) -> str:
    """Another tool that calls itself get_weather."""
    return f"Rainy in {city}"


def plain_add(a: int, b: int) -> int:
    """Add two integers (a plain function, no decorator)."""
    return a + b


class Calendar:
    """An instance with @tool methods."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    @tool
    def next_meeting(self) -> str:
        """Return the next meeting."""
        return f"{self.owner}: standup at 9"


class Units:
    """A class with a @tool static method."""

    @staticmethod
    @tool
    def to_celsius(fahrenheit: float) -> float:
        """Convert Fahrenheit to Celsius."""
        return round((fahrenheit - 32) * 5 / 9, 1)


SCHEMA = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


class PingCallback(ToolCallback):
    """A hand-written callback."""

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("ping", "Answer pong.", SCHEMA)

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        return "pong"


class EchoProvider(ToolCallbackProvider):
    """A provider of one callback."""

    def tool_callbacks(self) -> list[ToolCallback]:
        return [FunctionToolCallback(lambda: "echo", name="echo", description="Echo.")]


def tools_module() -> types.ModuleType:
    module = types.ModuleType("weather_tools")
    module.get_weather = get_weather  # type: ignore[attr-defined]
    module.get_time = get_time  # type: ignore[attr-defined]
    module.helper = plain_add  # type: ignore[attr-defined]  # not a @tool: not offered
    return module


class Recorder(Advisor):
    """Records the request it sees, then passes it on."""

    def __init__(self, order: int = 0) -> None:
        self.order = order
        self.requests: list[ChatClientRequest] = []

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        self.requests.append(request)
        return chain.next_call(request)


def offered(model: ScriptedChatModel, index: int = 0) -> ToolCallingChatOptions:
    options = model.requests[index].options
    assert isinstance(options, ToolCallingChatOptions)
    return options


# -- the request spec ----------------------------------------------------------------------------


def test_prompt_call_content_returns_the_answer_text() -> None:
    model = ScriptedChatModel([text("Hello there")])

    reply = ChatClient.create(model).prompt("Hi").call().content()

    assert reply == "Hello there"
    assert model.requests[0].messages == [UserMessage("Hi")]
    model.assert_consumed()


def test_chat_response_is_the_models_response() -> None:
    model = ScriptedChatModel([text("Hello there")])

    response = ChatClient.create(model).prompt("Hi").call().chat_response()

    assert response == ChatResponse(
        [
            Generation(
                AssistantMessage(
                    "Hello there", [], {"id": "chatcmpl-scripted-1", "role": "assistant"}
                ),
                finish_reason="stop",
            )
        ],
        metadata={
            "id": "chatcmpl-scripted-1",
            "model": "scripted",
            "created": 0,
            "system_fingerprint": None,
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        },
    )


def test_the_request_is_system_then_messages_then_user() -> None:
    model = ScriptedChatModel([text("ok")])
    history = [UserMessage("earlier"), AssistantMessage("an earlier answer")]

    ChatClient.create(model).prompt().user("now").messages(*history).system("Be brief.").call()

    assert model.requests[0].messages == [
        SystemMessage("Be brief."),
        UserMessage("earlier"),
        AssistantMessage("an earlier answer"),
        UserMessage("now"),
    ]


def test_messages_accepts_lists() -> None:
    model = ScriptedChatModel([text("ok")])

    history = [UserMessage("a"), AssistantMessage("b")]

    ChatClient.create(model).prompt().messages(history).user("c").call()

    assert model.requests[0].messages == [UserMessage("a"), AssistantMessage("b"), UserMessage("c")]


def test_prompt_accepts_a_whole_prompt_with_its_options() -> None:
    model = ScriptedChatModel([text("ok")])
    prompt = Prompt(
        [SystemMessage("Be brief."), UserMessage("Hi")], ChatOptions("small", temperature=0.1)
    )

    ChatClient.create(model).prompt(prompt).call()

    sent = offered(model)
    assert model.requests[0].messages == [SystemMessage("Be brief."), UserMessage("Hi")]
    assert (sent.model, sent.model_options) == ("small", {"temperature": 0.1})


def test_an_empty_prompt_is_rejected_before_the_model_is_called() -> None:
    model = ScriptedChatModel([text("never")])

    with pytest.raises(
        ValueError,
        match=re.escape("The prompt is empty: give a user message, messages or a system text."),
    ):
        ChatClient.create(model).prompt().call()

    assert model.requests == []


def test_default_user_is_used_when_the_request_gives_none() -> None:
    model = ScriptedChatModel([text("one"), text("two")])
    client = ChatClient.builder(model).default_user("Tell me a joke").build()

    client.prompt().call()
    client.prompt("Tell me a fact").call()

    assert [r.messages for r in model.requests] == [
        [UserMessage("Tell me a joke")],
        [UserMessage("Tell me a fact")],
    ]


def test_conversation_id_travels_in_the_advisor_context() -> None:
    model = ScriptedChatModel([text("ok"), text("ok")])
    recorder = Recorder()
    client = ChatClient.builder(model).default_advisors(recorder).build()

    spec = client.prompt("Hi").conversation_id("conv-7").call()
    client.prompt("Hi").call()

    assert recorder.requests[0].context == {ChatMemory.CONVERSATION_ID: "conv-7"}
    assert spec.chat_client_response().context == {ChatMemory.CONVERSATION_ID: "conv-7"}
    assert recorder.requests[1].context == {}


def test_a_default_conversation_id_applies_unless_the_request_names_one() -> None:
    model = ScriptedChatModel([text("ok"), text("ok")])
    recorder = Recorder()
    client = (
        ChatClient.builder(model).default_advisors(recorder).default_conversation_id("c-1").build()
    )

    client.prompt("Hi").call()
    client.prompt("Hi").conversation_id("c-2").call()

    assert [r.context for r in recorder.requests] == [
        {ChatMemory.CONVERSATION_ID: "c-1"},
        {ChatMemory.CONVERSATION_ID: "c-2"},
    ]


def test_acall_is_the_async_twin_of_call() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny in Oslo.")])

    spec = asyncio.run(ChatClient.create(model).prompt("Weather?").tools(get_weather).acall())

    assert spec.content() == "Sunny in Oslo."
    model.assert_consumed()


def test_stream_content_and_chat_response_of_a_plain_answer() -> None:
    model = ScriptedChatModel(
        [text("It is sunny in Oslo today"), text("It is sunny in Oslo today")]
    )
    client = ChatClient.create(model)

    pieces = list(client.prompt("Weather?").stream().content())
    chunks = list(client.prompt("Weather?").stream().chat_response())

    assert pieces == ["It is sunny ", "in Oslo today"]
    assert [c.result.output.text for c in chunks if c.result] == [
        "It is sunny ",
        "in Oslo today",
        None,
    ]
    assert chunks[-1].result is not None and chunks[-1].result.finish_reason == "stop"


# -- defaults merged with per-call values --------------------------------------------------------


def test_defaults_are_merged_with_per_call_values() -> None:
    model = ScriptedChatModel([text("ok")])
    client = (
        ChatClient.builder(model)
        .default_system("Default system.")
        .default_tools(get_weather)
        .default_tool_context({"tenant": "acme", "user": "ann"})
        .default_options(ToolCallingChatOptions("base-model", temperature=0.2, max_tokens=100))
        .build()
    )

    (
        client.prompt("Hi")
        .system("Per-call system.")
        .tools(get_time)
        .tool_context({"user": "bob"})
        .options(ChatOptions(temperature=0.7))
        .call()
    )

    sent = offered(model)
    assert model.requests[0].messages == [SystemMessage("Per-call system."), UserMessage("Hi")]
    assert [cb.definition.name for cb in sent.tool_callbacks] == ["get_weather", "get_time"]
    assert sent.tool_context == {"tenant": "acme", "user": "bob"}
    assert sent.model == "base-model"
    assert sent.model_options == {"temperature": 0.7, "max_tokens": 100}
    assert sent.internal_tool_execution_enabled is None


def test_per_call_tool_context_wins_over_every_default() -> None:
    seen: dict[str, Any] = {}

    @tool
    def whoami(context: ToolContext) -> str:
        """Report the tool context."""
        seen.update(context)
        return "noted"

    model = ScriptedChatModel([tool_call("whoami"), text("done")])
    client = (
        ChatClient.builder(model)
        .default_options(ToolCallingChatOptions(tool_context={"a": "default options", "b": "x"}))
        .default_tool_context({"a": "default context", "c": "y"})
        .build()
    )

    (
        client.prompt("Who?")
        .tools(whoami)
        .options(ToolCallingChatOptions(tool_context={"a": "request options", "d": "z"}))
        .call()
    )

    assert seen == {"a": "request options", "b": "x", "c": "y", "d": "z"}

    seen.clear()
    model = ScriptedChatModel([tool_call("whoami"), text("done")])
    (
        ChatClient.builder(model)
        .default_tool_context({"a": "default context"})
        .build()
        .prompt("Who?")
        .tools(whoami)
        .options(ToolCallingChatOptions(tool_context={"a": "request options"}))
        .tool_context({"a": "request context"})
        .call()
    )
    assert seen == {"a": "request context"}


def test_tool_context_reaches_the_tool_and_never_the_model() -> None:
    @tool
    def tenant_report(context: ToolContext) -> str:
        """Report for the current tenant."""
        return f"report for {context['tenant']}"

    model = ScriptedChatModel([tool_call("tenant_report"), text("Here it is.")])

    ChatClient.create(model).prompt("Report?").tools(tenant_report).tool_context(
        {"tenant": "acme", "secret": "s3cr3t"}
    ).call()

    second = model.requests[1].messages
    assert second[-1] == ToolResponseMessage(
        [ToolResponse("call_1", "tenant_report", "report for acme")]
    )
    assert offered(model).tool_callbacks[0].definition.input_schema == SCHEMA


def test_options_internal_execution_and_model_options_merge() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo")])
    client = (
        ChatClient.builder(model)
        .default_options(ToolCallingChatOptions(internal_tool_execution_enabled=False, top_p=0.5))
        .build()
    )

    response = client.prompt("Weather?").tools(get_weather).options(ChatOptions("m2")).call()

    sent = offered(model)
    assert (sent.model, sent.model_options, sent.internal_tool_execution_enabled) == (
        "m2",
        {"top_p": 0.5},
        False,
    )
    chat_response = response.chat_response()
    assert chat_response is not None and chat_response.has_tool_calls()
    model.assert_consumed()


def test_mutate_starts_from_the_clients_defaults_without_changing_it() -> None:
    model = ScriptedChatModel([text("a"), text("b")])
    client = ChatClient.builder(model).default_system("One.").default_tools(get_weather).build()

    other = client.mutate().default_system("Two.").default_tools(get_time).build()
    other.prompt("x").call()
    client.prompt("x").call()

    assert model.requests[0].messages[0] == SystemMessage("Two.")
    assert model.tool_names_seen[0] == ["get_weather", "get_time"]
    assert model.requests[1].messages[0] == SystemMessage("One.")
    assert model.tool_names_seen[1] == ["get_weather"]


# -- .tools(): every kind of tool ----------------------------------------------------------------


def test_tools_accepts_every_kind_of_tool_in_order() -> None:
    model = ScriptedChatModel([text("ok")])
    resolver = StaticToolCallbackResolver([FunctionToolCallback(plain_add, name="add")])
    client = ChatClient.builder(model).tool_callback_resolver(resolver).build()

    (
        client.prompt("Hi")
        .tools(
            get_weather,  # a @tool function
            plain_add,  # a plain function
            Calendar("ann"),  # an instance with @tool methods
            Units,  # a class with a @tool static method
            PingCallback(),  # a ToolCallback
            EchoProvider(),  # a ToolCallbackProvider
            ["add"],  # a tool name, resolved through the resolver, inside a list
        )
        .call()
    )

    assert model.tool_names_seen == [
        ["get_weather", "plain_add", "next_meeting", "to_celsius", "ping", "echo", "add"]
    ]


def test_tools_accepts_modules_and_bound_methods() -> None:
    model = ScriptedChatModel([tool_call("next_meeting"), text("At 9.")])

    ChatClient.create(model).prompt("Hi").tools(tools_module(), Calendar("bob").next_meeting).call()

    assert model.tool_names_seen[0] == ["get_weather", "get_time", "next_meeting"]
    assert model.requests[1].messages[-1] == ToolResponseMessage(
        [ToolResponse("call_1", "next_meeting", "bob: standup at 9")]
    )


def test_tool_names_are_resolved_and_executed() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])
    resolver = StaticToolCallbackResolver([FunctionToolCallback(get_weather)])
    client = ChatClient.builder(model).tool_callback_resolver(resolver).build()

    reply = client.prompt("Weather?").tools("get_weather").call().content()

    assert reply == "Sunny."
    assert model.requests[1].messages[-1] == ToolResponseMessage(
        [ToolResponse("call_1", "get_weather", "Sunny in Oslo")]
    )


def test_a_tool_name_without_a_resolver_is_an_error() -> None:
    model = ScriptedChatModel([text("never")])

    with pytest.raises(
        ToolResolutionError,
        match=re.escape(
            "No tool named 'get_weather' could be resolved (the client has no resolver)"
        ),
    ):
        ChatClient.create(model).prompt("Hi").tools("get_weather").call()

    assert model.requests == []


def test_an_unknown_tool_name_is_an_error() -> None:
    model = ScriptedChatModel([text("never")])
    resolver = StaticToolCallbackResolver([FunctionToolCallback(get_weather)])
    client = ChatClient.builder(model).tool_callback_resolver(resolver).build()

    with pytest.raises(ToolResolutionError) as caught:
        client.prompt("Hi").tools("get_wether").call()

    assert str(caught.value) == "No tool named 'get_wether' could be resolved"
    assert model.requests == []


def test_the_same_tool_in_defaults_and_request_is_offered_once() -> None:
    model = ScriptedChatModel([text("ok")])
    client = ChatClient.builder(model).default_tools(get_weather).build()

    client.prompt("Hi").tools(get_weather, [get_weather]).call()

    assert model.tool_names_seen == [["get_weather"]]


def test_one_function_under_two_names_is_two_tools() -> None:
    model = ScriptedChatModel([text("ok")])
    resolver = StaticToolCallbackResolver([FunctionToolCallback(plain_add, name="add")])
    client = ChatClient.builder(model).tool_callback_resolver(resolver).build()

    client.prompt("Hi").tools(plain_add, "add").call()

    assert model.tool_names_seen == [["plain_add", "add"]]


@dataclass
class Greeter:
    """A dataclass (unhashable: eq without frozen) with a @tool method."""

    name: str

    @tool
    def greet(self) -> str:
        """Greet the user."""
        return f"Hello from {self.name}"


def test_tools_of_an_unhashable_instance_work() -> None:
    model = ScriptedChatModel([tool_call("greet"), text("ok")])

    ChatClient.create(model).prompt("Hi").tools(Greeter("ann")).call()

    assert model.requests[1].messages[-1] == ToolResponseMessage(
        [ToolResponse("call_1", "greet", "Hello from ann")]
    )


def test_equal_instances_are_still_two_tools() -> None:
    model = ScriptedChatModel([text("never")])

    with pytest.raises(ToolDefinitionError, match=r"^Duplicate tool name 'greet'"):
        ChatClient.create(model).prompt("Hi").tools(Greeter("ann"), Greeter("ann")).call()


DUPLICATE = (
    "Duplicate tool name 'get_weather': tests.core.test_client.get_weather and "
    "tests.core.test_client.weather_again. Tool names must be unique; rename one with "
    "@tool(name=...)."
)


def test_two_tools_with_one_name_in_the_merged_list_raise_naming_both() -> None:
    model = ScriptedChatModel([text("never")])
    client = ChatClient.builder(model).default_tools(get_weather).build()

    with pytest.raises(ToolDefinitionError, match=re.escape(DUPLICATE)) as caught:
        client.prompt("Hi").tools(weather_again).call()

    assert isinstance(caught.value, ValueError)
    assert model.requests == []


def test_a_duplicate_between_tools_and_options_callbacks_raises() -> None:
    model = ScriptedChatModel([text("never")])
    options = ToolCallingChatOptions(tool_callbacks=[FunctionToolCallback(weather_again)])

    with pytest.raises(ValueError, match=re.escape(DUPLICATE)):
        ChatClient.create(model).prompt("Hi").tools(get_weather).options(options).call()

    with pytest.raises(ValueError, match=re.escape(DUPLICATE)):
        ChatClient.create(model).prompt("Hi").tools(get_weather, weather_again).stream()
    assert model.requests == []


def test_a_name_differing_only_in_case_is_a_duplicate() -> None:
    @tool(name="Get_Weather")
    def shouting(city: str) -> str:
        """Loud weather."""
        return city.upper()

    model = ScriptedChatModel([text("never")])
    with pytest.raises(ValueError, match=r"^Tool names 'get_weather' and 'Get_Weather' differ"):
        ChatClient.create(model).prompt("Hi").tools(get_weather, shouting).call()


def test_tools_that_are_not_tools_are_rejected() -> None:
    model = ScriptedChatModel([text("never")])

    with pytest.raises(TypeError, match=re.escape("int object has no @tool methods")):
        ChatClient.create(model).prompt("Hi").tools(42).call()


def test_tool_calls_are_executed_with_the_models_arguments() -> None:
    model = ScriptedChatModel(
        [tool_call("get_weather", city="Oslo"), tool_call("get_time"), text("Sunny, noon.")]
    )

    reply = ChatClient.create(model).prompt("Weather?").tools(get_weather, get_time).call()

    assert reply.content() == "Sunny, noon."
    assert model.requests[2].messages == [
        UserMessage("Weather?"),
        AssistantMessage(
            None,
            [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')],
            {"id": "chatcmpl-scripted-1", "role": "assistant"},
        ),
        ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny in Oslo")]),
        AssistantMessage(
            None,
            [ToolCall("call_2", "get_time", "{}")],
            {"id": "chatcmpl-scripted-2", "role": "assistant"},
        ),
        ToolResponseMessage([ToolResponse("call_2", "get_time", "12:00 in UTC")]),
    ]


def test_prompt_takes_the_user_text_by_the_contract_keyword() -> None:
    """The documented signature: ``client.prompt(text=None)``."""
    from tool_calling import ChatClient
    from tool_calling.testing import ScriptedChatModel, text

    model = ScriptedChatModel([text("hello")])
    assert ChatClient.create(model).prompt(text="Hi").call().content() == "hello"
    assert model.requests[0].messages[-1].text == "Hi"
