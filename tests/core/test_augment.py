"""Argument augmentation: AugmentedToolCallback and AugmentedToolCallbackProvider."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Literal

import pydantic
import pytest

from tool_calling import (
    AugmentedArguments,
    AugmentedToolCallback,
    AugmentedToolCallbackProvider,
    ChatClient,
    ToolCallbackProvider,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionResult,
    ToolResponseMessage,
    ToolSearchToolCallingAdvisor,
    tool,
    tool_callbacks,
)
from tool_calling.core.tools.schema import to_strict_json_schema
from tool_calling.exceptions import ToolArgumentsError, ToolExecutionException
from tool_calling.testing import ScriptedChatModel, text, tool_call


class Thinking(pydantic.BaseModel):
    inner_thought: str = pydantic.Field(description="Why you call this tool, in one sentence.")
    confidence: Literal["low", "medium", "high"] = pydantic.Field(
        description="How sure you are that this is the right tool."
    )


received: list[AugmentedArguments[Any]] = []
ran: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _clean() -> None:
    received.clear()
    ran.clear()


@tool
def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Return the weather in a city."""
    ran.append({"city": city, "unit": unit})
    return f"Sunny in {city}"


@tool
def rate_answer(answer: str, confidence: str) -> str:
    """Record an answer with its own confidence parameter."""
    ran.append({"answer": answer, "confidence": confidence})
    return "noted"


@tool(return_direct=True, requires_approval=True)
def lookup_order(order_id: str) -> str:
    """Return an order's status, straight to the caller."""
    ran.append({"order_id": order_id})
    return f"Order {order_id}: shipped"


def augmented(callback_source: Any = get_weather, **kwargs: Any) -> AugmentedToolCallback:
    [callback] = tool_callbacks(callback_source)
    return AugmentedToolCallback(callback, Thinking, received.append, **kwargs)


THOUGHT = {"inner_thought": "The user asked for the weather.", "confidence": "high"}


def test_the_augment_fields_come_first_required_and_described() -> None:
    schema = augmented().definition.input_schema
    assert list(schema["properties"]) == ["inner_thought", "confidence", "city", "unit"]
    assert schema["required"] == ["inner_thought", "confidence", "city"]
    assert schema["properties"]["inner_thought"] == {
        "type": "string",
        "description": "Why you call this tool, in one sentence.",
    }
    assert schema["properties"]["confidence"] == {
        "type": "string",
        "enum": ["low", "medium", "high"],
        "description": "How sure you are that this is the right tool.",
    }
    assert schema["additionalProperties"] is False
    # The wrapped tool's own definition is untouched.
    assert "inner_thought" not in get_weather.__tool_spec__.definition.input_schema["properties"]  # type: ignore[attr-defined]


def test_the_name_description_and_metadata_are_the_wrapped_tools() -> None:
    wrapper = augmented(lookup_order)
    assert wrapper.definition.name == "lookup_order"
    assert wrapper.definition.description == "Return an order's status, straight to the caller."
    assert wrapper.metadata.return_direct is True
    assert wrapper.metadata.requires_approval is True
    assert (
        repr(wrapper)
        == "<AugmentedToolCallback 'lookup_order' of <FunctionToolCallback 'lookup_order'>>"
    )


def test_strict_mode_schemas_stay_valid() -> None:
    strict = to_strict_json_schema(augmented().definition.input_schema)
    assert strict["required"] == list(strict["properties"])
    assert strict["additionalProperties"] is False
    assert strict["properties"]["inner_thought"] == {
        "type": "string",
        "description": "Why you call this tool, in one sentence.",
    }
    assert strict["properties"]["unit"]["anyOf"][-1] == {"type": "null"}


class Step(pydantic.BaseModel):
    action: str


class Plan(pydantic.BaseModel):
    steps: list[Step] = pydantic.Field(description="What you will do next.")


def test_nested_models_bring_their_definitions_along() -> None:
    [callback] = tool_callbacks(get_weather)
    wrapper = AugmentedToolCallback(callback, Plan, received.append)
    schema = wrapper.definition.input_schema
    assert schema["properties"]["steps"]["items"] == {"$ref": "#/$defs/Step"}
    assert schema["$defs"]["Step"]["properties"] == {"action": {"type": "string"}}
    strict = to_strict_json_schema(schema)
    assert strict["required"] == ["steps", "city", "unit"]
    wrapper.call(json.dumps({"steps": [{"action": "look"}], "city": "Oslo"}))
    assert received[0].values == Plan(steps=[Step(action="look")])


def test_clashing_definitions_are_refused() -> None:
    def other_plan() -> type[pydantic.BaseModel]:
        class Step(pydantic.BaseModel):  # another model under the same $defs name
            x: int

        class OtherPlan(pydantic.BaseModel):
            step: Step

        return OtherPlan

    @tool
    def uses_step(step: Step) -> str:
        """Do one step."""
        return step.action

    [callback] = tool_callbacks(uses_step)
    with pytest.raises(ToolDefinitionError) as caught:
        AugmentedToolCallback(callback, other_plan(), received.append)
    assert str(caught.value) == (
        "Tool 'uses_step': the augment type and the tool both define a schema named 'Step' "
        "($defs) differently; rename one of the models."
    )
    # The same model on both sides is no clash.
    AugmentedToolCallback(callback, Plan, received.append)


