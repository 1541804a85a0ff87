"""ToolCallback, FunctionToolCallback, ToolContext, tool_callbacks() and providers.

No ``from __future__ import annotations`` here: some tools use types local to a test.
"""

import asyncio
import dataclasses
import re
import sys
import threading
import types
from typing import Annotated, Any

import pydantic
import pytest
from typing_extensions import TypedDict

from tool_calling import (
    FunctionToolCallback,
    ToolCallback,
    ToolCallbackProvider,
    ToolContext,
    ToolDefinition,
    ToolDefinitionError,
    ToolExecutionException,
    ToolMetadata,
    ToolParam,
    tool,
    tool_callbacks,
)
from tool_calling.core.tools.decorator import get_spec
from tool_calling.exceptions import ToolArgumentsError

MODULE = __name__


# -- FunctionToolCallback over functions --------------------------------------------------------


def test_plain_function_without_decorator() -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    callback = FunctionToolCallback(add)
    assert callback.definition == ToolDefinition(
        "add",
        "Add two integers.",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    )
    assert callback.metadata == ToolMetadata(return_direct=False)
    assert callback.name == "add"
    assert callback.call('{"a": 2, "b": 3}') == "5"
    assert callback.function is add
    assert repr(callback) == "<FunctionToolCallback 'add'>"


def test_decorated_function_reuses_its_spec() -> None:
    @tool(name="plus", return_direct=True)
    def add(a: int, b: int) -> int:
        return a + b

    callback = FunctionToolCallback(add)
    assert callback.definition is get_spec(add).definition  # type: ignore[union-attr]
    assert callback.metadata.return_direct is True


def test_overrides_on_a_decorated_function_keep_the_rest() -> None:
    @tool(name="plus", description="Adds.", return_direct=True)
    def add(a: int, b: int) -> int:
        return a + b

    renamed = FunctionToolCallback(add, name="sum")
    assert (renamed.definition.name, renamed.definition.description) == ("sum", "Adds.")
    assert renamed.metadata.return_direct is True
    described = FunctionToolCallback(add, description="Sums.")
    assert (described.definition.name, described.definition.description) == ("plus", "Sums.")
    assert described.definition.input_schema == get_spec(add).definition.input_schema  # type: ignore[union-attr]


def test_return_direct_option() -> None:
    def answer() -> str:
        return "42"

    assert FunctionToolCallback(answer, return_direct=True).metadata.return_direct is True


def test_bad_arguments_raise_tool_arguments_error_without_calling() -> None:
    calls: list[int] = []

    def add(a: int) -> int:
        calls.append(a)
        return a

    callback = FunctionToolCallback(add)
    message = "Invalid arguments for tool 'add':\n- a: Input should be a valid integer"
    with pytest.raises(ToolArgumentsError, match=re.escape(message)) as info:
        callback.call('{"a": "one"}')
    assert info.value.tool_name == "add"
    assert calls == []


def test_a_raising_function_becomes_tool_execution_exception() -> None:
    def boom() -> str:
        raise KeyError("missing")

    callback = FunctionToolCallback(boom)
    with pytest.raises(ToolExecutionException) as info:
        callback.call("{}")
    assert info.value.tool_definition is callback.definition
    assert isinstance(info.value.cause, KeyError)
    assert info.value.__cause__ is info.value.cause
    assert str(info.value) == "'missing'"


# -- methods ---------------------------------------------------------------------------------


class Counter:
    """Tools on an instance, a class and static methods."""

    prefix = "n="

    def __init__(self, start: int) -> None:
        self.value = start

    @tool
    def increment(self, by: int = 1) -> int:
        """Increment the counter."""
        self.value += by
        return self.value

    @tool
    @staticmethod
    def double(x: int) -> int:
        """Double x."""
        return x * 2

    @tool
    @classmethod
    def describe(cls, n: int) -> str:
        """Describe n."""
        return f"{cls.prefix}{n}"

    def helper(self) -> None:
        """Not a tool."""


def test_bound_method() -> None:
    counter = Counter(10)
    callback = FunctionToolCallback(counter.increment)
    assert list(callback.definition.input_schema["properties"]) == ["by"]
    assert callback.call('{"by": 5}') == "15"
    assert callback.call("{}") == "16"
    assert counter.value == 16


