"""ToolResult: content blocks and structured data that still read as text to the model."""

from __future__ import annotations

import dataclasses
import pickle
import re

import pydantic
import pytest
from typing_extensions import TypedDict

from tool_calling import (
    AudioBlock,
    ChatClient,
    FunctionToolCallback,
    ImageBlock,
    ResourceBlock,
    TextBlock,
    ToolContext,
    ToolResult,
    tool,
)
from tool_calling.core.tools.context import PROGRESS_KEY
from tool_calling.testing import ScriptedChatModel, text, tool_call

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 60  # 68 bytes; only the size matters here


class Forecast(pydantic.BaseModel):
    city: str
    celsius: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Span(TypedDict):
    start: int
    end: int


def test_the_model_reads_the_blocks_texts_and_a_note_for_each_binary_block() -> None:
    result = ToolResult(
        "Here it is:",
        ImageBlock.from_bytes(PNG, "image/png"),
        AudioBlock.from_bytes(b"RIFF" * 5, "audio/wav"),
        ResourceBlock("test://a", mime_type="text/plain", text="resource text"),
        ResourceBlock("test://b", mime_type="application/pdf", blob="AAAA"),
    )
    assert result == (
        "Here it is:\n[image image/png, 68 bytes]\n[audio audio/wav, 20 bytes]\nresource text\n"
        "[resource test://b (application/pdf, 3 bytes)]"
    )
    assert isinstance(result, str)
    assert result.content[0] == TextBlock("Here it is:")


def test_structured_data_without_blocks_reads_as_its_compact_json_and_text_can_be_given() -> None:
    assert ToolResult(structured={"a": 1, "b": [True, None]}) == '{"a":1,"b":[true,null]}'
    assert ToolResult(structured={"a": 1}, text="one a") == "one a"
    assert ToolResult() == ""


def test_bad_blocks_and_values_are_refused_with_their_reason() -> None:
    with pytest.raises(TypeError, match=re.escape("got int")):
        ToolResult(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ToolResult structured must be a JSON value"):
        ToolResult(structured={"when": object()})
    with pytest.raises(ValueError, match=re.escape("give exactly one of text and blob, not both")):
        ResourceBlock("test://x", text="a", blob="AA==")
    with pytest.raises(ValueError, match=re.escape("not neither")):
        ResourceBlock("test://x")


def test_a_result_survives_pickling_with_its_blocks() -> None:
    result = ToolResult("a", ImageBlock("AAAA", "image/png"), structured={"k": 1})
    copy = pickle.loads(pickle.dumps(result))
    assert copy == result
    assert copy.content == result.content
    assert copy.structured == {"k": 1}


def test_a_tool_returning_a_tool_result_gives_the_model_its_text_only() -> None:
    @tool
    def snapshot() -> ToolResult:
        """Take a picture."""
        return ToolResult("A red pixel.", ImageBlock.from_bytes(PNG, "image/png"))

    model = ScriptedChatModel([tool_call("snapshot"), text("done")])
    ChatClient.create(model).prompt("look").tools(snapshot).call().content()
    tool_message = model.requests[1].messages[-1]
    assert tool_message.responses[0].response_data == "A red pixel.\n[image image/png, 68 bytes]"


@pytest.mark.parametrize(
    ("return_type", "value", "schema_properties"),
    [
        (Forecast, Forecast(city="Oslo", celsius=3.5), {"city", "celsius"}),
        (Point, Point(1, 2), {"x", "y"}),
        (Span, Span(start=1, end=2), {"start", "end"}),
    ],
)
def test_a_structured_return_type_gives_an_output_schema_and_compact_json_once(
    return_type: type, value: object, schema_properties: set[str]
) -> None:
    def produce() -> object:
        return value

    produce.__annotations__["return"] = return_type
    callback = FunctionToolCallback(produce, name="produce", description="Produce a value.")
    schema = callback.output_schema
    assert schema is not None
    assert schema["type"] == "object"
    assert set(schema["properties"]) == schema_properties
    answer = callback.call("{}")
    # The model gets the JSON once: no second copy beside it.
    assert answer.count("{") == 1
    assert pydantic.TypeAdapter(return_type).validate_json(answer) == value


def test_plain_types_and_converted_results_have_no_output_schema() -> None:
    @tool
    def name() -> str:
        """A name."""
        return "x"

    @tool(result_converter=lambda result, _type: "custom")
    def point() -> Point:
        """A point, converted by hand."""
        return Point(1, 2)

    assert FunctionToolCallback(name).output_schema is None
    assert FunctionToolCallback(point).output_schema is None


def test_report_progress_calls_the_reporter_the_caller_gave_and_is_a_no_op_otherwise() -> None:
    reports: list[tuple[float, float | None, str | None]] = []
    ToolContext({PROGRESS_KEY: lambda *args: reports.append(args)}).report_progress(1, 4, "one")
    ToolContext().report_progress(2, 4)  # nobody asked: nothing happens, nothing raises
    assert reports == [(1, 4, "one")]
