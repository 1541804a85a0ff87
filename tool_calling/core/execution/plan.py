"""ToolCallPlan and ToolOutcome: a batch's decisions and each call's ending, as plain values.

A batch of tool calls is decided (limits counted, tools looked up), run, then turned into
responses. The manager does all three in one go for in-process turns; a durable run stores the
plan, runs the calls on workers, and completes the batch later, possibly in another process.
Both values therefore convert to and from JSON, and hold no callbacks or live objects apart from
the exception of a call that failed in this process.
"""

from __future__ import annotations

import enum
import sys
import traceback as _traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tool_calling.core.chat.messages import AssistantMessage, ToolCall, ToolResponse
from tool_calling.core.errors import RemoteToolError, ToolFailure
from tool_calling.core.tools.callback import ToolExecutionException

__all__ = ["PlannedCall", "ToolCallPlan", "ToolOutcome", "ToolOutcomeKind", "qualified_name"]

JsonDict = dict[str, Any]


def qualified_name(cls: type) -> str:
    """Return ``module.QualifiedName`` of a class (how outcomes name exception types)."""
    return f"{cls.__module__}.{cls.__qualname__}"


class ToolOutcomeKind(str, enum.Enum):  # noqa: UP042 - str-mixin keeps "ok" == member in JSON
    """How a tool call ended."""

    OK = "ok"
    """The tool returned; ``text`` is its result."""
    ERROR = "error"
    """The tool raised (or was refused); ``text`` is the exception's message."""
    TIMEOUT = "timeout"
    """The call did not end within its time limit; ``text`` says so."""
    UNKNOWN = "unknown"
    """Nobody knows whether the call ran to its end (its worker died); ``text`` says so."""


@dataclass(frozen=True)
class ToolOutcome:
    """How one call ended, as a value the exception processor decides from.

    A call that raised in this process keeps its exception; one that raised elsewhere (a Celery
    worker) carries the exception's type names instead, so ``rethrown`` types, ``always_throw``
    and ``ToolFailure`` behave the same wherever the call ran.
    """

    kind: ToolOutcomeKind
    """Whether the call returned, raised, timed out, or ended unknown."""
    text: str = ""
    """The result (``OK``), or the message of the failure."""
    error_type: str = ""
    """``module.QualifiedName`` of the exception the call raised; blank when it did not."""
    error_types: tuple[str, ...] = ()
    """The qualified names of that exception's class and its bases (matched by name)."""
    traceback: str = ""
    """The formatted traceback, for operators (never sent to the model)."""
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """What the call raised, when it ran in this process (possibly a ToolExecutionException)."""

    @classmethod
    def ok(cls, text: str | None) -> ToolOutcome:
        """The outcome of a call that returned ``text``."""
        return cls(ToolOutcomeKind.OK, "" if text is None else text)

    @classmethod
    def failure(cls, text: str, error_class: type[BaseException] = ToolFailure) -> ToolOutcome:
        """The outcome of a call that failed with ``text`` written for the model.

        It reads as if the call had raised ``error_class`` (``ToolFailure`` by default, whose
        message goes to the model as it is), without a traceback: a call refused, denied or
        given up on by the framework rather than by the tool.
        """
        return cls(
            ToolOutcomeKind.ERROR,
            text,
            qualified_name(error_class),
            tuple(qualified_name(c) for c in error_class.__mro__ if c is not object),
        )

    @classmethod
    def from_exception(
        cls, exception: BaseException, kind: ToolOutcomeKind = ToolOutcomeKind.ERROR
    ) -> ToolOutcome:
        """The outcome of a call that raised ``exception`` (a wrapper is looked through)."""
        cause = exception.cause if isinstance(exception, ToolExecutionException) else exception
        error_type = type(cause)
        return cls(
            kind,
            str(cause),
            qualified_name(error_type),
            tuple(qualified_name(c) for c in error_type.__mro__ if c is not object),
            "".join(_traceback.format_exception(error_type, cause, cause.__traceback__)),
            exception,
        )

    @property
    def cause(self) -> BaseException | None:
        """The exception the tool itself raised, when the call failed in this process."""
        exception = self.exception
        return exception.cause if isinstance(exception, ToolExecutionException) else exception

    @property
    def type_name(self) -> str:
        """The short name of the exception's class (``ValueError``); blank when none."""
        return self.error_type.rpartition(".")[2]

    def is_a(self, cls: type[BaseException]) -> bool:
        """Whether the call raised an instance of ``cls`` (by its qualified name, if remote)."""
        cause = self.cause
        if cause is not None:
            return isinstance(cause, cls)
        return qualified_name(cls) in self.error_types

    def as_exception(self, expected: type[BaseException] | None = None) -> BaseException:
        """The exception the tool raised, rebuilt when it was raised in another process.

        A remote exception is rebuilt as its own class when that class is imported here and is
        an ``expected`` subclass (or, without ``expected``, any exception class), else as
        ``expected``, else as :class:`RemoteToolError`. The class's ``__init__`` is not run:
        the instance carries the message only, and a note with the remote traceback.
        """
        cause = self.cause
        if cause is not None:
            return cause
        found = _imported_class(self.error_type)
        cls: type[BaseException]
        if found is not None and (expected is None or issubclass(found, expected)):
            cls = found
        elif expected is not None:
            cls = expected
        else:
            return RemoteToolError(self.text, error_type=self.error_type)
        args = (self.text,) if self.text else ()
        try:
            rebuilt = cls.__new__(cls, *args)
            BaseException.__init__(rebuilt, *args)
        except Exception:  # an exotic __new__: fall back to a type that always builds
            return RemoteToolError(self.text, error_type=self.error_type)
        if self.traceback:
            rebuilt.add_note(f"Raised in another process; its traceback:\n{self.traceback}")
        return rebuilt

    def to_json(self) -> JsonDict:
        """This outcome as JSON (the exception object stays behind)."""
        data: JsonDict = {"kind": self.kind.value, "text": self.text}
        if self.error_type:
            data.update(
                error_type=self.error_type,
                error_types=list(self.error_types),
                traceback=self.traceback,
            )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolOutcome:
        """Rebuild an outcome from :meth:`to_json`'s output.

        Raises:
            ValueError: ``data`` is not an outcome.
        """
        try:
            kind = ToolOutcomeKind(data["kind"])
            text = data.get("text") or ""
            if not isinstance(text, str):
                raise TypeError("text")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"Not a tool outcome: {data!r:.200}") from exc
        return cls(
            kind,
            text,
            str(data.get("error_type") or ""),
            tuple(str(name) for name in data.get("error_types") or ()),
            str(data.get("traceback") or ""),
        )


