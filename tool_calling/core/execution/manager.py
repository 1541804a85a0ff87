"""ToolCallingManager: resolves a request's tools and executes the calls the model asks for."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from types import EllipsisType
from typing import Protocol, TypeAlias, runtime_checkable

from tool_calling.core._async import run_sync
from tool_calling.core._settings import CoreSettings, core_settings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
)
from tool_calling.core.chat.prompt import (
    ChatOptions,
    Prompt,
    ToolCallbackList,
    ToolCallingChatOptions,
)
from tool_calling.core.chat.response import ChatResponse
from tool_calling.core.errors import ToolArgumentsError, ToolFailure, ToolResolutionError
from tool_calling.core.execution.confirmation import (
    PendingToolCall,
    ToolCallConfirmationPolicy,
    ToolCallConfirmationRequiredError,
    ToolCallDecision,
    denial_text,
    edited_call,
    index_decisions,
    needs_confirmation,
    parse_arguments,
)
from tool_calling.core.execution.exception_processor import (
    DefaultToolExecutionExceptionProcessor,
    ToolExecutionExceptionProcessor,
)
from tool_calling.core.execution.limits import (
    ToolCallLimitBehavior,
    ToolCallLimitExceededException,
    ToolCallLimits,
    breach_text,
    find_breaches,
)
from tool_calling.core.execution.plan import PlannedCall, ToolCallPlan, ToolOutcome, ToolOutcomeKind
from tool_calling.core.execution.resolvers import ToolCallbackResolver
from tool_calling.core.execution.result import ToolExecutionResult
from tool_calling.core.tools.callback import (
    FunctionToolCallback,
    ToolCallback,
)
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["DefaultToolCallingManager", "ToolCallExecutor", "ToolCallingManager"]

logger = logging.getLogger("tool_calling.execution")


class ToolCallingManager(ABC):
    """Resolves the tool definitions of a request and executes a response's tool calls."""

    @abstractmethod
    def resolve_tool_definitions(self, options: ChatOptions | None) -> list[ToolDefinition]:
        """Return the definitions of the tools offered by ``options``, in order."""

    @abstractmethod
    def execute_tool_calls(
        self,
        prompt: Prompt,
        chat_response: ChatResponse,
        decisions: Sequence[ToolCallDecision] | None = None,
    ) -> ToolExecutionResult:
        """Run the tool calls of ``chat_response`` and return the extended history.

        ``decisions`` are the user's, one per call that waits for confirmation (see
        ``ToolCallConfirmationRequiredError``).
        """

    async def aexecute_tool_calls(
        self,
        prompt: Prompt,
        chat_response: ChatResponse,
        decisions: Sequence[ToolCallDecision] | None = None,
    ) -> ToolExecutionResult:
        """Async twin of :meth:`execute_tool_calls` (runs it in a worker thread)."""
        if decisions is None:
            return await asyncio.to_thread(self.execute_tool_calls, prompt, chat_response)
        return await asyncio.to_thread(self.execute_tool_calls, prompt, chat_response, decisions)


@runtime_checkable
class ToolCallExecutor(Protocol):
    """An executor that runs tool calls elsewhere (Celery workers) given the call, not a thunk.

    Any ``concurrent.futures.Executor`` also works; this protocol lets an executor see which tool
    is called with which arguments instead of an opaque function.
    """

    def submit_tool_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> Future[str] | Future[ToolOutcome]:
        """Start the call and return a future of its text, or of its whole outcome.

        A future that raises is a failed call (the exception processor decides what the model
        sees); a :class:`ToolOutcome` lets a call that failed elsewhere say what it raised.
        """


_SHARED_POOL_SIZE = 32
"""Threads of the in-process pool shared by every batch (each batch keeps its own bound)."""
_shared: ThreadPoolExecutor | None = None
_shared_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    global _shared
    pool = _shared
    if pool is None:
        with _shared_lock:
            if _shared is None:
                _shared = ThreadPoolExecutor(
                    max_workers=_SHARED_POOL_SIZE, thread_name_prefix="tool-calling"
                )
            pool = _shared
    return pool


