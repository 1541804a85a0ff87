"""OpenTelemetry spans and metrics of governed turns, in the GenAI semantic conventions.

``opentelemetry-api`` is optional (``pip install 'django-tool-calling[otel]'``): without it, or
without a tracer or meter provider configured (an SDK), every observation here is a no-op but
the log fields (:class:`LogContextFilter`). Spans, all with ``gen_ai.conversation.id`` and
``tool_calling.run.id`` where there is one:

``invoke_agent`` (INTERNAL)
    One turn: :class:`TurnObservationAdvisor` around a governed turn in-process; in a durable
    run the first step opens it and stores its context on the run, and every later step (on any
    worker, after any wait) and every tool call joins it (:func:`run_step`, :func:`resume_turn`).
``chat {model}`` (CLIENT)
    One model call (:class:`ChatObservationAdvisor`, innermost, streaming included): provider,
    request and response model, token usage, finish reasons.
``execute_tool {tool}`` (INTERNAL)
    One tool call, where it runs (:class:`tool_call`, in-process or on a worker; calls a limit
    refused: :func:`limit_refused`): tool name, call id, type, execution mode, attempt, outcome,
    ``error.type`` on failure, the approval decision.

Content (arguments, results, messages) goes on spans only with
``TOOL_CALLING["OBSERVATIONS_INCLUDE_CONTENT"] = True``, redacted by ``AUDIT_REDACTOR`` and cut
to ``AUDIT_MAX_CHARS`` as the audit is; a tool's ``ToolContext`` never does. Metrics are
recorded once per operation where it ran: ``gen_ai.client.operation.duration`` and
``gen_ai.client.token.usage`` per model call, ``tool_calling.tool_call.duration`` and
``tool_calling.tool_calls`` per tool call, ``tool_calling.limit_refusals``, approval decisions
and how long they waited, and gauges of the calls waiting for approval.

A Celery task carries its sender's trace context in its headers (:func:`task_options`), and the
worker continues it (:func:`task_prerun`, connected by ``ToolCallingConfig.ready()``), so the
web request, a run's steps and every tool-call task make one trace. MCP calls nest under the
MCP SDK's own ``MCP send tools/call`` spans, which run inside ``execute_tool``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from tool_calling import signals
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat._stream import FINAL_RESPONSE, aggregate
from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    LOWEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.client import ChatClient
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResponseMessage,
)
from tool_calling.core.chat.response import ChatResponse
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc

__all__ = [
    "ChatObservationAdvisor",
    "LogContextFilter",
    "TurnObservationAdvisor",
    "chat_advisors",
    "connect",
    "content_enabled",
    "limit_refused",
    "metrics_enabled",
    "provider_name",
    "resume_turn",
    "run_step",
    "task_headers",
    "task_options",
    "task_postrun",
    "task_prerun",
    "tool_call",
    "tracing_enabled",
]

logger = logging.getLogger("tool_calling.observability")

INLINE = "inline"
"""``tool_calling.tool_call.execution_mode`` of a call run in the turn's process."""
CELERY = "celery"
"""``tool_calling.tool_call.execution_mode`` of a call run on a Celery worker."""


def tracing_enabled() -> bool:
    """Whether spans are recorded: the API is installed and a tracer provider is configured."""
    return _otel.tracer() is not None


def metrics_enabled() -> bool:
    """Whether metrics are recorded: the API is installed and a meter provider is configured."""
    return _otel.meter()[1] is not None


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
        step: run_step | None = None,
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
# Set only by this module's context managers and read only by this module (its log filter, and
# its own observations finding the turn they belong to).
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


# -- content ---------------------------------------------------------------------------------------

_warned: list[bool] = [False]


def content_enabled() -> bool:
    """``OBSERVATIONS_INCLUDE_CONTENT``: put arguments, results and messages on spans.

    The first time it is found on in a process, a warning says so (spans then carry what
    tools and users sent, redacted by ``AUDIT_REDACTOR`` only).
    """
    on = app_settings.OBSERVATIONS_INCLUDE_CONTENT is True
    if on and not _warned[0]:
        _warned[0] = True
        logger.warning(
            "TOOL_CALLING['OBSERVATIONS_INCLUDE_CONTENT'] is on: tool arguments and results and "
            "the messages of model calls are recorded on spans (redacted by AUDIT_REDACTOR). "
            "Turn it off unless your traces may hold what users and tools send."
        )
    return on


