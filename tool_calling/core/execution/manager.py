"""ToolCallingManager: resolves a request's tools and executes the calls the model asks for."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from types import EllipsisType
from typing import Protocol, runtime_checkable

from tool_calling.core._async import run_sync
from tool_calling.core._settings import core_settings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
)
from tool_calling.core.chat.prompt import ChatOptions, Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse
from tool_calling.core.errors import ToolArgumentsError, ToolFailure, ToolResolutionError
from tool_calling.core.execution.exception_processor import (
    DefaultToolExecutionExceptionProcessor,
    ToolExecutionExceptionProcessor,
)
from tool_calling.core.execution.limits import (
    LimitCounter,
    ToolCallLimitBehavior,
    ToolCallLimitExceededException,
    ToolCallLimits,
    breach_text,
)
from tool_calling.core.execution.plan import PlannedCall, ToolCallPlan, ToolOutcome, ToolOutcomeKind
from tool_calling.core.execution.resolvers import ToolCallbackResolver
from tool_calling.core.execution.result import ToolExecutionResult
from tool_calling.core.tools.callback import (
    FunctionToolCallback,
    ToolCallback,
    check_unique_names,
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
        self, prompt: Prompt, chat_response: ChatResponse
    ) -> ToolExecutionResult:
        """Run the tool calls of ``chat_response`` and return the extended history."""

    async def aexecute_tool_calls(
        self, prompt: Prompt, chat_response: ChatResponse
    ) -> ToolExecutionResult:
        """Async twin of :meth:`execute_tool_calls` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.execute_tool_calls, prompt, chat_response)


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
_pool_thread = threading.local()
_shared: ThreadPoolExecutor | None = None
_shared_lock = threading.Lock()


def _mark_pool_thread() -> None:
    _pool_thread.active = True


def _shared_pool() -> ThreadPoolExecutor:
    global _shared
    pool = _shared
    if pool is None:
        with _shared_lock:
            if _shared is None:
                _shared = ThreadPoolExecutor(
                    max_workers=_SHARED_POOL_SIZE,
                    thread_name_prefix="tool-calling",
                    initializer=_mark_pool_thread,
                )
            pool = _shared
    return pool


_index_cache: dict[tuple[int, ...], tuple[tuple[ToolCallback, ...], dict[str, ToolCallback]]] = {}
_INDEX_CACHE_SIZE = 128


