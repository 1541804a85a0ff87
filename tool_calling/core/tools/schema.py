"""JSON Schema and argument validation for tool functions, built from type hints with pydantic."""

from __future__ import annotations

import asyncio
import builtins
import collections.abc
import concurrent.futures
import contextlib
import copy
import dataclasses
import datetime
import decimal
import inspect
import json
import keyword
import re
import threading
import types
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    TypeAlias,
    Union,
    get_args,
    get_origin,
)

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo
from typing_extensions import TypedDict, is_typeddict

from tool_calling.core.errors import ToolArgumentsError, ToolDefinitionError
from tool_calling.core.tools._docstring import parse_docstring
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import JsonSchema

__all__ = [
    "ArgumentsSchema",
    "Parameter",
    "ToolParam",
    "build_arguments_schema",
    "parameters",
    "parse_arguments_object",
    "to_strict_json_schema",
    "type_hints",
]


@dataclass(frozen=True)
class ToolParam:
    """Describes a tool parameter: ``Annotated[str, ToolParam("City name, e.g. 'Oslo'")]``.

    A parameter is required unless it has a default, is ``Optional``/``X | None``, or says
    ``required=False``.
    """

    description: str = ""
    """What the parameter means, for the model."""
    required: bool | None = None
    """Force the parameter required (``True``) or optional (``False``); ``None`` infers it."""


# Types a tool cannot take or return: they have no JSON form and cannot cross a process boundary.
_UNSUPPORTED_ORIGINS: dict[Any, str] = {
    collections.abc.Callable: "a callable",
    collections.abc.Generator: "a generator",
    collections.abc.Iterator: "an iterator",
    collections.abc.AsyncIterator: "an async iterator",
    collections.abc.AsyncGenerator: "an async generator",
    collections.abc.AsyncIterable: "an async iterable",
    collections.abc.Awaitable: "an awaitable",
    collections.abc.Coroutine: "a coroutine",
    concurrent.futures.Future: "a future",
    asyncio.Future: "a future",
    types.GeneratorType: "a generator",
    types.FunctionType: "a function",
}


def _unsupported(tp: Any, seen: set[int] | None = None) -> str | None:
    """Return why ``tp`` (or a type inside it) is unsupported, or ``None``."""
    seen = set() if seen is None else seen
    if id(tp) in seen:
        return None
    seen.add(id(tp))
    origin = get_origin(tp)
    for candidate in (origin, tp):
        if candidate is None:
            continue
        if candidate in _UNSUPPORTED_ORIGINS:
            return _UNSUPPORTED_ORIGINS[candidate]
    if origin is Annotated:
        return _unsupported(get_args(tp)[0], seen)
    if origin is Literal:
        return None
    for arg in get_args(tp):
        if arg is Ellipsis or isinstance(arg, (list, str, int, float, bytes)):
            continue
        reason = _unsupported(arg, seen)
        if reason:
            return reason
    return None


_MODULE_PATH_RE = re.compile(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*)")


def _type_name(tp: Any) -> str:
    """Return ``tp`` as written in code, without module paths: ``Future[int]``."""
    text = getattr(tp, "__name__", None) if get_origin(tp) is None else None
    return text or _MODULE_PATH_RE.sub("", repr(tp))


