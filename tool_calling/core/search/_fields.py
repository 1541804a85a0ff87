"""The searchable fields of a tool definition: name, description, parameters, tags."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["parameter_text", "tool_fields"]

_MAX_DEPTH = 3
_MAX_ENUM = 20


def _walk(schema: Any, depth: int) -> Iterator[str]:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return
    description = schema.get("description")
    if isinstance(description, str):
        yield description
    enum = schema.get("enum")
    if isinstance(enum, list):
        yield " ".join(str(v) for v in enum[:_MAX_ENUM] if isinstance(v, str))
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            yield str(name)
            yield from _walk(child, depth + 1)
    for key in ("items", "additionalProperties"):
        yield from _walk(schema.get(key), depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        variants = schema.get(key)
        if isinstance(variants, list):
            for variant in variants:
                yield from _walk(variant, depth + 1)


def parameter_text(definition: ToolDefinition) -> str:
    """Return the parameter names, descriptions and enum values of a tool as one text."""
    schema = dict(definition.input_schema)
    schema.pop("description", None)  # the root's description repeats the tool's, if any
    return " ".join(_walk(schema, 0))


def tool_fields(definition: ToolDefinition, tags: Sequence[str] = ()) -> dict[str, str]:
    """Return ``{"name", "description", "parameters", "tags"}`` texts of one tool."""
    return {
        "name": definition.name,
        "description": definition.description,
        "parameters": parameter_text(definition),
        "tags": " ".join(tags),
    }
