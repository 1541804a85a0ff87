"""The governed entry point: a ChatClient with the database's tools, limits, audit and memory.

Every Django entry point (``manage.py chat``, ``manage.py tools call``, background runs, the
API) builds its turn here, so governance is enforced on every path: only the tools the user may
use now are offered, the operators' limit overrides apply, every call is re-checked when it
runs and audited (``calls``), and a stored conversation records every step as it happens.
"""

from __future__ import annotations

import functools
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections
from django.utils.module_loading import import_string

from tool_calling import models, observability
from tool_calling.calls import lifecycle
from tool_calling.calls.executors import CeleryToolExecutor, RoutingToolCallExecutor, execution_mode
from tool_calling.calls.running import run_governed_call
from tool_calling.conf import settings as app_settings
from tool_calling.conversations import ConversationTurnAdvisor, TurnLog, memory_advisor
from tool_calling.core._settings import core_settings
from tool_calling.core.chat.client import ChatClient, ChatClientBuilder
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.execution.exception_processor import ToolExecutionExceptionProcessor
from tool_calling.core.execution.manager import DefaultToolCallingManager, ToolCallExecutor
from tool_calling.core.execution.plan import ToolCallPlan, ToolOutcomeKind
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.registry import ToolRegistry
from tool_calling.resolvers import DatabaseToolCallbackResolver, GovernedTools

__all__ = [
    "GovernedToolCallingManager",
    "GovernedTurn",
    "chat_model",
    "exception_processor",
    "governed_chat_client",
    "governed_turn",
]


