"""What the model is told about a tool, and how the framework treats its result."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from tool_calling.core.errors import ToolDefinitionError

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


def _invisible_character(text: str) -> tuple[int, str] | None:
    """Return the position and character of the first invisible or control character, if any.

    Zero-width, bidirectional-override and tag characters (Unicode category Cf) and control
    characters other than tab and newline can hide instructions from the people who review a
    tool's description while the model still reads them.
    """
    for position, char in enumerate(text):
        category = unicodedata.category(char)
        if category == "Cf" or (category == "Cc" and char not in "\t\n\r"):
            return position, char
    return None


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
        if not isinstance(self.description, str):
            raise ToolDefinitionError(
                f"Tool {self.name!r}: description must be a str, "
                f"got {type(self.description).__name__}."
            )
        hidden = _invisible_character(self.description)
        if hidden is not None:
            position, char = hidden
            raise ToolDefinitionError(
                f"Tool {self.name!r}: the description contains the invisible character "
                f"U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')}) at position {position}; "
                "remove it."
            )
        if not isinstance(self.input_schema, dict) or self.input_schema.get("type") != "object":
            raise ToolDefinitionError(
                f"Tool {self.name!r}: input_schema must be a JSON Schema object "
                'with "type": "object".'
            )


@dataclass(frozen=True, kw_only=True)
class ToolMetadata:
    """How the framework treats a tool: its result, its approval, how it is found."""

    return_direct: bool = False
    """Return the tool's result to the caller as the answer instead of sending it to the model."""
    requires_approval: bool = False
    """A person must approve each call before it runs (background runs pause for it; see
    ``tool_calling.calls.approvals``). In code it is a floor: operators cannot lift it in the
    admin."""
    tags: tuple[str, ...] = ()
    """Extra words tool search finds the tool by (synonyms, the product it belongs to, ...);
    never sent to the model."""

    def __post_init__(self) -> None:
        tags = self.tags
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise ToolDefinitionError(
                f"ToolMetadata tags must be a sequence of strings, got {tags!r}."
            )
        object.__setattr__(self, "tags", tuple(tags))
