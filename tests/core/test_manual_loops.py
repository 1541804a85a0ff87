"""User-controlled tool execution: the manual loops of the design documents, as written there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tool_calling import (
    AssistantMessage,
    ChatClient,
    ChatMemory,
    DefaultToolCallingManager,
    MessageWindowChatMemory,
    Prompt,
    SystemMessage,
    ToolCall,
    ToolCallingChatOptions,
    ToolCallingManager,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
    tool,
    tool_callbacks,
)
from tool_calling.testing import ScriptedChatModel, text, tool_call

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


def script() -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            tool_call("get_weather", city="Copenhagen"),
            tool_call("get_time", timezone="Europe/Copenhagen"),
            text("Sunny in Copenhagen at noon."),
        ]
    )


def assistant(number: int, *calls: ToolCall, text: str | None = None) -> AssistantMessage:
    return AssistantMessage(
        text, list(calls), {"id": f"chatcmpl-scripted-{number}", "role": "assistant"}
    )


WEATHER_CALL = ToolCall("call_1", "get_weather", '{"city":"Copenhagen"}')
TIME_CALL = ToolCall("call_2", "get_time", '{"timezone":"Europe/Copenhagen"}')
WEATHER_RESULT = ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny in Copenhagen")])
TIME_RESULT = ToolResponseMessage(
    [ToolResponse("call_2", "get_time", "12:00 in Europe/Copenhagen")]
)
SYSTEM = SystemMessage("You are a helpful assistant.")
QUESTION = UserMessage("What is the weather in Copenhagen, and what time is it there?")


def options() -> ToolCallingChatOptions:
    return ToolCallingChatOptions(
        tool_callbacks=tool_callbacks(get_weather, get_time),
        internal_tool_execution_enabled=False,
    )


def test_the_manual_loop_runs_as_written() -> None:
    chat_model = script()
    tool_calling_manager: ToolCallingManager = DefaultToolCallingManager()
    chat_options = options()

    prompt = Prompt([QUESTION], chat_options)
    chat_response = chat_model.call(prompt)
    while chat_response.has_tool_calls():
        tool_execution_result = tool_calling_manager.execute_tool_calls(prompt, chat_response)
        prompt = Prompt(tool_execution_result.conversation_history, chat_options)
        chat_response = chat_model.call(prompt)

    assert chat_response.result is not None
    assert chat_response.result.output.text == "Sunny in Copenhagen at noon."
    assert ran == ["get_weather(Copenhagen)", "get_time(Europe/Copenhagen)"]
    assert [r.messages for r in chat_model.requests] == [
        [QUESTION],
        [QUESTION, assistant(1, WEATHER_CALL), WEATHER_RESULT],
        [
            QUESTION,
            assistant(1, WEATHER_CALL),
            WEATHER_RESULT,
            assistant(2, TIME_CALL),
            TIME_RESULT,
        ],
    ]
    assert all(r.options is chat_options for r in chat_model.requests)
    chat_model.assert_consumed()


def test_with_internal_execution_off_the_client_hands_the_tool_calls_back() -> None:
    chat_model = script()
    manager = DefaultToolCallingManager()
    chat_options = options()
    client = ChatClient.create(chat_model)

    prompt = Prompt([QUESTION], chat_options)
    chat_response = client.prompt(prompt).call().chat_response()
    assert chat_response is not None and ran == []  # the client did not run the tool
    while chat_response.has_tool_calls():
        result = manager.execute_tool_calls(prompt, chat_response)
        prompt = Prompt(result.conversation_history, chat_options)
        chat_response = client.prompt(prompt).call().chat_response()
        assert chat_response is not None

    assert chat_response.result is not None
    assert chat_response.result.text == "Sunny in Copenhagen at noon."
    assert ran == ["get_weather(Copenhagen)", "get_time(Europe/Copenhagen)"]
    assert chat_model.requests[2].messages == [
        QUESTION,
        assistant(1, WEATHER_CALL),
        WEATHER_RESULT,
        assistant(2, TIME_CALL),
        TIME_RESULT,
    ]


def test_the_manual_loop_with_chat_memory_runs_as_written() -> None:
    chat_model = script()
    manager = DefaultToolCallingManager()
    chat_options = options()
    memory: ChatMemory = MessageWindowChatMemory()
    cid = "conversation-1"

    prompt = Prompt([SYSTEM, QUESTION], chat_options)
    memory.add(cid, prompt.messages)
    chat_response = chat_model.call(Prompt(memory.get(cid), chat_options))
    assert chat_response.result is not None
    memory.add(cid, chat_response.result.output)
    while chat_response.has_tool_calls():
        result = manager.execute_tool_calls(Prompt(memory.get(cid), chat_options), chat_response)
        memory.add(cid, result.conversation_history[-1])
        chat_response = chat_model.call(Prompt(memory.get(cid), chat_options))
        assert chat_response.result is not None
        memory.add(cid, chat_response.result.output)

    assert chat_response.result.output.text == "Sunny in Copenhagen at noon."
    turn = [
        SYSTEM,
        QUESTION,
        assistant(1, WEATHER_CALL),
        WEATHER_RESULT,
        assistant(2, TIME_CALL),
        TIME_RESULT,
    ]
    assert memory.get(cid) == [*turn, assistant(3, text="Sunny in Copenhagen at noon.")]
    assert [r.messages for r in chat_model.requests] == [turn[:2], turn[:4], turn]
    assert ran == ["get_weather(Copenhagen)", "get_time(Europe/Copenhagen)"]


def test_the_memory_loop_works_with_the_prompt_before_the_answer_too() -> None:
    # Spring AI's own sample executes with the prompt built before the answer was stored.
    chat_model = script()
    manager = DefaultToolCallingManager()
    chat_options = options()
    memory = MessageWindowChatMemory()
    cid = "conversation-2"

    memory.add(cid, [SYSTEM, QUESTION])
    prompt_with_memory = Prompt(memory.get(cid), chat_options)
    chat_response = chat_model.call(prompt_with_memory)
    assert chat_response.result is not None
    memory.add(cid, chat_response.result.output)
    while chat_response.has_tool_calls():
        result = manager.execute_tool_calls(prompt_with_memory, chat_response)
        memory.add(cid, result.conversation_history[-1])
        prompt_with_memory = Prompt(memory.get(cid), chat_options)
        chat_response = chat_model.call(prompt_with_memory)
        assert chat_response.result is not None
        memory.add(cid, chat_response.result.output)

    assert memory.get(cid) == [
        SYSTEM,
        QUESTION,
        assistant(1, WEATHER_CALL),
        WEATHER_RESULT,
        assistant(2, TIME_CALL),
        TIME_RESULT,
        assistant(3, text="Sunny in Copenhagen at noon."),
    ]


def test_a_second_turn_continues_from_memory() -> None:
    chat_model = ScriptedChatModel(
        [tool_call("get_weather", city="Oslo"), text("Sunny."), text("You asked about Oslo.")]
    )
    manager = DefaultToolCallingManager()
    chat_options = options()
    memory = MessageWindowChatMemory()
    cid = "c"

    for question in ("Weather in Oslo?", "What did I ask?"):
        memory.add(cid, UserMessage(question))
        chat_response = chat_model.call(Prompt(memory.get(cid), chat_options))
        assert chat_response.result is not None
        memory.add(cid, chat_response.result.output)
        while chat_response.has_tool_calls():
            result = manager.execute_tool_calls(
                Prompt(memory.get(cid), chat_options), chat_response
            )
            memory.add(cid, result.conversation_history[-1])
            chat_response = chat_model.call(Prompt(memory.get(cid), chat_options))
            assert chat_response.result is not None
            memory.add(cid, chat_response.result.output)

    assert chat_model.requests[2].messages == [
        UserMessage("Weather in Oslo?"),
        assistant(1, ToolCall("call_1", "get_weather", '{"city":"Oslo"}')),
        ToolResponseMessage([ToolResponse("call_1", "get_weather", "Sunny in Oslo")]),
        assistant(2, text="Sunny."),
        UserMessage("What did I ask?"),
    ]