def _redacted(text: str | None, *, tool_name: str, field: str) -> str:
    """``text`` as a span may carry it: redacted by ``AUDIT_REDACTOR``, cut to ``AUDIT_MAX_CHARS``.

    ``field`` is ``"arguments"``, ``"result"`` or ``"error"`` (a tool's), or ``"message"`` (the
    text of a user or assistant message, ``tool_name`` blank).
    """
    if not text:
        return ""
    redactor: Callable[..., str] | None = app_settings.AUDIT_REDACTOR
    if redactor is not None:
        text = redactor(text, tool_name=tool_name, field=field)
    limit = app_settings.AUDIT_MAX_CHARS
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n[Truncated: {len(text)} characters; first {limit} kept.]"
    return text


def _arguments(text: str, tool_name: str) -> Any:
    redacted = _redacted(text, tool_name=tool_name, field="arguments")
    try:
        return json.loads(redacted)
    except ValueError:
        return redacted


def _parts(message: Message) -> list[dict[str, Any]]:
    """The GenAI conventions' parts of one message (redacted)."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, ToolResponseMessage):
        for response in message.responses:
            field = "error" if response.is_error else "result"
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": response.id,
                    "response": _redacted(
                        response.response_data, tool_name=response.name, field=field
                    ),
                }
            )
        return parts
    if message.text:
        parts.append(
            {"type": "text", "content": _redacted(message.text, tool_name="", field="message")}
        )
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": _arguments(call.arguments, call.name),
                }
            )
    return parts


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _input_content(messages: Sequence[Message]) -> dict[str, str]:
    system = [
        {"type": "text", "content": _redacted(m.text, tool_name="", field="message")}
        for m in messages
        if isinstance(m, SystemMessage)
    ]
    chat = [
        {"role": m.role, "parts": _parts(m)} for m in messages if not isinstance(m, SystemMessage)
    ]
    found = {sc.GEN_AI_INPUT_MESSAGES: _json(chat)}
    if system:
        found[sc.GEN_AI_SYSTEM_INSTRUCTIONS] = _json(system)
    return found


def _output_content(response: ChatResponse) -> str:
    return _json(
        [
            {
                "role": "assistant",
                "parts": _parts(generation.output),
                "finish_reason": generation.finish_reason or "",
            }
            for generation in response.generations
        ]
    )


# -- metrics ---------------------------------------------------------------------------------------


class _Instruments:
    """tool_calling's instruments on one meter (made once per meter provider)."""

    def __init__(self, meter: Any) -> None:
        self.operation_duration = _otel.histogram(
            meter,
            sc.GEN_AI_CLIENT_OPERATION_DURATION,
            "s",
            "GenAI operation duration.",
            sc.DURATION_BUCKETS,
        )
        self.token_usage = _otel.histogram(
            meter,
            sc.GEN_AI_CLIENT_TOKEN_USAGE,
            "{token}",
            "Number of input and output tokens used.",
            sc.TOKEN_BUCKETS,
        )
        self.tool_duration = _otel.histogram(
            meter,
            sc.TOOL_CALL_DURATION,
            "s",
            "Duration of one tool call, where it ran.",
            sc.DURATION_BUCKETS,
        )
        self.tool_calls = meter.create_counter(
            sc.TOOL_CALLS, unit="{call}", description="Tool calls that ended, by outcome."
        )
        self.limit_refusals = meter.create_counter(
            sc.LIMIT_REFUSALS, unit="{call}", description="Tool calls a call limit refused."
        )
        self.approval_decisions = meter.create_counter(
            sc.APPROVAL_DECISIONS, unit="{call}", description="Approval decisions."
        )
        self.approval_wait = _otel.histogram(
            meter,
            sc.APPROVAL_WAIT_DURATION,
            "s",
            "How long a call waited for its approval decision.",
            (1, 10, 60, 300, 900, 3600, 14400, 86400),
        )
        meter.create_observable_gauge(
            sc.APPROVALS_WAITING,
            callbacks=[_waiting_count],
            unit="{call}",
            description="Tool calls waiting for a person's approval.",
        )
        meter.create_observable_gauge(
            sc.APPROVALS_OLDEST_AGE,
            callbacks=[_oldest_age],
            unit="s",
            description="How long the oldest call waiting for approval has waited.",
        )


_instruments_cache: list[Any] = [None, None]


def _instruments() -> _Instruments | None:
    provider, meter = _otel.meter()
    if meter is None:
        return None
    cached = _instruments_cache
    if cached[0] is not provider:
        cached[1] = _Instruments(meter)
        cached[0] = provider
    instruments: _Instruments = cached[1]
    return instruments


_approvals: list[Any] = [None, 0.0, (0, 0.0)]
"""The summary function :func:`connect` was given, when it last ran, what it returned."""