def test_the_consumer_gets_the_definition_the_values_and_the_raw_arguments() -> None:
    wrapper = augmented()
    raw = json.dumps({**THOUGHT, "city": "Oslo"})
    context = ToolContext({"user_id": 7})
    assert wrapper.call(raw, context) == "Sunny in Oslo"
    [event] = received
    assert event.tool_definition is get_weather.__tool_spec__.definition  # type: ignore[attr-defined]
    assert event.values == Thinking(**THOUGHT)
    assert event.raw_arguments == raw
    assert event.tool_context["user_id"] == 7


def test_the_augment_fields_are_removed_before_the_tool_runs() -> None:
    """The wrapped tool forbids unknown parameters: it would fail if they were left in."""
    augmented().call(json.dumps({**THOUGHT, "city": "Oslo", "unit": "f"}))
    assert ran == [{"city": "Oslo", "unit": "f"}]


def test_a_field_the_tool_declares_itself_is_kept_for_the_tool() -> None:
    wrapper = augmented(rate_answer)
    schema = wrapper.definition.input_schema
    assert list(schema["properties"]) == ["inner_thought", "answer", "confidence"]
    assert schema["properties"]["confidence"] == {"type": "string"}  # the tool's own schema
    wrapper.call(json.dumps({**THOUGHT, "answer": "42"}))
    assert ran == [{"answer": "42", "confidence": "high"}]
    assert received[0].values.confidence == "high"


