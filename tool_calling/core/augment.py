"""Argument augmentation: extra fields the model fills in on every call of the wrapped tools.

``AugmentedToolCallbackProvider`` wraps the tools of a provider (or any tools) so that the model
also says, for example, why it calls a tool and how sure it is, without the tools changing::

    class Thinking(pydantic.BaseModel):
        inner_thought: str = Field(description="Why you call this tool, in one sentence.")
        confidence: Literal["low", "medium", "high"]

    tools = AugmentedToolCallbackProvider(my_tools, Thinking, lambda event: log(event.values))
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pydantic

from tool_calling.core.errors import ToolArgumentsError, ToolDefinitionError
from tool_calling.core.tools.callback import (
    DelegatingToolCallback,
    ToolCallback,
    ToolCallbackProvider,
    ToolExecutionException,
    tool_callbacks,
)
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import JsonSchema, ToolDefinition
from tool_calling.core.tools.schema import (
    _STRICT_DECODER,
    _RejectedJson,
    clean_schema,
    describe_validation_error,
)

__all__ = ["AugmentedArguments", "AugmentedToolCallback", "AugmentedToolCallbackProvider"]

T = TypeVar("T")


@dataclass(frozen=True)
class AugmentedArguments(Generic[T]):
    """What the consumer of an augmented tool call receives."""

    tool_definition: ToolDefinition
    """The definition of the tool the model called, as the tool itself declares it."""
    values: T
    """The augmented fields the model filled in, as an instance of the augment type."""
    raw_arguments: str
    """The arguments exactly as the model sent them, augmented fields included."""
    tool_context: ToolContext = field(default_factory=ToolContext)
    """The tool context of the call (server-side data, never sent to the model)."""


def _augment_schema(augment_type: Any) -> tuple[pydantic.TypeAdapter[Any], JsonSchema]:
    where = f"Augment type {getattr(augment_type, '__qualname__', augment_type)!r}"
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(augment_type)
        schema = clean_schema(adapter.json_schema())
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
        raise ToolDefinitionError(f"{where}: cannot build a JSON Schema: {exc}") from exc
    if schema.get("type") != "object" or not schema.get("properties"):
        raise ToolDefinitionError(
            f"{where} must be an object type with fields (a pydantic model, dataclass or "
            "TypedDict)."
        )
    return adapter, schema


def _merge(definition: ToolDefinition, augment: JsonSchema) -> JsonSchema:
    """The tool's schema with the augment fields first (required), the tool's own kept."""
    schema = copy.deepcopy(definition.input_schema)
    own: dict[str, Any] = dict(schema.get("properties") or {})
    added = {k: v for k, v in augment["properties"].items() if k not in own}
    schema["properties"] = {**copy.deepcopy(added), **own}
    required = list(schema.get("required") or [])
    wanted = [k for k in augment.get("required", []) if k in added]
    schema["required"] = [*wanted, *(r for r in required if r not in wanted)]
    schema.setdefault("additionalProperties", False)
    definitions = augment.get("$defs")
    if definitions:
        merged = dict(schema.get("$defs") or {})
        for key, value in definitions.items():
            if key in merged and merged[key] != value:
                raise ToolDefinitionError(
                    f"Tool {definition.name!r}: the augment type and the tool both define "
                    f"a schema named {key!r} ($defs) differently; rename one of the models."
                )
            merged[key] = copy.deepcopy(value)
        schema["$defs"] = merged
    return schema


class AugmentedToolCallback(DelegatingToolCallback):
    """Wraps one tool: its schema gains the augment fields, which go to ``consumer``.

    On each call the augmented fields are validated against ``augment_type`` and handed to
    ``consumer`` as ``AugmentedArguments``; then, with ``remove_extra_arguments``, they are
    taken out of the arguments before the wrapped tool runs (a field the tool declares itself
    stays). Name, description, return-direct and the other metadata are the wrapped tool's.

    Args:
        delegate: The tool to wrap.
        augment_type: A pydantic model, dataclass or TypedDict whose fields the model fills in.
        consumer: Called with ``AugmentedArguments`` before the tool runs; if it raises, the
            tool does not run and the call fails like a tool exception.
        remove_extra_arguments: Remove the augmented fields before the tool runs.

    Raises:
        ToolDefinitionError: ``augment_type`` is not an object type, or its ``$defs`` clash
            with the tool's.
    """

    def __init__(
        self,
        delegate: ToolCallback,
        augment_type: Any,
        consumer: Callable[[AugmentedArguments[Any]], object],
        remove_extra_arguments: bool = True,
    ) -> None:
        super().__init__(delegate)
        self._adapter, augment = _augment_schema(augment_type)
        self.augment_type = augment_type
        """The type whose fields the model fills in."""
        self.consumer = consumer
        """Receives the augmented values of every call."""
        self.remove_extra_arguments = remove_extra_arguments
        """Whether the augmented fields are removed before the tool runs."""
        original = delegate.definition
        self._definition = ToolDefinition(
            original.name, original.description, _merge(original, augment)
        )
        declared = set((original.input_schema.get("properties") or {}).keys())
        self._fields = tuple(augment["properties"])
        self._removed = tuple(f for f in self._fields if f not in declared)

    @property
    def definition(self) -> ToolDefinition:
        """The wrapped tool's definition with the augment fields in its schema."""
        return self._definition

    def validate_arguments(self, tool_input: str | None) -> None:
        """Check the augmented fields, then the wrapped tool's own arguments, as a call would.

        Raises:
            ToolArgumentsError: not a JSON object, the augmented fields fail ``augment_type``,
                or the rest fails the wrapped tool's schema.
        """
        _, delegated = self.split(tool_input or "")
        self._delegate.validate_arguments(delegated)

    def split(
        self, tool_input: str, tool_context: ToolContext | None = None
    ) -> tuple[AugmentedArguments[Any], str]:
        """Validate the augmented fields of a call; return them and the wrapped tool's input.

        The consumer is not called: this is for a caller that records the values itself (an
        audit row) or runs the wrapped tool elsewhere (a worker that only knows the plain tool).

        Raises:
            ToolArgumentsError: the arguments are not a JSON object, or the augmented fields
                fail ``augment_type``.
        """
        name = self._definition.name
        text = tool_input if tool_input and tool_input.strip() else "{}"
        try:
            arguments = _STRICT_DECODER.decode(text)
        except _RejectedJson as exc:
            raise ToolArgumentsError(name, f"Invalid arguments for tool '{name}': {exc}.") from None
        except (ValueError, RecursionError) as exc:
            raise ToolArgumentsError(
                name,
                f"Invalid arguments for tool '{name}': not valid JSON ({exc}). "
                "Send the arguments as a JSON object.",
            ) from None
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                name,
                f"Invalid arguments for tool '{name}': the arguments must be a JSON object "
                "of named parameters.",
            )
        augmented = {k: arguments[k] for k in self._fields if k in arguments}
        try:
            # JSON mode: strict about types, yet dates and the like may come as text.
            values = self._adapter.validate_json(json.dumps(augmented), strict=True)
        except pydantic.ValidationError as exc:
            raise ToolArgumentsError(name, describe_validation_error(name, exc)) from exc
        event = AugmentedArguments(
            self._delegate.definition, values, tool_input, tool_context or ToolContext()
        )
        if not self.remove_extra_arguments or not any(k in arguments for k in self._removed):
            return event, tool_input
        kept = {k: v for k, v in arguments.items() if k not in self._removed}
        return event, json.dumps(kept, ensure_ascii=False)

    def _prepare(self, tool_input: str, tool_context: ToolContext | None) -> str:
        event, delegated = self.split(tool_input, tool_context)
        try:
            self.consumer(event)
        except Exception as exc:
            raise ToolExecutionException(self._delegate.definition, exc) from exc
        return delegated

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Hand the augmented fields to the consumer, then run the wrapped tool.

        Raises:
            ToolArgumentsError: the arguments are not a JSON object, or the augmented fields
                fail ``augment_type`` (the wrapped tool checks its own).
            ToolExecutionException: the consumer or the tool raised.
        """
        return self._delegate.call(self._prepare(tool_input, tool_context), tool_context)

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Async twin of :meth:`call` (the wrapped tool's ``acall`` runs the tool)."""
        return await self._delegate.acall(self._prepare(tool_input, tool_context), tool_context)


