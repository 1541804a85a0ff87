"""What one MCP server says about one tool, the name the model sees for it, and its pin hash.

Pure Python (no SDK import): the Django layer stores and compares these values.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tool_calling.core.errors import ToolDefinitionError
from tool_calling.core.tools.definition import JsonSchema, ToolDefinition

__all__ = ["McpToolSpec", "definition_hash", "mcp_tool_name", "validate_prefix"]

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_UNSAFE_RUN_RE = re.compile(r"[^A-Za-z0-9_.\-]+")
_PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,31}")

MAX_PREFIX_LENGTH = 32
"""Longest name prefix: leaves at least 22 characters of a 64-character tool name."""

HASH_LENGTH = 8
"""Hex digits of SHA-256 appended to a name that had to be shortened or cleaned."""


def validate_prefix(prefix: str | None) -> str | None:
    """Return ``prefix`` if it can start tool names; raise ``ToolDefinitionError`` otherwise."""
    if prefix is None or prefix == "":
        return None
    if not isinstance(prefix, str) or _PREFIX_RE.fullmatch(prefix) is None:
        raise ToolDefinitionError(
            f"Invalid MCP tool name prefix {prefix!r}: a prefix must be 1-{MAX_PREFIX_LENGTH} "
            "characters of letters, digits, '_', '.' or '-', starting with a letter or digit."
        )
    return prefix


def mcp_tool_name(server_name: str, prefix: str | None = None) -> str:
    """Return the tool name the model sees for ``server_name`` (deterministic, always valid).

    ``prefix_server_name`` when that is 1-64 characters of ``[A-Za-z0-9_.-]``. Otherwise the
    server's name is cleaned (every run of other characters becomes ``_``), shortened to fit,
    and followed by ``_`` and the first 8 hex digits of the SHA-256 of the server's name, so two
    server names never map to one model name and the same name always maps the same way.

    Raises:
        ToolDefinitionError: ``prefix`` is not a valid prefix.
    """
    prefix = validate_prefix(prefix)
    head = f"{prefix}_" if prefix else ""
    candidate = head + server_name
    if _NAME_RE.fullmatch(candidate) is not None:
        return candidate
    digest = hashlib.sha256(server_name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]
    cleaned = _UNSAFE_RUN_RE.sub("_", server_name).strip("_") or "tool"
    room = 64 - len(head) - 1 - HASH_LENGTH
    return f"{head}{cleaned[:room].rstrip('_') or 'tool'}_{digest}"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def definition_hash(
    *,
    server_name: str,
    title: str | None,
    description: str,
    input_schema: JsonSchema,
    output_schema: JsonSchema | None,
    annotations: Mapping[str, Any],
) -> str:
    """Return the SHA-256 (hex) of everything a server says about a tool, canonically encoded.

    Any change of the name, title, description, schemas or annotations changes the hash; key
    order and whitespace do not.
    """
    payload = {
        "name": server_name,
        "title": title,
        "description": description,
        "inputSchema": input_schema,
        "outputSchema": output_schema,
        "annotations": dict(annotations),
    }
    return hashlib.sha256(_canonical(payload).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, kw_only=True)
class McpToolSpec:
    """One tool as an MCP server lists it, with the name the model sees for it."""

    server_name: str
    """The tool's name on the server (what ``tools/call`` sends)."""
    name: str
    """The name offered to the model: the prefixed name, or its deterministic mapping."""
    title: str | None = None
    """The server's human-readable title, if it gave one."""
    description: str = ""
    """The server's description (untrusted text from the server)."""
    input_schema: JsonSchema = field(default_factory=lambda: {"type": "object"}, hash=False)
    """The server's JSON Schema of the arguments; arguments are validated against it."""
    output_schema: JsonSchema | None = field(default=None, hash=False)
    """The server's JSON Schema of the structured result, if it gave one."""
    annotations: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The server's hints (``readOnlyHint``, ``destructiveHint``, ...) as sent: shown to
    operators, never trusted to skip a check."""

    @property
    def definition_hash(self) -> str:
        """SHA-256 of what the server said about the tool, for pinning an approved definition."""
        return definition_hash(
            server_name=self.server_name,
            title=self.title,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=self.annotations,
        )

    def to_definition(self) -> ToolDefinition:
        """Return the definition sent to the model.

        Raises:
            ToolDefinitionError: the description hides invisible characters, or the schema is
                not an object schema.
        """
        return ToolDefinition(self.name, self.description, self.input_schema)
