"""ToolCallback: what the framework calls; FunctionToolCallback wraps any Python callable.

``DelegatingToolCallback`` is the base of every wrapper (argument augmentation, an operator's
settings, an MCP server's approved tool): it forwards all a tool does to the wrapped one, and a
wrapper overrides only what it changes.
"""

from __future__ import annotations

import asyncio
import inspect
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from tool_calling.core._async import run_sync
from tool_calling.core.errors import ToolArgumentsError, ToolCallingError, ToolDefinitionError
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.converter import DEFAULT_CONVERT
from tool_calling.core.tools.decorator import ResultConverter, build_spec, get_spec
from tool_calling.core.tools.definition import (
    JsonSchema,
    ToolAnnotations,
    ToolDefinition,
    ToolMetadata,
)
from tool_calling.core.tools.schema import output_schema, parse_arguments_object

__all__ = [
    "ToolExecutionException",
    "DelegatingToolCallback",
    "FunctionToolCallback",
    "ToolCallback",
    "ToolCallbackProvider",
    "tool_callbacks",
]


class ToolExecutionException(ToolCallingError):
    """A tool raised while it ran.

    The message is the cause's message; the cause is kept as ``cause`` and ``__cause__``.
    """

    def __init__(self, tool_definition: ToolDefinition, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.tool_definition = tool_definition
        """The definition of the tool that failed."""
        self.cause = cause
        """The exception the tool raised."""
        self.__cause__ = cause


class ToolCallback(ABC):
    """A tool the framework can offer to the model and call with the model's JSON arguments."""

    @property
    @abstractmethod
    def definition(self) -> ToolDefinition:
        """The name, description and input schema sent to the model."""

    @property
    def metadata(self) -> ToolMetadata:
        """How the framework treats this tool's result (return-direct or not)."""
        return ToolMetadata()

    @abstractmethod
    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Run the tool with ``tool_input`` (a JSON object as text) and return text for the model.

        Raises:
            ToolExecutionException: the tool raised.
            ToolArgumentsError: ``tool_input`` is not valid for the tool's schema.
        """

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Async twin of :meth:`call`; the default runs ``call`` in a worker thread."""
        return await asyncio.to_thread(self.call, tool_input, tool_context)

    def validate_arguments(self, tool_input: str | None) -> None:
        """Check ``tool_input`` as a call would, without running the tool.

        This default parses the arguments as one JSON object and checks the top level of the
        input schema: every required key present, no unknown key where
        ``additionalProperties`` is false. Tools that check more when they run override it
        (a function tool its parameters' types, an MCP tool its JSON Schema), so that a check
        made before a call (an approver's edited arguments) is the call's own.

        Raises:
            ToolArgumentsError: not a JSON object, or it fails the schema.
        """
        name = self.definition.name
        arguments = parse_arguments_object(name, tool_input)
        schema = self.definition.input_schema
        required = schema.get("required") or ()
        problems = [f"- {key}: Field required" for key in required if key not in arguments]
        if schema.get("additionalProperties") is False:
            known = schema.get("properties") or {}
            problems += [
                f"- {key}: Unknown parameter; remove it" for key in arguments if key not in known
            ]
        if problems:
            raise ToolArgumentsError(
                name, f"Invalid arguments for tool '{name}':\n" + "\n".join(problems)
            )

    @property
    def function(self) -> Callable[..., Any] | None:
        """The Python callable that runs the tool, if one does (``None`` for a remote tool)."""
        return None

    @property
    def output_schema(self) -> JsonSchema | None:
        """JSON Schema of the tool's structured result (a JSON object), or ``None``.

        A tool with one answers with that object's compact JSON as its text; an MCP client
        also gets it as ``structuredContent``, checked against this schema.
        """
        return None

    @property
    def name(self) -> str:
        """Shortcut for ``definition.name``."""
        return self.definition.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.definition.name!r}>"


