"""The turn: its ``invoke_agent`` span and ``turn_finished`` (:class:`TurnObservationAdvisor`).

A turn decides once whether anything is recorded; its model calls and tool calls read that
decision (and the tracer and instruments it looked up) from the scope.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tool_calling import signals
from tool_calling.core.chat._stream import FINAL_RESPONSE, aggregate
from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.client import ChatClient
from tool_calling.core.chat.response import ChatResponse
from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc
from tool_calling.observability._chat import (
    _default_model,
    _finish_reasons,
    _request_model,
    _usage,
    provider_name,
)
from tool_calling.observability._metrics import _instruments
from tool_calling.observability._scope import (
    _error_type,
    _Restore,
    _Scope,
    _scope,
    _stepped,
    _text,
)


def _streamed_response(chunks: Sequence[ChatClientResponse]) -> ChatResponse | None:
    for chunk in reversed(chunks):
        final = chunk.context.get(FINAL_RESPONSE)
        if isinstance(final, ChatResponse):
            return final
    responses = [c.chat_response for c in chunks if c.chat_response is not None]
    return aggregate(responses) if responses else None


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