def _callback_index(callbacks: Sequence[ToolCallback]) -> dict[str, ToolCallback]:
    """Return ``{name: callback}`` for a request's callbacks; checked and built once per list.

    A request usually offers the same callbacks as the one before (same client defaults), so
    the index and its duplicate check are cached by the callbacks' identities. The cache holds
    the callbacks, so their ids cannot be reused while an entry lives. Treat the result as
    read-only.
    """
    key = tuple(map(id, callbacks))
    hit = _index_cache.get(key)
    if hit is not None:
        return hit[1]
    # Two different tools under one name would make "which one runs" an accident of order.
    check_unique_names(callbacks)
    index: dict[str, ToolCallback] = {}
    for callback in callbacks:
        index.setdefault(callback.definition.name, callback)
    if len(_index_cache) >= _INDEX_CACHE_SIZE:
        _index_cache.clear()
    _index_cache[key] = (tuple(callbacks), index)
    return index


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
    of one assistant message run concurrently (a single call runs inline); responses keep call
    order. Bad arguments, unknown tools and tool exceptions become ``is_error`` responses the
    model can act on, unless strict tool calls (or the exception processor) say to raise.

    Args:
        resolver: Resolves ``tool_names`` (and, with the fallback, any other name).
        exception_processor: Turns tool exceptions into text; default from settings.
        limits: Per-turn call limits; default from settings (40 per tool, 150 in total).
        resolution_fallback_enabled: Look names the request did not offer up in the resolver.
        executor: Where calls run; default an in-process thread pool per batch (async tools
            on a shared event loop). Any ``concurrent.futures.Executor`` is accepted.
        strict_tool_calls: Raise on bad arguments or unknown tools; default from settings.
        max_result_chars: Cut longer results (with a note); default from settings.
        max_concurrent_calls: How many calls of one batch run at once in-process; default from
            settings.
    """

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
    ) -> None:
        self.resolver = resolver
        self.exception_processor = exception_processor
        self.limits = limits
        self.resolution_fallback_enabled = resolution_fallback_enabled
        self.executor = executor
        self.strict_tool_calls = strict_tool_calls
        self.max_result_chars = max_result_chars
        self.max_concurrent_calls = max_concurrent_calls

    # -- resolution -------------------------------------------------------------------------

    def _request_callbacks(self, options: ChatOptions | None) -> dict[str, ToolCallback]:
        if not isinstance(options, ToolCallingChatOptions):
            return {}
        callbacks = _callback_index(options.tool_callbacks)
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
        self, prompt: Prompt, chat_response: ChatResponse
    ) -> ToolExecutionResult:
        """Run the tool calls of the first generation that has any.

        The same as ``complete_tool_calls(prompt, plan, outcomes)`` where ``plan`` is
        ``plan_tool_calls(prompt, chat_response)`` and ``outcomes`` are those of its jobs.

        Returns:
            The prompt's messages, the assistant message and one ``ToolResponseMessage`` with a
            response per call in call order; ``return_direct`` when every executed tool is.

        Raises:
            ValueError: the response has no tool calls.
            ToolCallLimitExceededException: a limit was exceeded with the THROW behaviour.
            ToolExecutionException: a tool failed and the exception processor re-raised.
            ToolArgumentsError, ToolResolutionError: bad arguments or unknown tool with strict
                tool calls.
        """
        plan, callbacks = self._plan(prompt, chat_response)
        outcomes = self._run(
            plan.jobs,
            callbacks,
            _context(prompt.options),
            core_settings().max_concurrent_calls,
            self.batch_executor(plan),
        )
        return self._complete(prompt, plan, outcomes, [cb.definition for cb in callbacks])

    def batch_executor(self, plan: ToolCallPlan) -> Executor | ToolCallExecutor | None:
        """Where the calls of ``plan`` run: ``executor``, or ``None`` for the default.

        Override to choose per batch (the Django layer sends a batch to Celery workers only
        when one of its tools runs there).
        """
        return self.executor

    def plan_tool_calls(self, prompt: Prompt, chat_response: ChatResponse) -> ToolCallPlan:
        """Count the limits and look the tools up: decide which calls run, answer the others.

        Nothing runs here; a caller that runs the jobs elsewhere (a durable run's Celery
        tasks) hands their outcomes to :meth:`complete_tool_calls`. The plan is JSON
        (``ToolCallPlan.to_json``), so it can be stored and completed in another process.

        Raises:
            ValueError: the response has no tool calls.
            ToolResolutionError: an unknown tool with strict tool calls.
        """
        return self._plan(prompt, chat_response)[0]

    def _plan(
        self, prompt: Prompt, chat_response: ChatResponse
    ) -> tuple[ToolCallPlan, list[ToolCallback]]:
        """The plan, and the callback of each of its jobs (in job order)."""
        for generation in chat_response.generations:
            if generation.output.tool_calls:
                break
        else:
            raise ValueError("No tool call requested by the chat model")
        assistant: AssistantMessage = generation.output
        calls = assistant.tool_calls
        options = prompt.options
        settings = core_settings()
        strict = (
            self.strict_tool_calls
            if self.strict_tool_calls is not None
            else settings.strict_tool_calls
        )
        limits = self.limits if self.limits is not None else settings.limits
        callbacks = self._request_callbacks(options)

        counter = None if limits.is_unlimited else LimitCounter(limits, prompt.messages)
        responses: list[ToolResponse | None] = [None] * len(calls)
        jobs: list[PlannedCall] = []
        job_callbacks: list[ToolCallback] = []
        breach: tuple[int, str | None, int] | None = None
        for index, call in enumerate(calls):
            if counter is not None:
                exceeded = counter.add(call.name)
                if exceeded is not None:
                    self.on_limit_exceeded(call, breach_text(*exceeded))
                    if limits.on_limit_exceeded is ToolCallLimitBehavior.THROW:
                        breach = (index, *exceeded)
                        break
                    responses[index] = ToolResponse(
                        call.id, call.name, breach_text(*exceeded), is_error=True
                    )
                    continue
            callback = self._lookup(call.name, callbacks)
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
            jobs.append(PlannedCall(index, call, callback.metadata.return_direct))
            job_callbacks.append(callback)
        plan = ToolCallPlan(assistant, responses, jobs, breach, strict)
        return plan, job_callbacks

    def _lookup(self, name: str, callbacks: dict[str, ToolCallback]) -> ToolCallback | None:
        callback = callbacks.get(name)
        if callback is None and self.resolution_fallback_enabled and self.resolver is not None:
            callback = self.resolver.resolve(name)
        return callback

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
        """
        callbacks = self._request_callbacks(prompt.options)
        definitions = []
        for job in plan.jobs:
            callback = self._lookup(job.call.name, callbacks)
            definitions.append(
                callback.definition if callback is not None else _bare_definition(job.call.name)
            )
        return self._complete(prompt, plan, outcomes, definitions)

    def _complete(
        self,
        prompt: Prompt,
        plan: ToolCallPlan,
        outcomes: Sequence[ToolOutcome],
        definitions: Sequence[ToolDefinition],
    ) -> ToolExecutionResult:
        settings = core_settings()
        calls = plan.assistant.tool_calls
        responses = list(plan.responses)
        jobs = plan.jobs
        max_chars = (
            settings.max_result_chars
            if isinstance(self.max_result_chars, EllipsisType)
            else self.max_result_chars
        )
        # Return-direct only when every call of the batch ran a return-direct tool. A call
        # answered with an unknown-tool, bad-arguments or limit text never ran, and that text is
        # for the model to act on, not an answer for the caller.
        return_direct = len(jobs) == len(calls)
        for job, outcome, definition in zip(jobs, outcomes, definitions, strict=True):
            call = job.call
            ok = outcome.kind is ToolOutcomeKind.OK
            if return_direct and (
                not job.return_direct or (not ok and outcome.is_a(ToolArgumentsError))
            ):
                return_direct = False
            if ok:
                result = outcome.text
                if max_chars is not None and len(result) > max_chars:
                    result = _truncate(result, max_chars)
                responses[job.index] = ToolResponse(call.id, call.name, result)
            else:
                responses[job.index] = self._error_response(
                    call, definition, outcome, plan.strict, max_chars
                )

        assistant = plan.assistant
        if plan.breach is not None:
            index, tool_name, limit = plan.breach
            call = calls[index]
            done = [r for r in responses[:index] if r is not None]
            done.append(
                ToolResponse(call.id, call.name, breach_text(tool_name, limit), is_error=True)
            )
            partial = ToolExecutionResult(
                [*prompt.messages, assistant, ToolResponseMessage(done)], return_direct=False
            )
            raise ToolCallLimitExceededException(tool_name, limit, partial)

        final = [r for r in responses if r is not None]
        return ToolExecutionResult(
            [*prompt.messages, assistant, ToolResponseMessage(final)], return_direct=return_direct
        )

    # -- hooks for subclasses (the Django layer audits and re-checks governance here) -------

    def call_tool(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        """Run one call and return its text; runs on the thread the call is scheduled on.

        Override to wrap every call (audit, authorization); raise to fail the call. Blank
        arguments arrive as ``"{}"``.
        """
        return callback.call(_normalise_arguments(tool_call.arguments), tool_context)

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

    def _invoke(
        self, callback: ToolCallback, tool_call: ToolCall, context: ToolContext
    ) -> ToolOutcome:
        try:
            return ToolOutcome.ok(self.call_tool(callback, tool_call, context))
        except BaseException as exc:  # collected and handled in call order by the caller
            return ToolOutcome.from_exception(exc)

    async def _ainvoke(
        self, callback: ToolCallback, tool_call: ToolCall, context: ToolContext
    ) -> ToolOutcome:
        try:
            return ToolOutcome.ok(await self.acall_tool(callback, tool_call, context))
        except BaseException as exc:
            return ToolOutcome.from_exception(exc)

    def _unknown_tool_text(self, name: str, callbacks: dict[str, ToolCallback]) -> str:
        available = ", ".join(callbacks) or "none"
        return (
            f"Unknown or disabled tool {_quote_name(name)}. "
            f"Available tools: {available}. Call one of these by its exact name."
        )

    def _run(
        self,
        jobs: Sequence[PlannedCall],
        callbacks: Sequence[ToolCallback],
        context: ToolContext,
        default_concurrency: int,
        executor: Executor | ToolCallExecutor | None,
    ) -> list[ToolOutcome]:
        if not jobs:
            return []
        if executor is None:
            if len(jobs) == 1:
                return [self._invoke(callbacks[0], jobs[0].call, context)]
            return self._run_in_process(
                jobs, callbacks, context, self.max_concurrent_calls or default_concurrency
            )
        futures: list[Future[str] | Future[ToolOutcome]] = []
        for job, callback in zip(jobs, callbacks, strict=True):
            if isinstance(executor, ToolCallExecutor):
                futures.append(executor.submit_tool_call(callback, job.call, context))
            else:
                futures.append(executor.submit(self._invoke, callback, job.call, context))
        outcomes: list[ToolOutcome] = []
        for future in futures:
            try:
                value = future.result()
            except BaseException as exc:
                outcomes.append(ToolOutcome.from_exception(exc))
                continue
            outcomes.append(value if isinstance(value, ToolOutcome) else ToolOutcome.ok(value))
        return outcomes

    def _run_in_process(
        self,
        jobs: Sequence[PlannedCall],
        callbacks: Sequence[ToolCallback],
        context: ToolContext,
        bound: int,
    ) -> list[ToolOutcome]:
        bound = max(1, bound)
        pairs = list(zip(jobs, callbacks, strict=True))
        native_async = type(self).call_tool is DefaultToolCallingManager.call_tool
        if native_async and all(
            isinstance(cb, FunctionToolCallback) and cb.is_async for cb in callbacks
        ):
            # Only async tools: run them together on the shared event loop, no threads.
            async def gather() -> list[ToolOutcome]:
                semaphore = asyncio.Semaphore(bound)

                async def one(call: ToolCall, callback: ToolCallback) -> ToolOutcome:
                    async with semaphore:
                        return await self._ainvoke(callback, call, context)

                return list(await asyncio.gather(*(one(job.call, cb) for job, cb in pairs)))

            return run_sync(gather())
        # In a mixed batch an async tool holds a worker while its coroutine runs on the shared
        # loop, so one bound covers sync and async calls alike.
        if getattr(_pool_thread, "active", False) or bound > _SHARED_POOL_SIZE:
            # A tool that itself runs tools (an agent used as a tool) gets a pool of its own, so
            # nested batches can never deadlock the shared one.
            with ThreadPoolExecutor(
                max_workers=min(bound, len(jobs)),
                thread_name_prefix="tool-calling",
                initializer=_mark_pool_thread,
            ) as pool:
                futures = [
                    pool.submit(
                        contextvars.copy_context().run, self._invoke, callback, job.call, context
                    )
                    for job, callback in pairs
                ]
                return [future.result() for future in futures]
        # The shared pool keeps its threads between batches (starting threads per batch costs
        # more than small tools do); the semaphore holds each batch to its own bound, so a turn
        # never queues behind the calls of other turns until the pool itself is full.
        pool = _shared_pool()
        slots = threading.BoundedSemaphore(min(bound, len(jobs)))
        shared_futures: list[Future[ToolOutcome]] = []
        for job, callback in pairs:
            slots.acquire()
            # Each call sees the caller's context variables (tracing, request-scoped state).
            future = pool.submit(
                contextvars.copy_context().run, self._invoke, callback, job.call, context
            )
            future.add_done_callback(lambda _: slots.release())
            shared_futures.append(future)
        return [future.result() for future in shared_futures]

    def _error_response(
        self,
        call: ToolCall,
        definition: ToolDefinition,
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
        text = processor.process_outcome(definition, outcome)
        return ToolResponse(call.id, call.name, _truncate(text, max_chars), is_error=True)


def _context(options: ChatOptions | None) -> ToolContext:
    raw = options.tool_context if isinstance(options, ToolCallingChatOptions) else None
    return ToolContext(raw) if raw else _EMPTY_CONTEXT


def _bare_definition(name: str) -> ToolDefinition:
    """The definition of a tool the request no longer offers (for the exception processor)."""
    return ToolDefinition(name, "", {"type": "object", "properties": {}, "required": []})