def test_with_remove_extra_arguments_off_the_tool_sees_everything() -> None:
    seen: list[str] = []

    class Raw(ToolCallbackProvider):
        def tool_callbacks(self) -> list[Any]:
            [callback] = tool_callbacks(get_weather)

            class Echo(type(callback)):  # type: ignore[misc]
                def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
                    seen.append(tool_input)
                    return "ok"

            return [Echo(get_weather)]

    [wrapper] = AugmentedToolCallbackProvider(
        Raw(), Thinking, received.append, remove_extra_arguments=False
    ).tool_callbacks()
    raw = json.dumps({**THOUGHT, "city": "Oslo"})
    wrapper.call(raw)
    assert seen == [raw]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"city": "Oslo"},
            "Invalid arguments for tool 'get_weather':\n- inner_thought: Field required\n"
            "- confidence: Field required",
        ),
        (
            {**THOUGHT, "confidence": "certain", "city": "Oslo"},
            "Invalid arguments for tool 'get_weather':\n"
            "- confidence: Input should be 'low', 'medium' or 'high'",
        ),
        (
            {**THOUGHT, "inner_thought": 3, "city": "Oslo"},
            "Invalid arguments for tool 'get_weather':\n- inner_thought: Input should be a valid "
            "string",
        ),
    ],
)
def test_bad_augment_values_are_argument_errors_and_nothing_runs(
    arguments: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        augmented().call(json.dumps(arguments))
    assert str(caught.value) == expected
    assert received == [] and ran == []


def test_arguments_that_are_not_an_object_or_not_json_are_refused() -> None:
    wrapper = augmented()
    with pytest.raises(ToolArgumentsError, match="the arguments must be a JSON object"):
        wrapper.call("[1, 2]")
    with pytest.raises(ToolArgumentsError, match="not valid JSON"):
        wrapper.call("{oops")
    with pytest.raises(
        ToolArgumentsError, match=re.escape("the key 'city' appears more than once")
    ):
        wrapper.call('{"inner_thought": "x", "confidence": "low", "city": "A", "city": "B"}')
    assert ran == []


def test_the_wrapped_tool_still_checks_its_own_arguments() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        augmented().call(json.dumps({**THOUGHT, "city": 5}))
    assert str(caught.value) == (
        "Invalid arguments for tool 'get_weather':\n- city: Input should be a valid string"
    )
    assert len(received) == 1  # the consumer saw the call the model tried


def test_a_failing_consumer_stops_the_tool() -> None:
    def broken(event: AugmentedArguments[Any]) -> None:
        raise RuntimeError("audit store down")

    [callback] = tool_callbacks(get_weather)
    wrapper = AugmentedToolCallback(callback, Thinking, broken)
    with pytest.raises(ToolExecutionException, match="audit store down"):
        wrapper.call(json.dumps({**THOUGHT, "city": "Oslo"}))
    assert ran == []


def test_the_async_path_does_the_same() -> None:
    result = asyncio.run(augmented().acall(json.dumps({**THOUGHT, "city": "Oslo"})))
    assert result == "Sunny in Oslo"
    assert ran == [{"city": "Oslo", "unit": "c"}]
    assert received[0].values.confidence == "high"


def test_the_augment_type_must_be_an_object_with_fields() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        AugmentedToolCallbackProvider([get_weather], int, received.append)
    assert str(caught.value) == (
        "Augment type 'int' must be an object type with fields (a pydantic model, dataclass "
        "or TypedDict)."
    )


def test_the_provider_wraps_providers_functions_and_lists_once() -> None:
    provider = AugmentedToolCallbackProvider([get_weather, lookup_order], Thinking, received.append)
    first = provider.tool_callbacks()
    assert [c.definition.name for c in first] == ["get_weather", "lookup_order"]
    assert all(isinstance(c, AugmentedToolCallback) for c in first)
    assert provider.tool_callbacks() == first  # the same wrappers: merged once
    nested = AugmentedToolCallbackProvider(provider, Thinking, received.append)
    [inner, _] = nested.tool_callbacks()
    assert list(inner.definition.input_schema["properties"])[:2] == ["inner_thought", "confidence"]


def test_a_turn_with_augmented_tools_records_why_the_model_called_them() -> None:
    provider = AugmentedToolCallbackProvider([get_weather, lookup_order], Thinking, received.append)
    model = ScriptedChatModel([tool_call("get_weather", **THOUGHT, city="Oslo"), text("Sunny.")])
    assert ChatClient.create(model).prompt("Weather?").tools(provider).call().content() == "Sunny."
    assert [e.values.inner_thought for e in received] == ["The user asked for the weather."]
    last = model.requests[1].messages[-1]
    assert isinstance(last, ToolResponseMessage)
    assert last.responses[0].response_data == "Sunny in Oslo"


def test_return_direct_is_kept_through_the_wrapper() -> None:
    provider = AugmentedToolCallbackProvider([lookup_order], Thinking, received.append)
    model = ScriptedChatModel([tool_call("lookup_order", **THOUGHT, order_id="A1")])
    response = ChatClient.create(model).prompt("Order A1?").tools(provider).call().chat_response()
    assert response is not None and response.result is not None
    assert response.result.finish_reason == ToolExecutionResult.FINISH_REASON
    assert response.result.output.text == "Order A1: shipped"


def test_a_bad_augmented_call_in_a_turn_is_an_error_response_the_model_can_fix() -> None:
    provider = AugmentedToolCallbackProvider([get_weather], Thinking, received.append)
    model = ScriptedChatModel(
        [
            tool_call("get_weather", city="Oslo"),
            tool_call("get_weather", **THOUGHT, city="Oslo"),
            text("Sunny."),
        ]
    )
    ChatClient.create(model).prompt("Weather?").tools(provider).call()
    last = model.requests[1].messages[-1]
    assert isinstance(last, ToolResponseMessage)
    assert last.responses[0].is_error is True
    assert last.responses[0].response_data.startswith("Invalid arguments for tool 'get_weather'")
    assert ran == [{"city": "Oslo", "unit": "c"}]


def test_augmented_tools_behind_tool_search() -> None:
    provider = AugmentedToolCallbackProvider([get_weather, lookup_order], Thinking, received.append)
    model = ScriptedChatModel(
        [
            tool_call("tool_search", query="weather", max_results=1),
            tool_call("get_weather", **THOUGHT, city="Oslo"),
            text("Sunny."),
        ]
    )
    client = ChatClient.create(model)
    reply = client.prompt("?").tools(provider).advisors(ToolSearchToolCallingAdvisor()).call()
    assert reply.content() == "Sunny."
    options = model.requests[1].options
    found = [c for c in options.tool_callbacks if c.definition.name == "get_weather"]  # type: ignore[union-attr]
    assert "inner_thought" in found[0].definition.input_schema["properties"]
    assert received[0].values == Thinking(**THOUGHT)


def test_split_gives_the_values_and_the_tools_input_without_calling_the_consumer() -> None:
    wrapper = augmented()
    raw = json.dumps({**THOUGHT, "city": "Oslo"})
    event, delegated = wrapper.split(raw, ToolContext({"conversation_id": "c1"}))
    assert event.values == Thinking(**THOUGHT)
    assert event.raw_arguments == raw
    assert event.tool_context["conversation_id"] == "c1"
    assert json.loads(delegated) == {"city": "Oslo"}
    assert received == [] and ran == []


def test_validating_checks_the_augmented_fields_then_the_tools_own_without_running() -> None:
    callback = AugmentedToolCallback(tool_callbacks(get_weather)[0], Thinking, received.append)
    good = {"inner_thought": "asked", "confidence": "high", "city": "Oslo"}
    callback.validate_arguments(json.dumps(good))
    with pytest.raises(ToolArgumentsError, match="confidence"):
        callback.validate_arguments(json.dumps({**good, "confidence": "sure"}))
    with pytest.raises(ToolArgumentsError, match="unit: Input should be 'c' or 'f'"):
        callback.validate_arguments(json.dumps({**good, "unit": "k"}))
    assert received == [] and ran == []
