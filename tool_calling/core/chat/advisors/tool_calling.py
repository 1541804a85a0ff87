"""ToolCallingAdvisor: the tool-calling loop, as an advisor that re-enters the chain below it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tool_calling.core._settings import DEFAULT_MAX_TOOL_ROUNDS as _DEFAULT_ROUNDS
from tool_calling.core._settings import core_settings
from tool_calling.core.chat._stream import FINAL_RESPONSE, add_usage, aggregate
from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
)
from tool_calling.core.chat.prompt import ChatOptions, Prompt
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.execution.confirmation import ToolCallConfirmationRequiredError
from tool_calling.core.execution.eligibility import (
    DefaultToolExecutionEligibilityPredicate,
    ToolExecutionEligibilityPredicate,
)
from tool_calling.core.execution.limits import ToolCallLimitExceededException
from tool_calling.core.execution.manager import DefaultToolCallingManager, ToolCallingManager
from tool_calling.core.execution.result import ToolExecutionResult

__all__ = [
    "ANSWERED",
    "DEFAULT_MAX_TOOL_ROUNDS",
    "RUN_TOOLS",
    "TOOL_ROUNDS_EXCEEDED",
    "LoopEnding",
    "ToolCallingAdvisor",
    "decide_after_model",
    "decide_after_tools",
]

DEFAULT_MAX_TOOL_ROUNDS = _DEFAULT_ROUNDS
"""Model calls one turn may make before the loop stops, whatever the per-tool limits say
(``TOOL_CALLING["LIMITS"]["MAX_TOOL_ROUNDS"]`` under Django)."""
TOOL_ROUNDS_EXCEEDED = "toolRoundLimitExceeded"
"""Finish reason when the loop stopped at ``max_tool_rounds``."""


@dataclass
class LoopState:
    """What the loop knows during one turn (lives on the stack, never on the advisor)."""

    request: ChatClientRequest
    """The request as it entered the advisor."""
    history: list[Message]
    """Every message of the turn so far (limits count over it)."""
    rounds: int = 0
    """Model calls made so far."""
    usage: dict[str, Any] = field(default_factory=dict)
    """Token usage summed over the model calls."""


class ToolCallingAdvisor(Advisor):
    """Runs the tools the model asks for and calls the model again until it answers.

    Hooks for subclasses, in the order they run: ``initialize_loop`` (once), then per model call
    ``before_call`` and ``after_call``, then ``finalize_loop`` (once). The calls of a response run
    with the options of the request ``before_call`` returned: a subclass that offers the model
    fewer tools also lets fewer tools run.

    Args:
        tool_calling_manager: Executes the calls; a ``DefaultToolCallingManager`` by default.
        order: Position in the chain (inside memory by default).
        conversation_history_enabled: Send the whole turn to the model on each round. Turn off
            when a memory advisor inside the loop supplies the history: the next request then
            carries the system message and the last tool responses only.
        eligibility: Decides whether a response's tool calls run here.
        max_tool_rounds: Model calls per turn before the loop stops; default from settings
            (100).
    """

    order = HIGHEST_PRECEDENCE + 300

    def __init__(
        self,
        tool_calling_manager: ToolCallingManager | None = None,
        order: int = HIGHEST_PRECEDENCE + 300,
        conversation_history_enabled: bool = True,
        *,
        eligibility: ToolExecutionEligibilityPredicate | None = None,
        max_tool_rounds: int | None = None,
    ) -> None:
        self.tool_calling_manager = tool_calling_manager or DefaultToolCallingManager()
        self.order = order
        self.conversation_history_enabled = conversation_history_enabled
        self.eligibility = eligibility or DefaultToolExecutionEligibilityPredicate()
        if max_tool_rounds is None:
            max_tool_rounds = core_settings().max_tool_rounds
        if (
            isinstance(max_tool_rounds, bool)
            or not isinstance(max_tool_rounds, int)
            or max_tool_rounds < 1
        ):
            raise ValueError(f"max_tool_rounds must be a positive integer, got {max_tool_rounds!r}")
        self.max_tool_rounds = max_tool_rounds

    # -- hooks ------------------------------------------------------------------------------

    def initialize_loop(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
        """Called once before the first model call; may replace the request."""
        return request

    def before_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientRequest:
        """Called before every model call; may replace the request."""
        return request

    def after_call(self, response: ChatClientResponse, chain: AdvisorChain) -> ChatClientResponse:
        """Called after every model call; may replace the response."""
        return response

    def finalize_loop(
        self, response: ChatClientResponse, chain: AdvisorChain
    ) -> ChatClientResponse:
        """Called once with the final response; may replace it."""
        return response

    # -- the loop ---------------------------------------------------------------------------

    def _next_request(self, state: LoopState, result: ToolExecutionResult) -> ChatClientRequest:
        state.history = result.conversation_history
        if self.conversation_history_enabled:
            messages = state.history
        else:
            systems: list[Message] = [m for m in state.history if isinstance(m, SystemMessage)]
            messages = [*systems[-1:], state.history[-1]]
        prompt = state.request.prompt
        return state.request.with_prompt(Prompt(messages, prompt.options))

    def _after_model(
        self,
        state: LoopState,
        response: ChatClientResponse,
        chain: AdvisorChain,
        request: ChatClientRequest,
    ) -> tuple[ChatClientResponse | None, ChatClientRequest | None]:
        """Decide what follows a model response: ``(final, None)`` or ``(None, next_request)``.

        ``final`` is ``response`` itself when the model answered, or a new response built by the
        loop (return-direct, limit exceeded, round limit).
        """
        chat_response = response.chat_response
        if chat_response is not None:
            state.usage = add_usage(state.usage, chat_response.metadata.get("usage"))
        # The options the model was called with: a subclass's before_call may have narrowed the
        # tools, and only the tools the model was offered may run.
        options = request.prompt.options
        decision = decide_after_model(
            options,
            chat_response,
            rounds=state.rounds,
            max_tool_rounds=self.max_tool_rounds,
            eligibility=self.eligibility,
        )
        if decision == ANSWERED:
            return response, None
        if isinstance(decision, LoopEnding):
            _loop_ended(chain, request, decision.messages)
            return ChatClientResponse(decision.response, response.context), None
        assert chat_response is not None
        prompt = Prompt(state.history, options)
        outcome: ToolExecutionResult | ToolCallLimitExceededException
        try:
            outcome = self.tool_calling_manager.execute_tool_calls(prompt, chat_response)
        except ToolCallLimitExceededException as exc:
            outcome = exc
        except ToolCallConfirmationRequiredError as exc:
            # The turn pauses: the reply goes back with its waiting calls, none of them ran.
            # Nothing is stored for the advisors inside the loop: the calls have no answer yet.
            paused = ChatResponse([exc.build_generation()], metadata=dict(chat_response.metadata))
            _loop_ended(chain, request, [])
            return ChatClientResponse(paused, response.context), None
        ending = decide_after_tools(chat_response, outcome)
        if ending is not None:
            _loop_ended(chain, request, ending.messages)
            return ChatClientResponse(ending.response, response.context), None
        assert isinstance(outcome, ToolExecutionResult)
        return None, self._next_request(state, outcome)

    def _with_usage(self, state: LoopState, response: ChatClientResponse) -> ChatClientResponse:
        chat_response = response.chat_response
        if chat_response is None or not state.usage or state.rounds <= 1:
            return response
        metadata = {**chat_response.metadata, "usage": state.usage}
        return ChatClientResponse(
            ChatResponse(chat_response.generations, metadata=metadata), response.context
        )

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Call the model, run its tool calls, and repeat until it answers."""
        request = self.initialize_loop(request, chain)
        state = LoopState(request, list(request.prompt.messages))
        current = request
        while True:
            current = self.before_call(current, chain)
            state.rounds += 1
            response = self.after_call(chain.next_call(current), chain)
            final, following = self._after_model(state, response, chain, current)
            if final is not None:
                return self.finalize_loop(self._with_usage(state, final), chain)
            assert following is not None
            current = following

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Stream the final answer's text; tool rounds run in between and are not shown."""
        request = self.initialize_loop(request, chain)
        state = LoopState(request, list(request.prompt.messages))
        current = request
        while True:
            current = self.before_call(current, chain)
            state.rounds += 1
            chunks: list[ChatResponse] = []
            context: dict[str, Any] = current.context
            for chunk in chain.next_stream(current):
                context = chunk.context
                if chunk.chat_response is None:
                    continue
                chunks.append(chunk.chat_response)
                if not chunk.chat_response.has_tool_calls():
                    text_only = _text_chunk(chunk.chat_response)
                    if text_only is not None:
                        yield ChatClientResponse(text_only, context)
            response = self.after_call(ChatClientResponse(aggregate(chunks), context), chain)
            final, following = self._after_model(state, response, chain, current)
            if final is not None:
                built_by_loop = final is not response
                final = self.finalize_loop(self._with_usage(state, final), chain)
                # The last chunk's context carries the whole final response (FINAL_RESPONSE).
                last_context = {**final.context, FINAL_RESPONSE: final.chat_response}
                if built_by_loop:
                    # Return-direct, limit and round-limit results arrive as one chunk.
                    yield ChatClientResponse(final.chat_response, last_context)
                else:
                    # The text went out already; close with the finish reason and usage.
                    yield ChatClientResponse(_closing_chunk(final.chat_response), last_context)
                return
            assert following is not None
            current = following


