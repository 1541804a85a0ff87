"""DefaultToolExecutionExceptionProcessor: its four rules, in order."""

from __future__ import annotations

import pytest

from tool_calling import (
    DefaultToolExecutionExceptionProcessor,
    ToolDefinition,
    ToolExecutionException,
    ToolExecutionExceptionProcessor,
)

DEFINITION = ToolDefinition("lookup", "Look something up.", {"type": "object"})


class Retryable(Exception):
    pass


def wrap(cause: BaseException) -> ToolExecutionException:
    try:
        raise ToolExecutionException(DEFINITION, cause) from cause
    except ToolExecutionException as exc:
        return exc


def test_tool_execution_exception_carries_definition_and_cause() -> None:
    cause = ValueError("bad city")
    exc = ToolExecutionException(DEFINITION, cause)
    assert str(exc) == "bad city"
    assert exc.tool_definition is DEFINITION
    assert exc.cause is cause
    assert exc.__cause__ is cause


def test_rule_4_the_message_goes_to_the_model() -> None:
    processor = DefaultToolExecutionExceptionProcessor()
    assert processor.process(wrap(ValueError("City 'Atlantis' not found"))) == (
        "City 'Atlantis' not found"
    )


@pytest.mark.parametrize("message", ["", "   ", "\n\t"])
def test_rule_4_a_blank_message_names_the_tool_and_the_type(message: str) -> None:
    processor = DefaultToolExecutionExceptionProcessor()
    assert processor.process(wrap(RuntimeError(message))) == (
        "Exception occurred in tool: lookup (RuntimeError)"
    )
    assert processor.process(wrap(Retryable())) == "Exception occurred in tool: lookup (Retryable)"


@pytest.mark.parametrize("cause", [KeyboardInterrupt(), SystemExit(3), GeneratorExit()])
def test_rule_1_a_base_exception_re_raises_the_wrapper(cause: BaseException) -> None:
    """Even with a rethrown type that matches, rule 1 comes first and raises the wrapper."""
    exc = wrap(cause)
    processor = DefaultToolExecutionExceptionProcessor(rethrown=[BaseException])
    with pytest.raises(ToolExecutionException) as info:
        processor.process(exc)
    assert info.value is exc


def test_rule_2_a_rethrown_type_re_raises_the_cause_itself() -> None:
    cause = Retryable("try again")
    processor = DefaultToolExecutionExceptionProcessor(always_throw=True, rethrown=[Retryable])
    with pytest.raises(Retryable) as info:
        processor.process(wrap(cause))
    assert info.value is cause  # rule 2 before rule 3: the cause, not the wrapper


def test_rule_2_matches_subclasses_only_of_the_listed_types() -> None:
    processor = DefaultToolExecutionExceptionProcessor(rethrown=(LookupError,))
    with pytest.raises(KeyError):
        processor.process(wrap(KeyError("k")))
    assert processor.process(wrap(ValueError("v"))) == "v"


def test_rule_3_always_throw_re_raises_the_wrapper() -> None:
    exc = wrap(ValueError("nope"))
    with pytest.raises(ToolExecutionException) as info:
        DefaultToolExecutionExceptionProcessor(always_throw=True).process(exc)
    assert info.value is exc


def test_processor_is_an_abstract_extension_point() -> None:
    with pytest.raises(TypeError):
        ToolExecutionExceptionProcessor()  # type: ignore[abstract]

    class Generic(ToolExecutionExceptionProcessor):
        def process(self, exception: ToolExecutionException) -> str:
            return f"{exception.tool_definition.name} failed"

    assert Generic().process(wrap(ValueError("secret dsn"))) == "lookup failed"
