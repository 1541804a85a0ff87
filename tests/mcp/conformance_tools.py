"""The tools the MCP conformance suite calls by name, as tool_calling tools.

The suite's server scenarios expect tools with fixed names and answers (``test_simple_text``,
``test_error_handling``, ``json_schema_2020_12_tool``). They are written here the way a project
writes its tools; McpToolServer serves them like any other.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

from tool_calling import (
    AudioBlock,
    ImageBlock,
    InputRequired,
    ResourceBlock,
    ToolCallback,
    ToolContext,
    ToolDefinition,
    ToolResult,
    tool,
    tool_callbacks,
)
from tool_calling.exceptions import ToolFailure

# A 1x1 red PNG and a 44-byte silent WAV header, as the scenarios suggest.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV = (
    b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00@\x1f\x00\x00"
    b"\x80>\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00"
)


@tool
def test_simple_text() -> str:
    """Return a fixed text (conformance scenario tools-call-simple-text)."""
    return "This is a simple text response for testing."


@tool
def test_error_handling() -> str:
    """Always fail (conformance scenario tools-call-error)."""
    raise ToolFailure("This tool intentionally returns an error for testing")


@tool
def test_image_content() -> ToolResult:
    """Return an image (conformance scenario tools-call-image)."""
    return ToolResult(ImageBlock.from_bytes(PNG, "image/png"))


@tool
def test_audio_content() -> ToolResult:
    """Return a sound (conformance scenario tools-call-audio)."""
    return ToolResult(AudioBlock.from_bytes(WAV, "audio/wav"))


@tool
def test_embedded_resource() -> ToolResult:
    """Return an embedded text resource (conformance scenario tools-call-embedded-resource)."""
    return ToolResult(
        ResourceBlock(
            "test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
    )


@tool
def test_multiple_content_types() -> ToolResult:
    """Return text, an image and a resource (conformance scenario tools-call-mixed-content)."""
    return ToolResult(
        "Multiple content types test:",
        ImageBlock.from_bytes(PNG, "image/png"),
        ResourceBlock(
            "test://mixed-content-resource",
            mime_type="application/json",
            text='{"test":"data","value":123}',
        ),
    )


@tool
def test_tool_with_progress(ctx: ToolContext) -> str:
    """Report progress 0, 50 and 100 of 100 (conformance scenario tools-call-with-progress)."""
    for step in (0, 50, 100):
        ctx.report_progress(step, 100)
        if step < 100:
            time.sleep(0.05)
    return "Progress test completed"


NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ASK_NAME = InputRequired.elicitation("What is your name?", NAME_FORM)


@tool
def test_input_required_result_elicitation(ctx: ToolContext) -> str:
    """Greet the user by the name a form asks for (input-required-result-basic-elicitation)."""
    answer = ctx.input_responses.get("user_name")
    if answer is None:  # a first call, or answers under other keys: ask (again)
        return InputRequired({"user_name": ASK_NAME})
    return f"Hello, {answer['content']['name']}!"


@tool
def test_input_required_result_sampling(ctx: ToolContext) -> str:
    """Answer with the client model's completion (input-required-result-basic-sampling)."""
    answer = ctx.input_responses.get("capital_question")
    if answer is None:
        question = InputRequired.sampling("What is the capital of France?", 100)
        return InputRequired({"capital_question": question})
    return str(answer["content"]["text"])


@tool
def test_input_required_result_list_roots(ctx: ToolContext) -> str:
    """List the client's roots (input-required-result-basic-list-roots)."""
    answer = ctx.input_responses.get("client_roots")
    if answer is None:
        return InputRequired({"client_roots": InputRequired.roots()})
    return "Roots: " + ", ".join(root["uri"] for root in answer["roots"])


CONFIRM = InputRequired.elicitation(
    "Please confirm",
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
)


@tool
def test_input_required_result_request_state(ctx: ToolContext) -> str:
    """Finish only with the state it handed out (input-required-result-request-state)."""
    if ctx.request_state == "awaiting-confirmation" and "confirm" in ctx.input_responses:
        return "state-ok: confirmed"
    return InputRequired({"confirm": CONFIRM}, request_state="awaiting-confirmation")


@tool
def test_input_required_result_multiple_inputs(ctx: ToolContext) -> str:
    """Ask for a form, a completion and the roots at once (multiple-input-requests)."""
    wanted = {
        "user_name": ASK_NAME,
        "greeting": InputRequired.sampling("Generate a greeting", 50),
        "client_roots": InputRequired.roots(),
    }
    if ctx.request_state == "all-three" and wanted.keys() <= ctx.input_responses.keys():
        return "Received all inputs"
    return InputRequired(wanted, request_state="all-three")


