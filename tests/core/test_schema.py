"""JSON Schemas from type hints, and their OpenAI strict-mode form.

The strict-mode oracle is ``openai.pydantic_function_tool`` applied to a pydantic model that is
equivalent to the tool's signature. One difference is intended and tested on its own: a tool
parameter with a default that is not ``None`` (``days: int = 3``) becomes nullable in strict mode,
because the validator turns ``null`` back into the default; the oracle can only express that
parameter as ``Optional[int] = None``, so the equivalent models use that form.
"""

import copy
import dataclasses
import datetime
import decimal
import enum
import json
import re
import uuid
from typing import Annotated, Any, Literal, NotRequired, Optional

import pydantic
import pytest
from typing_extensions import TypedDict

from tool_calling import FunctionToolCallback, ToolContext, ToolParam, tool
from tool_calling.core.tools.decorator import get_spec
from tool_calling.core.tools.schema import to_strict_json_schema
from tool_calling.exceptions import ToolArgumentsError

openai = pytest.importorskip("openai")


def schema_of(function: Any) -> dict[str, Any]:
    spec = get_spec(function)
    assert spec is not None
    return spec.definition.input_schema


def strip_titles(node: Any) -> Any:
    """Remove pydantic's "title" keywords (never a property that happens to be named title)."""
    if isinstance(node, dict):
        result = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                result[key] = {k: strip_titles(v) for k, v in value.items()}
            else:
                result[key] = strip_titles(value)
        return result
    if isinstance(node, list):
        return [strip_titles(v) for v in node]
    return node


