"""The governed entry point: a ChatClient with the database's tools, limits, audit and memory.

Every Django entry point (``manage.py chat``, ``manage.py tools call``, background runs, the
API) builds its turn here, so governance is enforced on every path: only the tools the user may
use now are offered, the operators' limit overrides apply, every call is re-checked when it
runs and audited (``calls``), and a stored conversation records every step as it happens.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections
from django.utils.module_loading import import_string

from tool_calling import models, observability
from tool_calling.augmentation import augmented
from tool_calling.calls import gate, lifecycle
from tool_calling.calls.executors import CeleryToolExecutor, RoutingToolCallExecutor, execution_mode
from tool_calling.calls.failures import GovernedToolExecutionExceptionProcessor
from tool_calling.calls.gate import approval_refusal_text
from tool_calling.calls.inline import InlineScope, run_inline, run_search_call
from tool_calling.conf import settings as app_settings
from tool_calling.conversations import ConversationTurnAdvisor, TurnLog, memory_advisor
from tool_calling.core._settings import core_settings
from tool_calling.core.chat.advisors.tool_search import ToolSearchToolCallingAdvisor
from tool_calling.core.chat.client import ChatClient, ChatClientBuilder
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.execution.exception_processor import ToolExecutionExceptionProcessor
from tool_calling.core.execution.manager import DefaultToolCallingManager, ToolCallExecutor
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.registry import ToolRegistry
from tool_calling.resolvers import DatabaseToolCallbackResolver, GovernedTools
from tool_calling.search import is_search_call, search_advisor

__all__ = [
    "GovernedToolCallingManager",
    "GovernedToolExecutionExceptionProcessor",
    "GovernedTurn",
    "chat_model",
    "exception_processor",
    "governed_chat_client",
    "governed_turn",
]


logger = logging.getLogger("tool_calling.calls")


class GovernedToolCallingManager(DefaultToolCallingManager):
    """Executes tool calls under governance and records a ``ToolExecution`` for each.

    Every call passes the gate (``calls.gate``) before its tool runs: in this process
    (``calls.inline``, with its retries) or on a Celery worker, whose gate applies again. Calls
    of tools the request does not offer, and calls the gate or a limit refuses, are audited as
    refused; a call over a limit meets the gate's rules first, so it reads the first rule
    that refuses it.

    A batch with calls of tools whose execution mode is ``"celery"`` (the tool's own, else
    ``EXECUTION["MODE"]``) runs through a ``RoutingToolCallExecutor``: those go to Celery
    workers and are waited for, the others run in-process meanwhile. A batch of in-process calls
    only runs exactly as ``DefaultToolCallingManager`` runs it. An ``executor`` given
    explicitly runs every call.

    The ``tool_search`` tool of a turn with tool search has no ``Tool`` row: it always runs in
    this process (it searches the turn's tools) and is audited like any call. An augmented
    tool (``augmentation``) runs with its own arguments; the values split from them are
    stored on its ``ToolExecution``.

    Args:
        governed: The turn's snapshot of the tools the user may use.
        conversation_id: Recorded in the audit.
        user: Whose governance applies.
        run_id: The durable run whose calls this manager plans (recorded in the audit); its
            calls can wait for a person's approval.
        log: The turn's memory: it knows the stored assistant message a batch answers.
        approval_text: What the model reads of a call that needs approval where the turn
            cannot wait for one (``calls.gate.approval_refusal_text`` by default).
        **kwargs: As ``DefaultToolCallingManager``.
    """

    # The gate decides who confirms or approves a call (calls.gate, rule 4): a durable run
    # waits for the user, other turns refuse the call with a text the model reads.
    decides_confirmation = False

    def __init__(
        self,
        *,
        governed: GovernedTools,
        conversation_id: str | uuid.UUID | None = None,
        user: Any = None,
        run_id: uuid.UUID | None = None,
        log: TurnLog | None = None,
        approval_text: Callable[[str], str] = approval_refusal_text,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("limits", governed.limits(core_settings().limits))
        super().__init__(**kwargs)
        self.governed = governed
        self.conversation_id = conversation_id
        self.run_id = run_id
        self.log = log
        self.approval_text = approval_text
        self.user = user if getattr(user, "is_authenticated", False) else None
        # The user's confirmation of one call, given when asked (over MCP): the gate lets that
        # call through when only the user decides it (``calls.gate.Confirmation``).
        self.confirmation: gate.Confirmation | None = None
        # Calls on other threads (the pool of a batch) give their database connections back.
        self._home = threading.get_ident()

    @property
    def assistant_message_id(self) -> int | None:
        """The stored assistant message whose calls run now (from the turn's memory)."""
        return self.log.last_assistant_id if self.log is not None else None

    def batch_executor(self, tool_calls: Sequence[ToolCall]) -> Any:
        """The given executor; else a router when a call of the batch goes to a worker."""
        if self.executor is not None:
            return self.executor
        rows = self.governed.rows
        # Only tools with a row can run on workers; tool_search, which has none, never does.
        if not any(
            call.name in rows and execution_mode(rows[call.name]) == models.ExecutionMode.CELERY
            for call in tool_calls
        ):
            return None
        celery = CeleryToolExecutor(
            user=self.user,
            conversation_id=self.conversation_id,
            tools=rows,
            assistant_message_id=self.assistant_message_id,
        )
        router = RoutingToolCallExecutor(self.call_tool, celery, rows)
        executor: ToolCallExecutor = _SearchInProcess(router, self.call_tool)
        return executor

    def _row(self, name: str) -> models.Tool | None:
        row = self.governed.rows.get(name)
        if row is None:
            # A Tool row whose code is gone (not in the registry) still links its refusals.
            row = models.Tool.objects.filter(name=name).first()
        return row

    def scope(self) -> InlineScope:
        """Whose turn the calls belong to, as their audit rows record it."""
        return InlineScope(
            self.user,
            self.conversation_id,
            self.assistant_message_id,
            self.run_id,
            self.approval_text,
            self.confirmation,
        )

    def refuse_over_limit(
        self,
        tool_call: ToolCall,
        callback: ToolCallback | None,
        tool_context: ToolContext,
        response_text: str,
    ) -> ToolOutcome | None:
        """A call over a limit meets the gate's rules first: the first that refuses answers it.

        Refused by the limit itself, it is audited as a limit refusal and the limit decides
        (``ON_LIMIT_EXCEEDED``); nothing is taken from its quotas either way.
        """
        if callback is None or is_search_call(callback):
            self.on_limit_exceeded(tool_call, response_text)
            return None
        verdict = gate.admit(
            gate.GateCall(
                tool_call,
                callback,
                self.user,
                tool_context,
                can_wait=self.run_id is not None,
                approval_text=self.approval_text,
                over_limit=response_text,
                confirmed=self.confirmation,
            )
        )
        if verdict.refused_by is gate.Rule.LIMIT or verdict.outcome is None:
            self.on_limit_exceeded(tool_call, response_text)
            return None
        lifecycle.record_refused(
            tool_call,
            verdict.text,
            tool=self._row(tool_call.name),
            outcome=verdict.outcome,
            **self.scope().recorded,
        )
        return verdict.outcome

    def on_limit_exceeded(self, tool_call: ToolCall, response_text: str) -> None:
        """Audit a call refused by a call limit as refused (it never ran)."""
        observability.limit_refused(
            tool_call, response_text, conversation_id=self.conversation_id, run_id=self.run_id
        )
        self.on_unavailable_tool(tool_call, response_text)

    def on_unavailable_tool(self, tool_call: ToolCall, response_text: str) -> None:
        """Audit a call of a tool the request did not offer as refused."""
        lifecycle.record_refused(
            tool_call,
            response_text,
            tool=self._row(tool_call.name),
            **self.scope().recorded,
        )

    def call_tool(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        """Run the call in-process through the gate, audited (``calls.inline``)."""
        try:
            scope = self.scope()
            if is_search_call(callback):
                _, outcome = run_search_call(
                    callback, tool_call, tool_context, keep=False, **scope.recorded
                )
                if outcome.kind is not ToolOutcomeKind.OK:
                    raise outcome.as_exception()
                return outcome.text
            tool = self.governed.rows.get(tool_call.name)
            return run_inline(callback, tool_call, tool_context, scope=scope, tool=tool)
        finally:
            if threading.get_ident() != self._home:
                close_old_connections()
                connections.close_all()


class _SearchInProcess:
    """Runs the turn's ``tool_search`` here, at once; every other call where ``router`` says."""

    def __init__(
        self,
        router: RoutingToolCallExecutor,
        call_inline: Any,
    ) -> None:
        self.router = router
        self.call_inline = call_inline

    def submit_tool_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> Future[str] | Future[ToolOutcome]:
        """Run a search now (it takes a millisecond); route any other call."""
        if not is_search_call(callback):
            return self.router.submit_tool_call(callback, tool_call, tool_context)
        future: Future[str] = Future()
        try:
            future.set_result(self.call_inline(callback, tool_call, tool_context))
        except BaseException as exc:  # the manager classifies it, as for any call
            future.set_exception(exc)
        return future


@functools.cache
def _chat_model_factory(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f'Could not import {path!r} for \'TOOL_CALLING["CHAT_MODEL"]["CLASS"]\': {exc}'
        ) from exc


def exception_processor() -> ToolExecutionExceptionProcessor:
    """The exception processor of governed turns (``EXCEPTION_PROCESSOR``).

    ``None`` (the default) is a ``GovernedToolExecutionExceptionProcessor``: an unexpected error
    reaches the model as a generic text with its error id (S13), ``THROW_EXCEPTION_ON_ERROR``
    re-raises instead. Name ``tool_calling.DefaultToolExecutionExceptionProcessor`` for the
    core's (Spring AI's) behaviour, the exception's message for the model.

    Raises:
        ImproperlyConfigured: the setting makes no ``ToolExecutionExceptionProcessor``.
    """
    configured = app_settings.EXCEPTION_PROCESSOR
    if configured is None:
        return GovernedToolExecutionExceptionProcessor(
            always_throw=bool(app_settings.THROW_EXCEPTION_ON_ERROR)
        )
    if isinstance(configured, ToolExecutionExceptionProcessor):
        return configured
    made = configured()
    if not isinstance(made, ToolExecutionExceptionProcessor):
        raise ImproperlyConfigured(
            f"TOOL_CALLING['EXCEPTION_PROCESSOR'] made a {type(made).__name__}, not a "
            "ToolExecutionExceptionProcessor."
        )
    return made


def chat_model() -> ChatModel:
    """The chat model of every governed path: ``CHAT_MODEL["CLASS"](**CHAT_MODEL["ARGUMENTS"])``.

    ``CLASS`` is a dotted path to a ``ChatModel`` subclass or to a factory returning one;
    the default, ``OpenAIChatModel``, reads the other ``CHAT_MODEL`` keys.

    Raises:
        ImproperlyConfigured: ``CLASS`` does not import, or does not make a ``ChatModel``.
    """
    settings = app_settings.CHAT_MODEL
    factory = settings["CLASS"]
    if isinstance(factory, str):
        factory = _chat_model_factory(factory)
    model = factory(**settings["ARGUMENTS"])
    if not isinstance(model, ChatModel):
        raise ImproperlyConfigured(
            f"TOOL_CALLING['CHAT_MODEL']['CLASS'] made a {type(model).__name__}, not a "
            "ChatModel: name a ChatModel subclass or a function that returns one."
        )
    return model


@dataclass
class GovernedTurn:
    """What one governed turn runs with: the manager, the offered tools and the tool context."""

    manager: GovernedToolCallingManager
    """Plans and runs the calls, audited."""
    callbacks: list[ToolCallback]
    """The tools offered to the model (augmented ones with their augmentation)."""
    tool_context: dict[str, Any]
    """Server-side context every call receives (user and conversation ids)."""
    search: ToolSearchToolCallingAdvisor | None = None
    """The tool loop with tool search (``TOOL_SEARCH``); ``None`` when search is off."""


def governed_turn(
    *,
    user: Any = None,
    conversation_id: uuid.UUID | None = None,
    tool_names: list[str] | None = None,
    tool_registry: ToolRegistry | None = None,
    run_id: uuid.UUID | None = None,
    log: TurnLog | None = None,
    approval_text: Callable[[str], str] = approval_refusal_text,
) -> GovernedTurn:
    """Read the database's governance for one turn of ``user`` (a snapshot of the tools).

    ``approval_text`` is what the model (or an MCP client) reads of a call that needs a person's
    approval where the turn cannot wait for one (a turn without a ``run_id``).

    ``RESOLUTION_FALLBACK_ENABLED`` lets a call of a tool the turn did not offer (narrowed by
    ``tool_names``) run when the database resolver finds it enabled and allowed for ``user``.
    Tools whose calls carry argument augmentation are wrapped (``ARGUMENT_AUGMENTATION``, the
    tools' admin choice); with ``TOOL_SEARCH`` on, ``search`` is the turn's tool loop (the
    memory advisor sits inside it when there is a ``log``).
    """
    governed = GovernedTools(user, tool_registry)
    manager = GovernedToolCallingManager(
        governed=governed,
        conversation_id=conversation_id,
        user=user,
        run_id=run_id,
        log=log,
        approval_text=approval_text,
        resolver=DatabaseToolCallbackResolver(user, governed.registry),
        resolution_fallback_enabled=bool(app_settings.RESOLUTION_FALLBACK_ENABLED),
        exception_processor=exception_processor(),
    )
    context: dict[str, Any] = {}
    if getattr(user, "is_authenticated", False):
        context["user_id"] = user.pk
    if conversation_id is not None:
        context["conversation_id"] = str(conversation_id)
    callbacks = augmented(governed.callbacks(tool_names), governed.rows)
    search = search_advisor(manager, governed.rows, conversation_history_enabled=log is None)
    return GovernedTurn(manager, callbacks, context, search)


def governed_chat_client(
    *,
    user: Any = None,
    conversation: models.Conversation | None = None,
    model: ChatModel | None = None,
    tool_names: list[str] | None = None,
    system: str | None = None,
    tool_registry: ToolRegistry | None = None,
) -> ChatClient:
    """Return a ChatClient governed by the database for ``user`` in ``conversation``.

    Only the tools the user may use now are offered (``tool_names`` narrows them); limits merge
    the operators' overrides into ``LIMITS``; every call is audited; with a conversation, every
    step of the turn (user message, each assistant tool-call message, each batch of tool
    responses, the answer) is stored as it happens. ``model`` defaults to :func:`chat_model`.
    The tools are a snapshot taken now: build a client per turn to see operators' changes.
    With ``TOOL_SEARCH`` on, the model is offered a search tool instead of every tool, and a
    conversation keeps what its searches found for its next turns.
    """
    conversation_id = conversation.pk if conversation is not None else None
    log = TurnLog(conversation_id) if conversation_id is not None else None
    turn = governed_turn(
        user=user,
        conversation_id=conversation_id,
        tool_names=tool_names,
        tool_registry=tool_registry,
        log=log,
    )
    model = model or chat_model()
    builder: ChatClientBuilder = (
        ChatClient.builder(model)
        .default_tools(turn.callbacks)
        .default_tool_context(turn.tool_context)
        .tool_calling_manager(turn.manager)
    )
    if system:
        builder.default_system(system)
    if turn.search is not None:
        builder.default_advisors(turn.search)
        if conversation_id is not None:
            # Tool search keeps its finds under the request's conversation id.
            builder.default_conversation_id(str(conversation_id))
    # The turn's span outermost, a span per model call inside the tool loop (next to the model).
    builder.default_advisors(
        observability.TurnObservationAdvisor(model, conversation_id=conversation_id),
        *observability.chat_advisors(model),
    )
    if log is not None:
        # Inside the tool loop: every step is stored as it happens, not only the final answer.
        builder.default_advisors(
            ConversationTurnAdvisor(log.conversation_id, log), memory_advisor(log)
        )
    return builder.build()