def test_bound_method_of_an_undecorated_class() -> None:
    class Greeter:
        def __init__(self, greeting: str) -> None:
            self.greeting = greeting

        def greet(self, name: str) -> str:
            return f"{self.greeting}, {name}"

    callback = FunctionToolCallback(Greeter("Hello").greet)
    assert list(callback.definition.input_schema["properties"]) == ["name"]
    assert callback.call('{"name": "Ada"}') == "Hello, Ada"


def test_unbound_instance_method_is_rejected() -> None:
    message = (
        f"Tool 'increment' ({MODULE}.Counter.increment) is an instance method; pass an instance "
        "(tool_callbacks(obj)) or a bound method (obj.method)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        FunctionToolCallback(Counter.increment)


def test_static_and_class_methods() -> None:
    assert FunctionToolCallback(Counter.double).call('{"x": 4}') == "8"
    assert FunctionToolCallback(Counter.describe).call('{"n": 4}') == '"n=4"'.strip('"')


def test_tool_callbacks_of_a_class_are_its_static_and_class_methods() -> None:
    callbacks = tool_callbacks(Counter)
    assert [cb.definition.name for cb in callbacks] == ["double", "describe"]
    assert [cb.call('{"x": 3}' if cb.name == "double" else '{"n": 3}') for cb in callbacks] == [
        "6",
        "n=3",
    ]


def test_tool_callbacks_of_an_instance_are_all_its_tools_in_order() -> None:
    counter = Counter(0)
    callbacks = tool_callbacks(counter)
    assert [cb.definition.name for cb in callbacks] == ["increment", "double", "describe"]
    callbacks[0].call('{"by": 2}')
    assert counter.value == 2


def test_inherited_tools_and_overrides() -> None:
    class Child(Counter):
        @tool
        def reset(self) -> str:
            """Reset."""
            self.value = 0
            return "reset"

        def double(self, x: int) -> int:  # type: ignore[override]  # overridden by a non-tool
            return x

    assert [cb.definition.name for cb in tool_callbacks(Child(1))] == [
        "increment",
        "describe",
        "reset",
    ]


def test_class_with_only_instance_tools_needs_an_instance() -> None:
    class OnlyInstance:
        @tool
        def a(self) -> str:
            return "a"

        @tool
        def b(self) -> str:
            return "b"

    message = (
        "test_class_with_only_instance_tools_needs_an_instance.<locals>.OnlyInstance has no @tool "
        "static or class methods; its @tool methods (a, b) are instance methods, so pass an "
        "instance of test_class_with_only_instance_tools_needs_an_instance.<locals>.OnlyInstance"
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        tool_callbacks(OnlyInstance)
    assert [cb.call("{}") for cb in tool_callbacks(OnlyInstance())] == ["a", "b"]


def test_object_without_tools_is_a_type_error() -> None:
    message = (
        "object object has no @tool methods; pass @tool functions, modules, classes, instances, "
        "ToolCallbacks or ToolCallbackProviders"
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        tool_callbacks(object())


# -- async -----------------------------------------------------------------------------------


@tool
async def slow_echo(text: str) -> str:
    """Echo after yielding to the loop."""
    await asyncio.sleep(0)
    return text


def test_async_function_called_synchronously() -> None:
    callback = FunctionToolCallback(slow_echo)
    assert callback.is_async is True
    assert callback.call('{"text": "hi"}') == "hi"


def test_async_function_called_from_a_thread_that_runs_a_loop() -> None:
    """Sync ``call`` works even where the caller's own thread already runs an event loop."""
    callback = FunctionToolCallback(slow_echo)

    async def main() -> str:
        return callback.call('{"text": "inside"}')

    assert asyncio.run(main()) == "inside"


def test_acall_awaits_async_and_threads_sync() -> None:
    threads: list[int] = []

    def sync_tool() -> str:
        threads.append(threading.get_ident())
        return "sync"

    async def main() -> list[str]:
        return [
            await FunctionToolCallback(slow_echo).acall('{"text": "async"}'),
            await FunctionToolCallback(sync_tool).acall("{}"),
        ]

    assert asyncio.run(main()) == ["async", "sync"]
    assert threads != [threading.get_ident()]  # the sync tool ran in a worker thread


def test_async_function_raising() -> None:
    async def fails() -> str:
        raise RuntimeError("async boom")

    callback = FunctionToolCallback(fails)
    with pytest.raises(ToolExecutionException, match="async boom"):
        callback.call("{}")
    with pytest.raises(ToolExecutionException, match="async boom"):
        asyncio.run(callback.acall("{}"))


def test_async_bad_arguments_in_acall() -> None:
    with pytest.raises(ToolArgumentsError):
        asyncio.run(FunctionToolCallback(slow_echo).acall('{"text": 1}'))


def test_abstract_callback_acall_defaults_to_call() -> None:
    class Echo(ToolCallback):
        @property
        def definition(self) -> ToolDefinition:
            return ToolDefinition("echo", "Echo.", {"type": "object"})

        def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
            return f"{tool_input}|{dict(tool_context or {})}"

    echo = Echo()
    assert echo.metadata == ToolMetadata()
    assert asyncio.run(echo.acall("{}", ToolContext({"k": 1}))) == "{}|{'k': 1}"


def test_tool_callback_needs_definition_and_call() -> None:
    class Incomplete(ToolCallback):
        pass

    with pytest.raises(TypeError):
        Incomplete()  # type: ignore[abstract]


# -- lambdas with an input type --------------------------------------------------------------


class Order(pydantic.BaseModel):
    item: str
    quantity: int = 1


@dataclasses.dataclass
class OrderData:
    item: str
    quantity: int = 1


class OrderDict(TypedDict):
    item: str
    quantity: int


@pytest.mark.parametrize("input_type", [Order, OrderData, OrderDict])
def test_lambda_with_input_type_gets_one_instance(input_type: Any) -> None:
    received: list[Any] = []
    callback = FunctionToolCallback(
        lambda order: received.append(order) or "ok",
        name="place_order",
        description="Place an order.",
        input_type=input_type,
    )
    schema = callback.definition.input_schema
    assert schema["type"] == "object"
    assert list(schema["properties"]) == ["item", "quantity"]
    assert schema["additionalProperties"] is False
    assert callback.call('{"item": "tea", "quantity": 2}') == "ok"
    (order,) = received
    if input_type is OrderDict:
        assert order == {"item": "tea", "quantity": 2}
    else:
        assert isinstance(order, input_type)
        assert (order.item, order.quantity) == ("tea", 2)


@pytest.mark.parametrize("input_type", [Order, OrderData, OrderDict])
def test_lambda_input_type_rejects_unknown_keys_and_wrong_types(input_type: Any) -> None:
    callback = FunctionToolCallback(lambda order: "ok", name="place_order", input_type=input_type)
    with pytest.raises(ToolArgumentsError, match="- extra: Unknown parameter; remove it"):
        callback.call('{"item": "tea", "quantity": 2, "extra": 1}')
    with pytest.raises(ToolArgumentsError, match="- quantity: Input should be a valid integer"):
        callback.call('{"item": "tea", "quantity": "2"}')


def test_lambda_input_type_with_tool_context_as_second_argument() -> None:
    callback = FunctionToolCallback(
        lambda order, ctx: f"{order.item} for {ctx['tenant']}", name="order", input_type=Order
    )
    assert "ctx" not in callback.definition.input_schema["properties"]
    assert callback.call('{"item": "tea"}', ToolContext({"tenant": "acme"})) == "tea for acme"


def test_lambda_without_input_type_or_name_is_rejected() -> None:
    message = (
        f"Invalid tool name '<lambda>' (defined by {MODULE}."
        "test_lambda_without_input_type_or_name_is_rejected.<locals>.<lambda>): "
        "a tool name must be 1-64 characters of letters, digits, '_', '.' or '-'."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        FunctionToolCallback(lambda order: "ok", input_type=Order)


def test_lambda_without_input_type_has_unannotated_parameters() -> None:
    with pytest.raises(ToolDefinitionError, match="parameter 'x' has no type annotation; add one"):
        FunctionToolCallback(lambda x: x, name="identity")


def test_input_type_must_be_an_object_type() -> None:
    message = (
        "Tool 'n' (input type int): the input type must be an object type (a pydantic model, "
        "dataclass or TypedDict)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        FunctionToolCallback(lambda n: n, name="n", input_type=int)


# -- ToolContext -------------------------------------------------------------------------------


def test_tool_context_is_injected_and_never_in_the_schema() -> None:
    """S5: server-bound data reaches the tool without ever being described to the model."""
    seen: list[Any] = []

    @tool
    def whoami(greeting: str, ctx: ToolContext) -> str:
        seen.append(ctx)
        return f"{greeting} {ctx['user_id']}"

    callback = FunctionToolCallback(whoami)
    assert list(callback.definition.input_schema["properties"]) == ["greeting"]
    assert callback.call('{"greeting": "hi"}', ToolContext({"user_id": 7})) == "hi 7"
    assert isinstance(seen[0], ToolContext)


def test_the_model_cannot_supply_the_context_parameter() -> None:
    """S5: arguments naming the context parameter are unknown keys, rejected before the call."""
    calls: list[Any] = []

    @tool
    def whoami(ctx: ToolContext) -> str:
        calls.append(ctx)
        return str(ctx.get("user_id"))

    callback = FunctionToolCallback(whoami)
    message = "Invalid arguments for tool 'whoami':\n- ctx: Unknown parameter; remove it"
    with pytest.raises(ToolArgumentsError, match=re.escape(message)):
        callback.call('{"ctx": {"user_id": 1}}', ToolContext({"user_id": 2}))
    with pytest.raises(ToolArgumentsError, match="- user_id: Unknown parameter; remove it"):
        callback.call('{"user_id": 1}', ToolContext({"user_id": 2}))
    assert calls == []
    assert callback.call("{}", ToolContext({"user_id": 2})) == "2"


def test_missing_context_is_an_empty_context() -> None:
    @tool
    def peek(ctx: ToolContext | None = None) -> str:
        assert isinstance(ctx, ToolContext)
        return str(len(ctx))

    assert FunctionToolCallback(peek).call("{}") == "0"


def test_tool_context_is_read_only() -> None:
    source = {"tenant_id": "acme", "nested": {"a": 1}}
    ctx = ToolContext(source)
    assert ctx["tenant_id"] == "acme"
    assert ctx.context["tenant_id"] == "acme"
    assert dict(ctx) == source
    assert len(ctx) == 2
    with pytest.raises(TypeError, match="ToolContext is read-only"):
        ctx["tenant_id"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError, match="ToolContext is read-only"):
        del ctx["tenant_id"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="ToolContext is read-only"):
        ctx.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="ToolContext is read-only"):
        del ctx.context  # type: ignore[misc]
    with pytest.raises(TypeError):
        ctx.context["tenant_id"] = "other"  # type: ignore[index]
    source["tenant_id"] = "changed later"
    assert ctx["tenant_id"] == "acme"  # a copy, not a view of the caller's dict


def test_tool_context_keywords_and_repr_hides_values() -> None:
    ctx = ToolContext({"api_key": "sk-secret"}, user=3)
    assert dict(ctx) == {"api_key": "sk-secret", "user": 3}
    assert repr(ctx) == "ToolContext(keys=['api_key', 'user'])"
    assert "sk-secret" not in repr(ctx)


# -- tool_callbacks(): modules, providers, lists, duplicates -----------------------------------


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__["__name__"] = name
    sys.modules[name] = module
    try:
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


WEATHER_TOOLS = '''
from tool_calling import tool

@tool
def forecast(city: str) -> str:
    """Forecast."""
    return "sun in " + city

def not_a_tool(city: str) -> str:
    return city

@tool(name="weather.alerts")
def alerts() -> list:
    return []

class Helper:
    @tool
    @staticmethod
    def inner() -> str:
        return ""
'''


def test_tool_callbacks_of_a_module_in_definition_order() -> None:
    module = _module("weather_tools", WEATHER_TOOLS)
    callbacks = tool_callbacks(module)
    assert [cb.definition.name for cb in callbacks] == ["forecast", "weather.alerts"]
    assert callbacks[0].call('{"city": "Oslo"}') == "sun in Oslo"
    assert callbacks[1].call("{}") == "[]"


def test_tool_callbacks_of_callbacks_providers_functions_and_lists() -> None:
    @tool
    def a() -> str:
        return "a"

    @tool
    def b() -> str:
        return "b"

    c = FunctionToolCallback(lambda x: "c", name="c", input_type=Order)

    class Provider(ToolCallbackProvider):
        def tool_callbacks(self) -> list[ToolCallback]:
            return [FunctionToolCallback(lambda x: "d", name="d", input_type=Order)]

    callbacks = tool_callbacks(a, [b, (c,)], Provider(), Counter(0))
    assert [cb.definition.name for cb in callbacks] == [
        "a",
        "b",
        "c",
        "d",
        "increment",
        "double",
        "describe",
    ]
    assert callbacks[2] is c


def test_tool_callback_provider_is_abstract() -> None:
    with pytest.raises(TypeError):
        ToolCallbackProvider()  # type: ignore[abstract]


def test_duplicate_names_raise_naming_both() -> None:
    """S19: two tools under one name are an error that names both origins."""

    @tool(name="lookup")
    def first() -> str:
        return "1"

    @tool(name="lookup")
    def second() -> str:
        return "2"

    origin = f"{MODULE}.test_duplicate_names_raise_naming_both.<locals>"
    message = (
        f"Duplicate tool name 'lookup': {origin}.first and {origin}.second. "
        "Tool names must be unique; rename one with @tool(name=...)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)) as info:
        tool_callbacks(first, second)
    assert isinstance(info.value, ValueError)


def test_names_differing_only_in_case_are_duplicates() -> None:
    """S19: ``add`` and ``Add`` side by side invite the model to run the wrong one."""

    @tool(name="add")
    def lower() -> str:
        return ""

    @tool(name="Add")
    def upper() -> str:
        return ""

    origin = f"{MODULE}.test_names_differing_only_in_case_are_duplicates.<locals>"
    message = (
        f"Tool names 'add' and 'Add' differ only in case: {origin}.lower and {origin}.upper. "
        "Tool names must be unique; rename one with @tool(name=...)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool_callbacks(lower, upper)


def test_duplicate_between_module_and_callback_names_the_callback() -> None:
    module = _module("weather_tools", WEATHER_TOOLS)
    other = FunctionToolCallback(lambda o: "", name="forecast", input_type=Order)
    message = (
        "Duplicate tool name 'forecast': weather_tools.forecast and "
        f"{MODULE}.test_duplicate_between_module_and_callback_names_the_callback.<locals>.<lambda>."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool_callbacks(module, other)


def test_tool_param_and_annotated_types_in_callbacks() -> None:
    def greet(name: Annotated[str, ToolParam("Who to greet")]) -> str:
        return f"hi {name}"

    callback = FunctionToolCallback(greet)
    assert callback.definition.input_schema["properties"]["name"] == {
        "type": "string",
        "description": "Who to greet",
    }
    assert callback.call('{"name": "Bo"}') == "hi Bo"


# -- validate_arguments on every tool, and the wrappers' base ------------------------------------


class _Remote(ToolCallback):
    """A tool with only a schema (no function): the base class's check applies."""

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            "remote",
            "A remote tool.",
            {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        )

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        return f"remote {tool_input}"


def test_every_tool_validates_its_arguments_without_running() -> None:
    remote = _Remote()
    remote.validate_arguments('{"city": "Oslo"}')
    with pytest.raises(ToolArgumentsError) as raised:
        remote.validate_arguments('{"town": "Oslo"}')
    assert str(raised.value) == (
        "Invalid arguments for tool 'remote':\n- city: Field required\n"
        "- town: Unknown parameter; remove it"
    )
    with pytest.raises(ToolArgumentsError, match="must be a JSON object"):
        remote.validate_arguments("[1]")
    assert remote.function is None


@tool
def _greet(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"


def test_a_wrapper_forwards_everything_it_does_not_change() -> None:
    from tool_calling.core.tools.callback import DelegatingToolCallback

    class Direct(DelegatingToolCallback):
        @property
        def metadata(self) -> ToolMetadata:
            return ToolMetadata(return_direct=True)

    inner = FunctionToolCallback(_greet)
    wrapper = Direct(inner)
    assert wrapper.delegate is inner
    assert (wrapper.definition, wrapper.name, wrapper.function) == (
        inner.definition,
        "_greet",
        _greet,
    )
    assert wrapper.metadata.return_direct and not inner.metadata.return_direct
    assert wrapper.call('{"name": "Ada"}') == "hello Ada"
    assert asyncio.run(wrapper.acall('{"name": "Ada"}')) == "hello Ada"
    # The wrapped tool's own check, its types included (the base class's would pass this).
    with pytest.raises(ToolArgumentsError, match="name: Input should be a valid string"):
        wrapper.validate_arguments('{"name": 5}')
    assert repr(wrapper) == "<Direct '_greet' of <FunctionToolCallback '_greet'>>"
