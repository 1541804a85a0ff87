"""The ``@tool`` decorator: validates a function eagerly and marks it as a tool."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from tool_calling.core.errors import ToolDefinitionError
from tool_calling.core.tools._docstring import function_docstring
from tool_calling.core.tools.converter import DEFAULT_CONVERT, ToolCallResultConverter
from tool_calling.core.tools.definition import (
    ToolAnnotations,
    ToolDefinition,
    ToolIcon,
    validate_tool_name,
)
from tool_calling.core.tools.schema import (
    ArgumentsSchema,
    build_arguments_schema,
    build_input_type_schema,
    parameters,
    type_hints,
    unsupported_return,
)

__all__ = ["ResultConverter", "ToolSpec", "build_spec", "get_spec", "tool"]

F = TypeVar("F", bound=Callable[..., Any])
ResultConverter = ToolCallResultConverter | Callable[[Any, Any], str]
SPEC_ATTRIBUTE = "__tool_spec__"


@dataclass(frozen=True, init=False)
class ToolSpec:
    """Everything known about a tool function, built once when it is defined."""

    definition: ToolDefinition
    """Name, description and input schema."""
    arguments: ArgumentsSchema
    """Validator of the model's arguments."""
    return_direct: bool
    """Whether results go straight to the caller."""
    converter: Callable[[Any, Any], str]
    """Turns the return value into text."""
    return_type: Any
    """The function's return annotation (``inspect.Signature.empty`` when absent)."""
    is_async: bool
    """True for ``async def`` tools."""
    takes_self: bool
    """True for methods: the first parameter is ``self`` or ``cls``."""
    origin: str
    """``module.qualname`` of the function, for error messages."""
    passes_context: bool = False
    """For input-type tools: whether the function takes a ToolContext as second argument."""
    requires_approval: bool = False
    """Whether each call needs a person's approval before it runs."""
    title: str | None = None
    """A name for people (MCP's ``title``)."""
    annotations: ToolAnnotations | None = None
    """Hints about what the tool does."""
    icons: tuple[ToolIcon, ...] = ()
    """Icons for MCP clients."""
    requires_confirmation: bool | Callable[[Any], bool] = False
    """Whether (or, a callable of the arguments, when) a call needs the user's confirmation."""

    # One per tool, built at import: writing the instance dict costs a third of the generated
    # frozen __init__ (object.__setattr__ per field); the instance stays frozen.
    def __init__(
        self,
        definition: ToolDefinition,
        arguments: ArgumentsSchema,
        return_direct: bool,
        converter: Callable[[Any, Any], str],
        return_type: Any,
        is_async: bool,
        takes_self: bool,
        origin: str,
        passes_context: bool = False,
        requires_approval: bool = False,
        title: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: tuple[ToolIcon, ...] = (),
        requires_confirmation: bool | Callable[[Any], bool] = False,
    ) -> None:
        fields = self.__dict__
        fields["definition"] = definition
        fields["arguments"] = arguments
        fields["return_direct"] = return_direct
        fields["converter"] = converter
        fields["return_type"] = return_type
        fields["is_async"] = is_async
        fields["takes_self"] = takes_self
        fields["origin"] = origin
        fields["passes_context"] = passes_context
        fields["requires_approval"] = requires_approval
        fields["title"] = title
        fields["annotations"] = annotations
        fields["icons"] = icons
        fields["requires_confirmation"] = requires_confirmation


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def _origin(function: Any) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', function)}"


def _return_type(function: Callable[..., Any], hints: dict[str, Any] | None) -> Any:
    """The return annotation as ``typing.get_type_hints`` gives it (``Annotated`` stripped)."""
    if hints is None or "return" not in hints:
        return inspect.Signature.empty
    return_type = hints["return"]
    if _has_annotated(return_type):
        return typing.get_type_hints(function)["return"]  # strips Annotated at every depth
    return return_type


def _has_annotated(tp: Any) -> bool:
    if isinstance(tp, type):  # a plain class (str, a model): nothing inside
        return False
    return typing.get_origin(tp) is typing.Annotated or any(
        _has_annotated(arg) for arg in typing.get_args(tp)
    )