class DelegatingToolCallback(ToolCallback):
    """A tool wrapping another: everything it does not override is the wrapped tool's.

    The definition, metadata, validation, the function and the calls are forwarded; a wrapper
    overrides only what it changes (its schema, its metadata, what reaches the tool).

    Args:
        delegate: The wrapped tool.
    """

    def __init__(self, delegate: ToolCallback) -> None:
        self._delegate = delegate

    @property
    def delegate(self) -> ToolCallback:
        """The wrapped tool."""
        return self._delegate

    @property
    def definition(self) -> ToolDefinition:
        """The wrapped tool's definition."""
        return self._delegate.definition

    @property
    def metadata(self) -> ToolMetadata:
        """The wrapped tool's metadata."""
        return self._delegate.metadata

    @property
    def function(self) -> Callable[..., Any] | None:
        """The wrapped tool's function."""
        return self._delegate.function

    @property
    def output_schema(self) -> JsonSchema | None:
        """The wrapped tool's output schema."""
        return self._delegate.output_schema

    def validate_arguments(self, tool_input: str | None) -> None:
        """Check ``tool_input`` as the wrapped tool would."""
        self._delegate.validate_arguments(tool_input)

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Run the wrapped tool."""
        return self._delegate.call(tool_input, tool_context)

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Run the wrapped tool (async)."""
        return await self._delegate.acall(tool_input, tool_context)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.definition.name!r} of {self._delegate!r}>"


class ToolCallbackProvider(ABC):
    """A source of tool callbacks (a module of tools, an MCP server, ...)."""

    @abstractmethod
    def tool_callbacks(self) -> list[ToolCallback]:
        """Return the callbacks this provider offers."""