_Job: TypeAlias = "tuple[int, ToolCall, ToolCallback, bool]"
"""A call that is to run: its position in the batch, the call, its tool, whether that tool is
return-direct."""
_StoredJob: TypeAlias = "tuple[int, ToolCall, ToolCallback | None, bool]"
"""A job of a plan being completed: its tool is ``None`` when the request no longer offers it."""
_Result: TypeAlias = "str | ToolOutcome"
"""How a job ended: its text when the tool returned, else its outcome (a failure)."""
_Plan: TypeAlias = (
    "tuple[AssistantMessage, list[ToolResponse | None], list[_Job], "
    "tuple[int, str | None, int] | None, bool]"
)
"""A batch's decisions (a :class:`ToolCallPlan` without the per-job objects): the assistant
message, the responses of calls answered without running, the jobs, the THROW breach, and
whether tool calls are strict."""

_NO_RESULT = ToolOutcome(
    ToolOutcomeKind.UNKNOWN, "The tool call ended without a result (an internal error)."
)

_EMPTY_CONTEXT = ToolContext()


def _normalise_arguments(arguments: str | None) -> str:
    return arguments if arguments and not arguments.isspace() else "{}"


def _truncate(text: str, max_chars: int | None) -> str:
    if max_chars is None or len(text) <= max_chars:
        return text
    return (
        text[:max_chars] + f"\n[Truncated: the tool returned {len(text)} characters; "
        f"only the first {max_chars} are shown.]"
    )


def _quote_name(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:80] + "...")


