"""Advisors: the chain and its order, ToolCallingAdvisor and its loop, MessageChatMemoryAdvisor."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tool_calling import (
    HIGHEST_PRECEDENCE,
    LOWEST_PRECEDENCE,
    Advisor,
    AssistantMessage,
    ChatClient,
    ChatResponse,
    DefaultToolCallingManager,
    Generation,
    InMemoryChatMemoryRepository,
    MessageChatMemoryAdvisor,
    MessageWindowChatMemory,
    Prompt,
    SystemMessage,
    ToolCall,
    ToolCallingAdvisor,
    ToolCallLimitBehavior,
    ToolCallLimitExceededException,
    ToolCallLimits,
    ToolExecutionResult,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
    tool,
)
from tool_calling.core import _settings
from tool_calling.core.chat.advisors.base import (
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.advisors.tool_calling import TOOL_ROUNDS_EXCEEDED
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> Iterator[None]:
    ran.clear()
    yield
    ran.clear()


@tool
def get_weather(city: str) -> str:
    """Return the weather in a city."""
    ran.append(f"get_weather({city})")
    return f"Sunny in {city}"


@tool
def get_time(timezone: str = "UTC") -> str:
    """Return the time in a time zone."""
    ran.append(f"get_time({timezone})")
    return f"12:00 in {timezone}"


@tool(return_direct=True)
def lookup_order(order_id: str) -> str:
    """Return an order's status, straight to the caller."""
    ran.append(f"lookup_order({order_id})")
    return f"Order {order_id}: shipped"


