"""ToolCallResultConverter: what the model reads for what a tool returns."""

import dataclasses
import datetime
import decimal
import enum
import inspect
import json
import re
import uuid
from typing import Any

import pydantic
import pytest

from tool_calling import FunctionToolCallback, ToolCallResultConverter, ToolExecutionException, tool

convert = ToolCallResultConverter().convert


class Status(enum.Enum):
    OK = "ok"


class Reading(pydantic.BaseModel):
    value: float
    at: datetime.date


@dataclasses.dataclass
class Box:
    label: str
    tags: set[str]
    price: decimal.Decimal


@pytest.mark.parametrize(
    ("value", "return_type", "expected"),
    [
        (None, None, "Done"),
        (None, type(None), "Done"),
        (None, str, "null"),
        (None, int | None, "null"),
        (None, inspect.Signature.empty, "null"),
        ("plain text", str, "plain text"),
        ('{"already": "json"}', str, '{"already": "json"}'),
        ("", str, ""),
        ("héllo ✓", str, "héllo ✓"),
        (3, int, "3"),
        (2.5, float, "2.5"),
        (True, bool, "true"),
        ([1, "a", None], list, '[1,"a",null]'),
        ({"k": [1, 2], "n": None}, dict, '{"k":[1,2],"n":null}'),
        ((1, "a"), tuple, '[1,"a"]'),
        ({"é": "ü"}, dict, '{"é":"ü"}'),
        (decimal.Decimal("1.10"), decimal.Decimal, '"1.10"'),
        (uuid.UUID(int=1), uuid.UUID, '"00000000-0000-0000-0000-000000000001"'),
        (datetime.date(2024, 1, 2), datetime.date, '"2024-01-02"'),
        (datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.datetime, '"2024-01-02T03:04:05"'),
        (Status.OK, Status, '"ok"'),
        (frozenset({7}), frozenset, "[7]"),
        (
            Reading(value=1.5, at=datetime.date(2024, 5, 6)),
            Reading,
            '{"value":1.5,"at":"2024-05-06"}',
        ),
        (Box("b", {"x"}, decimal.Decimal("2")), Box, '{"label":"b","tags":["x"],"price":"2"}'),
    ],
)
def test_default_conversion(value: Any, return_type: Any, expected: str) -> None:
    assert convert(value, return_type) == expected


def test_non_finite_floats_become_valid_json() -> None:
    """NaN and Infinity are not JSON; they are sent as strings so the result still parses."""
    text = convert({"a": float("nan"), "b": float("inf"), "c": [float("-inf")]}, dict)
    assert text == '{"a":"NaN","b":"Infinity","c":["-Infinity"]}'
    assert json.loads(text) == {"a": "NaN", "b": "Infinity", "c": ["-Infinity"]}


def test_unencodable_value_is_a_type_error() -> None:
    class Opaque:
        pass

    message = (
        "the tool returned a value of type Opaque that cannot be converted to JSON (Unable to "
        "serialize unknown "
        "type: <class 'tests.core.test_converter.test_unencodable_value_is_a_type_error.<locals>."
        "Opaque'>); return a str, a JSON-compatible value, a dataclass or a pydantic model"
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        convert(Opaque(), Opaque)
    with pytest.raises(
        TypeError, match="the tool returned a value of type dict that cannot be converted"
    ):
        convert({"nested": object()}, dict)


def test_converter_is_callable_like_a_function() -> None:
    assert ToolCallResultConverter()(None, None) == "Done"


def test_function_annotated_none_says_done_and_unannotated_says_null() -> None:
    @tool
    def side_effect() -> None:
        return None

    @tool
    def unannotated():  # type: ignore[no-untyped-def]
        return None

    @tool
    def maybe() -> str | None:
        return None

    assert FunctionToolCallback(side_effect).call("{}") == "Done"
    assert FunctionToolCallback(unannotated).call("{}") == "null"
    assert FunctionToolCallback(maybe).call("{}") == "null"


def test_custom_converter_subclass_receives_the_return_type() -> None:
    seen: list[Any] = []

    class Recording(ToolCallResultConverter):
        def convert(self, result: Any, return_type: Any) -> str:
            seen.append(return_type)
            return super().convert(result, return_type)

    @tool(result_converter=Recording())
    def numbers() -> list[int]:
        return [1, 2]

    assert FunctionToolCallback(numbers).call("{}") == "[1,2]"
    assert seen == [list[int]]


def test_unencodable_tool_result_is_a_tool_execution_exception() -> None:
    @tool
    def leaky() -> object:
        return object()

    callback = FunctionToolCallback(leaky)
    with pytest.raises(ToolExecutionException) as info:
        callback.call("{}")
    assert isinstance(info.value.cause, TypeError)
    assert str(info.value).startswith(
        "the tool returned a value of type object that cannot be converted to JSON"
    )