class DefaultToolCallingManager(ToolCallingManager):
    """Executes tool calls in-process (or on a given executor), keeping call order.

    Lookup is by exact name among the request's callbacks (``tool_callbacks`` plus the resolved
    ``tool_names``); the resolver is consulted for other names only when
    ``resolution_fallback_enabled`` is true. Limits are counted per turn before lookup. The calls
    of one assistant message run concurrently: a single call runs inline, a batch on the caller's
    thread together with helpers from a shared pool; responses keep call order.
    Bad arguments, unknown tools and tool exceptions become ``is_error`` responses the
    model can act on, unless strict tool calls (or the exception processor) say to raise.

    Args:
        resolver: Resolves ``tool_names`` (and, with the fallback, any other name).
        exception_processor: Turns tool exceptions into text; default from settings.
        limits: Per-turn call limits; default from settings (40 per tool, 150 in total).
        resolution_fallback_enabled: Look names the request did not offer up in the resolver.
        executor: Where calls run; default in-process (the caller's thread and pool helpers;
            a batch of async tools on a shared event loop). Any ``concurrent.futures.Executor``
            is accepted, and then runs every call.
        strict_tool_calls: Raise on bad arguments or unknown tools; default from settings.
        max_result_chars: Cut longer results (with a note); default from settings.
        max_concurrent_calls: How many calls of one batch run at once in-process; default from
            settings.
        confirmation_policy: Which calls need the user's confirmation besides those whose tool
            says so (``ToolMetadata.requires_confirmation``, always applied). A reply with such
            a call runs none of its calls: ``ToolCallConfirmationRequiredError`` lists them.
    """

    decides_confirmation: bool = True
    """Whether this manager stops a reply for calls that need confirmation. A subclass whose own
    rules decide who confirms a call (a governed manager, whose gate queues it for the user)
    sets it false; decisions given to it still apply."""

    def __init__(
        self,
        *,
        resolver: ToolCallbackResolver | None = None,
        exception_processor: ToolExecutionExceptionProcessor | None = None,
        limits: ToolCallLimits | None = None,
        resolution_fallback_enabled: bool = False,
        executor: Executor | ToolCallExecutor | None = None,
        strict_tool_calls: bool | None = None,
        max_result_chars: int | None | EllipsisType = ...,
        max_concurrent_calls: int | None = None,
        confirmation_policy: ToolCallConfirmationPolicy | None = None,
    ) -> None:
        self.resolver = resolver
        self.exception_processor = exception_processor
        self.limits = limits
        self.resolution_fallback_enabled = resolution_fallback_enabled
        self.executor = executor
        self.strict_tool_calls = strict_tool_calls
        self.max_result_chars = max_result_chars
        self.max_concurrent_calls = max_concurrent_calls
        self.confirmation_policy = confirmation_policy

    # -- resolution -------------------------------------------------------------------------

    def _request_callbacks(self, options: ChatOptions | None) -> dict[str, ToolCallback]:
        if not isinstance(options, ToolCallingChatOptions):
            return {}
        offered = options.tool_callbacks
        # ToolCallingChatOptions keeps a ToolCallbackList, which builds its index once and keeps
        # it until the list changes; any other sequence is indexed anew.
        if type(offered) is not ToolCallbackList:
            offered = ToolCallbackList(offered)
        callbacks = offered.cached_index or offered.by_name()
        if not options.tool_names:
            return callbacks
        callbacks = dict(callbacks)
        for name in options.tool_names:
            if name in callbacks:
                continue
            resolved = self.resolver.resolve(name) if self.resolver is not None else None
            if resolved is None:
                raise ToolResolutionError(
                    f"No tool named {_quote_name(name)} could be resolved"
                    + ("" if self.resolver is not None else " (the manager has no resolver)")
                )
            callbacks[name] = resolved
        return callbacks

    def resolve_tool_definitions(self, options: ChatOptions | None) -> list[ToolDefinition]:
        """Return the callbacks' definitions, then those of ``tool_names`` not already present.

        Raises:
            ToolResolutionError: a name in ``tool_names`` cannot be resolved.
            ToolDefinitionError: two different callbacks in ``tool_callbacks`` share a name.
        """
        return [callback.definition for callback in self._request_callbacks(options).values()]

    # -- execution --------------------------------------------------------------------------

    def execute_tool_calls(
        self,
        prompt: Prompt,
        chat_response: ChatResponse,
        decisions: Sequence[ToolCallDecision] | None = None,
    ) -> ToolExecutionResult:
        """Run the tool calls of the first generation that has any.

        The same as ``complete_tool_calls(prompt, plan, outcomes)`` where ``plan`` is
        ``plan_tool_calls(prompt, chat_response, decisions)`` and ``outcomes`` are those of
        its jobs.

        Before any call runs, each call that would run (an offered tool, valid arguments,
        within the limits) is checked for confirmation: its tool's flag, then
        ``confirmation_policy``. If one needs it and ``decisions`` has none for it, nothing
        runs. A denied call is answered with the decision's message (``is_error``); an allowed
        one runs, with its edited arguments if the decision has any.

        Args:
            prompt: The prompt the model answered.
            chat_response: The model's reply.
            decisions: The user's decisions on waiting calls, by call id (``None``: none yet).

        Returns:
            The prompt's messages, the assistant message and one ``ToolResponseMessage`` with a
            response per call in call order; ``return_direct`` when every executed tool is.

        Raises:
            ValueError: the response has no tool calls, or a decision names no call of it.
            ToolCallConfirmationRequiredError: calls wait for the user's decision; none ran.
            ToolCallLimitExceededException: a limit was exceeded with the THROW behaviour.
            ToolExecutionException: a tool failed and the exception processor re-raised.
            ToolArgumentsError, ToolResolutionError: bad arguments or unknown tool with strict
                tool calls; edited arguments that fail the tool's schema (always).
        """
        settings = core_settings()
        messages, options = prompt.messages, prompt.options
        assistant, denied = self._confirm(
            messages, options, _calling_message(chat_response), decisions, settings
        )
        executor = self.batch_executor(assistant.tool_calls)
        if executor is None and len(assistant.tool_calls) == 1 and not denied:
            done = self._execute_single(messages, options, assistant, settings)
            if done is not None:
                return done
        plan = self._plan(messages, options, assistant, settings, denied)
        results = self._run(plan[2], options, settings, executor)
        return self._complete(messages, plan, results, settings)

    def batch_executor(self, tool_calls: Sequence[ToolCall]) -> Executor | ToolCallExecutor | None:
        """Where the calls of one assistant message run: ``executor``, or ``None`` in-process.

        Override to choose per batch (the Django layer sends a batch to Celery workers only
        when one of its tools runs there).
        """
        return self.executor

    def _execute_single(
        self,
        messages: list[Message],
        options: ChatOptions | None,
        assistant: AssistantMessage,
        settings: CoreSettings,
    ) -> ToolExecutionResult | None:
        """Run the commonest batch: one call of an offered tool, within the limits, in-process.

        The result is the one _plan, _run and _complete give (tests compare the two paths);
        skipping their per-job lists and loops saves about a fifth of such a call's cost.
        Returns ``None``, having run and reported nothing, for any other single call (a limit
        breached, a tool not offered): the general path then decides it.
        """
        calls = assistant.tool_calls
        limits = self.limits if self.limits is not None else settings.limits
        if find_breaches(limits, messages, calls) is not None:
            return None
        call = calls[0]
        callback = self._request_callbacks(options).get(call.name)
        if callback is None:
            return None
        try:
            result = self.call_tool(callback, call, _context(options))
        except BaseException as exc:  # handled below, as _complete handles a failed job
            outcome = ToolOutcome.from_exception(exc)
        else:
            max_chars = self._max_chars(settings)
            if result is None:
                result = ""
            elif max_chars is not None and len(result) > max_chars:
                result = _truncate(result, max_chars)
            response = ToolResponse(call.id, call.name, result)
            return ToolExecutionResult(
                [*messages, assistant, ToolResponseMessage([response])],
                callback.metadata.return_direct,
            )
        strict = self._strict(settings)
        response = self._error_response(call, callback, outcome, strict, self._max_chars(settings))
        return_direct = callback.metadata.return_direct and not outcome.is_a(ToolArgumentsError)
        return ToolExecutionResult(
            [*messages, assistant, ToolResponseMessage([response])], return_direct
        )

    def _strict(self, settings: CoreSettings) -> bool:
        strict = self.strict_tool_calls
        return settings.strict_tool_calls if strict is None else strict

    def _max_chars(self, settings: CoreSettings) -> int | None:
        max_chars = self.max_result_chars
        return settings.max_result_chars if isinstance(max_chars, EllipsisType) else max_chars

    def plan_tool_calls(
        self,
        prompt: Prompt,
        chat_response: ChatResponse,
        decisions: Sequence[ToolCallDecision] | None = None,
    ) -> ToolCallPlan:
        """Count the limits and look the tools up: decide which calls run, answer the others.

        Nothing runs here; a caller that runs the jobs elsewhere (a durable run's Celery
        tasks) hands their outcomes to :meth:`complete_tool_calls`. The plan is JSON
        (``ToolCallPlan.to_json``), so it can be stored and completed in another process.
        Confirmation is decided as :meth:`execute_tool_calls` decides it.

        Raises:
            ValueError: the response has no tool calls, or a decision names no call of it.
            ToolCallConfirmationRequiredError: calls wait for the user's decision.
            ToolResolutionError: an unknown tool with strict tool calls.
            ToolArgumentsError: edited arguments that fail the tool's schema.
        """
        settings = core_settings()
        messages, options = prompt.messages, prompt.options
        confirmed, denied = self._confirm(
            messages, options, _calling_message(chat_response), decisions, settings
        )
        assistant, responses, jobs, breach, strict = self._plan(
            messages, options, confirmed, settings, denied
        )
        planned = [PlannedCall(index, call, direct) for index, call, _, direct in jobs]
        return ToolCallPlan(assistant, responses, planned, breach, strict)

    def _plan(
        self,
        messages: list[Message],
        options: ChatOptions | None,
        assistant: AssistantMessage,
        settings: CoreSettings,
        denied: Mapping[str, str] | None = None,
    ) -> _Plan:
        calls = assistant.tool_calls
        strict = self._strict(settings)
        limits = self.limits if self.limits is not None else settings.limits
        callbacks = self._request_callbacks(options)
        breaches = find_breaches(limits, messages, calls)
        responses: list[ToolResponse | None] = [None] * len(calls)
        jobs: list[_Job] = []
        breach: tuple[int, str | None, int] | None = None
        for index, call in enumerate(calls):
            if denied and call.id in denied:  # the user's decision answers it; it never runs
                responses[index] = ToolResponse(call.id, call.name, denied[call.id], True)
                continue
            exceeded = breaches[index] if breaches is not None else None
            if exceeded is not None:
                found = callbacks.get(call.name)
                refused = self.refuse_over_limit(
                    call, found, _context(options), breach_text(*exceeded)
                )
                if refused is not None:  # a rule before the limits answers it
                    responses[index] = self._error_response(
                        call, found, refused, strict, self._max_chars(settings)
                    )
                    continue
                if limits.on_limit_exceeded is ToolCallLimitBehavior.THROW:
                    breach = (index, *exceeded)
                    break
                responses[index] = ToolResponse(
                    call.id, call.name, breach_text(*exceeded), is_error=True
                )
                continue
            callback = callbacks.get(call.name)
            if callback is None:
                callback = self._fallback(call.name)
                if callback is None:
                    text = self._unknown_tool_text(call.name, callbacks)
                    self.on_unavailable_tool(call, text)
                    if strict:
                        raise ToolResolutionError(text)
                    logger.warning(
                        "Model called unknown or unavailable tool %s", _quote_name(call.name)
                    )
                    responses[index] = ToolResponse(call.id, call.name, text, is_error=True)
                    continue
            jobs.append((index, call, callback, callback.metadata.return_direct))
        return assistant, responses, jobs, breach, strict

    def _confirm(
        self,
        messages: list[Message],
        options: ChatOptions | None,
        assistant: AssistantMessage,
        decisions: Sequence[ToolCallDecision] | None,
        settings: CoreSettings,
    ) -> tuple[AssistantMessage, dict[str, str]]:
        """Apply the user's decisions to a reply, or stop it when a call still waits.

        Returns the reply with the allowed calls' edited arguments and the texts of the denied
        calls by id. A call waits when it would run (its tool offered, its arguments valid, no
        limit refusing it), needs confirmation, and ``decisions`` has none for it.

        Raises:
            ToolCallConfirmationRequiredError: at least one call waits.
            ValueError: a decision names no call of the reply, or a call twice.
            ToolArgumentsError: edited arguments fail the tool's schema.
        """
        calls = assistant.tool_calls
        by_id = index_decisions(decisions, calls) if decisions else {}
        if not self.decides_confirmation and not by_id:
            return assistant, {}
        callbacks = self._request_callbacks(options)
        policy = self.confirmation_policy
        if policy is None and not by_id:
            # The common case: no policy, no decisions, no tool asking. Settled in one pass.
            for call in calls:
                found = callbacks.get(call.name)
                if found is None:
                    if self.resolution_fallback_enabled:
                        break
                elif found.metadata.requires_confirmation:
                    break
            else:
                return assistant, {}
        limits = self.limits if self.limits is not None else settings.limits
        breaches = find_breaches(limits, messages, calls)
        stop_at = len(calls)
        if breaches is not None and limits.on_limit_exceeded is ToolCallLimitBehavior.THROW:
            stop_at = next((i for i, b in enumerate(breaches) if b is not None), stop_at)
        pending: list[PendingToolCall] = []
        denied: dict[str, str] = {}
        edited: list[ToolCall] = []
        for index, call in enumerate(calls):
            callback = callbacks.get(call.name) or self._fallback(call.name)
            decision = by_id.get(call.id)
            if decision is not None:
                if decision.allowed:
                    edited.append(edited_call(call, decision, callback))
                else:
                    denied[call.id] = decision.message or denial_text(call.name)
                    edited.append(call)
                continue
            edited.append(call)
            if callback is None or index >= stop_at:
                continue
            if breaches is not None and breaches[index] is not None:
                continue  # a limit refuses it: nobody is asked about a call that cannot run
            try:
                callback.validate_arguments(call.arguments)
            except ToolArgumentsError:
                continue  # answered as bad arguments: nothing invalid waits for a person
            arguments = parse_arguments(call.arguments) or {}
            if needs_confirmation(callback, arguments) or (
                policy is not None and policy.requires_confirmation(call, callback, arguments)
            ):
                pending.append(PendingToolCall(call, callback.definition))
        if pending:
            raise ToolCallConfirmationRequiredError(assistant, pending)
        if any(new is not old for new, old in zip(edited, calls, strict=True)):
            assistant = AssistantMessage(assistant.text, edited, assistant.metadata)
        return assistant, denied

    def _fallback(self, name: str) -> ToolCallback | None:
        """The resolver's callback for a name the request does not offer, when allowed."""
        if self.resolution_fallback_enabled and self.resolver is not None:
            return self.resolver.resolve(name)
        return None

    def complete_tool_calls(
        self, prompt: Prompt, plan: ToolCallPlan, outcomes: Sequence[ToolOutcome]
    ) -> ToolExecutionResult:
        """Build the result of a planned batch from the outcomes of its jobs, in job order.

        ``prompt`` is the one the plan was made for: its messages start the history, and its
        tools name the definitions the exception processor is given.

        Raises:
            ToolCallLimitExceededException: the plan recorded a breach with the THROW behaviour.
            ToolExecutionException: a tool failed and the exception processor re-raised.
            ToolArgumentsError: bad arguments with strict tool calls.
            ValueError: ``outcomes`` does not have one outcome per job.
        """
        if len(outcomes) != len(plan.jobs):
            raise ValueError(
                f"The plan has {len(plan.jobs)} jobs but {len(outcomes)} outcomes were given; "
                "pass one outcome per job, in job order."
            )
        callbacks = self._request_callbacks(prompt.options)
        jobs: list[_StoredJob] = [
            (
                job.index,
                job.call,
                callbacks.get(job.call.name) or self._fallback(job.call.name),
                job.return_direct,
            )
            for job in plan.jobs
        ]
        results: list[_Result] = [
            outcome.text if outcome.kind is ToolOutcomeKind.OK else outcome for outcome in outcomes
        ]
        stored = (plan.assistant, list(plan.responses), jobs, plan.breach, plan.strict)
        return self._complete(prompt.messages, stored, results, core_settings())

    def _complete(
        self,
        messages: list[Message],
        plan: tuple[
            AssistantMessage,
            list[ToolResponse | None],
            Sequence[_StoredJob],
            tuple[int, str | None, int] | None,
            bool,
        ],
        results: Sequence[_Result],
        settings: CoreSettings,
    ) -> ToolExecutionResult:
        assistant, responses, jobs, breach, strict = plan
        calls = assistant.tool_calls
        max_chars = self._max_chars(settings)
        # Return-direct only when every call of the batch ran a return-direct tool. A call
        # answered with an unknown-tool, bad-arguments or limit text never ran, and that text is
        # for the model to act on, not an answer for the caller.
        return_direct = len(jobs) == len(calls)
        # One result per job: _run returns one each, complete_tool_calls checks its outcomes.
        for (index, call, callback, direct), result in zip(jobs, results):  # noqa: B905
            if isinstance(result, ToolOutcome):
                if return_direct and (not direct or result.is_a(ToolArgumentsError)):
                    return_direct = False
                responses[index] = self._error_response(call, callback, result, strict, max_chars)
                continue
            if not direct:
                return_direct = False
            if max_chars is not None and len(result) > max_chars:
                result = _truncate(result, max_chars)
            responses[index] = ToolResponse(call.id, call.name, result)

        if breach is not None:
            index, tool_name, limit = breach
            call = calls[index]
            done = [r for r in responses[:index] if r is not None]
            done.append(
                ToolResponse(call.id, call.name, breach_text(tool_name, limit), is_error=True)
            )
            partial = ToolExecutionResult(
                [*messages, assistant, ToolResponseMessage(done)], return_direct=False
            )
            raise ToolCallLimitExceededException(tool_name, limit, partial)

        # Without a breach every call is answered: by its job, a limit text or an unknown-tool
        # text.
        final: list[ToolResponse] = responses  # type: ignore[assignment]
        return ToolExecutionResult(
            [*messages, assistant, ToolResponseMessage(final)], return_direct
        )

    # -- hooks for subclasses (the Django layer audits and re-checks governance here) -------

    def call_tool(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        """Run one call and return its text; runs on the thread the call is scheduled on.

        Override to wrap every call (audit, authorization); raise to fail the call. Blank
        arguments arrive as ``"{}"``.
        """
        arguments = tool_call.arguments
        if not arguments or arguments.isspace():
            arguments = "{}"
        return callback.call(arguments, tool_context)

    async def acall_tool(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        """Async twin of :meth:`call_tool` (used for async tools unless call_tool is overridden)."""
        return await callback.acall(_normalise_arguments(tool_call.arguments), tool_context)

    def on_unavailable_tool(self, tool_call: ToolCall, response_text: str) -> None:
        """Called when the model names a tool the request does not offer (default: nothing)."""

    def on_limit_exceeded(self, tool_call: ToolCall, response_text: str) -> None:
        """Called for a call a limit refuses, with the breach text (default: nothing).

        Called before the call is answered (``RETURN_ERROR_RESPONSE``) or the turn ends
        (``THROW``).
        """

    def refuse_over_limit(
        self,
        tool_call: ToolCall,
        callback: ToolCallback | None,
        tool_context: ToolContext,
        response_text: str,
    ) -> ToolOutcome | None:
        """Decide a call over a limit: ``None`` lets the limit refuse it (the default).

        A subclass whose own rules come before the limits returns the outcome of the first of
        them that refuses the call: the call is answered with it as with a failed call (strict
        tool calls raise bad arguments), and the limit does not end the turn for it. The
        default calls :meth:`on_limit_exceeded` and returns ``None``.

        Args:
            tool_call: The call over the limit.
            callback: Its tool among the request's, or ``None`` when the request has none.
            tool_context: The request's tool context.
            response_text: The breach text.
        """
        self.on_limit_exceeded(tool_call, response_text)
        return None

    def _invoke(self, callback: ToolCallback, tool_call: ToolCall, context: ToolContext) -> _Result:
        try:
            text = self.call_tool(callback, tool_call, context)
        except BaseException as exc:  # collected and handled in call order by the caller
            return ToolOutcome.from_exception(exc)
        return "" if text is None else text

    async def _ainvoke(
        self, callback: ToolCallback, tool_call: ToolCall, context: ToolContext
    ) -> _Result:
        try:
            text = await self.acall_tool(callback, tool_call, context)
        except BaseException as exc:
            return ToolOutcome.from_exception(exc)
        return "" if text is None else text

    def _unknown_tool_text(self, name: str, callbacks: dict[str, ToolCallback]) -> str:
        available = ", ".join(callbacks) or "none"
        return (
            f"Unknown or disabled tool {_quote_name(name)}. "
            f"Available tools: {available}. Call one of these by its exact name."
        )

    def _run(
        self,
        jobs: Sequence[_Job],
        options: ChatOptions | None,
        settings: CoreSettings,
        executor: Executor | ToolCallExecutor | None,
    ) -> list[_Result]:
        if not jobs:
            return []
        context = _context(options)
        if executor is None:
            if len(jobs) == 1:  # a single call runs inline, in the caller's thread
                _, call, callback, _ = jobs[0]
                # _invoke's body, inlined: every single-call batch comes through here.
                try:
                    text = self.call_tool(callback, call, context)
                except BaseException as exc:
                    return [ToolOutcome.from_exception(exc)]
                return ["" if text is None else text]
            return self._run_in_process(
                jobs, context, self.max_concurrent_calls or settings.max_concurrent_calls
            )
        futures: list[Future[str | ToolOutcome]] = []
        for _, call, callback, _ in jobs:
            if isinstance(executor, ToolCallExecutor):
                futures.append(executor.submit_tool_call(callback, call, context))  # type: ignore[arg-type]
            else:
                futures.append(executor.submit(self._invoke, callback, call, context))
        results: list[_Result] = []
        for future in futures:
            try:
                value = future.result()
            except BaseException as exc:
                results.append(ToolOutcome.from_exception(exc))
                continue
            if isinstance(value, ToolOutcome):
                results.append(value.text if value.kind is ToolOutcomeKind.OK else value)
            else:
                results.append("" if value is None else value)
        return results

    def _run_in_process(
        self, jobs: Sequence[_Job], context: ToolContext, bound: int
    ) -> list[_Result]:
        bound = max(1, bound)
        native_async = type(self).call_tool is DefaultToolCallingManager.call_tool
        if native_async and all(
            isinstance(cb, FunctionToolCallback) and cb.is_async for _, _, cb, _ in jobs
        ):
            # Only async tools: run them together on the shared event loop, no threads.
            async def gather() -> list[_Result]:
                semaphore = asyncio.Semaphore(bound)

                async def one(call: ToolCall, callback: ToolCallback) -> _Result:
                    async with semaphore:
                        return await self._ainvoke(callback, call, context)

                return list(await asyncio.gather(*(one(call, cb) for _, call, cb, _ in jobs)))

            return run_sync(gather())
        # In a mixed batch an async tool holds a thread while its coroutine runs on the shared
        # loop, so one bound covers sync and async calls alike.
        if bound <= _SHARED_POOL_SIZE:
            return _Batch(self, jobs, context, bound).run(_shared_pool())
        # A bound larger than the shared pool gets a pool of its own for this batch.
        with ThreadPoolExecutor(
            max_workers=min(bound, len(jobs)) - 1, thread_name_prefix="tool-calling"
        ) as pool:
            return _Batch(self, jobs, context, bound).run(pool)

    def _error_response(
        self,
        call: ToolCall,
        callback: ToolCallback | None,
        outcome: ToolOutcome,
        strict: bool,
        max_chars: int | None,
    ) -> ToolResponse:
        if outcome.kind is not ToolOutcomeKind.ERROR or outcome.is_a(ToolFailure):
            # Timeouts, unknown outcomes and ToolFailure carry a text written for the model.
            logger.info(
                "Tool %s (call %s) reported a failure to the model", _quote_name(call.name), call.id
            )
            return ToolResponse(call.id, call.name, _truncate(outcome.text, max_chars), True)
        if outcome.is_a(ToolArgumentsError):
            if strict:
                cause = outcome.cause
                raise cause if cause is not None else ToolArgumentsError(call.name, outcome.text)
            logger.info("Rejected arguments for tool %s (call %s)", _quote_name(call.name), call.id)
            return ToolResponse(call.id, call.name, outcome.text, is_error=True)
        cause = outcome.cause
        logger.error(
            "Tool %s (call %s) raised %s",
            _quote_name(call.name),
            call.id,
            outcome.type_name,
            exc_info=(type(cause), cause, cause.__traceback__) if cause is not None else None,
        )
        processor = self.exception_processor
        if processor is None:
            processor = DefaultToolExecutionExceptionProcessor(
                always_throw=core_settings().throw_exception_on_error
            )
        definition = callback.definition if callback is not None else _bare_definition(call.name)
        text = processor.process_outcome(definition, outcome)
        return ToolResponse(call.id, call.name, _truncate(text, max_chars), is_error=True)


class _Batch:
    """The calls of one batch, run by the caller's thread together with helpers from a pool.

    The caller's thread takes calls one after another, and so does every helper. Before its first
    call the caller asks the pool for one helper; each helper that finds calls left asks for the
    next one, up to ``bound`` threads in all. Cheap calls are therefore all done by the caller
    before the first helper is even scheduled: one hand-off per batch instead of one per call
    (a pool hand-off costs several times a cheap call). Slow or blocking calls still fan out to
    ``bound`` threads, one helper joining after another. No thread ever waits for a call that
    nobody has taken, so a tool that runs a batch of its own (an agent used as a tool) never
    deadlocks the pool, however full it is. A helper still queued when the batch ends is
    cancelled, so busy pools do not fill up with helpers that would find nothing to do.
    """

    __slots__ = (
        "_context",
        "_done",
        "_finish",
        "_helpers",
        "_jobs",
        "_join",
        "_manager",
        "_pool",
        "_requests",
        "_results",
        "_take",
    )

    def __init__(
        self,
        manager: DefaultToolCallingManager,
        jobs: Sequence[_Job],
        context: ToolContext,
        bound: int,
    ) -> None:
        self._manager = manager
        self._jobs = jobs
        self._context = context
        self._results: list[_Result] = [_NO_RESULT] * len(jobs)
        # Counters whose __next__ is one C call, so threads take and finish calls without a lock.
        self._take = itertools.count().__next__
        self._finish = itertools.count(1).__next__
        self._join = itertools.count(1).__next__
        self._helpers = min(bound, len(jobs)) - 1
        self._done = threading.Lock()
        self._done.acquire()  # released by whoever finishes the last call
        self._pool: ThreadPoolExecutor | None = None
        self._requests: list[Future[None]] = []

    def run(self, pool: ThreadPoolExecutor) -> list[_Result]:
        """Run every call (the caller's thread among the workers) and return their results."""
        self._pool = pool
        # Each call sees the caller's context variables (tracing, request-scoped state) in a
        # copy of its own, wherever it runs.
        caller = contextvars.copy_context()
        self._call_for_help(caller)
        self._work(caller)
        self._done.acquire()
        for request in self._requests:
            request.cancel()  # a helper that has not started yet: no call left for it
        return self._results

    def _call_for_help(self, caller: contextvars.Context) -> None:
        if self._join() > self._helpers:
            return
        assert self._pool is not None
        try:
            self._requests.append(self._pool.submit(self._help, caller))
        except RuntimeError:  # the interpreter is shutting down: the threads already working do
            pass

    def _help(self, caller: contextvars.Context) -> None:
        self._work(caller, helper=True)

    def _work(self, caller: contextvars.Context, helper: bool = False) -> None:
        jobs = self._jobs
        count = len(jobs)
        invoke = self._manager._invoke
        context = self._context
        while (position := self._take()) < count:
            if helper:
                helper = False
                if position + 1 < count:  # calls are left for one more thread
                    self._call_for_help(caller)
            _, call, callback, _ = jobs[position]
            result: _Result = _NO_RESULT
            try:
                result = caller.copy().run(invoke, callback, call, context)
            finally:  # counted even if _invoke itself failed, so the caller never hangs
                self._results[position] = result
                if self._finish() == count:
                    self._done.release()


def _calling_message(chat_response: ChatResponse) -> AssistantMessage:
    """The output of the first generation that has tool calls."""
    for generation in chat_response.generations:
        if generation.output.tool_calls:
            return generation.output
    raise ValueError("No tool call requested by the chat model")


def _context(options: ChatOptions | None) -> ToolContext:
    raw = options.tool_context if isinstance(options, ToolCallingChatOptions) else None
    return ToolContext(raw) if raw else _EMPTY_CONTEXT


def _bare_definition(name: str) -> ToolDefinition:
    """The definition of a tool the request no longer offers (for the exception processor)."""
    return ToolDefinition(name, "", {"type": "object", "properties": {}, "required": []})