@tool
def test_input_required_result_multi_round(ctx: ToolContext) -> str:
    """Ask twice, one answer at a time (input-required-result-multi-round)."""
    state = ctx.request_state or ""
    answers = ctx.input_responses
    if state.startswith("round-2:") and "step2" in answers:
        name = state.removeprefix("round-2:")
        return f"{name} likes {answers['step2']['content']['color']}"
    if state == "round-1" and "step1" in answers:
        color = InputRequired.elicitation(
            "Step 2: What is your favorite color?",
            {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
        )
        name = answers["step1"]["content"]["name"]
        return InputRequired({"step2": color}, request_state=f"round-2:{name}")
    step1 = InputRequired.elicitation("Step 1: What is your name?", NAME_FORM)
    return InputRequired({"step1": step1}, request_state="round-1")


@tool
def test_input_required_result_tampered_state(ctx: ToolContext) -> str:
    """Hand out state; a changed copy never reaches this tool (tampered-state)."""
    if ctx.request_state == "untouched" and "confirm" in ctx.input_responses:
        return "state-ok"
    return InputRequired({"confirm": CONFIRM}, request_state="untouched")


@tool
def test_input_required_result_capabilities() -> str:
    """Ask for a form and a completion; the server drops what the client cannot give
    (input-required-result-capability-check)."""
    return InputRequired(
        {
            "user_name": ASK_NAME,
            "greeting": InputRequired.sampling("Generate a greeting", 50),
        }
    )


@tool
def test_missing_capability() -> str:
    """Ask the client's model, which only a client declaring sampling can answer
    (server-stateless: refused with -32021 otherwise)."""
    return InputRequired({"completion": InputRequired.sampling("Say hello", 20)})


@tool
def test_streaming_elicitation(ctx: ToolContext) -> str:
    """Ask for a form as an input_required result, never as a request on the response stream
    (server-stateless)."""
    answer = ctx.input_responses.get("user_name")
    if answer is None:
        return InputRequired({"user_name": ASK_NAME})
    return f"Hello, {answer['content']['name']}!"


@tool
def test_logging_tool() -> str:
    """Log on the server; MCP log notifications are never sent (server-stateless: no logs
    without a requested log level)."""
    logging.getLogger(__name__).info("test_logging_tool ran")
    return "Logged on the server"


# The older revision's way: the server asks the client during the call. A tool returns
# InputRequired either way; over a 2025-11-25 session the server asks on the call's stream and
# calls the tool again with the answers.


@tool
def test_sampling(prompt: str, ctx: ToolContext) -> str:
    """Answer with the client model's completion of ``prompt`` (tools-call-sampling)."""
    answer = ctx.input_responses.get("completion")
    if answer is None:
        return InputRequired({"completion": InputRequired.sampling(prompt, 100)})
    return f"LLM response: {answer['content']['text']}"


def _elicited(answer: dict[str, Any]) -> str:
    return f"action={answer['action']}, content={json.dumps(answer.get('content'))}"


@tool
def test_elicitation(message: str, ctx: ToolContext) -> str:
    """Ask the user for a user name and e-mail address (tools-call-elicitation)."""
    answer = ctx.input_responses.get("contact")
    if answer is None:
        form = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        return InputRequired({"contact": InputRequired.elicitation(message, form)})
    return f"User response: {_elicited(answer)}"


@tool
def test_elicitation_sep1034_defaults(ctx: ToolContext) -> str:
    """Ask with a default for every primitive type (elicitation-sep1034-defaults)."""
    answer = ctx.input_responses.get("profile")
    if answer is None:
        form = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {
                    "type": "string",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "default": True},
            },
        }
        return InputRequired({"profile": InputRequired.elicitation("Your profile", form)})
    return f"Elicitation completed: {_elicited(answer)}"


@tool
def test_elicitation_sep1330_enums(ctx: ToolContext) -> str:
    """Ask with each of the five kinds of choice (elicitation-sep1330-enums)."""
    answer = ctx.input_responses.get("choices")
    if answer is None:
        three = ["option1", "option2", "option3"]
        titled = [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ]
        form = {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": three},
                "titledSingle": {"type": "string", "oneOf": titled},
                "legacyEnum": {
                    "type": "string",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": three}},
                "titledMulti": {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"},
                        ]
                    },
                },
            },
        }
        return InputRequired({"choices": InputRequired.elicitation("Choose", form)})
    return f"Elicitation completed: {_elicited(answer)}"


class JsonSchema202012Tool(ToolCallback):
    """A tool whose input schema uses JSON Schema 2020-12 keywords (scenario json-schema-2020-12).

    Its schema is written by hand, as an MCP server's would be, to prove that the adapter sends
    ``$schema``, ``$defs`` and ``additionalProperties`` unchanged.
    """

    _definition = ToolDefinition(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    )

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        return tool_input


def callbacks() -> list[Any]:
    return [
        *tool_callbacks(
            test_simple_text,
            test_error_handling,
            test_image_content,
            test_audio_content,
            test_embedded_resource,
            test_multiple_content_types,
            test_tool_with_progress,
            test_input_required_result_elicitation,
            test_input_required_result_sampling,
            test_input_required_result_list_roots,
            test_input_required_result_request_state,
            test_input_required_result_multiple_inputs,
            test_input_required_result_multi_round,
            test_input_required_result_tampered_state,
            test_input_required_result_capabilities,
            test_missing_capability,
            test_streaming_elicitation,
            test_logging_tool,
            test_sampling,
            test_elicitation,
            test_elicitation_sep1034_defaults,
            test_elicitation_sep1330_enums,
        ),
        JsonSchema202012Tool(),
    ]