def assistant(
    number: int, *calls: ToolCall, text: str | None = None, usage: tuple[int, int] | None = None
) -> AssistantMessage:
    """The assistant message ScriptedChatModel answers with at call ``number``.

    Memory stores it with the response's ``usage``: (prompt, completion) tokens, the words the
    scripted model counted (outside the tool loop, summed over the turn's model calls).
    """
    metadata: dict[str, object] = {"id": f"chatcmpl-scripted-{number}", "role": "assistant"}
    if usage is not None:
        prompt, completion = usage
        metadata["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return AssistantMessage(text, list(calls), metadata)


def answered(*responses: ToolResponse) -> ToolResponseMessage:
    return ToolResponseMessage(list(responses))


class Tracer(Advisor):
    """Records when it is entered and left."""

    def __init__(self, name: str, order: int, events: list[str]) -> None:
        self._name = name
        self.order = order
        self.events = events
        self.requests: list[ChatClientRequest] = []

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        self.events.append(f"in:{self._name}")
        self.requests.append(request)
        response = chain.next_call(request)
        self.events.append(f"out:{self._name}")
        return response


class HookedAdvisor(ToolCallingAdvisor):
    """A ToolCallingAdvisor that records its hooks."""

    def __init__(self, events: list[str], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.events = events

    def initialize_loop(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
        self.events.append("initialize_loop")
        return super().initialize_loop(request, chain)

    def before_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
        self.events.append("before_call")
        return super().before_call(request, chain)

    def after_call(self, response: ChatClientResponse, chain: AdvisorChain) -> ChatClientResponse:
        self.events.append("after_call")
        return super().after_call(response, chain)

    def finalize_loop(
        self, response: ChatClientResponse, chain: AdvisorChain
    ) -> ChatClientResponse:
        self.events.append("finalize_loop")
        return super().finalize_loop(response, chain)


class CountingManager(DefaultToolCallingManager):
    """Counts the batches it executes."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.batches = 0

    def execute_tool_calls(
        self, prompt: Prompt, chat_response: ChatResponse
    ) -> ToolExecutionResult:
        self.batches += 1
        return super().execute_tool_calls(prompt, chat_response)


def usage(prompt: int, completion: int) -> dict[str, dict[str, int]]:
    return {
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    }


# -- the chain -----------------------------------------------------------------------------------


def test_lower_order_runs_first_and_outermost() -> None:
    events: list[str] = []
    model = ScriptedChatModel([text("ok")])
    client = (
        ChatClient.builder(model)
        .default_advisors(Tracer("late", 10, events), Tracer("first", -10, events))
        .build()
    )

    client.prompt("Hi").advisors(Tracer("middle", 0, events)).call()

    assert events == ["in:first", "in:middle", "in:late", "out:late", "out:middle", "out:first"]


def test_equal_orders_keep_the_order_they_were_given_in() -> None:
    events: list[str] = []
    model = ScriptedChatModel([text("ok")])
    client = ChatClient.builder(model).default_advisors(Tracer("a", 5, events)).build()

    client.prompt("Hi").advisors([Tracer("b", 5, events), Tracer("c", 5, events)]).call()

    assert events == ["in:a", "in:b", "in:c", "out:c", "out:b", "out:a"]


def test_a_chain_can_be_re_entered_and_runs_the_rest_each_time() -> None:
    events: list[str] = []
    inner = Tracer("inner", 1, events)
    calls: list[ChatClientRequest] = []

    def model_call(request: ChatClientRequest) -> ChatClientResponse:
        calls.append(request)
        return ChatClientResponse(None, request.context)

    def model_stream(request: ChatClientRequest) -> Iterator[ChatClientResponse]:
        raise AssertionError("not streamed")

    chain = AdvisorChain([inner], model_call, model_stream)
    request = ChatClientRequest(Prompt("Hi"))

    chain.next_call(request)
    chain.next_call(request)

    assert events == ["in:inner", "out:inner", "in:inner", "out:inner"]
    assert len(calls) == 2
    assert chain.advisors == (inner,)


def test_precedence_constants_bound_the_order() -> None:
    assert (HIGHEST_PRECEDENCE, LOWEST_PRECEDENCE) == (-(2**31), 2**31 - 1)
    assert ToolCallingAdvisor.order == HIGHEST_PRECEDENCE + 300
    assert MessageChatMemoryAdvisor.order == HIGHEST_PRECEDENCE + 200


# -- ToolCallingAdvisor: hooks -------------------------------------------------------------------


def test_hooks_run_1_2_2_1_times_for_one_tool_round_then_an_answer() -> None:
    events: list[str] = []
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    reply = (
        ChatClient.create(model)
        .prompt("Weather?")
        .tools(get_weather)
        .advisors(HookedAdvisor(events))
        .call()
        .content()
    )

    assert reply == "Sunny."
    assert events == [
        "initialize_loop",
        "before_call",
        "after_call",
        "before_call",
        "after_call",
        "finalize_loop",
    ]


def test_hooks_can_replace_the_request_and_the_response() -> None:
    class Annotating(ToolCallingAdvisor):
        def initialize_loop(
            self, request: ChatClientRequest, chain: AdvisorChain
        ) -> ChatClientRequest:
            prompt = request.prompt
            return request.with_prompt(
                Prompt([SystemMessage("Use tools."), *prompt.messages], prompt.options)
            )

        def finalize_loop(
            self, response: ChatClientResponse, chain: AdvisorChain
        ) -> ChatClientResponse:
            chat_response = response.chat_response
            assert chat_response is not None and chat_response.result is not None
            checked = Generation(AssistantMessage(f"[checked] {chat_response.result.text}"))
            return ChatClientResponse(ChatResponse([checked]), response.context)

    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    reply = (
        ChatClient.create(model)
        .prompt("Weather?")
        .tools(get_weather)
        .advisors(Annotating())
        .call()
        .content()
    )

    assert reply == "[checked] Sunny."
    assert [r.messages[0] for r in model.requests] == [SystemMessage("Use tools.")] * 2


# -- ToolCallingAdvisor: history -----------------------------------------------------------------


def test_with_history_each_round_sends_the_whole_turn() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    ChatClient.create(model).prompt("Weather?").system("Be brief.").tools(get_weather).call()

    assert model.requests[1].messages == [
        SystemMessage("Be brief."),
        UserMessage("Weather?"),
        assistant(1, ToolCall("call_1", "get_weather", '{"city":"Oslo"}')),
        answered(ToolResponse("call_1", "get_weather", "Sunny in Oslo")),
    ]


def test_without_history_the_next_request_is_the_system_and_the_last_tool_response() -> None:
    model = ScriptedChatModel(
        [tool_call("get_weather", city="Oslo"), tool_call("get_time"), text("Sunny, noon.")]
    )
    advisor = ToolCallingAdvisor(conversation_history_enabled=False)

    reply = (
        ChatClient.create(model)
        .prompt("Weather?")
        .system("Be brief.")
        .tools(get_weather, get_time)
        .advisors(advisor)
        .call()
        .content()
    )

    assert reply == "Sunny, noon."
    assert [r.messages for r in model.requests] == [
        [SystemMessage("Be brief."), UserMessage("Weather?")],
        [
            SystemMessage("Be brief."),
            answered(ToolResponse("call_1", "get_weather", "Sunny in Oslo")),
        ],
        [SystemMessage("Be brief."), answered(ToolResponse("call_2", "get_time", "12:00 in UTC"))],
    ]


def test_without_history_limits_still_count_the_whole_turn() -> None:
    model = ScriptedChatModel(
        [
            tool_call("get_weather", city="Oslo"),
            tool_call("get_weather", city="Paris"),
            tool_call("get_weather", city="Rome"),
        ]
    )
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=2))
    advisor = ToolCallingAdvisor(manager, conversation_history_enabled=False)

    response = (
        ChatClient.create(model)
        .prompt("Weather?")
        .tools(get_weather)
        .advisors(advisor)
        .call()
        .chat_response()
    )

    assert response is not None
    assert response.generations == [
        Generation(
            AssistantMessage(
                "Tool call limit (2) exceeded for tool 'get_weather'. "
                "No further calls to this tool are allowed in this turn."
            ),
            finish_reason=ToolCallLimitExceededException.FINISH_REASON,
            metadata={ToolCallLimitExceededException.METADATA_PARTIAL_TOOL_RESPONSES: []},
        )
    ]
    assert ran == ["get_weather(Oslo)", "get_weather(Paris)"]
    model.assert_consumed()


# -- ToolCallingAdvisor: return-direct, limits, rounds, usage ------------------------------------


def test_return_direct_ends_the_turn_with_one_generation_per_result() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("lookup_order", order_id="A1"), tool_call("lookup_order", order_id="B2")
            )
        ]
    )

    spec = ChatClient.create(model).prompt("Where are my orders?").tools(lookup_order).call()

    response = spec.chat_response()
    assert response is not None
    assert response.generations == [
        Generation(
            AssistantMessage("Order A1: shipped"),
            finish_reason="returnDirect",
            metadata={"toolId": "call_1", "toolName": "lookup_order"},
        ),
        Generation(
            AssistantMessage("Order B2: shipped"),
            finish_reason="returnDirect",
            metadata={"toolId": "call_2", "toolName": "lookup_order"},
        ),
    ]
    assert spec.content() == "Order A1: shipped"
    assert response.metadata["id"] == "chatcmpl-scripted-1"
    assert len(model.requests) == 1  # no further model call


def test_a_batch_mixing_return_direct_and_normal_tools_goes_back_to_the_model() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(tool_call("lookup_order", order_id="A1"), tool_call("get_time")),
            text("A1 shipped at noon."),
        ]
    )

    reply = ChatClient.create(model).prompt("?").tools(lookup_order, get_time).call().content()

    assert reply == "A1 shipped at noon."
    assert len(model.requests) == 2


def test_a_limit_breach_is_a_single_generation_with_the_partial_responses() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("get_weather", city="Oslo"),
                tool_call("get_weather", city="Paris"),
                tool_call("get_time"),
            )
        ]
    )
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=1))
    client = ChatClient.builder(model).tool_calling_manager(manager).build()

    spec = client.prompt("Weather?").tools(get_weather, get_time).call()  # no exception

    response = spec.chat_response()
    assert response is not None
    assert response.generations == [
        Generation(
            AssistantMessage(
                "Tool call limit (1) exceeded for tool 'get_weather'. "
                "No further calls to this tool are allowed in this turn."
            ),
            finish_reason="toolCallLimitExceeded",
            metadata={
                "partialToolResponses": [ToolResponse("call_1", "get_weather", "Sunny in Oslo")]
            },
        )
    ]
    assert response.metadata["id"] == "chatcmpl-scripted-1"
    assert ran == ["get_weather(Oslo)"]  # the call after the breach never ran
    model.assert_consumed()


def test_a_total_limit_breach_over_several_rounds_is_reported_too() -> None:
    model = ScriptedChatModel(
        [tool_call("get_weather", city="Oslo"), tool_call("get_time"), tool_call("get_time")]
    )
    manager = DefaultToolCallingManager(limits=ToolCallLimits(max_total_tool_calls=2))

    spec = (
        ChatClient.builder(model)
        .tool_calling_manager(manager)
        .build()
        .prompt("?")
        .tools(get_weather, get_time)
        .call()
    )

    assert spec.content() == (
        "Total tool call limit (2) exceeded for this turn. No further tool calls are allowed."
    )
    assert ran == ["get_weather(Oslo)", "get_time(UTC)"]


def test_return_error_response_lets_the_model_go_on() -> None:
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("get_weather", city="Oslo"), tool_call("get_weather", city="Rome")
            ),
            text("Oslo is sunny; Rome I could not check."),
        ]
    )
    limits = ToolCallLimits(
        max_calls_per_tool=1, on_limit_exceeded=ToolCallLimitBehavior.RETURN_ERROR_RESPONSE
    )
    client = (
        ChatClient.builder(model)
        .tool_calling_manager(DefaultToolCallingManager(limits=limits))
        .build()
    )

    reply = client.prompt("?").tools(get_weather).call().content()

    assert reply == "Oslo is sunny; Rome I could not check."
    assert model.requests[1].messages[-1] == answered(
        ToolResponse("call_1", "get_weather", "Sunny in Oslo"),
        ToolResponse(
            "call_2",
            "get_weather",
            "Tool call limit (1) exceeded for tool 'get_weather'. "
            "No further calls to this tool are allowed in this turn.",
            is_error=True,
        ),
    )


def test_the_round_guard_stops_a_model_that_never_answers() -> None:
    model = ScriptedChatModel([tool_call("get_time"), tool_call("get_time")])

    response = (
        ChatClient.create(model)
        .prompt("?")
        .tools(get_time)
        .advisors(ToolCallingAdvisor(max_tool_rounds=2))
        .call()
        .chat_response()
    )

    assert response is not None
    assert response.generations == [
        Generation(
            AssistantMessage(
                "Tool round limit (2) exceeded for this turn. "
                "The model kept calling tools without answering."
            ),
            finish_reason=TOOL_ROUNDS_EXCEEDED,
        )
    ]
    assert ran == ["get_time(UTC)"]  # the last round's calls are not run: nobody would see them
    model.assert_consumed()


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_the_round_guard_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"max_tool_rounds must be a positive integer, got {value!r}")
    ):
        ToolCallingAdvisor(max_tool_rounds=value)  # type: ignore[arg-type]


def test_usage_is_summed_over_the_rounds() -> None:
    weather_call = ToolCall("c1", "get_weather", '{"city":"Oslo"}')
    model = ScriptedChatModel(
        [
            ChatResponse(
                [Generation(AssistantMessage(None, [weather_call]), "tool_calls")],
                metadata={"id": "r1", **usage(10, 5)},
            ),
            ChatResponse(
                [Generation(AssistantMessage("Sunny."), "stop")],
                metadata={"id": "r2", **usage(20, 7)},
            ),
        ]
    )

    response = ChatClient.create(model).prompt("?").tools(get_weather).call().chat_response()

    assert response is not None
    assert response.metadata == {"id": "r2", **usage(30, 12)}
    assert response.result is not None and response.result.text == "Sunny."


def test_usage_of_a_single_round_is_the_models() -> None:
    model = ScriptedChatModel(
        [ChatResponse([Generation(AssistantMessage("Hi."), "stop")], {"id": "r1", **usage(3, 1)})]
    )

    response = ChatClient.create(model).prompt("?").call().chat_response()

    assert response is not None and response.metadata == {"id": "r1", **usage(3, 1)}


# -- automatic registration ----------------------------------------------------------------------


def test_a_tool_advisor_is_registered_automatically_by_default() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    reply = ChatClient.create(model).prompt("?").tools(get_weather).call().content()

    assert reply == "Sunny."
    assert ran == ["get_weather(Oslo)"]


def test_automatic_registration_can_be_turned_off_per_request() -> None:
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo")])

    spec = (
        ChatClient.create(model)
        .prompt("?")
        .tools(get_weather)
        .tool_calling_advisor_auto_register(False)
        .call()
    )

    assert spec.chat_response() == ChatResponse(
        [
            Generation(
                assistant(1, ToolCall("call_1", "get_weather", '{"city":"Oslo"}')),
                finish_reason="tool_calls",
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
    assert spec.content() is None
    assert ran == []


def test_automatic_registration_can_be_turned_off_for_a_client() -> None:
    model = ScriptedChatModel(
        [
            tool_call("get_weather", city="Oslo"),
            tool_call("get_weather", city="Paris"),
            text("Sunny in Paris."),
        ]
    )
    client = ChatClient.builder(model).tool_calling_advisor_auto_register(False).build()

    first = client.prompt("?").tools(get_weather).call().chat_response()
    assert first is not None and first.has_tool_calls()
    assert ran == []

    # The request's own value wins over the client's.
    second = client.prompt("?").tools(get_weather).tool_calling_advisor_auto_register(True).call()
    assert second.content() == "Sunny in Paris."
    assert ran == ["get_weather(Paris)"]
    model.assert_consumed()


def test_automatic_registration_follows_the_setting() -> None:
    model = ScriptedChatModel(
        [tool_call("get_weather", city="Oslo"), tool_call("get_time"), text("ok")]
    )
    previous = _settings._provider
    _settings.set_core_settings_provider(
        lambda: _settings.CoreSettings(tool_calling_advisor_auto_register=False)
    )
    try:
        off = ChatClient.create(model).prompt("?").tools(get_weather).call().chat_response()
        on = (
            ChatClient.create(model)
            .prompt("?")
            .tools(get_time)
            .tool_calling_advisor_auto_register(True)
            .call()
            .content()
        )
    finally:
        _settings.set_core_settings_provider(previous)

    assert off is not None and off.has_tool_calls()
    assert on == "ok"
    assert ran == ["get_time(UTC)"]


def test_an_explicit_tool_advisor_replaces_the_automatic_one() -> None:
    manager = CountingManager()
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    reply = (
        ChatClient.create(model)
        .prompt("?")
        .tools(get_weather)
        .advisors(ToolCallingAdvisor(manager))
        .call()
        .content()
    )

    # A second (automatic) tool advisor would sit inside and run the batch itself.
    assert reply == "Sunny."
    assert manager.batches == 1


def test_an_explicit_default_tool_advisor_replaces_the_automatic_one() -> None:
    manager = CountingManager()
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])
    client = ChatClient.builder(model).default_advisors(ToolCallingAdvisor(manager)).build()

    client.prompt("?").tools(get_weather).call()

    assert manager.batches == 1


def test_two_tool_advisors_are_rejected() -> None:
    model = ScriptedChatModel([text("never")])
    client = ChatClient.builder(model).default_advisors(ToolCallingAdvisor()).build()

    with pytest.raises(
        ValueError,
        match=re.escape(
            "A request can have at most one tool calling advisor; got 2 "
            "(ToolCallingAdvisor, HookedAdvisor)."
        ),
    ):
        client.prompt("?").advisors(HookedAdvisor([])).call()

    assert model.requests == []


def test_the_automatic_advisor_uses_the_clients_manager() -> None:
    manager = CountingManager()
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    ChatClient.builder(model).tool_calling_manager(manager).build().prompt("?").tools(
        get_weather
    ).call()

    assert manager.batches == 1


# -- MessageChatMemoryAdvisor --------------------------------------------------------------------


def weather_turns() -> list[object]:
    return [
        tool_call("get_weather", city="Oslo"),
        text("Sunny in Oslo."),
        text("You asked about Oslo."),
    ]


def test_memory_outside_the_loop_stores_the_user_message_and_the_final_answer() -> None:
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel(weather_turns())  # type: ignore[arg-type]
    client = ChatClient.builder(model).default_advisors(MessageChatMemoryAdvisor(memory)).build()

    client.prompt("Weather in Oslo?").tools(get_weather).conversation_id("c1").call()
    client.prompt("What did I ask?").conversation_id("c1").call()

    # The stored answer carries the turn's usage: (3 + 8, 2 + 3) tokens over its two calls.
    assert memory.get("c1") == [
        UserMessage("Weather in Oslo?"),
        assistant(2, text="Sunny in Oslo.", usage=(11, 5)),
        UserMessage("What did I ask?"),
        assistant(3, text="You asked about Oslo.", usage=(10, 4)),
    ]
    assert model.requests[2].messages == [
        UserMessage("Weather in Oslo?"),
        assistant(2, text="Sunny in Oslo.", usage=(11, 5)),
        UserMessage("What did I ask?"),
    ]


def test_memory_inside_the_loop_stores_every_tool_call_and_response() -> None:
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel(weather_turns())  # type: ignore[arg-type]
    inside = MessageChatMemoryAdvisor(memory, order=ToolCallingAdvisor.order + 1)
    client = ChatClient.builder(model).default_advisors(inside).build()

    client.prompt("Weather in Oslo?").system("Be brief.").tools(get_weather).conversation_id(
        "c1"
    ).call()
    client.prompt("What did I ask?").system("Be brief.").conversation_id("c1").call()

    weather_call = ToolCall("call_1", "get_weather", '{"city":"Oslo"}')
    # Each stored message carries the usage of its own model call.
    turn = [
        UserMessage("Weather in Oslo?"),
        assistant(1, weather_call, usage=(5, 2)),
        answered(ToolResponse("call_1", "get_weather", "Sunny in Oslo")),
        assistant(2, text="Sunny in Oslo.", usage=(10, 3)),
    ]
    assert memory.get("c1") == [
        *turn,
        UserMessage("What did I ask?"),
        assistant(3, text="You asked about Oslo.", usage=(17, 4)),
    ]
    assert model.requests[1].messages == [SystemMessage("Be brief."), *turn[:3]]
    assert model.requests[2].messages == [
        SystemMessage("Be brief."),
        *turn,
        UserMessage("What did I ask?"),
    ]


def test_the_automatic_tool_advisor_drops_its_history_when_memory_is_inside() -> None:
    events: list[str] = []
    between = Tracer("between", ToolCallingAdvisor.order + 1, events)
    inside = MessageChatMemoryAdvisor(MessageWindowChatMemory(), order=ToolCallingAdvisor.order + 2)
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    ChatClient.create(model).prompt("Weather?").system("Be brief.").tools(get_weather).advisors(
        between, inside
    ).call()

    assert [r.prompt.messages for r in between.requests] == [
        [SystemMessage("Be brief."), UserMessage("Weather?")],
        [
            SystemMessage("Be brief."),
            answered(ToolResponse("call_1", "get_weather", "Sunny in Oslo")),
        ],
    ]


def test_the_automatic_tool_advisor_keeps_its_history_when_memory_is_outside() -> None:
    events: list[str] = []
    between = Tracer("between", ToolCallingAdvisor.order + 1, events)
    outside = MessageChatMemoryAdvisor(MessageWindowChatMemory())
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])

    ChatClient.create(model).prompt("Weather?").tools(get_weather).advisors(between, outside).call()

    assert len(between.requests[1].prompt.messages) == 3


def test_memory_already_in_the_prompt_is_not_duplicated() -> None:
    memory = MessageWindowChatMemory()
    history = [UserMessage("Hi"), AssistantMessage("Hello!")]
    memory.add("c1", history)
    model = ScriptedChatModel([text("Fine, thanks.")])
    client = ChatClient.builder(model).default_advisors(MessageChatMemoryAdvisor(memory)).build()

    client.prompt().messages(*history).user("How are you?").conversation_id("c1").call()

    assert model.requests[0].messages == [*history, UserMessage("How are you?")]
    assert memory.get("c1") == [
        *history,
        UserMessage("How are you?"),
        assistant(1, text="Fine, thanks.", usage=(5, 2)),
    ]


def test_a_resent_answer_is_not_duplicated_although_memory_added_its_usage() -> None:
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel([text("Hello!"), text("Fine.")])
    client = ChatClient.builder(model).default_advisors(MessageChatMemoryAdvisor(memory)).build()

    response = client.prompt("Hi").call().chat_response()
    assert response is not None and response.result is not None
    answer = response.result.output  # the caller's copy: the usage is the response's
    client.prompt().messages(UserMessage("Hi"), answer).user("How are you?").call()

    assert "usage" not in answer.metadata
    assert memory.get("default") == [
        UserMessage("Hi"),
        assistant(1, text="Hello!", usage=(1, 1)),
        UserMessage("How are you?"),
        assistant(2, text="Fine.", usage=(5, 1)),
    ]


def test_memory_inside_with_a_resent_turn_is_not_duplicated() -> None:
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny.")])
    client = (
        ChatClient.builder(model)
        .default_advisors(
            ToolCallingAdvisor(),  # explicit: keeps its history although memory is inside
            MessageChatMemoryAdvisor(memory, order=ToolCallingAdvisor.order + 1),
        )
        .build()
    )

    client.prompt("Weather?").tools(get_weather).call()

    # The loop's copy of the first answer has no usage, memory's has: still the same message.
    expected_turn = [
        UserMessage("Weather?"),
        assistant(1, ToolCall("call_1", "get_weather", '{"city":"Oslo"}'), usage=(1, 2)),
        answered(ToolResponse("call_1", "get_weather", "Sunny in Oslo")),
    ]
    assert model.requests[1].messages == expected_turn
    assert memory.get("default") == [*expected_turn, assistant(2, text="Sunny.", usage=(6, 1))]


def test_system_messages_are_sent_but_never_stored() -> None:
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel([text("a"), text("b")])
    client = (
        ChatClient.builder(model)
        .default_system("Be brief.")
        .default_advisors(MessageChatMemoryAdvisor(memory))
        .build()
    )

    client.prompt("one").call()
    client.prompt("two").call()

    assert model.requests[1].messages == [
        SystemMessage("Be brief."),
        UserMessage("one"),
        assistant(1, text="a", usage=(3, 1)),
        UserMessage("two"),
    ]
    assert SystemMessage("Be brief.") not in memory.get("default")


def test_conversations_are_kept_apart() -> None:
    memory = MessageWindowChatMemory()
    model = ScriptedChatModel([text("a"), text("b"), text("c")])
    client = ChatClient.builder(model).default_advisors(MessageChatMemoryAdvisor(memory)).build()

    client.prompt("to alice").conversation_id("alice").call()
    client.prompt("to bob").conversation_id("bob").call()
    client.prompt("again alice").conversation_id("alice").call()

    assert model.requests[1].messages == [UserMessage("to bob")]
    assert model.requests[2].messages == [
        UserMessage("to alice"),
        assistant(1, text="a", usage=(2, 1)),
        UserMessage("again alice"),
    ]
    assert memory.get("bob") == [UserMessage("to bob"), assistant(2, text="b", usage=(2, 1))]


def test_the_advisors_own_conversation_id_is_the_fallback() -> None:
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository())
    model = ScriptedChatModel([text("a")])
    advisor = MessageChatMemoryAdvisor(memory, conversation_id="fixed")

    ChatClient.create(model).prompt("Hi").advisors(advisor).call()

    assert memory.get("fixed") == [UserMessage("Hi"), assistant(1, text="a", usage=(1, 1))]
    assert memory.get("default") == []


def test_a_return_direct_turn_with_memory_inside_leaves_a_history_the_model_accepts() -> None:
    memory = MessageWindowChatMemory()
    inside = MessageChatMemoryAdvisor(memory, order=ToolCallingAdvisor.order + 1)
    model = ScriptedChatModel([tool_call("lookup_order", order_id="A1"), text("Anything else?")])
    client = ChatClient.builder(model).default_advisors(inside).build()

    first = client.prompt("Where is A1?").tools(lookup_order).call().content()
    client.prompt("Thanks").call()

    assert first == "Order A1: shipped"
    # The loop ended the turn itself; the advisor inside it still stored the tool's response and
    # the answer the caller got, so the next request carries the whole, valid exchange.
    call = ToolCall("call_1", "lookup_order", '{"order_id":"A1"}')
    assert model.requests[1].messages == [
        UserMessage("Where is A1?"),
        assistant(1, call, usage=(3, 2)),
        answered(ToolResponse("call_1", "lookup_order", "Order A1: shipped")),
        AssistantMessage("Order A1: shipped"),
        UserMessage("Thanks"),
    ]


def test_a_limit_breach_with_memory_inside_leaves_a_history_the_model_accepts() -> None:
    memory = MessageWindowChatMemory()
    inside = MessageChatMemoryAdvisor(memory, order=ToolCallingAdvisor.order + 1)
    model = ScriptedChatModel(
        [
            tool_calls(
                tool_call("get_weather", city="Oslo"), tool_call("get_weather", city="Rome")
            ),
            text("Sorry."),
        ]
    )
    client = (
        ChatClient.builder(model)
        .default_advisors(inside)
        .tool_calling_manager(
            DefaultToolCallingManager(limits=ToolCallLimits(max_calls_per_tool=1))
        )
        .build()
    )

    first = client.prompt("Weather?").tools(get_weather).call().chat_response()
    client.prompt("Never mind").call()

    assert first is not None and first.has_finish_reasons("toolCallLimitExceeded")
    # Both calls are answered in memory (the second with the breach text), then the breach
    # answer: a history the model API accepts.
    breach = (
        "Tool call limit (1) exceeded for tool 'get_weather'. "
        "No further calls to this tool are allowed in this turn."
    )
    stored = model.requests[1].messages
    assert stored[0] == UserMessage("Weather?")
    assert [r.is_error for r in stored[2].responses] == [False, True]
    assert stored[2].responses[1].response_data == breach
    assert stored[3:] == [AssistantMessage(breach), UserMessage("Never mind")]
