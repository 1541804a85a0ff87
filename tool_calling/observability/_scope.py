"""What the current work belongs to, and making an observation current.

``_scope`` (a context variable) holds the conversation, run, tool call and turn the current
code works for; :class:`LogContextFilter` puts them on log records. :class:`_Restore` makes a
span and a scope current and undoes it; :func:`_stepped` keeps an observation current around
each step of a stream. ``_text`` and ``_error_type`` are the small conversions every
observation uses.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tool_calling.core.chat.advisors.base import ChatClientResponse
from tool_calling.observability import _otel


class _Step(Protocol):
    """The durable run's step a scope belongs to (``_runs.run_step``)."""

    step: int
    """The step's number in its run."""

    def resume(self, stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None: ...


# -- what the log records of the current work carry ----------------------------------------------


class _Scope:
    """The turn, run and tool call the current code works for (:class:`LogContextFilter`)."""

    __slots__ = ("conversation_id", "run_id", "step", "tool_call_id", "tool_name", "turn")

    def __init__(
        self,
        conversation_id: str = "",
        run_id: str = "",
        tool_call_id: str = "",
        tool_name: str = "",
        turn: Any = None,
        step: _Step | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.turn = turn
        self.step = step

    def but(self, **changes: Any) -> _Scope:
        scope = _Scope(
            self.conversation_id,
            self.run_id,
            self.tool_call_id,
            self.tool_name,
            self.turn,
            self.step,
        )
        for name, value in changes.items():
            setattr(scope, name, value)
        return scope


_EMPTY = _Scope()
# Set only by this package's context managers and read only by this package (its log filter,
# and its own observations finding the turn they belong to).
_scope: contextvars.ContextVar[_Scope] = contextvars.ContextVar(
    "tool_calling_observation", default=_EMPTY
)


def _text(value: object) -> str:
    return "" if value is None else str(value)


class LogContextFilter(logging.Filter):
    """Adds what the current work belongs to, as fields of every log record it sees.

    ``run_id``, ``conversation_id``, ``tool_call_id`` and ``tool_name`` (blank outside a turn,
    a run or a tool call), plus ``trace_id`` and ``span_id`` of the current span when tracing.
    A field the record already has (``extra=``) is left as it is; no record is dropped. Never
    adds content: arguments, results and messages are not log fields.

    Install it on a handler, e.g. ``"filters": {"tool_calling": {"()":
    "tool_calling.observability.LogContextFilter"}}`` and ``"filters": ["tool_calling"]`` on
    the handler; a JSON formatter then writes the fields, a text one can name them
    (``%(run_id)s``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields; always keeps the record."""
        scope = _scope.get()
        trace_id, span_id = _otel.current_ids()
        fields = (
            ("run_id", scope.run_id),
            ("conversation_id", scope.conversation_id),
            ("tool_call_id", scope.tool_call_id),
            ("tool_name", scope.tool_name),
            ("trace_id", trace_id),
            ("span_id", span_id),
        )
        for name, value in fields:
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


# -- making an observation current ----------------------------------------------------------------


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


class _Restore:
    """Makes a span and a scope current; :meth:`__call__` undoes it."""

    __slots__ = ("_otel_token", "_scope_token")

    def __init__(self, span: Any, scope: _Scope | None, parent: Any = None) -> None:
        self._scope_token = _scope.set(scope) if scope is not None else None
        self._otel_token = (
            _otel.attach(span, parent) if span is not None or parent is not None else None
        )

    def __call__(self) -> None:
        if self._otel_token is not None:
            _otel.detach(self._otel_token)
            self._otel_token = None
        if self._scope_token is not None:
            _scope.reset(self._scope_token)
            self._scope_token = None


class _Observation(Protocol):
    """What :func:`_stepped` observes a stream with."""

    def activate(self) -> _Restore: ...

    def streamed(self, chunks: list[ChatClientResponse], error: BaseException | None) -> None: ...


def _stepped(
    observe: Callable[[], _Observation],
    stream: Callable[[], Iterator[ChatClientResponse]],
) -> Iterator[ChatClientResponse]:
    """Yield the chunks of ``stream()``, observed by ``observe()``, once iteration starts.

    A generator cannot hold a context across its yields (the consumer runs in between), so the
    observation is made current around each step only; it is told what was streamed once the
    stream ended, failed or was closed by the consumer. Nothing starts before the first chunk
    is asked for, so a stream never iterated leaves no span open.
    """
    observation = observe()
    restore = observation.activate()
    try:
        chunks = stream()
    except BaseException as exc:
        restore()
        observation.streamed([], exc)
        raise
    restore()
    seen: list[ChatClientResponse] = []
    error: BaseException | None = None
    try:
        while True:
            restore = observation.activate()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except BaseException as exc:
                error = exc
                raise
            finally:
                restore()
            seen.append(chunk)
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            restore = observation.activate()
            try:
                close()
            finally:
                restore()
        observation.streamed(seen, error)
