"""Prompts and the options that travel with them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tool_calling.core.chat.messages import Message, SystemMessage, UserMessage, as_messages

if TYPE_CHECKING:
    from tool_calling.core.tools.callback import ToolCallback

__all__ = ["ChatOptions", "Prompt", "ToolCallingChatOptions"]


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
        self.tool_callbacks: list[ToolCallback] = list(tool_callbacks)
        """Tools offered to the model in this request, as callbacks."""
        self.tool_names: list[str] = list(tool_names)
        """Tools offered by name, resolved through the tool calling manager's resolver."""
        self.tool_context: dict[str, Any] = dict(tool_context or {})
        """Data passed to tools that take a ``ToolContext``; never sent to the model."""
        self.internal_tool_execution_enabled = internal_tool_execution_enabled
        """``False`` hands tool calls back to the caller instead of running them."""

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

    __slots__ = ("_messages", "_options")

    def __init__(
        self, messages: str | Message | Sequence[Message], options: ChatOptions | None = None
    ) -> None:
        self._messages = as_messages(messages)
        self._options = options

    @property
    def messages(self) -> list[Message]:
        """The messages, oldest first."""
        return self._messages

    @property
    def instructions(self) -> list[Message]:
        """Alias of ``messages`` (Spring AI's ``getInstructions``)."""
        return self._messages

    @property
    def options(self) -> ChatOptions | None:
        """The options of this call, or ``None``."""
        return self._options

    @property
    def user_message(self) -> UserMessage | None:
        """The last user message, or ``None``."""
        for message in reversed(self._messages):
            if isinstance(message, UserMessage):
                return message
        return None

    @property
    def system_message(self) -> SystemMessage | None:
        """The first system message, or ``None``."""
        for message in self._messages:
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
            self._messages if messages is None else messages,
            self._options if options is None else options,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prompt):
            return NotImplemented
        return self._messages == other._messages and self._options == other._options

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Prompt(messages={self._messages!r}, options={self._options!r})"