def _approval_summary(fresh: bool) -> tuple[int, float] | None:
    summary = _approvals[0]
    if summary is None:
        return None
    # The gauges are read in one collection, the count first: its query serves the age too.
    if fresh or time.monotonic() - _approvals[1] > 1.0:
        try:
            _approvals[2] = summary()
        except Exception:
            logger.exception("Could not read the calls waiting for approval")
            return None
        _approvals[1] = time.monotonic()
    found: tuple[int, float] = _approvals[2]
    return found


def _waiting_count(options: Any) -> list[Any]:
    found = _approval_summary(fresh=True)
    return [] if found is None else [_otel.observation(found[0])]


def _oldest_age(options: Any) -> list[Any]:
    found = _approval_summary(fresh=False)
    return [] if found is None else [_otel.observation(found[1])]


def _approval_decided(sender: Any, execution: Any, decision: str = "", **kwargs: Any) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    attributes = {sc.GEN_AI_TOOL_NAME: execution.tool_name, sc.TOOL_CALLING_APPROVAL: decision}
    instruments.approval_decisions.add(1, attributes)
    created, decided = execution.created_at, execution.decided_at
    if created is not None and decided is not None:
        instruments.approval_wait.record((decided - created).total_seconds(), attributes)


def connect(*, approvals_waiting: Callable[[], tuple[int, float]] | None = None) -> None:
    """Connect the receivers of metrics (``ToolCallingConfig.ready()`` does).

    Args:
        approvals_waiting: Returns how many calls wait for approval and how many seconds the
            oldest has waited; the gauges report it (read at most once a second).
    """
    _approvals[0] = approvals_waiting
    _approvals[1] = 0.0
    signals.approval_decided.connect(
        _approval_decided, dispatch_uid="tool_calling.observability.approval_decided"
    )
    _instruments()  # registers the gauges now when a meter provider is already configured


# -- spans: the shared machinery -------------------------------------------------------------------


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


def _streamed_response(chunks: Sequence[ChatClientResponse]) -> ChatResponse | None:
    for chunk in reversed(chunks):
        final = chunk.context.get(FINAL_RESPONSE)
        if isinstance(final, ChatResponse):
            return final
    responses = [c.chat_response for c in chunks if c.chat_response is not None]
    return aggregate(responses) if responses else None


def _usage(response: ChatResponse | None) -> tuple[int | None, int | None]:
    usage = response.metadata.get("usage") if response is not None else None
    if not isinstance(usage, dict):
        return None, None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else None,
        completion if isinstance(completion, int) else None,
    )


def _finish_reasons(response: ChatResponse | None) -> list[str]:
    if response is None:
        return []
    return [g.finish_reason for g in response.generations if g.finish_reason]


def provider_name(model: Any) -> str:
    """``gen_ai.provider.name`` of a chat model.

    A model class may say it with a ``provider_name`` attribute; ``OpenAIChatModel`` (and its
    subclasses) is ``"openai"``; any other is named by its class.
    """
    declared = getattr(model, "provider_name", None)
    if isinstance(declared, str) and declared:
        return declared
    for cls in type(model).__mro__:
        if cls.__name__ == "OpenAIChatModel" and cls.__module__.startswith("tool_calling.core"):
            return sc.PROVIDER_OPENAI
    return type(model).__name__


def _default_model(model: Any) -> str:
    try:
        options = model.default_options
    except Exception:  # a model whose options cannot be read now still gets observed
        return ""
    return _text(getattr(options, "model", None))


def _request_model(request: ChatClientRequest, default: str) -> str:
    options = request.prompt.options
    return _text(getattr(options, "model", None)) or default


# -- the turn --------------------------------------------------------------------------------------


