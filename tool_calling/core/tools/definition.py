"""What the model is told about a tool, and how the framework treats its result."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tool_calling.exceptions import ToolDefinitionError

__all__ = ["JsonSchema", "ToolDefinition", "ToolMetadata", "validate_tool_name"]

JsonSchema = dict[str, Any]

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
NAME_RULE = "1-64 characters of letters, digits, '_', '.' or '-'"


def validate_tool_name(name: object, origin: str | None = None) -> str:
    """Return ``name`` if it is a valid tool name; raise ``ToolDefinitionError`` otherwise."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        where = f" (defined by {origin})" if origin else ""
        raise ToolDefinitionError(
            f"Invalid tool name {name!r}{where}: a tool name must be {NAME_RULE}."
        )
    return name


@dataclass(frozen=True)
class ToolDefinition:
    """The name, description and input schema the model sees for one tool."""

    name: str
    """Unique name: 1-64 characters of ``[A-Za-z0-9_.-]``."""
    description: str
    """What the tool does, for the model to decide when to call it."""
    input_schema: JsonSchema = field(hash=False)
    """JSON Schema (an object schema) of the tool's arguments."""

    def __post_init__(self) -> None:
        validate_tool_name(self.name)
        if not isinstance(self.input_schema, dict) or self.input_schema.get("type") != "object":
            raise ToolDefinitionError(
                f"Tool {self.name!r}: input_schema must be a JSON Schema object "
                "with \"type\": \"object\"."
            )


@dataclass(frozen=True, kw_only=True)
class ToolMetadata:
    """How the framework treats a tool's result."""

    return_direct: bool = False
    """Return the tool's result to the caller as the answer instead of sending it to the model."""
