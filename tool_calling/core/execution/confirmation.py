"""Tool call confirmation: which calls wait for the user's decision, and the decisions themselves.

Some tools should not run just because the model asked for them (a refund, a deletion, an
e-mail). A tool says so with ``@tool(requires_confirmation=True)`` (or a callable of its
arguments: ``lambda args: args["amount"] > 100``), and a manager may add a
:class:`ToolCallConfirmationPolicy` (by name or pattern, for tools whose code is not yours).

When a model reply has a call that needs confirmation, the manager runs none of the reply's
calls and raises :class:`ToolCallConfirmationRequiredError`, which lists the waiting calls. The
application shows them to the user and hands one :class:`ToolCallDecision` per waiting call to
``execute_tool_calls(prompt, reply, decisions)``: allow, allow with edited arguments (validated
against the tool's schema), or deny with a message the model reads. Nothing is kept in between:
the pause is an exception, the resumption an ordinary call with the same prompt and reply.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tool_calling.core.chat.messages import AssistantMessage, ToolCall
from tool_calling.core.chat.response import Generation
from tool_calling.core.errors import ToolArgumentsError, ToolCallingError
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.definition import ToolDefinition

__all__ = [
    "ConfirmationCondition",
    "DefaultToolCallConfirmationPolicy",
    "PendingToolCall",
    "ToolCallConfirmationPolicy",
    "ToolCallConfirmationRequiredError",
    "ToolCallDecision",
    "ToolNameConfirmationPolicy",
    "denial_text",
    "needs_confirmation",
]

logger = logging.getLogger("tool_calling.execution")

ConfirmationCondition = Callable[[Mapping[str, Any]], bool]
"""A tool's own test of one call's arguments: true when the call needs the user's confirmation."""


class ToolCallConfirmationPolicy(ABC):
    """Decides which calls need the user's confirmation, beyond what each tool's code says.

    The tool's own flag (``ToolMetadata.requires_confirmation``) always applies; a policy can
    only add calls to confirm, never waive a tool's flag.
    """

    @abstractmethod
    def requires_confirmation(
        self, tool_call: ToolCall, callback: ToolCallback, arguments: Mapping[str, Any]
    ) -> bool:
        """Return whether ``tool_call`` (of ``callback``, with parsed ``arguments``) waits."""


class DefaultToolCallConfirmationPolicy(ToolCallConfirmationPolicy):
    """The tools' own flags only: what every manager applies anyway (adds nothing)."""

    def requires_confirmation(
        self, tool_call: ToolCall, callback: ToolCallback, arguments: Mapping[str, Any]
    ) -> bool:
        """Return the tool's own answer for these arguments."""
        return needs_confirmation(callback, arguments)


class ToolNameConfirmationPolicy(ToolCallConfirmationPolicy):
    """Every call of a tool whose name matches one of the glob patterns needs confirmation.

    ``ToolNameConfirmationPolicy("refund_*", "github__delete_*")``: patterns are shell-style
    (``*``, ``?``, ``[...]``) and case-sensitive, as tool names are.
    """

    def __init__(self, *patterns: str) -> None:
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(
                    f"ToolNameConfirmationPolicy patterns must be non-empty strings, "
                    f"got {pattern!r}."
                )
        self.patterns: tuple[str, ...] = patterns
        """The glob patterns, in the order given."""

    def requires_confirmation(
        self, tool_call: ToolCall, callback: ToolCallback, arguments: Mapping[str, Any]
    ) -> bool:
        """Return whether the tool's name matches a pattern."""
        name = tool_call.name
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)

    def __repr__(self) -> str:
        return f"ToolNameConfirmationPolicy{self.patterns!r}"


def needs_confirmation(callback: ToolCallback, arguments: Mapping[str, Any]) -> bool:
    """Whether the tool's own flag asks for confirmation of a call with ``arguments``.

    A condition that raises counts as asking (a test that cannot be answered does not let a
    call through).
    """
    flag = callback.metadata.requires_confirmation
    if not callable(flag):
        return bool(flag)
    try:
        return bool(flag(arguments))
    except Exception:
        logger.exception(
            "The confirmation condition of tool %r raised; the call waits for confirmation",
            callback.definition.name,
        )
        return True


