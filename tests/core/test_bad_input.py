"""Bad input never crashes a turn (S3, S19, R8).

Each test states what must hold. Unless the contract says a case raises, the model gets a short
``is_error=True`` response telling it what was wrong, the tool does not run, and the other calls
of the batch still run and answer in order.
"""

import asyncio
import re
import time
from typing import Any

import pydantic
import pytest

from tool_calling import (
    DefaultToolCallingManager,
    FunctionToolCallback,
    ToolCallingChatOptions,
    ToolDefinitionError,
    ToolExecutionException,
    ToolResponse,
    tool,
    tool_callbacks,
)
from tool_calling.core import _settings
from tool_calling.core._settings import DEFAULT_MAX_RESULT_CHARS

from ._builders import call, responses, run, texts

MAX_ERROR_CHARS = 2_000  # every error text the model gets stays short, whatever it was sent


class Address(pydantic.BaseModel):
    street: str
    zip: int


class Spy:
    """A ``ship`` tool that records the calls that reached it, plus a harmless ``ping``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

        @tool
        def ship(name: str, qty: int, address: Address, tags: list[str] | None = None) -> str:
            """Ship an order."""
            self.calls.append({"name": name, "qty": qty})
            return "shipped"

        @tool
        def ping() -> str:
            """Answer pong."""
            return "pong"

        self.callbacks = tool_callbacks(ship, ping)

    def run(self, arguments: str | None, **manager_options: Any) -> tuple[ToolResponse, str]:
        """Call ship with ``arguments`` in a batch with ping; return ship's response, ping's."""
        result = run(
            DefaultToolCallingManager(**manager_options),
            self.callbacks,
            call("ship", arguments, id="bad"),
            call("ping", id="ok"),
        )
        bad, ok = responses(result)
        assert (bad.id, ok.id) == ("bad", "ok")
        return bad, ok.response_data


def invalid(detail: str) -> str:
    return f"Invalid arguments for tool 'ship': {detail}"


def fields(*lines: str) -> str:
    return "Invalid arguments for tool 'ship':\n" + "\n".join(f"- {line}" for line in lines)


def assert_rejected(spy: Spy, arguments: str | None, expected: str) -> None:
    bad, ping = spy.run(arguments)
    assert bad == ToolResponse("bad", "ship", expected, is_error=True)
    assert len(bad.response_data) < MAX_ERROR_CHARS
    assert spy.calls == []  # the tool never ran
    assert ping == "pong"  # and the batch went on


# -- arguments that are not a JSON object ------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        ("not json", "expected ident at line 1 column 2"),
        ('{"name": "a",', "EOF while parsing a value at line 1 column 13"),
        ('{"name": "a"} trailing', "trailing characters at line 1 column 15"),
        ("{'name': 'a'}", "key must be a string at line 1 column 2"),
    ],
)
def test_arguments_that_are_not_json(arguments: str, detail: str) -> None:
    """The model is told the JSON is invalid, where, and what to send instead."""
    assert_rejected(
        Spy(),
        arguments,
        invalid(f"not valid JSON ({detail}). Send the arguments as a JSON object."),
    )


@pytest.mark.parametrize("arguments", ["[1, 2]", '"ship it"', "42", "true", "null"])
def test_arguments_that_are_json_but_not_an_object(arguments: str) -> None:
    assert_rejected(
        Spy(), arguments, invalid("the arguments must be a JSON object of named parameters.")
    )


# -- arguments that violate the schema -------------------------------------------------------


def test_missing_required_parameters() -> None:
    assert_rejected(
        Spy(),
        '{"name": "tea"}',
        fields("qty: Field required", "address: Field required"),
    )


def test_wrong_types_are_not_coerced() -> None:
    """S3: "2" is not an integer and 1 is not a string; strict validation, no coercion."""
    assert_rejected(
        Spy(),
        '{"name": 1, "qty": "2", "address": {"street": "s", "zip": 1}}',
        fields("name: Input should be a valid string", "qty: Input should be a valid integer"),
    )


def test_nested_errors_are_listed_field_by_field() -> None:
    assert_rejected(
        Spy(),
        '{"name": "a", "qty": 1, "address": {"street": 2, "zip": "9"}, "tags": ["x", 3]}',
        fields(
            "address.street: Input should be a valid string",
            "address.zip: Input should be a valid integer",
            "tags.1: Input should be a valid string",
        ),
    )


def test_unknown_keys_are_rejected_at_every_depth() -> None:
    """S3: the schema says additionalProperties: false everywhere, so validation does too."""
    assert_rejected(
        Spy(),
        '{"name": "a", "qty": 1, "address": {"street": "s", "zip": 1, "floor": 3}, "admin": true}',
        fields(
            "address.floor: Unknown parameter; remove it",
            "admin: Unknown parameter; remove it",
        ),
    )


def test_many_errors_are_capped() -> None:
    arguments = "{" + ", ".join(f'"k{i}": 1' for i in range(15)) + "}"
    lines = ["name: Field required", "qty: Field required", "address: Field required"]
    lines += [f"k{i}: Unknown parameter; remove it" for i in range(7)]
    assert_rejected(Spy(), arguments, fields(*lines, "... and 8 more errors"))


@pytest.mark.parametrize("arguments", [None, "", "   "])
def test_blank_arguments_are_an_empty_object(arguments: str | None) -> None:
    """Blank means {}: a tool without required parameters runs, this one is told what is missing."""
    assert_rejected(
        Spy(),
        arguments,
        fields("name: Field required", "qty: Field required", "address: Field required"),
    )


def test_null_for_a_required_parameter() -> None:
    assert_rejected(
        Spy(),
        '{"name": null, "qty": 1, "address": {"street": "s", "zip": 1}}',
        fields("name: Input should be a valid string"),
    )


# -- S3: what a lenient JSON parser would let through ------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        ('{"name": "a", "name": "b", "qty": 1, "address": {"street": "s", "zip": 1}}', "'name'"),
        ('{"name": "a", "qty": 1, "address": {"street": "s", "zip": 1, "zip": 2}}', "'zip'"),
    ],
)
def test_duplicate_json_keys_are_rejected(arguments: str, detail: str) -> None:
    """A repeated key would let the audit show one value while the tool receives another."""
    assert_rejected(
        Spy(), arguments, invalid(f"the key {detail} appears more than once; send each key once.")
    )


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_rejected_even_where_any_value_is_allowed(constant: str) -> None:
    ran: list[Any] = []

    @tool
    def store(value: Any = None) -> str:
        ran.append(value)
        return "stored"

    result = run(
        DefaultToolCallingManager(),
        [FunctionToolCallback(store)],
        call("store", f'{{"value": {constant}}}'),
    )
    assert responses(result)[0].is_error is True
    assert texts(result) == [
        f"Invalid arguments for tool 'store': {constant} is not valid JSON; send a number or null."
    ]
    assert ran == []


@pytest.mark.parametrize("shape", ["list", "object"])
def test_deep_nesting_is_rejected_quickly_with_a_bounded_error(shape: str) -> None:
    """10,000 levels of nesting: a short error, no RecursionError, no call, no slow parse."""
    spy = Spy()
    if shape == "list":
        arguments = '{"tags": ' + "[" * 10_000 + "]" * 10_000 + "}"
    else:
        arguments = '{"tags": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + "}"
    started = time.perf_counter()
    bad, ping = spy.run(arguments)
    elapsed = time.perf_counter() - started
    assert bad.is_error is True
    assert bad.response_data.startswith(invalid("not valid JSON (recursion limit exceeded"))
    assert len(bad.response_data) < MAX_ERROR_CHARS
    assert spy.calls == [] and ping == "pong"
    assert elapsed < 2  # generous: the parser gives up after a few hundred levels


def test_huge_invalid_input_is_not_echoed_back() -> None:
    spy = Spy()
    huge_key = "k" * 1_000_000
    bad, _ = spy.run(
        '{"' + huge_key + '": 1, "name": "a", "qty": 1, "address": {"street": "s", "zip": 1}}'
    )
    assert bad.response_data == fields(f"{'k' * 80}...: Unknown parameter; remove it")
    bad, _ = spy.run('{"name": "' + "x" * 1_000_000)
    assert bad.response_data.startswith(invalid("not valid JSON (EOF while parsing a string"))
    assert len(bad.response_data) < MAX_ERROR_CHARS


TEN_MB = 10 * 1024 * 1024


@pytest.mark.parametrize("where", ["unknown key", "unterminated string", "wrong type", "nested"])
def test_s3_a_10_mb_string_is_rejected_with_a_bounded_error_and_no_call(where: str) -> None:
    """S3: 10 MB where the schema wants something else: a short error, no call, no crash.

    How long the rejection takes is measured by ``benchmarks/bad_arguments.py``, not here.
    """
    spy = Spy()
    huge = "x" * TEN_MB
    arguments = {
        "unknown key": '{"' + huge + '": 1, "name": "a", "qty": 1, "address": {"street": "s", '
        '"zip": 1}}',
        "unterminated string": '{"name": "' + huge,
        "wrong type": '{"name": "a", "qty": "' + huge + '", "address": {"street": "s", "zip": 1}}',
        "nested": '{"name": "a", "qty": 1, "address": {"street": "s", "zip": "' + huge + '"}}',
    }[where]
    bad, ping = spy.run(arguments)
    assert bad.is_error is True
    assert bad.response_data.startswith("Invalid arguments for tool 'ship':")
    assert len(bad.response_data) < MAX_ERROR_CHARS
    assert spy.calls == [] and ping == "pong"


# -- unknown tools -----------------------------------------------------------------------------


def test_an_unknown_tool_name_lists_the_available_tools() -> None:
    spy = Spy()
    result = run(
        DefaultToolCallingManager(), spy.callbacks, call("delete_all", id="x"), call("ping", id="y")
    )
    assert responses(result) == [
        ToolResponse(
            "x",
            "delete_all",
            "Unknown or disabled tool 'delete_all'. Available tools: ship, ping. "
            "Call one of these by its exact name.",
            is_error=True,
        ),
        ToolResponse("y", "ping", "pong"),
    ]


# -- tools that fail ---------------------------------------------------------------------------


def failing_tools() -> list[FunctionToolCallback]:
    @tool
    def raises() -> str:
        raise ValueError("Order 17 does not exist")

    @tool
    def blank() -> str:
        raise LookupError()

    @tool
    def blank_spaces() -> str:
        raise RuntimeError("   ")

    @tool
    async def async_raises() -> str:
        await asyncio.sleep(0)
        raise ConnectionError("upstream timed out")

    @tool
    def unencodable() -> object:
        return {"when": object()}

    @tool
    def ping() -> str:
        return "pong"

    return [
        FunctionToolCallback(f)
        for f in (raises, blank, blank_spaces, async_raises, unencodable, ping)
    ]


def test_failing_tools_answer_with_errors_and_the_batch_goes_on() -> None:
    """R8: one response per call, in order, failures as error responses, the rest unaffected."""
    names = ["raises", "blank", "blank_spaces", "async_raises", "unencodable", "ping"]
    result = run(DefaultToolCallingManager(), failing_tools(), *[call(n, id=n) for n in names])
    assert responses(result) == [
        ToolResponse("raises", "raises", "Order 17 does not exist", is_error=True),
        ToolResponse(
            "blank", "blank", "Exception occurred in tool: blank (LookupError)", is_error=True
        ),
        ToolResponse(
            "blank_spaces",
            "blank_spaces",
            "Exception occurred in tool: blank_spaces (RuntimeError)",
            is_error=True,
        ),
        ToolResponse("async_raises", "async_raises", "upstream timed out", is_error=True),
        ToolResponse(
            "unencodable",
            "unencodable",
            "the tool returned a value of type dict that cannot be converted to JSON (Unable to "
            "serialize unknown type: <class 'object'>); return a str, a JSON-compatible value, a "
            "dataclass or a pydantic model",
            is_error=True,
        ),
        ToolResponse("ping", "ping", "pong"),
    ]


@pytest.mark.parametrize("name", ["raises", "async_raises", "unencodable"])
def test_a_single_failing_call_inline(name: str) -> None:
    """The inline path (one call, no pool) handles failures the same way."""
    result = run(DefaultToolCallingManager(), failing_tools(), call(name))
    assert responses(result)[0].is_error is True


@pytest.mark.parametrize("cause", [KeyboardInterrupt, SystemExit])
def test_a_base_exception_raises_as_the_contract_says(cause: type[BaseException]) -> None:
    """A BaseException that is not an Exception is re-raised wrapped (processor rule 1)."""

    def stop() -> str:
        raise cause()

    callbacks = [FunctionToolCallback(stop, name="stop")]
    with pytest.raises(ToolExecutionException) as info:
        run(DefaultToolCallingManager(), callbacks, call("stop"))
    assert isinstance(info.value.cause, cause)
    with pytest.raises(ToolExecutionException):  # also from the pool, in a batch
        run(
            DefaultToolCallingManager(),
            [*callbacks, *failing_tools()[5:]],
            call("ping"),
            call("stop"),
        )


# -- results too long --------------------------------------------------------------------------


def long_tool(size: int) -> FunctionToolCallback:
    return FunctionToolCallback(lambda: "a" * size, name="long")


def truncated(size: int, limit: int) -> str:
    return (
        "a" * limit
        + f"\n[Truncated: the tool returned {size} characters; only the first {limit} are shown.]"
    )


def test_a_result_longer_than_the_limit_is_cut_with_a_note() -> None:
    manager = DefaultToolCallingManager(max_result_chars=100)
    assert texts(run(manager, [long_tool(100)], call("long"))) == ["a" * 100]
    assert texts(run(manager, [long_tool(101)], call("long"))) == [truncated(101, 100)]


def test_the_default_limit_is_max_result_chars_from_the_settings() -> None:
    assert DEFAULT_MAX_RESULT_CHARS == 65_536
    size = DEFAULT_MAX_RESULT_CHARS + 5
    assert texts(run(DefaultToolCallingManager(), [long_tool(size)], call("long"))) == [
        truncated(size, DEFAULT_MAX_RESULT_CHARS)
    ]
    settings = _settings.CoreSettings(max_result_chars=10)
    _settings.set_core_settings_provider(lambda: settings)
    assert texts(run(DefaultToolCallingManager(), [long_tool(11)], call("long"))) == [
        truncated(11, 10)
    ]


def test_no_limit_when_max_result_chars_is_none() -> None:
    manager = DefaultToolCallingManager(max_result_chars=None)
    assert texts(run(manager, [long_tool(200_000)], call("long"))) == ["a" * 200_000]


def test_long_error_messages_are_cut_too() -> None:
    def verbose() -> str:
        raise RuntimeError("e" * 50)

    manager = DefaultToolCallingManager(max_result_chars=10)
    result = run(manager, [FunctionToolCallback(verbose, name="verbose")], call("verbose"))
    assert texts(result) == [
        "e" * 10 + "\n[Truncated: the tool returned 50 characters; only the first 10 are shown.]"
    ]
    assert responses(result)[0].is_error is True


# -- bad definitions raise when the tools are defined, not during a turn ----------------------


def test_invalid_tool_names_raise_at_definition() -> None:
    """S19."""
    for name in ["", "x" * 65, "has space", "\u0430dd", "tab\tname"]:
        with pytest.raises(ToolDefinitionError, match=re.escape(f"Invalid tool name {name!r}")):
            FunctionToolCallback(lambda: "", name=name)


def test_duplicate_tool_names_raise_naming_both() -> None:
    """S19: also when two callbacks with one name reach the manager in a request."""
    first = FunctionToolCallback(lambda: "1", name="lookup")
    second = FunctionToolCallback(lambda: "2", name="lookup")
    origin = f"{__name__}.test_duplicate_tool_names_raise_naming_both.<locals>.<lambda>"
    message = (
        f"Duplicate tool name 'lookup': {origin} and {origin}. "
        "Tool names must be unique; rename one with @tool(name=...)."
    )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        tool_callbacks(first, second)
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        DefaultToolCallingManager().resolve_tool_definitions(
            ToolCallingChatOptions(tool_callbacks=[first, second])
        )
    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        run(DefaultToolCallingManager(), [first, second], call("lookup"))


def test_unsupported_parameter_types_raise_at_definition() -> None:
    from collections.abc import Callable, Iterator

    def f(callback: Callable[[], int], items: Iterator[int]) -> str:
        return ""

    with pytest.raises(ToolDefinitionError) as info:
        tool(f)
    assert "parameter 'callback' has unsupported type Callable[[], int] (a callable)" in str(
        info.value
    )
    assert "parameter 'items' has unsupported type Iterator[int] (an iterator)" in str(info.value)


def test_tool_failure_sends_its_message_and_is_never_rethrown() -> None:
    """ToolFailure is a tool's message for the model: an error response, even with always_throw."""
    from tool_calling import (
        AssistantMessage,
        ChatResponse,
        DefaultToolCallingManager,
        DefaultToolExecutionExceptionProcessor,
        Generation,
        Prompt,
        ToolCall,
        ToolCallingChatOptions,
        ToolResponse,
        tool,
        tool_callbacks,
    )
    from tool_calling.exceptions import ToolFailure

    @tool
    def cancel(order: str) -> str:
        """Cancel an order."""
        raise ToolFailure(f"Order {order} already shipped; it cannot be cancelled.")

    manager = DefaultToolCallingManager(
        exception_processor=DefaultToolExecutionExceptionProcessor(always_throw=True)
    )
    options = ToolCallingChatOptions(tool_callbacks=tool_callbacks(cancel))
    response = ChatResponse(
        [Generation(AssistantMessage(None, [ToolCall("c1", "cancel", '{"order": "A1"}')]))]
    )
    result = manager.execute_tool_calls(Prompt("Cancel A1", options), response)
    assert result.conversation_history[-1].responses == [
        ToolResponse("c1", "cancel", "Order A1 already shipped; it cannot be cancelled.", True)
    ]
