"""Prompts and the options that travel with them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, SupportsIndex

from tool_calling.core.chat.messages import Message, SystemMessage, UserMessage, as_messages
from tool_calling.core.tools.callback import ToolCallback, check_unique_names

__all__ = ["ChatOptions", "Prompt", "ToolCallbackList", "ToolCallingChatOptions"]


class ChatOptions:
    """Options for one model call: the model name plus provider options such as ``temperature``.

    Unknown keyword arguments are kept in ``model_options`` and passed to the provider as they are.
    """

    def __init__(self, model: str | None = None, **model_options: Any) -> None:
        self.model = model
        """The model to call, or ``None`` for the chat model's default."""
        self.model_options: dict[str, Any] = dict(model_options)
        """Provider options (``temperature``, ``max_tokens``, ``tool_choice``, ...)."""

    def _fields(self) -> dict[str, Any]:
        return {"model": self.model, **self.model_options}

    def copy(self, **changes: Any) -> ChatOptions:
        """Return a copy with ``changes`` applied."""
        return type(self)(**{**self._fields(), **changes})

    def __getattr__(self, name: str) -> Any:
        # Provider options read like attributes (options.temperature), as in Spring's getters.
        options = self.__dict__.get("model_options")
        if options is not None and name in options:
            return options[name]
        raise AttributeError(f"{type(self).__name__!s} has no option {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._fields().items() if v is not None)
        return f"{type(self).__name__}({args})"


class ToolCallbackList(list[ToolCallback]):
    """The list in ``ToolCallingChatOptions.tool_callbacks``: a list that knows its tools by name.

    The tool calling manager looks every call up by name. Building that index, and checking that
    the names are unique, once per list rather than once per batch keeps a call's cost the same
    whether the request offers one tool or hundreds. Every method that changes the list drops
    the index, so it is never stale.
    """

    __slots__ = ("cached_index",)

    def __init__(self, callbacks: Iterable[ToolCallback] = ()) -> None:
        super().__init__(callbacks)
        self.cached_index: dict[str, ToolCallback] | None = None
        """What :meth:`by_name` returns once it has built it; ``None`` until then, and again
        after any change to the list. Read-only for callers."""

    def by_name(self) -> dict[str, ToolCallback]:
        """Return ``{name: callback}`` of the list, built once until the list changes.

        Treat the result as read-only.

        Raises:
            ToolDefinitionError: two different callbacks share a name.
        """
        index = self.cached_index
        if index is None:
            # Two different tools under one name would make "which one runs" an accident of order.
            check_unique_names(self)
            index = {}
            for callback in self:
                index.setdefault(callback.name, callback)
            self.cached_index = index
        return index

    # -- every mutating method of list drops the index ------------------------------------------

    def __setitem__(self, key: Any, value: Any) -> None:
        self.cached_index = None
        super().__setitem__(key, value)

    def __delitem__(self, key: SupportsIndex | slice) -> None:
        self.cached_index = None
        super().__delitem__(key)

    def __iadd__(self, other: Iterable[ToolCallback]) -> ToolCallbackList:  # type: ignore[override,misc]
        self.cached_index = None
        return super().__iadd__(other)

    def __imul__(self, count: SupportsIndex) -> ToolCallbackList:
        self.cached_index = None
        return super().__imul__(count)

    def append(self, callback: ToolCallback) -> None:
        """Append ``callback`` (and drop the index)."""
        self.cached_index = None
        super().append(callback)

    def extend(self, callbacks: Iterable[ToolCallback]) -> None:
        """Extend the list (and drop the index)."""
        self.cached_index = None
        super().extend(callbacks)

    def insert(self, index: SupportsIndex, callback: ToolCallback) -> None:
        """Insert ``callback`` (and drop the index)."""
        self.cached_index = None
        super().insert(index, callback)

    def remove(self, callback: ToolCallback) -> None:
        """Remove ``callback`` (and drop the index)."""
        self.cached_index = None
        super().remove(callback)

    def pop(self, index: SupportsIndex = -1) -> ToolCallback:
        """Remove and return an item (and drop the index)."""
        self.cached_index = None
        return super().pop(index)

    def clear(self) -> None:
        """Empty the list (and drop the index)."""
        self.cached_index = None
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        """Sort the list in place (the index stays valid, but is dropped like any change)."""
        self.cached_index = None
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        """Reverse the list in place."""
        self.cached_index = None
        super().reverse()


class ToolCallingChatOptions(ChatOptions):
    """Chat options that also carry the tools of a request and how to run them."""

    def __init__(
        self,
        model: str | None = None,
        tool_callbacks: Iterable[ToolCallback] = (),
        tool_names: Iterable[str] = (),
        tool_context: Mapping[str, Any] | None = None,
        internal_tool_execution_enabled: bool | None = None,
        **model_options: Any,
    ) -> None:
        super().__init__(model, **model_options)
        self.tool_callbacks: list[ToolCallback] = ToolCallbackList(tool_callbacks)
        """Tools offered to the model in this request, as callbacks. Assigning any iterable
        stores it as a :class:`ToolCallbackList` (a list)."""
        self.tool_names: list[str] = list(tool_names)
        """Tools offered by name, resolved through the tool calling manager's resolver."""
        self.tool_context: dict[str, Any] = dict(tool_context or {})
        """Data passed to tools that take a ``ToolContext``; never sent to the model."""
        self.internal_tool_execution_enabled = internal_tool_execution_enabled
        """``False`` hands tool calls back to the caller instead of running them."""

    def __setattr__(self, name: str, value: Any) -> None:
        # tool_callbacks stays a plain attribute (read on every batch) that always holds a
        # ToolCallbackList, whatever iterable is assigned to it.
        if name == "tool_callbacks" and type(value) is not ToolCallbackList:
            value = ToolCallbackList(value)
        super().__setattr__(name, value)

    def _fields(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "tool_callbacks": self.tool_callbacks,
            "tool_names": self.tool_names,
            "tool_context": self.tool_context,
            "internal_tool_execution_enabled": self.internal_tool_execution_enabled,
            **self.model_options,
        }

    def __repr__(self) -> str:
        fields = self._fields()
        fields["tool_callbacks"] = [cb.definition.name for cb in self.tool_callbacks]
        fields["tool_context"] = sorted(self.tool_context)  # values may be secrets: keys only
        args = ", ".join(f"{k}={v!r}" for k, v in fields.items() if v not in (None, [], {}))
        return f"ToolCallingChatOptions({args})"

    @classmethod
    def from_options(cls, options: ChatOptions | None) -> ToolCallingChatOptions:
        """Return ``options`` as tool calling options (a copy when they are plain options)."""
        if isinstance(options, ToolCallingChatOptions):
            return options
        if options is None:
            return cls()
        return cls(options.model, **options.model_options)


def is_internal_tool_execution_enabled(options: ChatOptions | None) -> bool:
    """Return whether the framework runs tool calls itself (the default) for these options."""
    if isinstance(options, ToolCallingChatOptions):
        return options.internal_tool_execution_enabled is not False
    return True


class Prompt:
    """The messages of one model call plus its options.

    ``Prompt("Hi")`` is a single user message.
    """

    # Plain slots rather than properties (the tool loop reads them for every batch); a prompt
    # is still immutable: __setattr__ refuses every change after __init__.
    __slots__ = ("messages", "options")

    messages: list[Message]
    """The messages, oldest first."""
    options: ChatOptions | None
    """The options of this call, or ``None``."""

    def __init__(
        self, messages: str | Message | Sequence[Message], options: ChatOptions | None = None
    ) -> None:
        object.__setattr__(self, "messages", as_messages(messages))
        object.__setattr__(self, "options", options)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Prompt is immutable; use prompt.copy({name}=...) instead")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Prompt is immutable")

    def __reduce__(self) -> tuple[type[Prompt], tuple[list[Message], ChatOptions | None]]:
        return (Prompt, (self.messages, self.options))

    @property
    def instructions(self) -> list[Message]:
        """Alias of ``messages`` (Spring AI's ``getInstructions``)."""
        return self.messages

    @property
    def user_message(self) -> UserMessage | None:
        """The last user message, or ``None``."""
        for message in reversed(self.messages):
            if isinstance(message, UserMessage):
                return message
        return None

    @property
    def system_message(self) -> SystemMessage | None:
        """The first system message, or ``None``."""
        for message in self.messages:
            if isinstance(message, SystemMessage):
                return message
        return None

    def copy(
        self,
        messages: str | Message | Sequence[Message] | None = None,
        options: ChatOptions | None = None,
    ) -> Prompt:
        """Return a prompt with the given messages or options replaced."""
        return Prompt(
            self.messages if messages is None else messages,
            self.options if options is None else options,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prompt):
            return NotImplemented
        return self.messages == other.messages and self.options == other.options

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Prompt(messages={self.messages!r}, options={self.options!r})"