ANSWERED = "answered"
"""``decide_after_model``: the model answered (or its calls are not for the loop to run)."""
RUN_TOOLS = "run_tools"
"""``decide_after_model``: run the response's tool calls, then decide with
``decide_after_tools``."""


@dataclass(frozen=True)
class LoopEnding:
    """How the loop ends a turn itself (round limit, call limit, return-direct)."""

    response: ChatResponse
    """The final response the loop built."""
    messages: list[Message]
    """What the advisors inside the loop are told (``loop_ended``): the tool responses of the
    last batch (every call answered), then the final outputs."""


def decide_after_model(
    options: ChatOptions | None,
    chat_response: ChatResponse | None,
    *,
    rounds: int,
    max_tool_rounds: int,
    eligibility: ToolExecutionEligibilityPredicate,
) -> str | LoopEnding:
    """Decide what follows a model response: ``ANSWERED``, ``RUN_TOOLS`` or a ``LoopEnding``.

    The one decision the in-process loop (``ToolCallingAdvisor``) and durable runs
    (``tool_calling.runs``) both take.

    Args:
        options: The options of the turn's request.
        chat_response: The model's response.
        rounds: Model calls made in this turn, this one included.
        max_tool_rounds: Model calls allowed per turn.
        eligibility: Decides whether the response's tool calls run in the loop.
    """
    if chat_response is None or not eligibility.test(options, chat_response):
        return ANSWERED
    if rounds >= max_tool_rounds:
        # Checked before running the calls: their results could only reach the model in
        # a round this turn may not make, and tools can have side effects.
        text = (
            f"Tool round limit ({max_tool_rounds}) exceeded for this turn. "
            "The model kept calling tools without answering."
        )
        final = ChatResponse(
            [Generation(AssistantMessage(text), finish_reason=TOOL_ROUNDS_EXCEEDED)],
            metadata=dict(chat_response.metadata),
        )
        not_run = "Not run: the tool round limit of this turn was reached."
        return LoopEnding(
            final, [_answer_all(_calls_of(chat_response), [], not_run), *_outputs(final)]
        )
    return RUN_TOOLS