@dataclass(frozen=True)
class ToolCallDecision:
    """The user's decision on one waiting call: allow (possibly with edited arguments) or deny.

    Build one with :meth:`allow` or :meth:`deny`.
    """

    tool_call_id: str
    """The id of the call it decides (``ToolCall.id`` of the model's reply)."""
    allowed: bool
    """Whether the call may run."""
    arguments: str | None = field(default=None, kw_only=True)
    """Allowed: the JSON arguments to run it with instead of the model's; ``None`` keeps them."""
    message: str | None = field(default=None, kw_only=True)
    """Denied: what the model reads instead of a result; ``None`` gives a standard text."""

    def __post_init__(self) -> None:
        if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
            raise ValueError(f"A decision needs the id of a tool call, got {self.tool_call_id!r}.")
        if self.allowed and self.message is not None:
            raise ValueError("Only a denial carries a message for the model.")
        if not self.allowed and self.arguments is not None:
            raise ValueError("Only an allowed call carries edited arguments.")

    @classmethod
    def allow(
        cls, tool_call_id: str, arguments: str | Mapping[str, Any] | None = None
    ) -> ToolCallDecision:
        """Allow the call, with the model's arguments or with ``arguments`` (JSON or a mapping).

        Edited arguments are checked against the tool's schema before any call of the reply
        runs.
        """
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(dict(arguments), separators=(",", ":"))
        return cls(tool_call_id, True, arguments=arguments)

    @classmethod
    def deny(cls, tool_call_id: str, message: str | None = None) -> ToolCallDecision:
        """Deny the call; the model reads ``message`` (or a standard text) as its error result."""
        return cls(tool_call_id, False, message=message or None)


def denial_text(name: str) -> str:
    """The text the model reads of a call the user denied without a message."""
    return (
        f"The user declined this call of tool {name!r}; it was not made. Do not call it again "
        "with the same arguments unless the user asks for it."
    )


@dataclass(frozen=True)
class PendingToolCall:
    """A call of the model's reply that waits for the user's decision."""

    tool_call: ToolCall
    """The model's call (its id is what a :class:`ToolCallDecision` names)."""
    definition: ToolDefinition
    """The called tool's definition (name, description, the schema edited arguments must fit)."""


class ToolCallConfirmationRequiredError(ToolCallingError):
    """Calls of a model reply need the user's decision; none of the reply's calls ran.

    Hand one :class:`ToolCallDecision` per waiting call to ``execute_tool_calls(prompt, reply,
    decisions)`` with the same prompt and reply to run the batch as decided.
    ``ToolCallingAdvisor`` turns this into a response (:meth:`build_generation`).
    """

    FINISH_REASON: ClassVar[str] = "toolCallConfirmationRequired"
    """Finish reason of the generation built by :meth:`build_generation`."""
    METADATA_PENDING_TOOL_CALLS: ClassVar[str] = "pendingToolCalls"
    """Generation metadata key under which the waiting calls are listed."""

    def __init__(self, assistant: AssistantMessage, pending: Sequence[PendingToolCall]) -> None:
        names = ", ".join(f"{p.tool_call.name!r} ({p.tool_call.id})" for p in pending)
        super().__init__(f"Tool calls wait for the user's confirmation: {names}")
        self.assistant = assistant
        """The model's message with every call of the reply (none of them ran)."""
        self.pending: tuple[PendingToolCall, ...] = tuple(pending)
        """The calls that wait for a decision, in call order."""

    def build_generation(self) -> Generation:
        """One generation: the model's message with its calls, and the waiting calls listed."""
        return Generation(
            self.assistant,
            finish_reason=self.FINISH_REASON,
            metadata={self.METADATA_PENDING_TOOL_CALLS: list(self.pending)},
        )


def parse_arguments(arguments: str | None) -> Mapping[str, Any] | None:
    """The arguments as a mapping, or ``None`` when they are not a JSON object."""
    if not arguments or arguments.isspace():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def index_decisions(
    decisions: Sequence[ToolCallDecision], calls: Sequence[ToolCall]
) -> dict[str, ToolCallDecision]:
    """The decisions by call id; each must name a call of the reply, once.

    Raises:
        ValueError: a decision names no call of the reply, or a call is decided twice.
    """
    ids = {call.id for call in calls}
    by_id: dict[str, ToolCallDecision] = {}
    for decision in decisions:
        if decision.tool_call_id not in ids:
            raise ValueError(
                f"The decision for tool call {decision.tool_call_id!r} names no call of the "
                f"model's reply (its calls: {', '.join(sorted(ids))})."
            )
        if decision.tool_call_id in by_id:
            raise ValueError(f"Tool call {decision.tool_call_id!r} was decided twice.")
        by_id[decision.tool_call_id] = decision
    return by_id


def edited_call(
    call: ToolCall, decision: ToolCallDecision, callback: ToolCallback | None
) -> ToolCall:
    """The call to run for an allowed decision: with its edited arguments once they validate.

    Raises:
        ToolArgumentsError: the edited arguments do not fit the tool's schema.
    """
    if decision.arguments is None:
        return call
    if callback is not None:
        try:
            callback.validate_arguments(decision.arguments)
        except ToolArgumentsError as exc:
            raise ToolArgumentsError(
                call.name, f"The edited arguments of tool call {call.id!r} are not valid: {exc}"
            ) from exc
    return ToolCall(call.id, call.name, decision.arguments)