class AugmentedToolCallbackProvider(ToolCallbackProvider):
    """The tools of ``delegate``, each wrapped in an ``AugmentedToolCallback``.

    Args:
        delegate: A ``ToolCallbackProvider``, or anything ``tool_callbacks()`` accepts
            (``@tool`` functions, modules, callbacks, lists of them). A provider is asked for
            its tools on every ``tool_callbacks()`` call, so tools it adds later are wrapped too.
        augment_type: A pydantic model, dataclass or TypedDict whose fields the model fills in.
        consumer: Called with ``AugmentedArguments`` before each tool runs.
        remove_extra_arguments: Remove the augmented fields before the tool runs.

    Raises:
        ToolDefinitionError: ``augment_type`` is not an object type.
    """

    _CACHE_SIZE = 4096

    def __init__(
        self,
        delegate: Any,
        augment_type: Any,
        consumer: Callable[[AugmentedArguments[Any]], object],
        remove_extra_arguments: bool = True,
    ) -> None:
        _augment_schema(augment_type)  # fail here, not on the first request
        self.delegate = delegate
        """Where the wrapped tools come from."""
        self.augment_type = augment_type
        """The type whose fields the model fills in."""
        self.consumer = consumer
        """Receives the augmented values of every call."""
        self.remove_extra_arguments = remove_extra_arguments
        """Whether the augmented fields are removed before the tools run."""
        # One wrapper per wrapped callback, so definitions are merged once, not per request.
        self._wrapped: dict[int, tuple[ToolCallback, AugmentedToolCallback]] = {}
        self._lock = threading.Lock()

    def _wrap(self, callback: ToolCallback) -> AugmentedToolCallback:
        with self._lock:
            hit = self._wrapped.get(id(callback))
            if hit is not None and hit[0] is callback:
                return hit[1]
        wrapper = AugmentedToolCallback(
            callback, self.augment_type, self.consumer, self.remove_extra_arguments
        )
        with self._lock:
            if len(self._wrapped) >= self._CACHE_SIZE:
                self._wrapped.clear()
            self._wrapped[id(callback)] = (callback, wrapper)
        return wrapper

    def tool_callbacks(self) -> list[ToolCallback]:
        """Return the delegate's tools, augmented."""
        if isinstance(self.delegate, ToolCallbackProvider):
            callbacks = self.delegate.tool_callbacks()
        else:
            callbacks = tool_callbacks(self.delegate)
        return [self._wrap(cb) for cb in callbacks]