def oracle(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """What the openai package sends for an equivalent pydantic model, without titles."""
    tool_param = openai.pydantic_function_tool(model)
    assert tool_param["function"]["strict"] is True
    return strip_titles(tool_param["function"]["parameters"])  # type: ignore[no-any-return]


def object_nodes(node: Any) -> list[dict[str, Any]]:
    """Every object node with properties, at any depth."""
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            found.append(node)
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for prop in value.values():
                    found.extend(object_nodes(prop))
            else:
                found.extend(object_nodes(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(object_nodes(value))
    return found


def keywords(node: Any) -> set[str]:
    """Every schema keyword used at any depth (property names excluded)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            if key in ("properties", "$defs") and isinstance(value, dict):
                for sub in value.values():
                    found |= keywords(sub)
            else:
                found |= keywords(value)
    elif isinstance(node, list):
        for value in node:
            found |= keywords(value)
    return found


# -- types used by the tools below ---------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    """A postal address."""

    street: str
    zip: str | None = None


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Window(TypedDict):
    start: datetime.date
    end: NotRequired[datetime.date]


class Inner(pydantic.BaseModel):
    """Inner doc."""

    a: int


# -- basic shape -----------------------------------------------------------------------------


def test_no_argument_tool_schema() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert schema_of(ping) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_simple_types_in_parameter_order() -> None:
    @tool
    def f(
        s: str,
        i: int,
        x: float,
        b: bool,
        names: list[str],
        counts: dict[str, int],
        maybe: int | None = None,
    ) -> str:
        return ""

    schema = schema_of(f)
    assert list(schema) == ["type", "properties", "required", "additionalProperties"]
    assert schema == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "x": {"type": "number"},
            "b": {"type": "boolean"},
            "names": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["s", "i", "x", "b", "names", "counts"],
        "additionalProperties": False,
    }


def test_rich_types() -> None:
    @tool
    def book(
        color: Color,
        mode: Literal["fast", "slow"],
        day: datetime.date,
        at: datetime.datetime,
        ref: uuid.UUID,
        amount: decimal.Decimal,
        tags: set[str],
        pair: tuple[int, str],
    ) -> str:
        return ""

    props = schema_of(book)["properties"]
    assert props["color"] == {"$ref": "#/$defs/Color"}
    assert schema_of(book)["$defs"]["Color"] == {"enum": ["red", "blue"], "type": "string"}
    assert props["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert props["day"] == {"format": "date", "type": "string"}
    assert props["at"] == {"format": "date-time", "type": "string"}
    assert props["ref"] == {"format": "uuid", "type": "string"}
    assert props["amount"]["anyOf"][0] == {"type": "number"}
    assert props["tags"] == {"items": {"type": "string"}, "type": "array", "uniqueItems": True}
    assert props["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]


def test_nested_models_dataclasses_and_typed_dicts_are_closed_objects() -> None:
    @tool
    def f(address: Address, point: Point, window: Window, points: list[Point]) -> str:
        return ""

    schema = schema_of(f)
    assert schema["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert schema["properties"]["points"] == {"type": "array", "items": {"$ref": "#/$defs/Point"}}
    assert schema["$defs"]["Address"] == {
        "description": "A postal address.",
        "properties": {
            "street": {"type": "string"},
            "zip": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["street"],
        "type": "object",
        "additionalProperties": False,
    }
    assert schema["$defs"]["Point"]["required"] == ["x"]
    assert schema["$defs"]["Window"]["required"] == ["start"]
    nodes = object_nodes(schema)
    assert len(nodes) == 4  # the root, Address, Point, Window
    for node in nodes:
        assert node["additionalProperties"] is False
        assert isinstance(node["required"], list)


def test_no_titles_but_a_parameter_named_title_survives() -> None:
    @tool
    def f(title: str, address: Address) -> str:
        return ""

    schema = schema_of(f)
    assert "title" in schema["properties"]
    assert "title" not in keywords(schema)


def test_descriptions_reach_nested_and_optional_parameters() -> None:
    @tool
    def f(
        address: Annotated[Address, ToolParam("Where to deliver")],
        color: Annotated[Color | None, ToolParam("Paint")] = None,
    ) -> str:
        return ""

    props = schema_of(f)["properties"]
    assert props["address"] == {"$ref": "#/$defs/Address", "description": "Where to deliver"}
    assert props["color"] == {
        "anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}],
        "description": "Paint",
    }


def test_tool_context_never_appears_even_nested_in_optional() -> None:
    @tool
    def f(ctx: ToolContext, other: ToolContext | None = None) -> str:
        return ""

    assert schema_of(f)["properties"] == {}
    assert "ToolContext" not in json.dumps(schema_of(f))


def test_input_type_schema_is_the_type_schema() -> None:
    callback = FunctionToolCallback(lambda a: a.street, name="ship", input_type=Address)
    assert callback.definition.input_schema == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "zip": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["street"],
        "additionalProperties": False,
        "description": "A postal address.",
    }


# -- strict mode: the openai oracle ----------------------------------------------------------


@tool
def plain_tool(
    city: Annotated[str, ToolParam("City name")],
    days: int | None = None,
    color: Color | None = None,
    address: Address | None = None,
    tags: list[str] | None = None,
    when: datetime.date | None = None,
) -> str:
    return city


class PlainArgs(pydantic.BaseModel):
    city: str = pydantic.Field(description="City name")
    days: int | None = None
    color: Color | None = None
    address: Address | None = None
    tags: list[str] | None = None
    when: datetime.date | None = None


@tool
def nested_tool(
    inner: Annotated[Inner, pydantic.Field(description="the inner")],
    items: list[Inner],
    mode: Literal["x", "y"],
    mapping: dict[str, int],
    point: Point,
    ref: uuid.UUID,
    amount: decimal.Decimal,
) -> str:
    return ""


class NestedArgs(pydantic.BaseModel):
    inner: Inner = pydantic.Field(description="the inner")
    items: list[Inner]
    mode: Literal["x", "y"]
    mapping: dict[str, int]
    point: Point
    ref: uuid.UUID
    amount: decimal.Decimal


@tool
def described_enum_tool(
    color: Annotated[Color, ToolParam("Paint colour")],
    address: Annotated[Address | None, ToolParam("Where")] = None,
) -> str:
    return ""


class DescribedEnumArgs(pydantic.BaseModel):
    color: Color = pydantic.Field(description="Paint colour")
    address: Address | None = pydantic.Field(None, description="Where")


@tool
def no_args_tool() -> str:
    return ""


class NoArgs(pydantic.BaseModel):
    pass


@pytest.mark.parametrize(
    ("function", "model"),
    [
        (plain_tool, PlainArgs),
        (nested_tool, NestedArgs),
        (described_enum_tool, DescribedEnumArgs),
        (no_args_tool, NoArgs),
    ],
    ids=["optional-parameters", "nested-models", "described-refs", "no-arguments"],
)
def test_strict_schema_matches_openai_for_an_equivalent_model(
    function: Any, model: type[pydantic.BaseModel]
) -> None:
    assert to_strict_json_schema(schema_of(function)) == oracle(model)


def test_strict_schema_of_an_input_type_matches_openai() -> None:
    class Order(pydantic.BaseModel):
        item: str
        quantity: int | None = None
        address: Address
        inner: Inner = pydantic.Field(description="described nested model")

    callback = FunctionToolCallback(lambda order: "", name="order", input_type=Order)
    assert to_strict_json_schema(callback.definition.input_schema) == oracle(Order)


def test_strict_mode_makes_parameters_with_defaults_nullable() -> None:
    """The intended difference: ``days: int = 3`` is required and nullable (null = default)."""

    @tool
    def forecast(
        city: str, days: Annotated[int, ToolParam("How many days")] = 3, color: Color = Color.RED
    ) -> str:
        return ""

    strict = to_strict_json_schema(schema_of(forecast))
    assert strict["required"] == ["city", "days", "color"]
    assert strict["properties"]["city"] == {"type": "string"}
    assert strict["properties"]["days"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "description": "How many days",
        "default": 3,
    }
    assert strict["properties"]["color"] == {
        "anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}],
        "default": "red",
    }


def test_strict_mode_keeps_nested_fields_with_defaults_non_nullable() -> None:
    """Inside a nested model null cannot mean "the default"; as in openai, it is not offered."""

    @tool
    def f(point: Point) -> str:
        return ""

    strict = to_strict_json_schema(schema_of(f))
    assert strict["$defs"]["Point"] == {
        "additionalProperties": False,
        "properties": {"x": {"type": "integer"}, "y": {"default": 0, "type": "integer"}},
        "required": ["x", "y"],
        "type": "object",
    }


def test_strict_mode_everywhere_required_and_closed() -> None:
    strict = to_strict_json_schema(schema_of(nested_tool))
    for node in object_nodes(strict):
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])
    for node in object_nodes(to_strict_json_schema(schema_of(plain_tool))):
        assert node["required"] == list(node["properties"])


def test_strict_mode_has_no_ref_with_siblings_and_no_all_of() -> None:
    strict = to_strict_json_schema(schema_of(described_enum_tool))
    assert strict["properties"]["color"] == {
        "enum": ["red", "blue"],
        "type": "string",
        "description": "Paint colour",
    }
    assert "allOf" not in keywords(strict)


def test_strict_mode_does_not_modify_the_definition() -> None:
    schema = schema_of(plain_tool)
    before = copy.deepcopy(schema)
    strict = to_strict_json_schema(schema)
    assert schema == before
    assert strict != schema
    assert to_strict_json_schema(strict) == strict  # idempotent


def refs_with_siblings(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if "$ref" in node and len(node) > 1:
            found.append(node)
        for value in node.values():
            found.extend(refs_with_siblings(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(refs_with_siblings(value))
    return found


class TreeNode(pydantic.BaseModel):
    name: str
    first: Optional["TreeNode"] = pydantic.Field(None, description="the first child")
    best: "TreeNode" = pydantic.Field(description="a described self-reference")


def test_recursive_input_type_has_an_object_root_and_a_finite_strict_form() -> None:
    callback = FunctionToolCallback(lambda n: n.best.name, name="walk", input_type=TreeNode)
    schema = callback.definition.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["name", "best"]
    assert "TreeNode" in schema["$defs"]
    strict = to_strict_json_schema(schema)  # inlining a self-reference must stop
    assert refs_with_siblings(strict) == []
    assert "allOf" not in keywords(strict)
    json.dumps(strict)
    # TreeNode.best is required all the way down, so no finite instance exists; the validator
    # still walks it and reports the innermost missing object.
    message = "Invalid arguments for tool 'walk':\n- best.best: Input should be an object"
    with pytest.raises(ToolArgumentsError, match=re.escape(message)):
        callback.call('{"name": "a", "best": {"name": "b", "best": null}}')


# -- strict mode and the validator agree -----------------------------------------------------


def test_a_strict_mode_model_sending_null_gets_the_defaults() -> None:
    """What strict mode makes the model send (every key, null for optional) validates."""
    seen: dict[str, Any] = {}

    @tool
    def forecast(
        city: str, days: int = 3, unit: str | None = "C", point: Point | None = None
    ) -> str:
        seen.update(city=city, days=days, unit=unit, point=point)
        return "ok"

    strict = to_strict_json_schema(schema_of(forecast))
    arguments = {name: None for name in strict["required"]}
    arguments["city"] = "Oslo"
    assert FunctionToolCallback(forecast).call(json.dumps(arguments)) == "ok"
    assert seen == {"city": "Oslo", "days": 3, "unit": None, "point": None}


def test_a_strict_mode_model_sending_null_to_an_input_type_gets_the_defaults() -> None:
    class Query(pydantic.BaseModel):
        text: str
        limit: int = 10
        lang: str | None = "en"

    @dataclasses.dataclass
    class DataQuery:
        text: str
        limit: int = 10

    received: list[Any] = []
    for input_type in (Query, DataQuery):
        callback = FunctionToolCallback(
            lambda q: received.append(q) or "ok", name="search", input_type=input_type
        )
        strict = to_strict_json_schema(callback.definition.input_schema)
        arguments = {name: None for name in strict["required"]}
        arguments["text"] = "hi"
        assert callback.call(json.dumps(arguments)) == "ok"
    assert received[0] == Query(text="hi", limit=10, lang=None)
    assert received[1] == DataQuery(text="hi", limit=10)


def test_defaults_of_optional_parameters_are_shown() -> None:
    @tool
    def f(days: int = 3, color: Color = Color.BLUE, note: str | None = None) -> str:
        return ""

    props = schema_of(f)["properties"]
    assert props["days"] == {"type": "integer", "default": 3}
    assert props["color"] == {"$ref": "#/$defs/Color", "default": "blue"}
    assert "default" not in props["note"]