def _is_optional(tp: Any) -> bool:
    origin = get_origin(tp)
    if origin is Annotated:
        return _is_optional(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return type(None) in get_args(tp)
    return tp is None or tp is type(None) or tp is Any


def _is_tool_context(tp: Any) -> bool:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        return any(_is_tool_context(a) for a in get_args(tp) if a is not type(None))
    return isinstance(tp, type) and issubclass(tp, ToolContext)


def _split_annotated(tp: Any) -> tuple[Any, ToolParam | None, list[Any]]:
    """Return the bare type, our ToolParam (if any) and the other Annotated metadata."""
    if get_origin(tp) is not Annotated:
        return tp, None, []
    base, *extras = get_args(tp)
    param = next((e for e in extras if isinstance(e, ToolParam)), None)
    others = [e for e in extras if not isinstance(e, ToolParam)]
    return base, param, others


def _strip_titles(node: Any) -> Any:
    """Remove pydantic's ``title`` keywords (noise for the model), never a property named title."""
    if isinstance(node, dict):
        result = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
                value, dict
            ):
                result[key] = {k: _strip_titles(v) for k, v in value.items()}
            else:
                result[key] = _strip_titles(value)
        return result
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _close_objects(node: Any) -> None:
    """Give every object node with properties ``required`` and ``additionalProperties: false``."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict) and node["properties"]:
            node.setdefault("required", [])
            node["additionalProperties"] = False
        for value in node.values():
            _close_objects(value)
    elif isinstance(node, list):
        for value in node:
            _close_objects(value)


def _canonical_root(schema: JsonSchema) -> JsonSchema:
    """Order the root as type, properties, required, additionalProperties, then the rest."""
    root: JsonSchema = {
        "type": "object",
        "properties": schema.get("properties", {}),
        "required": list(schema.get("required", [])),
        "additionalProperties": False,
    }
    for key, value in schema.items():
        if key not in root and key != "type":
            root[key] = value
    return root


def clean_schema(raw: JsonSchema) -> JsonSchema:
    """Turn a pydantic JSON Schema into the shape tools use (no titles, closed objects)."""
    schema = _strip_titles(raw)
    ref = schema.get("$ref")
    if isinstance(ref, str) and set(schema) <= {"$ref", "$defs"}:
        # A recursive model is written as {"$ref": ..., "$defs": ...}; tools need an object root.
        target = _resolve_ref(schema, ref)
        if target is not None and target.get("type") == "object":
            schema = {**target, "$defs": schema["$defs"]}
    _close_objects(schema)
    if schema.get("type") == "object" or "properties" in schema:
        schema = _canonical_root(schema)
    return schema  # type: ignore[no-any-return]


# Keywords that describe a property rather than constrain its type; they stay outside an anyOf.
_ANNOTATION_KEYS = ("description", "default", "examples")


def _nullable(node: JsonSchema) -> JsonSchema:
    """Return ``node`` accepting null too, its description and default kept outside the anyOf."""
    if _is_nullable(node):
        return node
    outer = {k: v for k, v in node.items() if k in _ANNOTATION_KEYS}
    inner = {k: v for k, v in node.items() if k not in _ANNOTATION_KEYS}
    return {"anyOf": [inner, {"type": "null"}], **outer}


def _is_nullable(node: JsonSchema) -> bool:
    if node.get("type") == "null" or (
        isinstance(node.get("type"), list) and "null" in node["type"]
    ):
        return True
    return any(
        isinstance(option, dict) and option.get("type") == "null"
        for key in ("anyOf", "oneOf")
        for option in node.get(key, ())
    )


def _resolve_ref(root: JsonSchema, ref: str) -> JsonSchema | None:
    if not ref.startswith("#/"):
        return None
    target: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(target, dict) or part not in target:
            return None
        target = target[part]
    return target if isinstance(target, dict) else None


def _strictify(
    node: Any, root: JsonSchema, *, is_root: bool = False, inlining: frozenset[str] = frozenset()
) -> Any:
    if isinstance(node, list):
        return [_strictify(v, root, inlining=inlining) for v in node]
    if not isinstance(node, dict):
        return node
    properties = node.get("properties")
    if is_root and isinstance(properties, dict):
        # Only the tool's own parameters become nullable: the validator turns null back into the
        # parameter's default. Inside nested models null would fail validation, so their optional
        # fields are required as they are (openai's transform does the same). Wrapping before the
        # $ref handling below keeps {"anyOf": [{"$ref": ...}, {"type": "null"}]}, as pydantic
        # writes an Optional field.
        required = set(node.get("required", []))
        node = {
            **node,
            "properties": {
                name: prop
                if name in required or not isinstance(prop, dict) or _is_nullable(prop)
                else _nullable(prop)
                for name, prop in properties.items()
            },
        }
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        # Strict mode rejects $ref with siblings (a description, say): inline the target, the
        # node's own keys winning, exactly as openai.pydantic_function_tool does. A recursive
        # model would inline forever; there the reference stays, without its siblings.
        resolved = _resolve_ref(root, ref)
        if ref in inlining or resolved is None:
            return {"$ref": ref}
        merged = {**resolved, **{k: v for k, v in node.items() if k != "$ref"}}
        return _strictify(merged, root, is_root=is_root, inlining=inlining | {ref})
    node = {
        key: (
            {name: _strictify(prop, root, inlining=inlining) for name, prop in value.items()}
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict)
            else _strictify(value, root, inlining=inlining)
        )
        for key, value in node.items()
    }
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        node["required"] = list(properties)
        node["additionalProperties"] = False
    if node.get("default", ...) is None:
        del node["default"]
    return node


def to_strict_json_schema(schema: JsonSchema) -> JsonSchema:
    """Return the OpenAI strict-mode form of ``schema``.

    Every property becomes required, the tool's optional parameters become nullable (null means
    "use the default"), every object gets ``additionalProperties: false``, and a ``$ref`` with
    sibling keys is inlined. Fields of nested objects keep their own nullability, as
    ``openai.pydantic_function_tool`` does, because null inside a nested model cannot mean "use
    the default". The input is not modified.
    """
    root = copy.deepcopy(schema)
    return _strictify(root, root, is_root=True)  # type: ignore[no-any-return]


def _format_loc(loc: tuple[Any, ...]) -> str:
    # Keys come from the model: a huge one must not make the error text huge too.
    parts = (str(part) if len(str(part)) <= 80 else str(part)[:80] + "..." for part in loc)
    return ".".join(parts) or "(root)"


# Error types pydantic reports when the arguments as a whole are not an object.
_NOT_AN_OBJECT = frozenset(
    {"model_type", "dict_type", "model_attributes_type", "dataclass_type", "dataclass_exact_type"}
)


def describe_validation_error(tool_name: str, error: pydantic.ValidationError) -> str:
    """Return a short text for the model listing what was wrong, field by field."""
    errors = error.errors(include_url=False, include_input=False, include_context=False)
    first: dict[str, Any] = dict(errors[0]) if errors else {}
    if first.get("type") == "json_invalid":
        detail = str(first.get("msg", "")).removeprefix("Invalid JSON: ")
        return (
            f"Invalid arguments for tool '{tool_name}': not valid JSON ({detail}). "
            "Send the arguments as a JSON object."
        )
    if first.get("type") in _NOT_AN_OBJECT and not first.get("loc"):
        return (
            f"Invalid arguments for tool '{tool_name}': the arguments must be a JSON object "
            "of named parameters."
        )
    lines = []
    for item in errors[:10]:
        msg = item["msg"]
        if item["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            msg = "Unknown parameter; remove it"
        lines.append(f"- {_format_loc(tuple(item['loc']))}: {msg}")
    if len(errors) > 10:
        lines.append(f"- ... and {len(errors) - 10} more errors")
    return f"Invalid arguments for tool '{tool_name}':\n" + "\n".join(lines)


_FORBID = pydantic.ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

# Validation forbids unknown keys at every depth, nested models included, because every object
# of the schema says "additionalProperties": false. pydantic < 2.12 has no run-time ``extra``
# and falls back to each model's own setting.
_EXTRA: dict[str, Any] = (
    {"extra": "forbid"}
    if "extra" in inspect.signature(pydantic.TypeAdapter.validate_json).parameters
    else {}
)


class _RejectedJson(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    result = {}
    for key, value in pairs:
        if key in result:
            shown = key if len(key) <= 80 else key[:80] + "..."
            raise _RejectedJson(f"the key {shown!r} appears more than once; send each key once")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise _RejectedJson(f"{name} is not valid JSON; send a number or null")


# Built once: json.loads() with hooks would build a new decoder on every call.
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constants)


def _count_objects(value: Any) -> tuple[int, int] | None:
    """Return ``(objects, keys)`` in a validated value, or ``None`` when it cannot tell."""
    kind = type(value)
    if kind is dict:
        objects, keys = 1, len(value)
        children: Any = value.values()
    elif isinstance(value, pydantic.BaseModel):
        if value.__pydantic_extra__:
            return None
        fields = value.__pydantic_fields_set__
        objects, keys = 1, len(fields)
        children = [getattr(value, name) for name in fields]
    elif kind is list or kind is tuple:
        objects, keys, children = 0, 0, value
    elif kind in (str, int, float, bool) or value is None:
        return 0, 0
    else:
        return None  # dataclasses, TypedDicts as other types, sets...: use the full check
    for child in children:
        counted = _count_objects(child)
        if counted is None:
            return None
        objects += counted[0]
        keys += counted[1]
    return objects, keys


def _plainly_unique(text: str, value: Any) -> bool:
    """Cheap proof that a JSON object had no duplicate keys and no NaN/Infinity.

    Every ``:`` separates a key from its value unless a string holds one, and every ``{`` opens
    an object unless a string holds one. When the validated value has as many objects as braces
    and as many keys as colons, no key was repeated (a repeat would leave fewer keys). Anything
    else goes through the full check.
    """
    if "NaN" in text or "Infinity" in text:
        return False
    counted = _count_objects(value)
    return counted is not None and counted == (text.count("{"), text.count(":"))


def _check_json_text(tool_name: str, text: str) -> None:
    """Reject what pydantic's parser tolerates but JSON forbids: duplicate keys, NaN, Infinity.

    Duplicate keys would let the audit show one value while the tool receives another.
    """
    try:
        _STRICT_DECODER.decode(text)
    except _RejectedJson as exc:
        raise ToolArgumentsError(
            tool_name, f"Invalid arguments for tool '{tool_name}': {exc}."
        ) from None
    except (ValueError, RecursionError):
        pass  # pydantic parsed it already; its verdict stands


class ArgumentsSchema:
    """The JSON Schema of a tool's arguments and the validator that turns model JSON into kwargs.

    Either part may be given as a function that builds it: it is then built on first use (under
    a lock, once). ``build_arguments_schema`` defers only what cannot fail, so every definition
    error still surfaces when the tool is defined.
    """

    __slots__ = (
        "_flat",
        "_json_schema",
        "_make_json_schema",
        "_make_validator",
        "_none_means_default",
        "_strict",
        "_validator",
        "context_parameter",
        "parameters",
        "single_argument",
    )

    def __init__(
        self,
        json_schema: JsonSchema | Callable[[], JsonSchema],
        adapter: pydantic.TypeAdapter[Any] | Callable[[], pydantic.TypeAdapter[Any]],
        *,
        parameters: tuple[str, ...] = (),
        context_parameter: str | None = None,
        none_means_default: frozenset[str] = frozenset(),
        single_argument: bool = False,
        strict: bool | None = True,
        flat: bool = False,
    ) -> None:
        self._json_schema: JsonSchema | None = None
        self._make_json_schema: Callable[[], JsonSchema] | None = None
        if callable(json_schema):
            self._make_json_schema = json_schema
        else:
            self._json_schema = json_schema
        # The core validator directly: TypeAdapter.validate_json adds a Python frame per call.
        self._validator: Any = None
        self._make_validator: Callable[[], pydantic.TypeAdapter[Any]] | None = None
        if callable(adapter):  # a TypeAdapter itself is not callable
            self._make_validator = adapter
        else:
            self._validator = adapter.validator
        self.parameters = parameters
        """Names of the parameters in the schema, in order."""
        self.context_parameter = context_parameter
        """Name of the parameter that receives the ToolContext, if any."""
        self._none_means_default = none_means_default
        self.single_argument = single_argument
        """True when the function takes one instance of an input type instead of keywords."""
        self._strict = strict
        # Every parameter is a str, number, bool, None or Literal of those (see _is_flat).
        self._flat = flat

    @property
    def json_schema(self) -> JsonSchema:
        """The JSON Schema sent to the model."""
        schema = self._json_schema
        if schema is None:
            with _build_lock:
                if self._json_schema is None:
                    assert self._make_json_schema is not None
                    self._json_schema = self._make_json_schema()
                    self._make_json_schema = None
                schema = self._json_schema
        return schema

    @property
    def json_schema_built(self) -> bool:
        """Whether :attr:`json_schema` is built already (else it is built on first read)."""
        return self._json_schema is not None

    def build(self) -> None:
        """Build whatever is still deferred now (and raise its errors now)."""
        self.json_schema  # noqa: B018 - built on access
        self._load_validator()

    def _load_validator(self) -> Any:
        validator = self._validator
        if validator is None:
            with _build_lock:
                if self._validator is None:
                    assert self._make_validator is not None
                    self._validator = self._make_validator().validator
                    self._make_validator = None
                validator = self._validator
        return validator

    def validate(self, tool_name: str, tool_input: str | None) -> Any:
        """Validate the model's JSON; return kwargs (or the input instance).

        Blank input (``None``, ``""``) means ``{}``. ``null`` for an optional parameter means
        its default, as OpenAI strict mode sends it.

        Raises:
            ToolArgumentsError: the JSON is invalid or fails the schema.
        """
        if not tool_input or tool_input.isspace():
            tool_input = "{}"
        validator = self._validator or self._load_validator()
        flat = self._flat
        try:
            if flat:
                # The schema's own config is strict and forbids extra keys, and a flat schema
                # has no nested model whose config could differ: no run-time options needed
                # (passing them costs as much again as validating two fields).
                value = validator.validate_json(tool_input)
            else:
                value = validator.validate_json(tool_input, strict=self._strict, **_EXTRA)
        except pydantic.ValidationError as exc:
            value = self._retry_without_nulls(tool_name, tool_input, exc)
        if flat:
            # Every value validated as a scalar, so each ':' outside strings separates a key
            # from its value: as many ':' as keys proves no key was repeated (NaN and Infinity
            # fail a scalar's validation). A ':' inside a string sends it to the full check.
            if tool_input.count(":") != len(value):
                _check_json_text(tool_name, tool_input)
        elif not _plainly_unique(tool_input, value):
            _check_json_text(tool_name, tool_input)
        if self._none_means_default and not self.single_argument:
            for name in self._none_means_default:
                if name in value and value[name] is None:
                    del value[name]
        return value

    def _retry_without_nulls(
        self, tool_name: str, tool_input: str, error: pydantic.ValidationError
    ) -> Any:
        """For input types: drop top-level nulls that mean "default", then validate again."""
        if self.single_argument and self._none_means_default:
            try:
                data = pydantic_core.from_json(tool_input)
            except ValueError:
                data = None
            if isinstance(data, dict) and any(
                data.get(name, ...) is None for name in self._none_means_default
            ):
                kept = {
                    k: v
                    for k, v in data.items()
                    if not (k in self._none_means_default and v is None)
                }
                try:
                    return self._validator.validate_json(
                        json.dumps(kept), strict=self._strict, **_EXTRA
                    )
                except pydantic.ValidationError as exc:
                    error = exc
        raise ToolArgumentsError(tool_name, describe_validation_error(tool_name, error)) from error


_build_lock = threading.RLock()
"""Guards the first build of deferred schemas and validators (each is built once)."""


def _schema_for(adapter: pydantic.TypeAdapter[Any], where: str) -> JsonSchema:
    try:
        return adapter.json_schema()
    except pydantic.PydanticInvalidForJsonSchema as exc:
        raise ToolDefinitionError(f"{where}: cannot build a JSON Schema: {exc}") from exc


def _with_defaults(schema: JsonSchema, defaults: Mapping[str, Any]) -> JsonSchema:
    """Show the model the defaults of optional parameters (when they have a JSON form)."""
    properties = schema.get("properties", {})
    for name, default in defaults.items():
        try:
            value = pydantic_core.to_jsonable_python(default)
        except pydantic_core.PydanticSerializationError:
            continue
        if name in properties and "default" not in properties[name]:
            properties[name]["default"] = value
    return schema


def _make_typed_dict(name: str, fields: dict[str, Any]) -> Any:
    factory: Any = TypedDict  # the functional form takes a runtime name
    typed_dict = factory(name, fields)
    typed_dict.__pydantic_config__ = _FORBID
    return typed_dict


class Parameter(typing.NamedTuple):
    """What a tool needs to know of a parameter (``inspect.Parameter`` without its properties)."""

    name: str
    kind: inspect._ParameterKind
    default: Any


_P = inspect.Parameter
_new = tuple.__new__
_CO_VARARGS = inspect.CO_VARARGS
_CO_VARKEYWORDS = inspect.CO_VARKEYWORDS


def _decorated(function: types.FunctionType) -> bool:
    """Whether a function says its signature is another's (``functools.wraps``, __signature__)."""
    attributes = function.__dict__  # a plain lookup: hasattr() raises and catches inside
    return "__wrapped__" in attributes or "__signature__" in attributes


def parameters(function: Callable[..., Any]) -> list[Parameter]:
    """The parameters of ``function`` in order, as ``inspect.signature`` reports them.

    A plain function (no ``__wrapped__``, no ``__signature__``) is read from its code object, as
    ``inspect`` itself does, without building a Signature (most of the cost of ``@tool``);
    everything else goes through ``inspect.signature``.

    Raises:
        TypeError, ValueError: as ``inspect.signature`` does for what has no signature.
    """
    if type(function) is not types.FunctionType or _decorated(function):
        return [
            Parameter(p.name, p.kind, p.default)
            for p in inspect.signature(function).parameters.values()
        ]
    code = function.__code__
    names = code.co_varnames
    positional = code.co_argcount
    positional_only = code.co_posonlyargcount
    keyword_only = code.co_kwonlyargcount
    defaults = function.__defaults__ or ()
    keyword_defaults = function.__kwdefaults__ or {}
    first_default = positional - len(defaults)
    # tuple.__new__ builds each NamedTuple without the Python frame of Parameter(...).
    result = [
        _new(
            Parameter,
            (
                names[i],
                _P.POSITIONAL_ONLY if i < positional_only else _P.POSITIONAL_OR_KEYWORD,
                defaults[i - first_default] if i >= first_default else _P.empty,
            ),
        )
        for i in range(positional)
    ]
    following = positional + keyword_only  # where *args and **kwargs are named
    if code.co_flags & _CO_VARARGS:
        result.append(_new(Parameter, (names[following], _P.VAR_POSITIONAL, _P.empty)))
        following += 1
    for name in names[positional : positional + keyword_only]:
        default = keyword_defaults.get(name, _P.empty)
        result.append(_new(Parameter, (name, _P.KEYWORD_ONLY, default)))
    if code.co_flags & _CO_VARKEYWORDS:
        result.append(_new(Parameter, (names[following], _P.VAR_KEYWORD, _P.empty)))
    return result


def type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """``typing.get_type_hints(function, include_extras=True)``, quicker for plain class names.

    Under ``from __future__ import annotations`` every annotation is a string, and
    ``get_type_hints`` compiles each one. An annotation that names a class (``"str"``,
    ``"Order"``) is looked up directly, as ``get_type_hints`` would resolve it; anything else
    (generics, ``Annotated``, a decorated function) goes to ``get_type_hints`` itself.

    Raises:
        Exception: whatever ``typing.get_type_hints`` raises (``NameError`` mostly).
    """
    if type(function) is not types.FunctionType or _decorated(function):
        return typing.get_type_hints(function, include_extras=True)
    annotations = function.__annotations__
    namespace = function.__globals__
    hints: dict[str, Any] = {}
    for name, annotation in annotations.items():
        value = annotation
        if isinstance(annotation, str):
            if not annotation.isidentifier() or keyword.iskeyword(annotation):
                return typing.get_type_hints(function, include_extras=True)
            value = namespace.get(annotation, _MISSING)
            if value is _MISSING:
                value = getattr(builtins, annotation, _MISSING)
        if value is None:
            value = type(None)
        if not isinstance(value, type):
            return typing.get_type_hints(function, include_extras=True)
        hints[name] = value
    return hints


_MISSING = object()


def build_arguments_schema(
    function: Callable[..., Any],
    *,
    tool_name: str,
    skip_first: bool = False,
    param_descriptions: Mapping[str, str] | None = None,
    signature: list[Parameter] | None = None,
    hints: Mapping[str, Any] | None = None,
) -> ArgumentsSchema:
    """Build the schema and validator of ``function``'s parameters.

    ``signature`` (``parameters(function)``) and ``hints`` (``type_hints(function)``) may be
    passed when the caller has them already.

    Raises:
        ToolDefinitionError: a parameter is variadic, unannotated or of an unsupported type.
    """
    if signature is None:
        try:
            signature = parameters(function)
        except (TypeError, ValueError) as exc:
            where = _where(tool_name, function)
            raise ToolDefinitionError(f"{where}: cannot read the signature: {exc}") from exc
    if hints is None:
        try:
            hints = type_hints(function)
        except Exception as exc:  # NameError for unresolved forward references, mostly
            where = _where(tool_name, function)
            raise ToolDefinitionError(f"{where}: cannot resolve the type hints: {exc}") from exc
    if param_descriptions is None:
        param_descriptions = parse_docstring(inspect.getdoc(function))[1]

    problems: list[str] = []
    fields: list[_Field] = []
    names: list[str] = []
    none_means_default: set[str] = set()
    defaults: dict[str, Any] = {}
    context_parameter: str | None = None
    deferrable = flat = True
    for param in signature[1:] if skip_first else signature:
        name = param.name
        if param.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
            problems.append(f"parameter {name!r}: *args and **kwargs are not supported")
            continue
        if param.kind is _P.POSITIONAL_ONLY:
            problems.append(f"parameter {name!r}: positional-only parameters are not supported")
            continue
        if name not in hints:
            problems.append(f"parameter {name!r} has no type annotation; add one")
            continue
        annotation = hints[name]
        base: Any
        extras: tuple[Any, ...]
        if _is_among(annotation, _SCALARS):  # str, int, ...: nothing inside to look at
            base, tool_param, extras = annotation, None, ()
            optional = annotation is type(None)
        else:
            if _is_tool_context(annotation):
                context_parameter = name
                continue
            base, tool_param, extra_list = _split_annotated(annotation)
            extras = tuple(extra_list)
            reason = _unsupported(base)
            if reason:
                problems.append(
                    f"parameter {name!r} has unsupported type {_type_name(base)} ({reason}); "
                    "use a JSON-serialisable type such as str, int, a list or a pydantic model"
                )
                continue
            optional = _is_optional(base)
            deferrable = deferrable and not extras and _known_to_pydantic(base)
            flat = flat and not extras and _is_scalar(base)
        has_default = param.default is not _P.empty
        if tool_param is not None and tool_param.required is not None:
            required = tool_param.required
        else:
            required = not (has_default or optional)
        description = (tool_param.description if tool_param else "") or param_descriptions.get(
            name, ""
        )
        fields.append((name, base, extras, description, required))
        names.append(name)
        if not required:
            if not optional and has_default:
                none_means_default.add(name)
            if has_default and param.default is not None:
                defaults[name] = param.default
    if problems:
        where = _where(tool_name, function)
        raise ToolDefinitionError(f"{where}: " + "; ".join(problems) + ".")

    def make_json_schema() -> JsonSchema:
        where = _where(tool_name, function)
        with _definition_errors(where, fields):
            typed_dict = _make_typed_dict(_type_name_of(tool_name), _schema_fields(fields))
            raw = _schema_for(pydantic.TypeAdapter(typed_dict), where)
        return _with_defaults(clean_schema(raw), defaults)

    def make_validator() -> pydantic.TypeAdapter[Any]:
        with _definition_errors(_where(tool_name, function), fields):
            typed_dict = _make_typed_dict(_type_name_of(tool_name), _validation_fields(fields))
            return pydantic.TypeAdapter(typed_dict)

    arguments = ArgumentsSchema(
        make_json_schema,
        make_validator,
        parameters=tuple(names),
        context_parameter=context_parameter,
        none_means_default=frozenset(none_means_default),
        flat=flat,
    )
    if not deferrable:
        # pydantic might reject these types: build now, so the error surfaces at definition.
        arguments.build()
    return arguments


def _where(tool_name: str, function: Any) -> str:
    return f"Tool {tool_name!r} ({_origin(function)})"


def _type_name_of(tool_name: str) -> str:
    return f"{tool_name.replace('.', '_').replace('-', '_')}_arguments"


_Field: TypeAlias = "tuple[str, Any, tuple[Any, ...], str, bool]"
"""One parameter of a keyword tool as the schema and the validator need it: its name, bare type,
other ``Annotated`` metadata, description, and whether it is required."""


def _annotated(field: _Field) -> tuple[Any, list[Any]]:
    """The parameter's type with its metadata (and its description as a pydantic Field)."""
    _, base, extras, description, _ = field
    metadata = list(extras)
    has_description = any(isinstance(e, FieldInfo) and e.description for e in metadata)
    if description and not has_description:
        metadata.append(pydantic.Field(description=description))
    return (Annotated[(base, *metadata)] if metadata else base), metadata


def _schema_fields(fields: list[_Field]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for field in fields:
        typed, _ = _annotated(field)
        result[field[0]] = Required[typed] if field[4] else NotRequired[typed]
    return result


def _validation_fields(fields: list[_Field]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for field in fields:
        name, base, _, _, required = field
        typed, metadata = _annotated(field)
        if required:
            result[name] = Required[typed]
            continue
        # Strict-mode models send null for optional parameters: accept it, and let the
        # function's own default apply when the type itself does not allow None.
        nullable: Any = Union[base, None]  # noqa: UP007 - base is a runtime value
        if metadata:
            nullable = Annotated[(nullable, *metadata)]
        result[name] = NotRequired[nullable]
    return result


@contextlib.contextmanager
def _definition_errors(where: str, fields: list[_Field]) -> Iterator[None]:
    """Turn pydantic's complaints about a tool's types into ``ToolDefinitionError``."""
    try:
        yield
    except pydantic.PydanticSchemaGenerationError as exc:
        culprit = _find_unsupported_field(_schema_fields(fields))
        raise ToolDefinitionError(
            f"{where}: parameter {culprit!r} has a type pydantic cannot describe "
            f"({exc.message.splitlines()[0]}); use a JSON-serialisable type such as str, int, "
            "a list or a pydantic model."
        ) from exc
    except pydantic.PydanticUserError as exc:
        raise ToolDefinitionError(f"{where}: {exc.message}") from exc


# Types whose values validate to a JSON scalar: a keyword tool taking only these is "flat".
_SCALARS = frozenset({str, int, float, bool, type(None)})
# Types pydantic always turns into a schema and a validator (checked by the tests), so their
# tools can be built on first use without moving an error from definition time to call time.
_KNOWN_TYPES = _SCALARS | {
    Any,
    bytes,
    list,
    dict,
    tuple,
    set,
    frozenset,
    decimal.Decimal,
    uuid.UUID,
    datetime.date,
    datetime.datetime,
    datetime.time,
    datetime.timedelta,
}
_KNOWN_CONTAINERS = frozenset({list, set, frozenset, collections.abc.Sequence, collections.abc.Set})


def _is_among(tp: Any, types_: frozenset[Any]) -> bool:
    try:
        return tp in types_
    except TypeError:  # an unhashable annotation
        return False


def _literal_of_scalars(tp: Any) -> bool:
    return all(type(v) in (str, int, float, bool) or v is None for v in get_args(tp))


def _is_scalar(tp: Any) -> bool:
    """Whether every value of ``tp`` validates to a str, number, bool or None."""
    origin = get_origin(tp)
    if origin is Literal:
        return _literal_of_scalars(tp)
    if origin in (Union, types.UnionType):
        return all(_is_scalar(arg) for arg in get_args(tp))
    return _is_among(tp, _SCALARS)


def _known_to_pydantic(tp: Any) -> bool:
    """Whether pydantic surely builds a schema and a validator for ``tp`` without an error."""
    if _is_among(tp, _KNOWN_TYPES):
        return True
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Literal:
        return _literal_of_scalars(tp)
    if origin in (Union, types.UnionType):
        return all(_known_to_pydantic(arg) for arg in args)
    if origin in _KNOWN_CONTAINERS:
        return len(args) == 1 and _known_to_pydantic(args[0])
    if origin is tuple:
        return all(arg is Ellipsis or _known_to_pydantic(arg) for arg in args)
    if origin in (dict, collections.abc.Mapping):
        return len(args) == 2 and args[0] is str and _known_to_pydantic(args[1])
    return False


def _origin(function: Any) -> str:
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{qualname}" if module else qualname


def _find_unsupported_field(fields: Mapping[str, Any]) -> str:
    for name, tp in fields.items():
        try:
            pydantic.TypeAdapter(get_args(tp)[0])
        except pydantic.PydanticSchemaGenerationError:
            return name
    return "?"


def build_input_type_schema(input_type: Any, *, tool_name: str) -> ArgumentsSchema:
    """Build the schema and validator for a function that takes one ``input_type`` instance.

    Raises:
        ToolDefinitionError: the type has no JSON Schema or is not an object type.
    """
    where = f"Tool {tool_name!r} (input type {_type_name(input_type)})"
    reason = _unsupported(input_type)
    if reason:
        raise ToolDefinitionError(f"{where}: unsupported input type ({reason}).")
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
            input_type, config=None if _has_own_config(input_type) else _FORBID
        )
    except pydantic.PydanticUserError:
        adapter = pydantic.TypeAdapter(input_type)
    except pydantic.PydanticSchemaGenerationError as exc:
        raise ToolDefinitionError(
            f"{where}: not supported ({exc.message.splitlines()[0]})."
        ) from exc
    schema = clean_schema(_schema_for(adapter, where))
    if schema.get("type") != "object":
        raise ToolDefinitionError(
            f"{where}: the input type must be an object type (a pydantic model, dataclass or "
            "TypedDict)."
        )
    required = set(schema.get("required", []))
    none_means_default = frozenset(
        name
        for name, prop in schema.get("properties", {}).items()
        if name not in required and isinstance(prop, dict) and not _is_nullable(prop)
    )
    return ArgumentsSchema(
        schema,
        adapter,
        single_argument=True,
        none_means_default=none_means_default,
        # Strict like keyword tools: "2" is not an integer, even for a model configured lax.
        strict=True,
    )


def _has_own_config(tp: Any) -> bool:
    return isinstance(tp, type) and (
        issubclass(tp, pydantic.BaseModel) or hasattr(tp, "__pydantic_config__")
    )


def unsupported_return(return_type: Any) -> str | None:
    """Return why a tool's return type is unsupported, or ``None``."""
    if return_type is inspect.Signature.empty or _is_among(return_type, _KNOWN_TYPES):
        return None
    return _unsupported(return_type)


def parse_arguments_object(tool_name: str, tool_input: str | None) -> dict[str, Any]:
    """Parse the model's arguments as one JSON object, with the error texts of local tools.

    For tools whose schema is validated elsewhere (MCP tools check theirs with ``jsonschema``).
    Blank input means ``{}``; duplicate keys, NaN and Infinity are refused as for local tools.

    Raises:
        ToolArgumentsError: not valid JSON, not an object, or refused JSON.
    """
    if tool_input is None or not tool_input.strip():
        return {}
    try:
        value = pydantic_core.from_json(tool_input, allow_inf_nan=False)
    except ValueError as exc:
        if "NaN" in tool_input or "Infinity" in tool_input:
            _check_json_text(tool_name, tool_input)
        raise ToolArgumentsError(
            tool_name,
            f"Invalid arguments for tool '{tool_name}': not valid JSON ({exc}). "
            "Send the arguments as a JSON object.",
        ) from None
    if not isinstance(value, dict):
        raise ToolArgumentsError(
            tool_name,
            f"Invalid arguments for tool '{tool_name}': the arguments must be a JSON object "
            "of named parameters.",
        )
    if not _plainly_unique(tool_input, value):
        _check_json_text(tool_name, tool_input)
    return value


_output_schemas: dict[Any, JsonSchema | None] = {}
_output_schema_lock = threading.Lock()


def output_schema(return_type: Any) -> JsonSchema | None:
    """The JSON Schema of a structured return type, or ``None`` when the type is not one.

    Structured means a pydantic model, a dataclass or a TypedDict: a JSON object whose fields
    a program can read (MCP's ``outputSchema``, and the ``structuredContent`` checked against
    it). Built once per type, on first use, never at import.
    """
    if not (
        (isinstance(return_type, type) and issubclass(return_type, pydantic.BaseModel))
        or (isinstance(return_type, type) and dataclasses.is_dataclass(return_type))
        or is_typeddict(return_type)
    ):
        return None
    with _output_schema_lock:
        if return_type not in _output_schemas:
            try:
                schema = pydantic.TypeAdapter(return_type).json_schema(mode="serialization")
            except pydantic.PydanticUserError:
                # typing.TypedDict before Python 3.12, say: the result is still sent as text.
                schema = {}
            _output_schemas[return_type] = schema if schema.get("type") == "object" else None
        return _output_schemas[return_type]
