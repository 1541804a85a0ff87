"""The tools the MCP conformance suite calls by name, as tool_calling tools.

The suite's server scenarios expect tools with fixed names and answers (``test_simple_text``,
``test_error_handling``, ``json_schema_2020_12_tool``). They are written here the way a project
writes its tools; McpToolServer serves them like any other.
"""

from __future__ import annotations

from typing import Any

from tool_calling import ToolCallback, ToolContext, ToolDefinition, tool, tool_callbacks
from tool_calling.exceptions import ToolFailure


@tool
def test_simple_text() -> str:
    """Return a fixed text (conformance scenario tools-call-simple-text)."""
    return "This is a simple text response for testing."


@tool
def test_error_handling() -> str:
    """Always fail (conformance scenario tools-call-error)."""
    raise ToolFailure("This tool intentionally returns an error for testing")


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
    return [*tool_callbacks(test_simple_text, test_error_handling), JsonSchema202012Tool()]
