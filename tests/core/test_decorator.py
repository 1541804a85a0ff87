"""The @tool decorator: defaults, options, eager validation, and a spec built once.

No ``from __future__ import annotations`` here: the tools below use types local to the tests.
"""

import asyncio
import concurrent.futures
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

import pydantic
import pytest

from tool_calling import (
    DefaultToolCallingManager,
    FunctionToolCallback,
    ToolCallResultConverter,
    ToolContext,
    ToolDefinition,
    ToolDefinitionError,
    ToolParam,
    tool,
    tool_callbacks,
)
from tool_calling.core.tools import decorator as decorator_module
from tool_calling.core.tools.decorator import get_spec

from ._builders import call, prompt_with, run, texts

MODULE = __name__


def schema_of(function: Callable[..., Any]) -> dict[str, Any]:
    spec = get_spec(function)
    assert spec is not None
    return spec.definition.input_schema


def definition_of(function: Callable[..., Any]) -> ToolDefinition:
    spec = get_spec(function)
    assert spec is not None
    return spec.definition


# -- the decorator returns the function ------------------------------------------------------


def test_bare_decorator_returns_the_function_unchanged() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    decorated = tool(add)
    assert decorated is add
    assert add(2, 3) == 5


def test_called_decorator_returns_the_function_unchanged() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assert tool(name="plus")(add) is add
    assert add(1, 1) == 2


def test_async_function_stays_a_coroutine_function() -> None:
    @tool
    async def fetch(n: int) -> int:
        return n

    assert asyncio.run(fetch(4)) == 4
    assert get_spec(fetch).is_async is True  # type: ignore[union-attr]


def test_decorating_registers_nothing() -> None:
    """Autodiscovery registers tools; the decorator only marks the function."""
    from tool_calling.registry import registry

    before = list(registry)

    @tool(name="never_registered")
    def f() -> str:
        return ""

    assert list(registry) == before
    assert "never_registered" not in registry


def test_undecorated_function_has_no_spec() -> None:
    def plain() -> None: ...

    assert get_spec(plain) is None


# -- names and descriptions ----------------------------------------------------------------


def test_name_defaults_to_the_function_name() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Return the weather."""
        return city

    assert definition_of(get_weather).name == "get_weather"


def test_description_defaults_to_the_docstring_summary() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Return the current weather
        for a city.

        Args:
            city: The city.
        """
        return city

    assert definition_of(get_weather).description == "Return the current weather for a city."


def test_description_without_docstring_is_the_name_with_spaces() -> None:
    @tool
    def get_current_weather(city: str) -> str:
        return city

    assert definition_of(get_current_weather).description == "get current weather"


def test_explicit_name_and_description_win() -> None:
    @tool(name="weather.now", description="Weather right now.")
    def get_weather(city: str) -> str:
        """Docstring summary."""
        return city

    definition = definition_of(get_weather)
    assert (definition.name, definition.description) == ("weather.now", "Weather right now.")


def test_return_direct_becomes_metadata() -> None:
    @tool(return_direct=True)
    def answer() -> str:
        return "42"

    @tool
    def ask() -> str:
        return "?"

    assert FunctionToolCallback(answer).metadata.return_direct is True
    assert FunctionToolCallback(ask).metadata.return_direct is False