class _Turn:
    """One turn: its span (when tracing), and what its model calls add up to."""

    __slots__ = (
        "announce",
        "conversation_id",
        "input_tokens",
        "instruments",
        "model",
        "observed",
        "output_tokens",
        "provider",
        "run_id",
        "scope",
        "span",
        "tracer",
    )

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        conversation_id: str,
        run_id: str,
        announce: bool,
        parent: Any = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.conversation_id = conversation_id
        self.run_id = run_id
        self.announce = announce
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.span: Any = None
        # Decided once a turn: the observations inside it look no provider up again.
        self.tracer = tracer = _otel.tracer()
        self.instruments = _instruments()
        self.observed = tracer is not None or self.instruments is not None
        outer = _scope.get()
        self.scope = _Scope(
            conversation_id or outer.conversation_id,
            run_id or outer.run_id,
            outer.tool_call_id,
            outer.tool_name,
            self,
            outer.step,
        )
        if tracer is not None:
            attributes: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT}
            if provider:
                attributes[sc.GEN_AI_PROVIDER_NAME] = provider
            if model:
                attributes[sc.GEN_AI_REQUEST_MODEL] = model
            if conversation_id:
                attributes[sc.GEN_AI_CONVERSATION_ID] = conversation_id
            if run_id:
                attributes[sc.TOOL_CALLING_RUN_ID] = run_id
            self.span = _otel.start_span(
                tracer, sc.OPERATION_INVOKE_AGENT, "internal", attributes, parent
            )

    def activate(self) -> _Restore:
        return _Restore(self.span, self.scope)

    def model_called(self, provider: str, model: str, response: ChatResponse | None) -> None:
        """Add up what one model call of the turn reported."""
        prompt, completion = _usage(response)
        if prompt is not None:
            self.input_tokens = (self.input_tokens or 0) + prompt
        if completion is not None:
            self.output_tokens = (self.output_tokens or 0) + completion
        span = self.span
        if span is not None and not self.provider and provider:
            self.provider = provider
            span.set_attribute(sc.GEN_AI_PROVIDER_NAME, provider)
        if span is not None and not self.model and model:
            self.model = model
            span.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)

    def streamed(self, chunks: list[ChatClientResponse], error: BaseException | None) -> None:
        self.end(_streamed_response(chunks), error)

    def end(self, response: ChatResponse | None = None, error: BaseException | None = None) -> None:
        """End the span with the turn's outcome; tell ``turn_finished`` receivers (in-process)."""
        span = self.span
        if span is not None:  # nothing to do unless traced or heard
            if self.input_tokens is None and self.output_tokens is None:
                self.input_tokens, self.output_tokens = _usage(response)
            if self.input_tokens is not None:
                span.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, self.input_tokens)
            if self.output_tokens is not None:
                span.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, self.output_tokens)
            reasons = _finish_reasons(response)
            if reasons:
                span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
            if error is not None:
                span.set_attribute(sc.ERROR_TYPE, _error_type(error))
                _otel.set_error(span, type(error).__name__)
            span.end()
        if self.announce and signals.turn_finished.receivers:
            _announce(self.conversation_id, response, error)


class _Unobserved:
    """The turn of a scope in which nothing is recorded (no provider configured)."""

    __slots__ = ()
    tracer = None
    instruments = None
    observed = False


_UNOBSERVED: Any = _Unobserved()


def _announce(
    conversation_id: str, response: ChatResponse | None, error: BaseException | None
) -> None:
    """Send ``turn_finished`` for an in-process turn, once the transaction commits."""
    reasons = _finish_reasons(response)
    signals.send_on_commit(
        signals.turn_finished,
        ChatClient,
        conversation_id=conversation_id or None,
        run_id=None,
        status="failed" if error is not None else "succeeded",
        finish_reason=reasons[0] if reasons else "",
        error=type(error).__name__ if error is not None else "",
    )


class TurnObservationAdvisor(Advisor):
    """Outermost advisor of governed turns: the turn's ``invoke_agent`` span and log fields.

    Ends with the turn: the finish reason and the token usage summed over its model calls go on
    the span, and ``signals.turn_finished`` is sent (once the transaction commits), whether
    OpenTelemetry is installed or not.

    Args:
        model: The turn's chat model (``gen_ai.provider.name``, ``gen_ai.request.model``).
        conversation_id: The stored conversation of the turn.
        run_id: The durable run, if the turn is one.
    """

    order = HIGHEST_PRECEDENCE

    def __init__(
        self, model: Any = None, *, conversation_id: Any = None, run_id: Any = None
    ) -> None:
        self.provider = provider_name(model) if model is not None else ""
        self.default_model = _default_model(model) if model is not None else ""
        self.conversation_id = _text(conversation_id)
        self.run_id = _text(run_id)

    def _turn(self, request: ChatClientRequest) -> _Turn:
        return _Turn(
            provider=self.provider,
            model=_request_model(request, self.default_model),
            conversation_id=self.conversation_id,
            run_id=self.run_id,
            announce=True,
        )

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Run the turn inside its span."""
        if _otel.tracer() is None and _instruments() is None:
            return self._unobserved(request, chain)
        turn = self._turn(request)
        token = _scope.set(turn.scope)
        span = turn.span
        otel_token = _otel.attach(span) if span is not None else None
        try:
            response = chain.next_call(request)
        except BaseException as exc:
            if otel_token is not None:
                _otel.detach(otel_token)
            _scope.reset(token)
            turn.end(error=exc)
            raise
        if otel_token is not None:
            _otel.detach(otel_token)
        _scope.reset(token)
        turn.end(response.chat_response)
        return response

    def _unobserved(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """The turn with nothing to record: the log fields and ``turn_finished`` only."""
        outer = _scope.get()
        token = _scope.set(
            _Scope(
                self.conversation_id or outer.conversation_id,
                self.run_id or outer.run_id,
                outer.tool_call_id,
                outer.tool_name,
                _UNOBSERVED,
                outer.step,
            )
        )
        try:
            response = chain.next_call(request)
        except BaseException as exc:
            _scope.reset(token)
            if signals.turn_finished.receivers:
                _announce(self.conversation_id, None, exc)
            raise
        _scope.reset(token)
        if signals.turn_finished.receivers:
            _announce(self.conversation_id, response.chat_response, None)
        return response

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Stream the turn inside its span (ended when the stream ends or is closed)."""
        return _stepped(lambda: self._turn(request), lambda: chain.next_stream(request))