class FunctionToolCallback(ToolCallback):
    """A tool backed by a Python callable: function, bound method, async function or lambda.

    With ``input_type`` (a pydantic model, dataclass or TypedDict) the schema is that type's and
    the function receives one validated instance (and the ToolContext as a second argument if it
    takes two). Functions marked with ``@tool`` reuse the spec built at decoration.
    """

    # definition, metadata and name are plain attributes here, not properties as on
    # ToolCallback: the manager reads them for every call, and a property costs a Python call.
    __slots__ = ("_function", "_spec", "definition", "metadata", "name")

    definition: ToolDefinition
    """The tool's definition, built once when the tool was defined."""
    metadata: ToolMetadata
    """Return-direct or not, approval or not."""
    name: str
    """Shortcut for ``definition.name``."""
    _derived: tuple[str, ...] = ()
    """The attributes of the three a subclass overrides (as properties): __init__ leaves them."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._derived = tuple(
            attribute
            for attribute in ("definition", "metadata", "name")
            if not isinstance(inspect.getattr_static(cls, attribute), types.MemberDescriptorType)
        )
        if "definition" in cls._derived and "name" not in cls._derived:
            # The name follows the overridden definition, as ToolCallback.name does.
            cls.name = ToolCallback.name  # type: ignore[assignment]
            cls._derived += ("name",)

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        input_type: Any = None,
        return_direct: bool = False,
        result_converter: ResultConverter | None = None,
    ) -> None:
        spec = get_spec(function)
        overrides = (
            name is not None
            or description is not None
            or input_type is not None
            or return_direct
            or result_converter is not None
        )
        if spec is None or overrides:
            target = getattr(function, "__func__", function)
            base = spec
            spec = build_spec(
                target,
                name=name if name is not None else (base.definition.name if base else None),
                description=description
                if description is not None
                else (base.definition.description if base else None),
                return_direct=return_direct or (base.return_direct if base else False),
                result_converter=result_converter,
                input_type=input_type,
                skip_first=inspect.ismethod(function) or (base.takes_self if base else None),
                requires_approval=base.requires_approval if base else False,
                title=base.title if base else None,
                annotations=base.annotations if base else None,
                icons=base.icons if base else (),
                requires_confirmation=base.requires_confirmation if base else False,
            )
        if spec.takes_self and not inspect.ismethod(function):
            raise ToolDefinitionError(
                f"Tool {spec.definition.name!r} ({spec.origin}) is an instance method; pass an "
                "instance (tool_callbacks(obj)) or a bound method (obj.method)."
            )
        self._function = function
        self._spec = spec
        metadata = (
            ToolMetadata(
                return_direct=spec.return_direct,
                requires_approval=spec.requires_approval,
                requires_confirmation=spec.requires_confirmation,
                title=spec.title,
                annotations=spec.annotations or ToolAnnotations(),
                icons=spec.icons,
            )
            if spec.title or spec.annotations or spec.icons
            else ToolMetadata(
                return_direct=spec.return_direct,
                requires_approval=spec.requires_approval,
                requires_confirmation=spec.requires_confirmation,
            )
        )
        if not self._derived:
            self.definition = spec.definition
            self.name = spec.definition.name
            self.metadata = metadata
            return
        for attribute, value in (
            ("definition", spec.definition),
            ("name", spec.definition.name),
            ("metadata", metadata),
        ):
            if attribute not in self._derived:
                setattr(self, attribute, value)

    @property
    def function(self) -> Callable[..., Any]:
        """The wrapped callable."""
        return self._function

    @property
    def output_schema(self) -> JsonSchema | None:
        """The schema of a structured return type (a pydantic model, dataclass or TypedDict).

        ``None`` for other types, and when a ``result_converter`` changes the text.
        """
        spec = self._spec
        if spec.converter is not DEFAULT_CONVERT:
            return None
        return output_schema(spec.return_type)

    @property
    def is_async(self) -> bool:
        """True when the wrapped callable is an ``async def``."""
        return self._spec.is_async

    def validate_arguments(self, tool_input: str | None) -> None:
        """Check ``tool_input`` as a call would, without running the tool.

        Raises:
            ToolArgumentsError: not a JSON object, or it fails the tool's schema.
        """
        self._spec.arguments.validate(self.name, tool_input)

    def _invoke(self, tool_input: str | None, tool_context: ToolContext | None) -> Any:
        """Validate ``tool_input`` and call the function with it (a coroutine if async)."""
        arguments = self._spec.arguments
        value = arguments.validate(self.name, tool_input)
        if arguments.single_argument:
            if self._spec.passes_context:
                return self._function(value, tool_context or ToolContext())
            return self._function(value)
        if arguments.context_parameter is not None:
            value[arguments.context_parameter] = tool_context or ToolContext()
        return self._function(**value)

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Validate the arguments, run the function and convert its result to text.

        Raises:
            ToolArgumentsError: the arguments are not valid JSON or fail the schema.
            ToolExecutionException: the function raised, or its result cannot be converted.
        """
        spec = self._spec
        arguments = spec.arguments
        try:
            if arguments.context_parameter is None and not arguments.single_argument:
                # What _invoke does for a tool that takes keywords only, the commonest kind,
                # without its frame: every call of a sync tool comes through here.
                result = self._function(**arguments.validate(self.name, tool_input))
            else:
                result = self._invoke(tool_input, tool_context)
            if spec.is_async:
                result = run_sync(result)
        except ToolArgumentsError:
            raise
        except BaseException as exc:
            raise ToolExecutionException(self.definition, exc) from exc
        try:
            return spec.converter(result, spec.return_type)
        except Exception as exc:
            raise ToolExecutionException(self.definition, exc) from exc

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Async twin of :meth:`call`: awaits async functions, runs sync ones in a thread."""
        spec = self._spec
        if not spec.is_async:
            return await asyncio.to_thread(self.call, tool_input, tool_context)
        try:
            result = await self._invoke(tool_input, tool_context)
        except ToolArgumentsError:
            raise
        except BaseException as exc:
            raise ToolExecutionException(self.definition, exc) from exc
        return self._convert(result)

    def _convert(self, result: Any) -> str:
        spec = self._spec
        try:
            return spec.converter(result, spec.return_type)
        except Exception as exc:
            raise ToolExecutionException(self.definition, exc) from exc


def _members_with_spec(cls: type) -> list[tuple[str, Any]]:
    """Return ``(name, raw attribute)`` of every @tool member of ``cls`` and its bases, in order."""
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for attr_name, raw in vars(klass).items():
            if get_spec(raw) is not None:
                seen[attr_name] = raw
            elif attr_name in seen:
                del seen[attr_name]  # overridden by a non-tool
    return list(seen.items())


_CACHED_CALLBACK = "__tool_callback__"


def _callbacks_of(obj: Any) -> list[ToolCallback]:
    if type(obj) is types.FunctionType:
        # Fast path for the common case, a @tool function: its callback is built once.
        cached = getattr(obj, _CACHED_CALLBACK, None)
        if cached is None:
            cached = FunctionToolCallback(obj)
            setattr(obj, _CACHED_CALLBACK, cached)
        return [cached]
    if isinstance(obj, ToolCallback):
        return [obj]
    if isinstance(obj, ToolCallbackProvider):
        return list(obj.tool_callbacks())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [cb for item in obj for cb in _callbacks_of(item)]
    if isinstance(obj, types.ModuleType):
        found: list[ToolCallback] = []
        seen_ids: set[int] = set()
        for value in vars(obj).values():
            if isinstance(value, type) or id(value) in seen_ids:
                continue
            if get_spec(value) is not None and not get_spec(value).takes_self:  # type: ignore[union-attr]
                seen_ids.add(id(value))
                found.append(FunctionToolCallback(value))
        return found
    if isinstance(obj, type):
        found = []
        instance_methods = []
        for attr_name, raw in _members_with_spec(obj):
            if isinstance(raw, staticmethod):
                found.append(FunctionToolCallback(raw.__func__))
            elif isinstance(raw, classmethod):
                found.append(FunctionToolCallback(getattr(obj, attr_name)))
            else:
                instance_methods.append(attr_name)
        if not found:
            hint = (
                f"; its @tool methods ({', '.join(instance_methods)}) are instance methods, so "
                f"pass an instance of {obj.__qualname__}"
                if instance_methods
                else ""
            )
            raise TypeError(f"{obj.__qualname__} has no @tool static or class methods{hint}")
        return found
    if callable(obj) and (inspect.isfunction(obj) or inspect.ismethod(obj)):
        return [FunctionToolCallback(obj)]
    members = _members_with_spec(type(obj))
    if not members:
        raise TypeError(
            f"{type(obj).__name__!s} object has no @tool methods; pass @tool functions, "
            "modules, classes, instances, ToolCallbacks or ToolCallbackProviders"
        )
    return [FunctionToolCallback(getattr(obj, attr_name)) for attr_name, _ in members]


def check_unique_names(callbacks: Iterable[ToolCallback]) -> None:
    """Raise ``ToolDefinitionError`` (a ValueError) if two callbacks share a name.

    Names that differ only in case (``add`` and ``Add``) count as the same name: a model that
    mixes them up would run the wrong tool.
    """
    by_name: dict[str, ToolCallback] = {}
    for callback in callbacks:
        name = callback.definition.name
        key = name.casefold()
        other = by_name.get(key)
        if other is not None and other is not callback:
            other_name = other.definition.name
            if other_name == name:
                problem = f"Duplicate tool name {name!r}"
            else:
                problem = f"Tool names {other_name!r} and {name!r} differ only in case"
            raise ToolDefinitionError(
                f"{problem}: {_describe(other)} and {_describe(callback)}. "
                "Tool names must be unique; rename one with @tool(name=...)."
            )
        by_name[key] = callback


def _describe(callback: ToolCallback) -> str:
    if isinstance(callback, FunctionToolCallback):
        return callback._spec.origin
    return repr(callback)


def tool_callbacks(*objects: Any) -> list[ToolCallback]:
    """Return the callbacks of every ``@tool`` on the given objects.

    Accepts ``@tool`` functions and bound methods, instances (their ``@tool`` methods), classes
    (their static and class methods), modules, ``ToolCallback``s, ``ToolCallbackProvider``s and
    lists of them.

    Raises:
        ValueError: two tools share a name (``ToolDefinitionError``).
        TypeError: an object has no tools.
    """
    callbacks = [cb for obj in objects for cb in _callbacks_of(obj)]
    check_unique_names(callbacks)
    return callbacks