def build_spec(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    return_direct: bool = False,
    result_converter: ResultConverter | None = None,
    input_type: Any = None,
    skip_first: bool | None = None,
    requires_approval: bool = False,
    title: str | None = None,
    annotations: ToolAnnotations | None = None,
    icons: Sequence[ToolIcon] = (),
    requires_confirmation: bool | Callable[[Any], bool] = False,
) -> ToolSpec:
    """Validate ``function`` and build its tool spec.

    Raises:
        ToolDefinitionError: bad name, unsupported parameter or return type.
    """
    origin = _origin(function)
    tool_name = name if name is not None else getattr(function, "__name__", None)
    if tool_name is None:
        raise ToolDefinitionError(f"Tool defined by {origin} has no name; pass name=...")
    validate_tool_name(tool_name, origin)
    if type(function) is types.FunctionType:  # a plain def: its code object says it all
        is_generator = bool(function.__code__.co_flags & _GENERATOR_FLAGS)
    else:
        is_generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
    if is_generator:
        raise ToolDefinitionError(
            f"Tool {tool_name!r} ({origin}): generator functions are not supported; "
            "return a list or a str instead."
        )
    summary, param_docs = function_docstring(function)
    if description is None:
        description = summary or tool_name.replace("_", " ")
    # One resolution of the hints serves the return type and the parameters. A failure is
    # reported by build_arguments_schema (an input-type tool does not need them).
    hints: dict[str, Any] | None
    try:
        hints = type_hints(function)
    except Exception:
        hints = None
    return_type = _return_type(function, hints)
    reason = unsupported_return(return_type)
    if reason:
        raise ToolDefinitionError(
            f"Tool {tool_name!r} ({origin}): unsupported return type ({reason}); "
            "return a str or a JSON-serialisable value."
        )
    signature = parameters(function)
    if skip_first is None:
        skip_first = bool(signature) and signature[0].name in ("self", "cls")
    passes_context = False
    arguments: ArgumentsSchema
    if input_type is not None:
        arguments = build_input_type_schema(input_type, tool_name=tool_name)
        positional = [
            p
            for p in signature[1 if skip_first else 0 :]
            if p.kind
            in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        passes_context = len(positional) >= 2
    else:
        arguments = build_arguments_schema(
            function,
            tool_name=tool_name,
            skip_first=skip_first,
            param_descriptions=param_docs,
            signature=signature,
            hints=hints,
        )
    converter: Callable[[Any, Any], str]
    if result_converter is None:
        converter = DEFAULT_CONVERT
    elif isinstance(result_converter, ToolCallResultConverter):
        converter = result_converter.convert
    elif callable(result_converter):
        converter = result_converter
    else:
        raise ToolDefinitionError(
            f"Tool {tool_name!r} ({origin}): result_converter must be a ToolCallResultConverter "
            f"or a callable (result, return_type) -> str, got {type(result_converter).__name__}."
        )
    if arguments.json_schema_built:
        definition = ToolDefinition(tool_name, description, arguments.json_schema)
    else:
        definition = ToolDefinition._deferred(tool_name, description, lambda: arguments.json_schema)
    return ToolSpec(
        definition=definition,
        arguments=arguments,
        return_direct=bool(return_direct),
        converter=converter,
        return_type=return_type,
        is_async=inspect.iscoroutinefunction(function),
        takes_self=skip_first,
        origin=origin,
        passes_context=passes_context,
        requires_approval=bool(requires_approval),
        title=_checked_title(title, tool_name, origin),
        annotations=annotations,
        icons=_checked_icons(icons, tool_name, origin),
        requires_confirmation=_confirmation_flag(tool_name, origin, requires_confirmation),
    )


def _confirmation_flag(name: str, origin: str, flag: Any) -> bool | Callable[[Any], bool]:
    if isinstance(flag, bool) or (callable(flag) and not isinstance(flag, type)):
        return flag
    raise ToolDefinitionError(
        f"Tool {name!r} ({origin}): requires_confirmation must be a bool or a callable taking "
        f"the call's arguments (a dict), got {type(flag).__name__}."
    )


def _checked_title(title: Any, tool_name: str, origin: str) -> str | None:
    if title is not None and not isinstance(title, str):
        raise ToolDefinitionError(
            f"Tool {tool_name!r} ({origin}): title must be a str, got {type(title).__name__}."
        )
    return title or None


def _checked_icons(icons: Any, tool_name: str, origin: str) -> tuple[ToolIcon, ...]:
    checked: list[ToolIcon] = []
    for icon in icons:
        if not isinstance(icon, ToolIcon):
            raise ToolDefinitionError(
                f"Tool {tool_name!r} ({origin}): icons must be ToolIcon values, "
                f"got {type(icon).__name__}."
            )
        checked.append(icon)
    return tuple(checked)


def get_spec(obj: Any) -> ToolSpec | None:
    """Return the tool spec attached by ``@tool`` to a function, method or static method."""
    target = getattr(obj, "__func__", obj)
    spec = getattr(target, SPEC_ATTRIBUTE, None)
    return spec if isinstance(spec, ToolSpec) else None


@overload
def tool(func: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    return_direct: bool = False,
    result_converter: ResultConverter | None = None,
    requires_approval: bool = False,
    title: str | None = None,
    annotations: ToolAnnotations | None = None,
    icons: Sequence[ToolIcon] = (),
    requires_confirmation: bool | Callable[[Any], bool] = False,
) -> Callable[[F], F]: ...


def tool(
    func: Any = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    return_direct: bool = False,
    result_converter: ResultConverter | None = None,
    requires_approval: bool = False,
    title: str | None = None,
    annotations: ToolAnnotations | None = None,
    icons: Sequence[ToolIcon] = (),
    requires_confirmation: bool | Callable[[Any], bool] = False,
) -> Any:
    """Mark a function or method as a tool and return it unchanged.

    The name defaults to the function's name and the description to its docstring's summary
    (else the name with underscores as spaces). The signature is validated and the JSON Schema
    built here, so mistakes surface at import. Nothing is registered: autodiscovery, or
    ``tool_callbacks()``, collects the marked functions.

    Args:
        func: The function (bare ``@tool`` form).
        name: Tool name, 1-64 characters of ``[A-Za-z0-9_.-]``.
        description: What the tool does, for the model.
        return_direct: Return the result to the caller instead of sending it to the model.
        result_converter: Turns the return value into text (default: str as is, else JSON).
        requires_approval: A person must approve each call before it runs: background runs
            pause until someone approves or denies it; other turns refuse the call. Synced to
            the tool's admin flag, which operators cannot turn off while the code says so.
        title: A name for people, shown by MCP clients (never sent to the model).
        annotations: Hints about what the tool does (read-only, destructive, idempotent,
            open-world), served over MCP; they never lift a check.
        icons: Icons for MCP clients.
        requires_confirmation: The user whose turn it is must confirm a call before it runs:
            ``True`` for every call, or a callable of the call's arguments (a dict) that says
            which (``lambda args: args["amount"] > 100``). The manager then runs none of the
            reply's calls until each waiting call has a decision (allow, allow with edited
            arguments, deny).

    Returns:
        The function itself (or, without ``func``, a decorator).

    Raises:
        ToolDefinitionError: the name, a parameter type or the return type is not supported.
    """

    def decorate(target: Any) -> Any:
        function = target.__func__ if isinstance(target, (staticmethod, classmethod)) else target
        if not callable(function):
            raise ToolDefinitionError(f"@tool needs a function, got {type(target).__name__}")
        skip_first = True if isinstance(target, classmethod) else None
        if isinstance(target, staticmethod):
            skip_first = False
        spec = build_spec(
            function,
            name=name,
            description=description,
            return_direct=return_direct,
            result_converter=result_converter,
            skip_first=skip_first,
            requires_approval=requires_approval,
            title=title,
            annotations=annotations,
            icons=icons,
            requires_confirmation=requires_confirmation,
        )
        setattr(function, SPEC_ATTRIBUTE, spec)
        return target

    if func is not None:
        return decorate(func)
    return decorate
