"""What the model is told about a tool, and how the framework treats its result."""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tool_calling.core.errors import ToolDefinitionError

__all__ = [
    "JsonSchema",
    "ToolAnnotations",
    "ToolDefinition",
    "ToolIcon",
    "ToolMetadata",
    "validate_tool_name",
]

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


_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _invisible_character(text: str) -> tuple[int, str] | None:
    """Return the position and character of the first invisible or control character, if any.

    Zero-width, bidirectional-override and tag characters (Unicode category Cf) and control
    characters other than tab and newline can hide instructions from the people who review a
    tool's description while the model still reads them.
    """
    if text.isascii() and _ASCII_CONTROL.search(text) is None:  # the common case, at C speed
        return None
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
        self._check_name_and_description()
        _check_input_schema(self.name, self.input_schema)

    @classmethod
    def _deferred(
        cls, name: str, description: str, input_schema: Callable[[], JsonSchema]
    ) -> ToolDefinition:
        """A definition whose input schema is built by ``input_schema()`` when first read.

        ``@tool`` uses this so that importing a module of tools costs no schema generation;
        the description is checked at once (the caller has checked the name), and the schema is
        built (once) by whoever first reads it: a request offering the tool, the registry's
        sync, an equality test.

        Raises:
            ToolDefinitionError: the description is invalid.
        """
        definition = cls.__new__(cls)
        fields = definition.__dict__  # frozen: write the fields the way __init__ would
        fields["name"] = name
        fields["description"] = description
        fields["_make_input_schema"] = input_schema
        definition._check_description()
        return definition

    if not TYPE_CHECKING:  # typed as the plain field; only a deferred definition gets here

        def __getattr__(self, attribute: str) -> Any:
            if attribute != "input_schema" or "_make_input_schema" not in self.__dict__:
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {attribute!r}"
                )
            with _schema_lock:
                fields = self.__dict__
                if "input_schema" not in fields:
                    schema = fields["_make_input_schema"]()
                    _check_input_schema(self.name, schema)
                    fields["input_schema"] = schema
                    del fields["_make_input_schema"]
                return fields["input_schema"]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the built schema, never the function that builds it."""
        self.input_schema  # noqa: B018 - builds a deferred schema
        return dict(self.__dict__)

    def _check_name_and_description(self) -> None:
        validate_tool_name(self.name)
        self._check_description()

    def _check_description(self) -> None:
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


_schema_lock = threading.RLock()


def _check_input_schema(name: str, schema: Any) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ToolDefinitionError(
            f'Tool {name!r}: input_schema must be a JSON Schema object with "type": "object".'
        )


@dataclass(frozen=True, kw_only=True)
class ToolAnnotations:
    """Hints about what a tool does, for MCP clients and the people using them.

    Hints only (``None``: not said): nothing in this project lifts a check because of them, and
    an MCP client should not either unless it trusts the server.
    """

    read_only_hint: bool | None = None
    """The tool changes nothing (MCP's ``readOnlyHint``)."""
    destructive_hint: bool | None = None
    """The tool may destroy or overwrite data (``destructiveHint``)."""
    idempotent_hint: bool | None = None
    """Calling it again with the same arguments changes nothing more (``idempotentHint``)."""
    open_world_hint: bool | None = None
    """It reaches beyond this system: the web, other services (``openWorldHint``)."""

    def __post_init__(self) -> None:
        for name in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ToolDefinitionError(
                    f"ToolAnnotations {name} must be True, False or None, got {value!r}."
                )

    def as_mcp(self) -> dict[str, bool]:
        """The hints that were said, under MCP's names (``readOnlyHint``, ...)."""
        names = {
            "readOnlyHint": self.read_only_hint,
            "destructiveHint": self.destructive_hint,
            "idempotentHint": self.idempotent_hint,
            "openWorldHint": self.open_world_hint,
        }
        return {key: value for key, value in names.items() if value is not None}

    @classmethod
    def from_mcp(cls, hints: Any) -> ToolAnnotations:
        """Annotations from MCP's names (unknown keys and non-booleans are left out)."""
        hints = hints if isinstance(hints, dict) else {}

        def flag(key: str) -> bool | None:
            value = hints.get(key)
            return value if isinstance(value, bool) else None

        return cls(
            read_only_hint=flag("readOnlyHint"),
            destructive_hint=flag("destructiveHint"),
            idempotent_hint=flag("idempotentHint"),
            open_world_hint=flag("openWorldHint"),
        )


@dataclass(frozen=True)
class ToolIcon:
    """An icon an MCP client may show beside the tool."""

    src: str
    """Its URL (``https:`` or a ``data:`` URI)."""
    mime_type: str | None = None
    """Its media type (``image/png``, ``image/svg+xml``), if known."""
    sizes: tuple[str, ...] = ()
    """The sizes it comes in (``"48x48"``, ``"any"``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.src, str) or not self.src.startswith(("https://", "data:")):
            raise ToolDefinitionError(
                f"ToolIcon src must be an https: URL or a data: URI, got {self.src!r}."
            )
        object.__setattr__(self, "sizes", tuple(self.sizes))

    def as_mcp(self) -> dict[str, Any]:
        """The icon as MCP writes it."""
        icon: dict[str, Any] = {"src": self.src}
        if self.mime_type:
            icon["mimeType"] = self.mime_type
        if self.sizes:
            icon["sizes"] = list(self.sizes)
        return icon


@dataclass(frozen=True, kw_only=True)
class ToolMetadata:
    """How the framework treats a tool: its result, its approval, how it is found."""

    return_direct: bool = False
    """Return the tool's result to the caller as the answer instead of sending it to the model."""
    requires_approval: bool = False
    """A person must approve each call before it runs (background runs pause for it; see
    ``tool_calling.calls.approvals``). In code it is a floor: operators cannot lift it in the
    admin."""
    requires_confirmation: bool | Callable[[Mapping[str, Any]], bool] = False
    """The user must confirm a call before it runs: ``True`` for every call, or a callable of
    the call's parsed arguments that says which (``lambda args: args["amount"] > 100``). The
    manager then runs none of the reply's calls until it has a decision per waiting call
    (``tool_calling.core.execution.confirmation``). A floor: no policy can waive it."""
    tags: tuple[str, ...] = ()
    """Extra words tool search finds the tool by (synonyms, the product it belongs to, ...);
    never sent to the model."""
    title: str | None = None
    """A name for people (MCP's ``title``: what a client shows); never sent to the model."""
    annotations: ToolAnnotations = field(default_factory=ToolAnnotations)
    """Hints about what the tool does (read-only, destructive, ...), served over MCP."""
    icons: tuple[ToolIcon, ...] = ()
    """Icons an MCP client may show beside the tool."""

    def __post_init__(self) -> None:
        tags = self.tags
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise ToolDefinitionError(
                f"ToolMetadata tags must be a sequence of strings, got {tags!r}."
            )
        object.__setattr__(self, "tags", tuple(tags))
        object.__setattr__(self, "icons", tuple(self.icons))
        flag = self.requires_confirmation
        if not isinstance(flag, bool) and not callable(flag):
            raise ToolDefinitionError(
                "ToolMetadata requires_confirmation must be a bool or a callable of the "
                f"arguments, got {type(flag).__name__}."
            )
