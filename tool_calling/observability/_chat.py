"""Model calls: the ``chat {model}`` span and the GenAI metrics (:class:`ChatObservationAdvisor`).

Also what a turn reads of a model and its responses: :func:`provider_name`, the request
model, token usage and finish reasons.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from tool_calling.core.chat._stream import aggregate
from tool_calling.core.chat.advisors.base import (
    LOWEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.response import ChatResponse
from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc
from tool_calling.observability._content import _input_content, _output_content, content_enabled
from tool_calling.observability._metrics import _instruments
from tool_calling.observability._scope import (
    _error_type,
    _Restore,
    _scope,
    _stepped,
    _text,
)


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
            if scope.step is not None:
                attributes[sc.TOOL_CALLING_RUN_STEP] = scope.step.step
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