class GovernedToolCallingManager(DefaultToolCallingManager):
    """Executes tool calls under governance and records a ``ToolExecution`` for each.

    Before a tool runs its ``Tool`` row is read again (enabled, present, allowed for the user),
    so an operator who disables or restricts a tool after the model asked for it stops the call.
    Calls of tools the request does not offer, and calls a limit refuses, are audited as
    refused.

    A batch with calls of tools whose execution mode is ``"celery"`` (the tool's own, else
    ``EXECUTION["MODE"]``) runs through a ``RoutingToolCallExecutor``: those go to Celery
    workers and are waited for, the others run in-process meanwhile. A batch of in-process calls
    only runs exactly as ``DefaultToolCallingManager`` runs it. An ``executor`` given
    explicitly runs every call.

    Args:
        governed: The turn's snapshot of the tools the user may use.
        conversation_id: Recorded in the audit.
        user: Whose governance applies.
        run_id: The durable run whose calls this manager plans (recorded in the audit).
        log: The turn's memory: it knows the stored assistant message a batch answers.
        **kwargs: As ``DefaultToolCallingManager``.
    """

    def __init__(
        self,
        *,
        governed: GovernedTools,
        conversation_id: str | uuid.UUID | None = None,
        user: Any = None,
        run_id: uuid.UUID | None = None,
        log: TurnLog | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("limits", governed.limits(core_settings().limits))
        super().__init__(**kwargs)
        self.governed = governed
        self.conversation_id = conversation_id
        self.run_id = run_id
        self.log = log
        self.user = user if getattr(user, "is_authenticated", False) else None
        # Calls on other threads (the pool of a batch) give their database connections back.
        self._home = threading.get_ident()

    @property
    def assistant_message_id(self) -> int | None:
        """The stored assistant message whose calls run now (from the turn's memory)."""
        return self.log.last_assistant_id if self.log is not None else None

    def batch_executor(self, plan: ToolCallPlan) -> Any:
        """The given executor; else a router when a call of the batch goes to a worker."""
        if self.executor is not None:
            return self.executor
        rows = self.governed.rows
        if not any(
            execution_mode(rows.get(job.call.name)) == models.ExecutionMode.CELERY
            for job in plan.jobs
        ):
            return None
        celery = CeleryToolExecutor(
            user=self.user,
            conversation_id=self.conversation_id,
            tools=rows,
            assistant_message_id=self.assistant_message_id,
        )
        router: ToolCallExecutor = RoutingToolCallExecutor(self.call_tool, celery, rows)
        return router

    def _row(self, name: str) -> models.Tool | None:
        row = self.governed.rows.get(name)
        if row is None:
            # A Tool row whose code is gone (not in the registry) still links its refusals.
            row = models.Tool.objects.filter(name=name).first()
        return row

    def _observed(self, callback: ToolCallback) -> dict[str, Any]:
        """What the ``execute_tool`` span of an in-process call carries besides the call."""
        return {
            "execution_mode": observability.INLINE,
            "description": callback.definition.description,
            "conversation_id": self.conversation_id,
            "run_id": self.run_id,
        }

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
            user=self.user,
            conversation_id=self.conversation_id,
            assistant_message_id=self.assistant_message_id,
            run_id=self.run_id,
        )

    def call_tool(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        """Re-check governance, run the tool in-process and record the outcome in the audit."""
        try:
            return self._governed_call(callback, tool_call, tool_context)
        finally:
            if threading.get_ident() != self._home:
                close_old_connections()
                connections.close_all()

    def _governed_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        name = tool_call.name
        tool = self.governed.rows.get(name)
        refs: list[lifecycle.CallRef] = []
        scope: dict[str, Any] = {
            "user": self.user,
            "conversation_id": self.conversation_id,
            "assistant_message_id": self.assistant_message_id,
            "run_id": self.run_id,
        }

        def start() -> None:
            refs.append(lifecycle.record_started(tool_call, tool=tool, **scope))

        base = super().call_tool
        with observability.tool_call(tool_call, **self._observed(callback)) as observed:
            result = observed.ended(
                run_governed_call(
                    name, self.user, lambda: base(callback, tool_call, tool_context), on_start=start
                )
            )
        if refs:
            lifecycle.finish(
                refs[0], result.status, result.outcome, duration_ms=result.duration_ms, keep=False
            )
        else:  # refused before it started
            lifecycle.record_refused(tool_call, result.text, tool=tool, **scope)
        if result.outcome.kind is not ToolOutcomeKind.OK:
            # What the tool raised, or (refused) a ToolNotAvailableError: the manager decides.
            raise result.outcome.as_exception()
        return result.text


@functools.cache
def _chat_model_factory(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f'Could not import {path!r} for \'TOOL_CALLING["CHAT_MODEL"]["CLASS"]\': {exc}'
        ) from exc


def exception_processor() -> ToolExecutionExceptionProcessor | None:
    """The exception processor of governed turns (``EXCEPTION_PROCESSOR``); ``None``: default.

    Raises:
        ImproperlyConfigured: the setting makes no ``ToolExecutionExceptionProcessor``.
    """
    configured = app_settings.EXCEPTION_PROCESSOR
    if configured is None or isinstance(configured, ToolExecutionExceptionProcessor):
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
    """The tools offered to the model."""
    tool_context: dict[str, Any]
    """Server-side context every call receives (user and conversation ids)."""


def governed_turn(
    *,
    user: Any = None,
    conversation_id: uuid.UUID | None = None,
    tool_names: list[str] | None = None,
    tool_registry: ToolRegistry | None = None,
    run_id: uuid.UUID | None = None,
    log: TurnLog | None = None,
) -> GovernedTurn:
    """Read the database's governance for one turn of ``user`` (a snapshot of the tools).

    ``RESOLUTION_FALLBACK_ENABLED`` lets a call of a tool the turn did not offer (narrowed by
    ``tool_names``) run when the database resolver finds it enabled and allowed for ``user``.
    """
    governed = GovernedTools(user, tool_registry)
    manager = GovernedToolCallingManager(
        governed=governed,
        conversation_id=conversation_id,
        user=user,
        run_id=run_id,
        log=log,
        resolver=DatabaseToolCallbackResolver(user, governed.registry),
        resolution_fallback_enabled=bool(app_settings.RESOLUTION_FALLBACK_ENABLED),
        exception_processor=exception_processor(),
    )
    context: dict[str, Any] = {}
    if getattr(user, "is_authenticated", False):
        context["user_id"] = user.pk
    if conversation_id is not None:
        context["conversation_id"] = str(conversation_id)
    return GovernedTurn(manager, governed.callbacks(tool_names), context)


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
