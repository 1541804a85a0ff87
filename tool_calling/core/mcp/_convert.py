"""Conversions at the MCP boundary: arguments, ToolContext to ``_meta``, results to text.

Arguments are checked against the server's JSON Schema; results become the text the model reads.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tool_calling.core.errors import ToolArgumentsError
from tool_calling.core.mcp._sdk import jsonschema
from tool_calling.core.tools.definition import JsonSchema

logger = logging.getLogger("tool_calling.mcp")

MAX_ERRORS = 10
"""Validation problems listed one by one before the rest are counted."""

_TYPE_TEXT = {
    "string": "Input should be a valid string",
    "integer": "Input should be a valid integer",
    "number": "Input should be a valid number",
    "boolean": "Input should be a valid boolean",
    "array": "Input should be a valid list",
    "object": "Input should be a valid dictionary",
    "null": "Input should be None",
}


def compile_validator(tool_name: str, schema: JsonSchema) -> Any | None:
    """Return a ``jsonschema`` validator for ``schema``, or ``None`` when the schema is invalid.

    The dialect comes from ``$schema``; without one it is JSON Schema 2020-12, as the MCP
    specification says. An invalid schema is logged and left to the server to enforce.
    """
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        logger.warning(
            "MCP tool %r has an invalid input schema (%s); its arguments are not checked "
            "before the call",
            tool_name,
            exc.message,
        )
        return None
    return cls(schema)


def _shown(part: object) -> str:
    text = str(part)
    return text if len(text) <= 80 else text[:80] + "..."


def _loc(path: Iterable[object], last: object | None = None) -> str:
    parts = [_shown(p) for p in path]
    if last is not None:
        parts.append(_shown(last))
    return ".".join(parts) or "(root)"


def _render(value: Any) -> str:
    if isinstance(value, str):
        return f"'{_shown(value)}'"
    return _shown(json.dumps(value, ensure_ascii=False))


def _one_of(values: list[Any]) -> str:
    rendered = [_render(v) for v in values[:10]]
    if len(values) > 10:
        rendered.append("...")
    if len(rendered) == 1:
        return rendered[0]
    return ", ".join(rendered[:-1]) + " or " + rendered[-1]


def _extra_keys(error: Any) -> list[str]:
    instance = error.instance if isinstance(error.instance, dict) else {}
    schema = error.schema if isinstance(error.schema, dict) else {}
    known = schema.get("properties") or {}
    patterns = list((schema.get("patternProperties") or {}).keys())
    return [
        key
        for key in instance
        if key not in known and not any(re.search(pattern, key) for pattern in patterns)
    ]


def _lines_for(error: Any, missing: dict[tuple[object, ...], list[str]]) -> list[str]:
    path = tuple(error.absolute_path)
    keyword = error.validator
    value = error.validator_value
    if keyword == "required":
        pending = missing.setdefault(
            path,
            [p for p in value if isinstance(error.instance, dict) and p not in error.instance],
        )
        name = pending.pop(0) if pending else "?"
        return [f"- {_loc(path, name)}: Field required"]
    if keyword in ("additionalProperties", "unevaluatedProperties") and value is False:
        return [f"- {_loc(path, key)}: Unknown parameter; remove it" for key in _extra_keys(error)]
    if keyword in ("anyOf", "oneOf") and isinstance(value, list) and error.instance is not None:
        # "X or null" (an optional parameter): report what is wrong against X itself.
        kept = [
            i
            for i, sub in enumerate(value)
            if not (isinstance(sub, dict) and sub.get("type") == "null")
        ]
        if len(kept) == 1:
            inner = [e for e in error.context or () if list(e.relative_schema_path)[:1] == kept]
            if inner:
                return [line for e in inner for line in _lines_for(e, missing)]
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        if len(kinds) == 1 and kinds[0] in _TYPE_TEXT:
            return [f"- {_loc(path)}: {_TYPE_TEXT[kinds[0]]}"]
        return [f"- {_loc(path)}: Input should be of type {' or '.join(map(str, kinds))}"]
    simple: dict[str, Callable[[], str]] = {
        "enum": lambda: f"Input should be {_one_of(list(value))}",
        "const": lambda: f"Input should be {_render(value)}",
        "minimum": lambda: f"Input should be greater than or equal to {value}",
        "maximum": lambda: f"Input should be less than or equal to {value}",
        "exclusiveMinimum": lambda: f"Input should be greater than {value}",
        "exclusiveMaximum": lambda: f"Input should be less than {value}",
        "multipleOf": lambda: f"Input should be a multiple of {value}",
        "minLength": lambda: f"String should have at least {value} characters",
        "maxLength": lambda: f"String should have at most {value} characters",
        "pattern": lambda: f"String should match pattern {_render(value)}",
        "minItems": lambda: f"List should have at least {value} items",
        "maxItems": lambda: f"List should have at most {value} items",
        "uniqueItems": lambda: "List items should be unique",
        "anyOf": lambda: "Input does not match any of the allowed forms",
        "oneOf": lambda: "Input should match exactly one of the allowed forms",
        "not": lambda: "Input is of a form that is not allowed",
    }
    if keyword in simple:
        return [f"- {_loc(path)}: {simple[keyword]()}"]
    message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
    return [f"- {_loc(path)}: {message}"]


def check_arguments(tool_name: str, validator: Any | None, arguments: dict[str, Any]) -> None:
    """Raise ``ToolArgumentsError`` listing what is wrong with ``arguments``, field by field.

    The text has the shape of local tools' errors (``- qty: Field required``), at most
    :data:`MAX_ERRORS` lines.
    """
    if validator is None:
        return
    errors = list(validator.iter_errors(arguments))
    if not errors:
        return
    missing: dict[tuple[object, ...], list[str]] = {}
    lines = [line for error in errors for line in _lines_for(error, missing)]
    shown = lines[:MAX_ERRORS]
    if len(lines) > MAX_ERRORS:
        shown.append(f"- ... and {len(lines) - MAX_ERRORS} more errors")
    raise ToolArgumentsError(
        tool_name, f"Invalid arguments for tool '{tool_name}':\n" + "\n".join(shown)
    )


# -- ToolContext -> _meta -----------------------------------------------------------------------

INTERNAL_PREFIX = "_"
"""ToolContext keys that start with this are internal: they never leave the process."""


def _reserved_meta_key(key: str) -> bool:
    """Return whether the MCP specification reserves the ``_meta`` key ``key``.

    Reserved: ``progressToken``, and prefixes whose second label is ``modelcontextprotocol`` or
    ``mcp`` (``io.modelcontextprotocol/...``).
    """
    if key == "progressToken":
        return True
    if "/" not in key:
        return False
    labels = key.split("/", 1)[0].split(".")
    return len(labels) >= 2 and labels[1] in ("modelcontextprotocol", "mcp")


def context_meta(
    context: Mapping[str, Any] | None, internal_keys: frozenset[str] = frozenset()
) -> dict[str, Any] | None:
    """Return the part of a ToolContext that travels to the server as ``_meta``.

    Left out: keys starting with ``_`` (:data:`INTERNAL_PREFIX`), keys in ``internal_keys``,
    keys the MCP specification reserves, and values with no JSON form (a user object, say).
    Returns ``None`` when nothing is left.
    """
    if not context:
        return None
    sent: dict[str, Any] = {}
    for key, value in context.items():
        if (
            not isinstance(key, str)
            or key.startswith(INTERNAL_PREFIX)
            or key in internal_keys
            or _reserved_meta_key(key)
        ):
            continue
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            logger.debug("ToolContext key %r has no JSON form; not sent as MCP _meta", key)
            continue
        sent[key] = value
    return sent or None


# -- CallToolResult -> text ---------------------------------------------------------------------


def _decoded_size(data: object) -> int | None:
    """Size in bytes of base64 ``data``, computed from its length (nothing is decoded)."""
    if not isinstance(data, str):
        return None
    text = "".join(data.split())
    padding = len(text) - len(text.rstrip("="))
    return max(0, len(text) * 3 // 4 - padding)


def _size_text(data: object) -> str:
    size = _decoded_size(data)
    return "" if size is None else f", {size} bytes"


def _block_text(block: Mapping[str, Any]) -> str | None:
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    if kind in ("image", "audio"):
        mime = block.get("mimeType") or "unknown type"
        return f"[{kind}: {mime}{_size_text(block.get('data'))}]"
    if kind == "resource_link":
        name = block.get("title") or block.get("name") or "resource"
        mime = block.get("mimeType")
        return f"[resource link: {name} <{block.get('uri', '')}>{f' ({mime})' if mime else ''}]"
    if kind == "resource":
        resource = block.get("resource") or {}
        uri = resource.get("uri", "")
        mime = resource.get("mimeType")
        if isinstance(resource.get("text"), str):
            return f"[resource: {uri}{f' ({mime})' if mime else ''}]\n{resource['text']}"
        return f"[resource: {uri} ({mime or 'binary'}{_size_text(resource.get('blob'))})]"
    return f"[{kind or 'unknown'} content]"


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _carries(texts: list[str], value: Any) -> bool:
    """Whether the text blocks ``texts`` say ``value``: one block, or one block per list item."""
    if any(text == value or _same_json(text, value) for text in texts):
        return True
    return (
        isinstance(value, list)
        and len(texts) == len(value) > 0
        and all(_carries([text], item) for text, item in zip(texts, value, strict=True))
    )


def _text_copy_of(texts: list[str], structured: Any) -> bool:
    """Whether the text blocks are a copy of the structured content (servers send both).

    The MCP specification asks a server sending structured content to send its JSON as text too.
    The SDKs' high-level servers (FastMCP, ``MCPServer``) wrap a value that is not an object as
    ``{"result": value}`` and write the value itself as text: a string as it is, a list as one
    block per item, anything else as JSON (indented, which parsing ignores).
    """
    if _carries(texts, structured):
        return True
    if isinstance(structured, Mapping) and len(structured) == 1:
        (value,) = structured.values()
        return _carries(texts, value)
    return False


def result_text(result: Mapping[str, Any]) -> str:
    """Return the text the model reads for a ``tools/call`` result (its JSON form, camelCase).

    Text blocks as they are; images, audio and binary resources as a short description (type
    and size, never the bytes); text resources with their text. Structured content is added
    as compact JSON only when the text blocks are not a copy of it (the specification asks
    servers for both, and a model reading both would read every result twice). Blocks are
    joined by newlines.
    """
    parts: list[str] = []
    texts: list[str] = []
    for block in result.get("content") or []:
        if isinstance(block, Mapping):
            text = _block_text(block)
            if text is not None:
                parts.append(text)
                if block.get("type") == "text":
                    texts.append(text)
    structured = result.get("structuredContent")
    if structured is not None and not _text_copy_of(texts, structured):
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(parts)