def decide_after_tools(
    chat_response: ChatResponse,
    outcome: ToolExecutionResult | ToolCallLimitExceededException,
) -> LoopEnding | None:
    """Decide what follows a batch of tool calls: a ``LoopEnding``, or ``None`` to go on.

    ``outcome`` is the manager's result, or the limit exception it raised (THROW).
    """
    if isinstance(outcome, ToolCallLimitExceededException):
        final = ChatResponse([outcome.build_generation()], metadata=dict(chat_response.metadata))
        partial = outcome.partial_result.tool_responses if outcome.partial_result else None
        not_run = "Not run: the tool call limit of this turn was reached."
        return LoopEnding(
            final,
            [
                _answer_all(
                    _calls_of(chat_response), partial.responses if partial else [], not_run
                ),
                *_outputs(final),
            ],
        )
    if outcome.return_direct:
        final = ChatResponse(
            ToolExecutionResult.build_generations(outcome), metadata=dict(chat_response.metadata)
        )
        return LoopEnding(final, [outcome.conversation_history[-1], *_outputs(final)])
    return None


def _calls_of(chat_response: ChatResponse) -> list[ToolCall]:
    for generation in chat_response.generations:
        if generation.output.tool_calls:
            return list(generation.output.tool_calls)
    return []


def _answer_all(
    calls: Sequence[ToolCall], responses: Sequence[ToolResponse], not_run: str
) -> ToolResponseMessage:
    """A response for every call: the ones given, and ``not_run`` errors for the rest."""
    answered = {r.id for r in responses}
    return ToolResponseMessage(
        [
            *responses,
            *(
                ToolResponse(c.id, c.name, not_run, is_error=True)
                for c in calls
                if c.id not in answered
            ),
        ]
    )


def _outputs(chat_response: ChatResponse) -> list[Message]:
    return [g.output for g in chat_response.generations]


def _loop_ended(chain: AdvisorChain, request: ChatClientRequest, messages: list[Message]) -> None:
    """Tell the advisors inside the loop how a turn the loop ended itself finished."""
    for advisor in chain.advisors:
        advisor.loop_ended(request, messages)


def _text_chunk(chat_response: ChatResponse) -> ChatResponse | None:
    """The text part of a streamed chunk (finish reasons and usage come in the closing chunk)."""
    generation = chat_response.result
    if generation is None or not generation.output.text:
        return None
    return ChatResponse([Generation(AssistantMessage(generation.output.text))])


def _closing_chunk(chat_response: ChatResponse | None) -> ChatResponse:
    """The last chunk of a streamed answer: no text, the finish reason and the metadata."""
    if chat_response is None or chat_response.result is None:
        return ChatResponse([])
    generation = chat_response.result
    return ChatResponse(
        [
            Generation(
                AssistantMessage(None, [], generation.output.metadata),
                finish_reason=generation.finish_reason,
                metadata=generation.metadata,
            )
        ],
        metadata=chat_response.metadata,
    )