# -- model calls -----------------------------------------------------------------------------------


class _Chat:
    """One model call: its ``chat`` span (when tracing) and its metrics (when configured)."""

    __slots__ = ("attributes", "instruments", "provider", "span", "started", "turn")

    def __init__(
        self, provider: str, model: str, request: ChatClientRequest, *, stream: bool
    ) -> None:
        self.provider = provider
        scope = _scope.get()
        turn = self.turn = scope.turn
        self.attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
            sc.GEN_AI_PROVIDER_NAME: provider,
        }
        if model:
            self.attributes[sc.GEN_AI_REQUEST_MODEL] = model
        self.span: Any = None
        tracer = turn.tracer if turn is not None else _otel.tracer()
        if tracer is not None:
            attributes = dict(self.attributes)
            attributes[sc.GEN_AI_REQUEST_STREAM] = stream
            if scope.conversation_id:
                attributes[sc.GEN_AI_CONVERSATION_ID] = scope.conversation_id
            if scope.run_id:
                attributes[sc.TOOL_CALLING_RUN_ID] = scope.run_id
            if content_enabled():
                attributes.update(_input_content(request.prompt.messages))
            name = f"{sc.OPERATION_CHAT} {model}" if model else sc.OPERATION_CHAT
            self.span = _otel.start_span(tracer, name, "client", attributes)
        self.instruments = turn.instruments if turn is not None else _instruments()
        self.started = time.perf_counter()

    def activate(self) -> _Restore:
        return _Restore(self.span, None)

    def streamed(self, chunks: list[ChatClientResponse], error: BaseException | None) -> None:
        responses = [c.chat_response for c in chunks if c.chat_response is not None]
        self.end(aggregate(responses) if responses else None, error)

    def end(self, response: ChatResponse | None, error: BaseException | None = None) -> None:
        elapsed = time.perf_counter() - self.started
        attributes = self.attributes
        if response is not None:
            response_model = response.metadata.get("model")
            if isinstance(response_model, str) and response_model:
                attributes[sc.GEN_AI_RESPONSE_MODEL] = response_model
        if error is not None:
            attributes[sc.ERROR_TYPE] = _error_type(error)
        prompt, completion = _usage(response)
        span = self.span
        if span is not None:
            # What the start did not know, in one call (each call takes the span's lock).
            ended: dict[str, Any] = {}
            for key in (sc.GEN_AI_RESPONSE_MODEL, sc.ERROR_TYPE):
                if key in attributes:
                    ended[key] = attributes[key]
            response_id = response.metadata.get("id") if response is not None else None
            if isinstance(response_id, str) and response_id:
                ended[sc.GEN_AI_RESPONSE_ID] = response_id
            reasons = _finish_reasons(response)
            if reasons:
                ended[sc.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
            if prompt is not None:
                ended[sc.GEN_AI_USAGE_INPUT_TOKENS] = prompt
            if completion is not None:
                ended[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = completion
            if response is not None and content_enabled():
                ended[sc.GEN_AI_OUTPUT_MESSAGES] = _output_content(response)
            span.set_attributes(ended)
            if error is not None:
                _otel.set_error(span, type(error).__name__)
            span.end()
        instruments = self.instruments
        if instruments is not None:
            instruments.operation_duration.record(elapsed, attributes)
            if prompt is not None:
                instruments.token_usage.record(
                    prompt, {**attributes, sc.GEN_AI_TOKEN_TYPE: sc.TOKEN_TYPE_INPUT}
                )
            if completion is not None:
                instruments.token_usage.record(
                    completion, {**attributes, sc.GEN_AI_TOKEN_TYPE: sc.TOKEN_TYPE_OUTPUT}
                )
        if self.turn is not None:
            self.turn.model_called(
                self.provider, _text(attributes.get(sc.GEN_AI_REQUEST_MODEL)), response
            )


class ChatObservationAdvisor(Advisor):
    """Innermost advisor: a ``chat {model}`` span and the GenAI metrics of every model call.

    Placed next to the model (inside the tool loop), so each round of a turn is one span. A
    streamed call is observed from its chunks: usage and finish reasons come from the
    aggregated response once the stream ends. Costs one type check per call when neither
    tracing nor metrics are configured.

    Args:
        model: The chat model the calls go to (``gen_ai.provider.name``, default model).
    """

    order = LOWEST_PRECEDENCE

    def __init__(self, model: Any) -> None:
        self.provider = provider_name(model)
        self.default_model = _default_model(model)

    def _observed(self) -> bool:
        turn = _scope.get().turn
        if turn is not None:  # the turn decided for its model calls
            return turn.observed
        return _otel.tracer() is not None or _otel.meter()[1] is not None

    def _chat(self, request: ChatClientRequest, *, stream: bool) -> _Chat:
        model = _request_model(request, self.default_model)
        return _Chat(self.provider, model, request, stream=stream)

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Call the model inside a ``chat`` span."""
        if not self._observed():
            return chain.next_call(request)
        chat = self._chat(request, stream=False)
        restore = chat.activate()
        try:
            response = chain.next_call(request)
        except BaseException as exc:
            restore()
            chat.end(None, exc)
            raise
        restore()
        chat.end(response.chat_response)
        return response

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Stream the model's answer inside a ``chat`` span (ended with the stream)."""
        if not self._observed():
            return chain.next_stream(request)
        return _stepped(
            lambda: self._chat(request, stream=True), lambda: chain.next_stream(request)
        )


def chat_advisors(model: Any) -> list[Advisor]:
    """``[ChatObservationAdvisor(model)]`` when spans or metrics are recorded, else ``[]``.

    For clients built per turn (governed turns, a durable run's model rounds): with nothing
    to record, the model calls go through no extra advisor at all.
    """
    if _otel.tracer() is None and _otel.meter()[1] is None:
        return []
    return [ChatObservationAdvisor(model)]


# -- tool calls ------------------------------------------------------------------------------------


class _Ended(Protocol):
    """How a governed call ended (``calls.running.CallOutcome``)."""

    @property
    def status(self) -> str: ...

    @property
    def outcome(self) -> ToolOutcome: ...


_OUTCOME_ERRORS = {ToolOutcomeKind.TIMEOUT: "timeout", ToolOutcomeKind.UNKNOWN: "outcome_unknown"}


class tool_call:
    """Observe one tool call where it runs: ``with tool_call(call, ...) as observed:``.

    Inside the block the ``execute_tool {tool}`` span is current (spans the tool makes, the MCP
    SDK's among them, are its children) and log records carry the call's id and tool name.
    ``observed.ended(outcome)`` records how it ended (and returns ``outcome``); a block that
    raises ends the span with the exception's type.

    Args:
        call: The model's call (its arguments go on the span with content on only).
        execution_mode: ``"inline"`` or ``"celery"``.
        attempt: The attempt that runs the call.
        description: The tool's description.
        approval: The approval decision the call runs under (blank: none needed).
        conversation_id: The stored conversation of the turn.
        run_id: The durable run that made the call.
        trace_context: The run's stored trace context (``Run.trace_context``): the span joins
            the run's turn even when someone else's request sent the call (an approval).
    """

    __slots__ = (
        "_attributes",
        "_ended",
        "_instruments",
        "_otel_token",
        "_scope",
        "_scope_token",
        "_span",
        "_started",
    )

    def __init__(
        self,
        call: ToolCall,
        *,
        execution_mode: str,
        attempt: int = 1,
        description: str = "",
        approval: str = "",
        conversation_id: Any = None,
        run_id: Any = None,
        trace_context: str = "",
    ) -> None:
        scope = _scope.get()
        turn = scope.turn
        conversation = scope.conversation_id if conversation_id is None else str(conversation_id)
        run = scope.run_id if run_id is None else str(run_id)
        self._scope = _Scope(conversation, run, call.id, call.name, turn, scope.step)
        self._ended = False
        self._span: Any = None
        self._otel_token: Any = None
        if turn is not None:  # the turn looked the providers up for its calls
            tracer, self._instruments = turn.tracer, turn.instruments
        else:
            tracer, self._instruments = _otel.tracer(), _instruments()
        if tracer is None and self._instruments is None:
            self._attributes: dict[str, Any] | None = None  # only the log fields
            return
        self._attributes = {
            sc.GEN_AI_TOOL_NAME: call.name,
            sc.TOOL_CALLING_EXECUTION_MODE: execution_mode,
        }
        if tracer is not None:
            attributes: dict[str, Any] = {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL,
                sc.GEN_AI_TOOL_NAME: call.name,
                sc.GEN_AI_TOOL_CALL_ID: call.id,
                sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
                sc.TOOL_CALLING_EXECUTION_MODE: execution_mode,
                sc.TOOL_CALLING_ATTEMPT: attempt,
            }
            if description:
                attributes[sc.GEN_AI_TOOL_DESCRIPTION] = description
            if approval:
                attributes[sc.TOOL_CALLING_APPROVAL] = approval
            if conversation:
                attributes[sc.GEN_AI_CONVERSATION_ID] = conversation
            if run:
                attributes[sc.TOOL_CALLING_RUN_ID] = run
            if content_enabled():
                attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = _redacted(
                    call.arguments, tool_name=call.name, field="arguments"
                )
            parent = _otel.extract({"traceparent": trace_context}) if trace_context else None
            self._span = _otel.start_span(
                tracer, f"{sc.OPERATION_EXECUTE_TOOL} {call.name}", "internal", attributes, parent
            )
        self._started = time.perf_counter()

    def __enter__(self) -> tool_call:
        self._scope_token = _scope.set(self._scope)
        if self._span is not None:
            self._otel_token = _otel.attach(self._span)
        return self

    def ended(self, result: Any) -> Any:
        """Record how the call ended (``status`` and ``outcome``); returns ``result``."""
        if self._attributes is not None:
            ended: _Ended = result
            self._end(ended.status, ended.outcome, time.perf_counter() - self._started)
        return result

    def _end(
        self,
        status: str,
        outcome: ToolOutcome | None,
        seconds: float,
        error: BaseException | None = None,
    ) -> None:
        attributes = self._attributes
        if self._ended or attributes is None:
            return
        self._ended = True
        status = str(status)
        attributes[sc.TOOL_CALLING_OUTCOME] = status
        error_type = ""
        if error is not None:
            error_type = _error_type(error)
        elif outcome is not None and outcome.kind is not ToolOutcomeKind.OK:
            kind = outcome.kind
            error_type = outcome.error_type or _OUTCOME_ERRORS.get(kind, sc.ERROR_TYPE_OTHER)
        if error_type:
            attributes[sc.ERROR_TYPE] = error_type
        span = self._span
        if span is not None:
            ended: dict[str, Any] = {sc.TOOL_CALLING_OUTCOME: status}
            if error_type:
                ended[sc.ERROR_TYPE] = error_type
            if status == "refused":
                ended[sc.TOOL_CALLING_REFUSAL] = "governance"
            span.set_attributes(ended)
            if error_type:
                _otel.set_error(span, error_type.rpartition(".")[2])
            if outcome is not None and content_enabled():
                name = attributes[sc.GEN_AI_TOOL_NAME]
                if outcome.kind is ToolOutcomeKind.OK:
                    span.set_attribute(
                        sc.GEN_AI_TOOL_CALL_RESULT,
                        _redacted(outcome.text, tool_name=name, field="result"),
                    )
                else:
                    span.add_event(
                        "exception",
                        {
                            "exception.type": error_type,
                            "exception.message": _redacted(
                                outcome.text, tool_name=name, field="error"
                            ),
                        },
                    )
        instruments = self._instruments
        if instruments is not None:
            metric = {
                sc.GEN_AI_TOOL_NAME: attributes[sc.GEN_AI_TOOL_NAME],
                sc.TOOL_CALLING_OUTCOME: status,
                sc.TOOL_CALLING_EXECUTION_MODE: attributes[sc.TOOL_CALLING_EXECUTION_MODE],
            }
            instruments.tool_duration.record(seconds, metric)
            instruments.tool_calls.add(1, metric)

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        if self._otel_token is not None:
            _otel.detach(self._otel_token)
        _scope.reset(self._scope_token)
        if exc is not None:
            self._end("failed", None, time.perf_counter() - self._started, exc)
        if self._span is not None:
            self._span.end()


def limit_refused(
    call: ToolCall, response_text: str, *, conversation_id: Any = None, run_id: Any = None
) -> None:
    """Observe a call a call limit refused (it never ran): a span, and the refusal counters.

    ``response_text`` is the breach text the model gets; it tells the total limit from a
    tool's own.
    """
    limit = "total" if response_text.startswith("Total tool call limit") else "per_tool"
    scope = _scope.get()
    conversation = _text(conversation_id) or scope.conversation_id
    run = _text(run_id) or scope.run_id
    error_type = "tool_calling.core.execution.limits.ToolCallLimitExceededException"
    tracer = _otel.tracer()
    if tracer is not None:
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: call.name,
            sc.GEN_AI_TOOL_CALL_ID: call.id,
            sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
            sc.TOOL_CALLING_OUTCOME: "refused",
            sc.TOOL_CALLING_REFUSAL: "limit",
            sc.TOOL_CALLING_LIMIT: limit,
            sc.ERROR_TYPE: error_type,
        }
        if conversation:
            attributes[sc.GEN_AI_CONVERSATION_ID] = conversation
        if run:
            attributes[sc.TOOL_CALLING_RUN_ID] = run
        span = _otel.start_span(
            tracer, f"{sc.OPERATION_EXECUTE_TOOL} {call.name}", "internal", attributes
        )
        _otel.set_error(span, "ToolCallLimitExceededException")
        span.end()
    instruments = _instruments()
    if instruments is not None:
        instruments.limit_refusals.add(
            1, {sc.GEN_AI_TOOL_NAME: call.name, sc.TOOL_CALLING_LIMIT: limit}
        )
        instruments.tool_calls.add(
            1, {sc.GEN_AI_TOOL_NAME: call.name, sc.TOOL_CALLING_OUTCOME: "refused"}
        )


# -- durable runs and Celery tasks -----------------------------------------------------------------


class run_step:
    """One step of a durable run: ``with run_step(run_id, step):`` around its work.

    Log records carry the run's id. The step joins the run's turn when it reads the run
    (:func:`resume_turn`); a turn span the first step opened ends with that step.
    """

    __slots__ = ("_restore", "_turn", "run_id", "step")

    def __init__(self, run_id: Any, step: int) -> None:
        self.run_id = _text(run_id)
        self.step = step
        self._turn: _Turn | None = None
        self._restore: list[_Restore] = []

    def __enter__(self) -> run_step:
        self._restore.append(_Restore(None, _scope.get().but(run_id=self.run_id, step=self)))
        return self

    def resume(self, stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None:
        """Join the stored turn, or open it (the first step): see :func:`resume_turn`."""
        scope = _scope.get().but(conversation_id=_text(conversation_id))
        if _otel.tracer() is None:
            self._restore.append(_Restore(None, scope))
            return
        parent = _otel.extract({"traceparent": stored}) if stored else None
        if parent is not None:
            self._restore.append(_Restore(None, scope, parent))
            return
        # No turn to join yet (the first step): open it here, under whoever sent the step.
        turn = _Turn(
            provider="",
            model="",
            conversation_id=_text(conversation_id),
            run_id=self.run_id,
            announce=False,
        )
        turn.span.set_attribute(sc.TOOL_CALLING_RUN_STEP, self.step)
        self._turn = turn
        self._restore.append(_Restore(turn.span, scope.but(turn=turn)))
        text = _otel.span_context_text(turn.span)
        if text:
            store(text)

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        while self._restore:
            self._restore.pop()()
        if self._turn is not None:
            self._turn.end(error=exc)


def resume_turn(stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None:
    """Join the run's turn in the current :class:`run_step` (call it once the run was read).

    Args:
        stored: The run's stored trace context (``Run.trace_context``; blank: none yet).
        conversation_id: The run's conversation.
        store: Saves the context of the turn span this step opens when none was stored.
    """
    step = _scope.get().step
    if step is not None:
        step.resume(stored, conversation_id, store)


def task_headers() -> dict[str, str] | None:
    """The current trace context as Celery task headers; ``None`` when nothing is traced."""
    if _otel.tracer() is None:
        return None
    return _otel.inject()


def task_options() -> dict[str, Any]:
    """``apply_async`` options that carry the current trace: ``{"headers": ...}``, or ``{}``.

    Empty when nothing is traced, so a task is sent exactly as it would be without
    OpenTelemetry.
    """
    headers = task_headers()
    return {"headers": headers} if headers else {}


_task_tokens: dict[str, _Restore] = {}


def task_prerun(sender: Any = None, task_id: str | None = None, task: Any = None, **_: Any) -> None:
    """Celery ``task_prerun``: continue the trace the task's headers carry (tool_calling's tasks).

    Left alone when another instrumentation already made a span current for the task.
    """
    if (
        not task_id
        or task is None
        or not str(getattr(task, "name", "")).startswith("tool_calling.")
    ):
        return
    if _otel.tracer() is None or _otel.has_current_span():
        return
    request = getattr(task, "request", None)
    headers = getattr(request, "headers", None) or {}
    carrier = {}
    for key in ("traceparent", "tracestate"):
        value = getattr(request, key, None) or headers.get(key)
        if isinstance(value, str):
            carrier[key] = value
    parent = _otel.extract(carrier)
    if parent is not None:
        _task_tokens[task_id] = _Restore(None, None, parent)


def task_postrun(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    """Celery ``task_postrun``: end what :func:`task_prerun` continued."""
    restore = _task_tokens.pop(task_id or "", None)
    if restore is not None:
        restore()