@pytest.mark.parametrize(
    "name", ["a", "A-b_c.d", "x" * 64, "get_weather", "v1.search-web", "0_starts_with_digit"]
)
def test_valid_names(name: str) -> None:
    @tool(name=name)
    def f() -> str:
        return ""

    assert definition_of(f).name == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 65,
        "bad name",
        "add ",
        "аdd",  # Cyrillic а
        "semi;colon",
        "slash/name",
        "new\nline",
        "zero\u200bwidth",
        "émoji",
    ],
)
def test_invalid_names_are_rejected_naming_the_tool_and_the_rule(name: str) -> None:
    """S19: a name outside 1-64 characters of [A-Za-z0-9_.-] is a ToolDefinitionError."""

    def f() -> str:
        return ""

    message = (
        f"Invalid tool name {name!r} (defined by {MODULE}."
        "test_invalid_names_are_rejected_naming_the_tool_and_the_rule.<locals>.f): "
        "a tool name must be 1-64 characters of letters, digits, '_', '.' or '-'."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(name=name)(f)
    assert get_spec(f) is None


def test_tool_definition_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        tool(name="bad name")(lambda: None)


def test_description_with_invisible_characters_is_rejected() -> None:
    """S19: zero-width and bidi-override characters could hide text from reviewers."""

    def f() -> str:
        return ""

    message = (
        "Tool 'f': the description contains the invisible character U+200B (ZERO WIDTH SPACE) "
        "at position 3; remove it."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(description="Add\u200b numbers")(f)
    message = (
        "Tool 'f': the description contains the invisible character U+202E "
        "(RIGHT-TO-LEFT OVERRIDE) at position 0; remove it."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(description="\u202eevil")(f)


def test_description_may_have_newlines_and_tabs() -> None:
    @tool(description="Line one.\n\tLine two.")
    def f() -> str:
        return ""

    assert definition_of(f).description == "Line one.\n\tLine two."


# -- parameters: required, descriptions ------------------------------------------------------


def test_parameter_required_unless_default_optional_or_tool_param_says_so() -> None:
    @tool
    def f(
        a: int,
        b: int = 1,
        c: int | None = None,
        d: Annotated[int, ToolParam("d", required=False)] = 0,
        e: Annotated[str | None, ToolParam("e", required=True)] = None,
        f_: Annotated[int, ToolParam(required=False)] = 2,
    ) -> str:
        return ""

    schema = schema_of(f)
    assert list(schema["properties"]) == ["a", "b", "c", "d", "e", "f_"]
    assert schema["required"] == ["a", "e"]


def test_optional_without_default_is_optional() -> None:
    @tool
    def f(a: int | None, b: "int | None") -> str:  # noqa: UP037 - a string annotation too
        return ""

    assert schema_of(f)["required"] == []


def test_descriptions_from_tool_param_field_and_docstring() -> None:
    @tool
    def f(
        a: Annotated[str, ToolParam("from ToolParam")],
        b: Annotated[str, pydantic.Field(description="from Field")],
        c: str,
        d: Annotated[str, ToolParam("ToolParam wins")],
        e: str,
    ) -> str:
        """Summary.

        Args:
            c: from the docstring,
                continued on the next line.
            d: loses to ToolParam
            e (str): typed in the docstring
        """
        return ""

    props = schema_of(f)["properties"]
    assert props["a"] == {"type": "string", "description": "from ToolParam"}
    assert props["b"] == {"type": "string", "description": "from Field"}
    assert props["c"] == {
        "type": "string",
        "description": "from the docstring, continued on the next line.",
    }
    assert props["d"]["description"] == "ToolParam wins"
    assert props["e"]["description"] == "typed in the docstring"


def test_sphinx_docstring_parameters() -> None:
    @tool
    def f(city: str) -> str:
        """Look up a city.

        :param city: the city name
        """
        return city

    assert definition_of(f).description == "Look up a city."
    assert schema_of(f)["properties"]["city"]["description"] == "the city name"


def test_parameter_without_description_has_none() -> None:
    @tool
    def f(a: int) -> str:
        return ""

    assert schema_of(f)["properties"]["a"] == {"type": "integer"}


def test_tool_context_parameter_is_not_in_the_schema() -> None:
    @tool
    def f(city: str, ctx: ToolContext) -> str:
        return ""

    @tool
    def g(ctx: ToolContext | None = None) -> str:
        return ""

    assert list(schema_of(f)["properties"]) == ["city"]
    assert schema_of(f)["required"] == ["city"]
    assert schema_of(g) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


# -- methods ---------------------------------------------------------------------------------


class Calculator:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    @tool
    def shift(self, value: int) -> int:
        """Add the offset."""
        return value + self.offset

    @tool
    @staticmethod
    def double(value: int) -> int:
        """Double a value."""
        return value * 2

    @tool
    @classmethod
    def kind(cls, upper: bool = False) -> str:
        """Name the class."""
        return cls.__name__.upper() if upper else cls.__name__


def test_self_and_cls_are_not_in_the_schema() -> None:
    assert list(schema_of(Calculator.shift)["properties"]) == ["value"]
    assert list(schema_of(Calculator.kind)["properties"]) == ["upper"]
    assert list(schema_of(Calculator.double)["properties"]) == ["value"]


def test_decorated_methods_still_work_as_methods() -> None:
    assert Calculator(10).shift(1) == 11
    assert Calculator.double(4) == 8
    assert Calculator.kind() == "Calculator"
    assert isinstance(vars(Calculator)["double"], staticmethod)
    assert isinstance(vars(Calculator)["kind"], classmethod)


# -- result converters -----------------------------------------------------------------------


def test_result_converter_callable_and_subclass() -> None:
    class Upper(ToolCallResultConverter):
        def convert(self, result: Any, return_type: Any) -> str:
            return str(result).upper()

    @tool(result_converter=Upper())
    def a() -> str:
        return "quiet"

    @tool(result_converter=lambda result, return_type: f"<{result}:{return_type.__name__}>")
    def b() -> int:
        return 7

    assert FunctionToolCallback(a).call("{}") == "QUIET"
    assert FunctionToolCallback(b).call("{}") == "<7:int>"


def test_result_converter_must_be_callable() -> None:
    def f() -> str:
        return ""

    message = (
        f"Tool 'f' ({MODULE}.test_result_converter_must_be_callable.<locals>.f): "
        "result_converter must be a ToolCallResultConverter or a callable "
        "(result, return_type) -> str, got int."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(result_converter=3)(f)  # type: ignore[call-overload]


def test_decorating_something_that_is_not_callable() -> None:
    with pytest.raises(ToolDefinitionError, match=re.escape("@tool needs a function, got int")):
        tool(3)  # type: ignore[call-overload]


# -- unsupported signatures ------------------------------------------------------------------


def _origin(test: str, name: str = "f") -> str:
    return f"{MODULE}.{test}.<locals>.{name}"


def test_generator_function_is_rejected() -> None:
    def f() -> Iterator[int]:
        yield 1

    message = (
        f"Tool 'f' ({_origin('test_generator_function_is_rejected')}): generator functions are "
        "not supported; return a list or a str instead."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(f)


def test_async_generator_function_is_rejected() -> None:
    async def f() -> AsyncIterator[int]:
        yield 1

    message = (
        f"Tool 'f' ({_origin('test_async_generator_function_is_rejected')}): generator functions "
        "are not supported; return a list or a str instead."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(f)


def test_unsupported_return_types_are_rejected() -> None:
    def f() -> Iterator[int]:
        return iter([1])

    message = (
        f"Tool 'f' ({_origin('test_unsupported_return_types_are_rejected')}): unsupported return "
        "type (an iterator); return a str or a JSON-serialisable value."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(f)

    async def g() -> asyncio.Future[int]:
        return asyncio.get_running_loop().create_future()

    message = (
        f"Tool 'g' ({_origin('test_unsupported_return_types_are_rejected', 'g')}): unsupported "
        "return type (a future); return a str or a JSON-serialisable value."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(g)


def test_every_unsupported_parameter_is_named_in_one_message() -> None:
    """All problems of one definition are collected and raised once."""

    def f(  # noqa: ANN001 - an unannotated parameter on purpose
        callback: Callable[[int], int],
        items: Iterator[int],
        future: concurrent.futures.Future[int],
        nested: list[Callable[[], int]],
        untyped,  # type: ignore[no-untyped-def]
        *args: int,
        **kwargs: int,
    ) -> str:
        return ""

    use = "use a JSON-serialisable type such as str, int, a list or a pydantic model"
    message = (
        f"Tool 'f' ({_origin('test_every_unsupported_parameter_is_named_in_one_message')}): "
        f"parameter 'callback' has unsupported type Callable[[int], int] (a callable); {use}; "
        f"parameter 'items' has unsupported type Iterator[int] (an iterator); {use}; "
        f"parameter 'future' has unsupported type Future[int] (a future); {use}; "
        f"parameter 'nested' has unsupported type list[Callable[[], int]] (a callable); {use}; "
        "parameter 'untyped' has no type annotation; add one; "
        "parameter 'args': *args and **kwargs are not supported; "
        "parameter 'kwargs': *args and **kwargs are not supported."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(f)


def test_positional_only_parameters_are_rejected() -> None:
    def f(a: int, /) -> str:
        return ""

    message = (
        f"Tool 'f' ({_origin('test_positional_only_parameters_are_rejected')}): "
        "parameter 'a': positional-only parameters are not supported."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(f)


def test_type_pydantic_cannot_describe_is_rejected_naming_the_parameter() -> None:
    class Opaque:
        pass

    def f(thing: Opaque) -> str:
        return ""

    origin = _origin("test_type_pydantic_cannot_describe_is_rejected_naming_the_parameter")
    prefix = f"Tool 'f' ({origin}): parameter 'thing' has a type pydantic cannot describe ("
    with pytest.raises(ToolDefinitionError) as info:
        tool(f)
    assert str(info.value).startswith(prefix)
    assert str(info.value).endswith(
        "; use a JSON-serialisable type such as str, int, a list or a pydantic model."
    )


def test_unresolvable_forward_reference_is_rejected() -> None:
    def f(x: "Undefined") -> str:  # type: ignore[name-defined] # noqa: F821
        return ""

    message = (
        f"Tool 'f' ({_origin('test_unresolvable_forward_reference_is_rejected')}): "
        "cannot resolve the type hints: name 'Undefined' is not defined"
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool(f)


# -- built once ------------------------------------------------------------------------------


@tool
def cached_tool(a: int, ctx: ToolContext) -> str:
    """Return a."""
    return str(a)


def test_the_definition_is_built_once_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Callbacks, tool_callbacks() and the manager reuse the spec built at decoration."""
    spec = get_spec(cached_tool)
    assert spec is get_spec(cached_tool)

    def no_rebuild(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the spec was rebuilt")

    monkeypatch.setattr(decorator_module, "build_arguments_schema", no_rebuild)
    monkeypatch.setattr(decorator_module, "build_input_type_schema", no_rebuild)
    monkeypatch.setattr("tool_calling.core.tools.callback.build_spec", no_rebuild)

    first = FunctionToolCallback(cached_tool)
    (second,) = tool_callbacks(cached_tool)
    assert first.definition is spec.definition  # type: ignore[union-attr]
    assert second.definition is spec.definition  # type: ignore[union-attr]
    manager = DefaultToolCallingManager()
    assert manager.resolve_tool_definitions(prompt_with([first]).options)[0] is first.definition
    assert texts(run(manager, [first], call("cached_tool", '{"a": 5}'))) == ["5"]