def _imported_class(error_type: str) -> type[BaseException] | None:
    """The class ``module.QualifiedName`` if its module is imported already (never imports)."""
    module_name, _, qualname = error_type.rpartition(".")
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) and issubclass(obj, BaseException) else None


@dataclass(frozen=True)
class PlannedCall:
    """One call of a batch that is to run."""

    index: int
    """Its position among the assistant message's tool calls."""
    call: ToolCall
    """The call as the model made it."""
    return_direct: bool = False
    """Whether the tool's result goes straight back to the caller (when every call's does)."""


@dataclass(frozen=True)
class ToolCallPlan:
    """What the manager decided for one assistant message's tool calls, before any runs."""

    assistant: AssistantMessage
    """The assistant message whose calls are planned."""
    responses: list[ToolResponse | None]
    """Per call, in call order: the response of a call answered without running it (a limit
    with ``RETURN_ERROR_RESPONSE``, an unknown tool), else ``None``."""
    jobs: list[PlannedCall]
    """The calls to run, in call order."""
    breach: tuple[int, str | None, int] | None = None
    """``(index, tool name or None for the total, limit)`` of a THROW breach; the calls from
    ``index`` on are not planned."""
    strict: bool = False
    """Whether bad arguments raise instead of becoming error responses."""

    def to_json(self) -> JsonDict:
        """This plan as JSON."""
        assistant = self.assistant
        return {
            "assistant": {
                "text": assistant.text,
                "tool_calls": [[c.id, c.name, c.arguments] for c in assistant.tool_calls],
                "metadata": dict(assistant.metadata),
            },
            "responses": [
                None if r is None else [r.id, r.name, r.response_data, r.is_error]
                for r in self.responses
            ],
            "jobs": [[job.index, job.return_direct] for job in self.jobs],
            "breach": None if self.breach is None else list(self.breach),
            "strict": self.strict,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCallPlan:
        """Rebuild a plan from :meth:`to_json`'s output.

        Raises:
            ValueError: ``data`` is not a plan.
        """
        try:
            message = data["assistant"]
            calls = [ToolCall(str(i), str(n), a) for i, n, a in message["tool_calls"]]
            assistant = AssistantMessage(message["text"], calls, dict(message["metadata"]))
            responses: list[ToolResponse | None] = [
                None if r is None else ToolResponse(str(r[0]), str(r[1]), str(r[2]), bool(r[3]))
                for r in data["responses"]
            ]
            jobs = [PlannedCall(int(i), calls[int(i)], bool(rd)) for i, rd in data["jobs"]]
            raw = data["breach"]
            breach = None if raw is None else (int(raw[0]), raw[1], int(raw[2]))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"Not a tool call plan: {data!r:.200}") from exc
        return cls(assistant, responses, jobs, breach, bool(data.get("strict")))
