"""The governed entry point: a ChatClient with the database's tools, limits, audit and memory.

Every Django entry point (``manage.py chat``, ``manage.py tools call``, background runs, the
API) builds its client here, so governance is enforced on every path.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from tool_calling import models
from tool_calling.conf import settings as app_settings
from tool_calling.core._settings import core_settings
from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.advisors.memory import MessageChatMemoryAdvisor
from tool_calling.core.chat.advisors.tool_calling import ToolCallingAdvisor
from tool_calling.core.chat.client import ChatClient, ChatClientBuilder
from tool_calling.core.chat.memory import MessageWindowChatMemory
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.chat.prompt import Prompt
from tool_calling.core.chat.response import ChatResponse
from tool_calling.core.execution.manager import DefaultToolCallingManager
from tool_calling.core.execution.result import ToolExecutionResult
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import (
    ToolArgumentsError,
    ToolCallingError,
    ToolExecutionException,
    ToolFailure,
)
from tool_calling.registry import ToolRegistry
from tool_calling.repositories import DjangoChatMemoryRepository
from tool_calling.resolvers import GovernedTools, approval_required

__all__ = [
    "CallOutcome",
    "ConversationBusyError",
    "ConversationTurnAdvisor",
    "GovernedToolCallingManager",
    "ToolNotAvailableError",
    "GovernedTurn",
    "audit_text",
    "chat_memory",
    "claim_conversation",
    "conversation_turn",
    "governed_turn",
    "memory_advisor",
    "governed_chat_client",
    "refusal_text",
    "release_conversation",
    "renew_conversation_claim",
    "run_governed_call",
]

logger = logging.getLogger("tool_calling.governance")

_assistant_message_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "tool_calling_assistant_message_id", default=None
)


class ConversationBusyError(ToolCallingError):
    """Another turn of the same conversation is running; retry when it has ended."""

    def __init__(self, conversation_id: object) -> None:
        super().__init__(
            f"Conversation {conversation_id} is already answering another message; "
            "send this one when that turn has ended."
        )
        self.conversation_id = conversation_id
        """The busy conversation."""


def claim_conversation(conversation_id: uuid.UUID | str) -> str:
    """Claim ``conversation_id`` for one turn and return the claim's token.

    The claim is one conditional UPDATE (atomic on SQLite and PostgreSQL). A claim older than
    ``CONVERSATION_TURN_TIMEOUT`` seconds is taken over: a crashed turn never blocks for good.
    A background run's claim is never taken over while the run is active: it may wait longer
    than that for an approval or its tool calls, and the sweeper keeps it moving.

    Raises:
        ConversationBusyError: another turn holds the conversation.
        Conversation.DoesNotExist: there is no such conversation.
    """
    token = uuid.uuid4().hex
    now = timezone.now()
    stale = now - datetime.timedelta(seconds=app_settings.CONVERSATION_TURN_TIMEOUT)
    held_by_a_run = models.Run.objects.filter(
        conversation_id=OuterRef("pk"),
        turn_token=OuterRef("turn_token"),
        status__in=models.RUN_ACTIVE_STATUSES,
    )
    claimed = (
        models.Conversation.objects.filter(pk=conversation_id)
        .filter(
            Q(turn_token="")
            | ((Q(turn_started_at__lt=stale) | Q(turn_started_at=None)) & ~Exists(held_by_a_run))
        )
        .update(turn_token=token, turn_started_at=now)
    )
    if not claimed:
        if not models.Conversation.objects.filter(pk=conversation_id).exists():
            raise models.Conversation.DoesNotExist(f"No conversation {conversation_id}")
        raise ConversationBusyError(conversation_id)
    return token


def renew_conversation_claim(conversation_id: uuid.UUID | str, token: str) -> bool:
    """Restart the timeout of the claim ``token``; False when the claim was lost."""
    return bool(
        models.Conversation.objects.filter(pk=conversation_id, turn_token=token).update(
            turn_started_at=timezone.now()
        )
    )


def release_conversation(conversation_id: uuid.UUID | str, token: str) -> None:
    """End the claim ``token`` (nothing happens if another turn took the conversation over)."""
    if token:
        models.Conversation.objects.filter(pk=conversation_id, turn_token=token).update(
            turn_token="", turn_started_at=None
        )


@contextmanager
def conversation_turn(conversation_id: uuid.UUID | str) -> Iterator[None]:
    """Hold ``conversation_id`` for one turn, so two turns never interleave their messages.

    See :func:`claim_conversation`; the claim ends with the block.

    Raises:
        ConversationBusyError: another turn holds the conversation.
    """
    token = claim_conversation(conversation_id)
    try:
        yield
    finally:
        release_conversation(conversation_id, token)


class ConversationTurnAdvisor(Advisor):
    """Outermost advisor of governed turns: holds the conversation for the whole turn."""

    order = HIGHEST_PRECEDENCE

    def __init__(self, conversation_id: uuid.UUID | str) -> None:
        self.conversation_id = conversation_id

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Run the turn while holding the conversation."""
        with conversation_turn(self.conversation_id):
            return chain.next_call(request)

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Stream the turn while holding the conversation (released when the stream ends)."""
        with conversation_turn(self.conversation_id):
            yield from chain.next_stream(request)


class ToolNotAvailableError(ToolFailure):
    """A tool was disabled, removed or forbidden between the model's request and the call."""


def _redactor() -> Callable[..., str] | None:
    # conf imports the dotted path on first access (IMPORT_STRINGS) and caches the callable.
    redactor: Callable[..., str] | None = app_settings.AUDIT_REDACTOR
    return redactor


def audit_text(text: str | None, *, tool_name: str, field: str) -> str:
    """Return ``text`` as stored in the audit: redacted by the hook, then cut to the setting."""
    if not text:
        return ""
    redactor = _redactor()
    if redactor is not None:
        text = redactor(text, tool_name=tool_name, field=field)
    limit = app_settings.AUDIT_MAX_CHARS
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n[Truncated: {len(text)} characters; first {limit} kept.]"
    return text


def refusal_text(name: str) -> str:
    """The text the model gets for a call of a tool an operator withdrew after it asked (S2)."""
    return (
        f"Tool {name!r} is not available: an operator disabled, removed or restricted "
        "it. Do not call it again in this conversation."
    )


def _qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"[:200]


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


@dataclass(frozen=True)
class CallOutcome:
    """How one governed call ended: what the model is told, and what the audit records."""

    status: str
    """An ``ExecutionStatus`` value."""
    text: str
    """The text for the model: the tool's result, or the error it is told about."""
    is_error: bool = False
    """Whether the model is told that the call failed."""
    error: str = ""
    """The traceback, for operators only."""
    error_type: str = ""
    """``module.QualifiedName`` of the exception the tool raised; blank when it did not."""
    exception: BaseException | None = field(default=None, compare=False)
    """What the in-process path raises to the manager (which turns it into a response)."""
    duration_ms: int = 0
    """How long the tool ran."""

    def audit_fields(self, tool_name: str) -> dict[str, Any]:
        """The ``ToolExecution`` fields that record this outcome (redacted, then capped)."""
        return {
            "status": self.status,
            "result": audit_text(self.text, tool_name=tool_name, field="result"),
            "error": audit_text(self.error, tool_name=tool_name, field="error"),
            "error_type": self.error_type,
            "is_error": self.is_error,
            "finished_at": timezone.now(),
            "duration_ms": self.duration_ms,
        }


def approval_refusal_text(name: str) -> str:
    """The text the model gets for a call that needs approval where no one can give it."""
    return (
        f"Tool {name!r} requires a person's approval before each call, and this conversation "
        "cannot wait for one (approvals pause background runs only). The call was not made."
    )


def run_governed_call(
    name: str,
    user: Any,
    run: Callable[[], str],
    *,
    on_start: Callable[[], None] | None = None,
    approved: bool = False,
) -> CallOutcome:
    """Re-check that ``user`` may use tool ``name`` now, run it, and say how it ended.

    The one implementation of "re-check, run, classify" shared by calls run in-process
    (``GovernedToolCallingManager``) and calls run on Celery workers (``tool_calling.tasks``).
    It writes nothing: each caller records the outcome in its own way (a new row, or a fenced
    update of a claimed one).

    Args:
        name: The tool the model called.
        user: The user of the turn (``None`` for anonymous turns).
        run: Runs the tool and returns its text (raises as ``ToolCallback.call`` does).
        on_start: Called once the re-check passed, just before ``run``.
        approved: A person approved this call (``tool_calling.approvals``). Without it a tool
            that requires approval is refused.

    Returns:
        ``REFUSED`` (the tool is no longer available to ``user``, or needs an approval this
        call does not have; it did not run), else
        ``SUCCEEDED`` or ``FAILED``, with the exception for the in-process path to re-raise.
    """
    # Read again at call time (S2): the operator may have disabled, removed or restricted the
    # tool after the model asked for it.
    needs_approval = approval_required(name, user)
    if needs_approval is None or (needs_approval and not approved):
        text = refusal_text(name) if needs_approval is None else approval_refusal_text(name)
        return CallOutcome(
            models.ExecutionStatus.REFUSED, text, True, exception=ToolNotAvailableError(text)
        )
    if on_start is not None:
        on_start()
    started = time.monotonic()
    try:
        result = run()
    except ToolArgumentsError as exc:
        failure: BaseException = exc
        text = str(exc)
        error = ""
    except ToolExecutionException as exc:
        failure = exc
        cause = exc.cause
        # What DefaultToolExecutionExceptionProcessor tells the model.
        text = str(cause) if isinstance(cause, ToolFailure) else str(cause).strip()
        text = text or f"Exception occurred in tool: {name} ({type(cause).__name__})"
        error = _traceback(cause)
    except BaseException as exc:
        failure = exc
        text = str(exc).strip() or f"Exception occurred in tool: {name} ({type(exc).__name__})"
        error = _traceback(exc)
    else:
        return CallOutcome(
            models.ExecutionStatus.SUCCEEDED,
            "" if result is None else result,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    cause = failure.cause if isinstance(failure, ToolExecutionException) else failure
    return CallOutcome(
        models.ExecutionStatus.FAILED,
        text,
        True,
        error=error,
        error_type=_qualified_name(cause),
        exception=failure,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


_batch_executor: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "tool_calling_batch_executor", default=None
)


class GovernedToolCallingManager(DefaultToolCallingManager):
    """Executes tool calls under governance and writes a ``ToolExecution`` row for each.

    Before a tool runs its ``Tool`` row is read again (enabled, present, allowed for the user),
    so an operator who disables or restricts a tool after the model asked for it stops the call.
    Calls of tools the request does not offer are refused and audited.

    Calls of tools whose execution mode is ``"celery"`` (the tool's own, else
    ``EXECUTION["MODE"]``) are sent to Celery workers and waited for; in a batch that mixes
    both, the in-process calls run meanwhile. A batch of in-process calls only runs exactly as
    ``DefaultToolCallingManager`` runs it. An ``executor`` given explicitly runs every call.
    """

    def __init__(
        self,
        *,
        governed: GovernedTools,
        conversation_id: str | uuid.UUID | None = None,
        user: Any = None,
        run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("limits", governed.limits(core_settings().limits))
        super().__init__(**kwargs)
        self.governed = governed
        self.conversation_id = conversation_id
        self.run_id = run_id
        """The durable run whose calls this manager plans (recorded in the audit)."""
        self.user = user if getattr(user, "is_authenticated", False) else None

    @property
    def executor(self) -> Any:
        """The executor of the running batch: the router when it has calls for workers."""
        routed = _batch_executor.get()
        return routed if routed is not None else self._executor

    @executor.setter
    def executor(self, value: Any) -> None:
        self._executor = value

    def _audit(self, call: ToolCall, **fields: Any) -> models.ToolExecution:
        row = self.governed.rows.get(call.name)
        if row is None:
            # A Tool row whose code is gone (not in the registry) still links its refusals.
            row = models.Tool.objects.filter(name=call.name).first()
        fields.setdefault("idempotent", bool(row is not None and row.idempotent))
        return models.ToolExecution.objects.create(
            conversation_id=self.conversation_id,
            run_id=self.run_id,
            assistant_message_id=_assistant_message_id.get(),
            tool_call_id=call.id[:200],
            tool=row,
            tool_name=call.name[:200],
            arguments=audit_text(call.arguments, tool_name=call.name, field="arguments"),
            user=self.user,
            **fields,
        )

    def _router(self, chat_response: ChatResponse) -> Any:
        """The routing executor when a call of this batch goes to a worker, else ``None``."""
        if self._executor is not None:
            return None
        from tool_calling.execution import RoutingToolCallExecutor, execution_mode

        for generation in chat_response.generations:
            if generation.output.tool_calls:
                calls = generation.output.tool_calls
                break
        else:
            return None
        rows = self.governed.rows
        if not any(
            call.name in self.governed.available
            and execution_mode(rows.get(call.name)) == models.ExecutionMode.CELERY
            for call in calls
        ):
            return None
        return RoutingToolCallExecutor(self)

    def execute_tool_calls(
        self, prompt: Prompt, chat_response: ChatResponse
    ) -> ToolExecutionResult:
        """Run the calls with the audit pointing at the stored assistant message."""
        message_id = None
        if self.conversation_id is not None:
            message_id = (
                models.Message.objects.filter(
                    conversation_id=self.conversation_id, role=models.MessageRole.ASSISTANT
                )
                .order_by("-sequence")
                .values_list("pk", flat=True)
                .first()
            )
        token = _assistant_message_id.set(message_id)
        routed = _batch_executor.set(self._router(chat_response))
        try:
            return super().execute_tool_calls(prompt, chat_response)
        finally:
            _batch_executor.reset(routed)
            _assistant_message_id.reset(token)

    def on_limit_exceeded(self, tool_call: ToolCall, response_text: str) -> None:
        """Audit a call refused by a call limit as refused (it never ran)."""
        self.on_unavailable_tool(tool_call, response_text)

    def on_unavailable_tool(self, tool_call: ToolCall, response_text: str) -> None:
        """Audit a call of a tool the request did not offer as refused."""
        now = timezone.now()
        self._audit(
            tool_call,
            status=models.ExecutionStatus.REFUSED,
            result=audit_text(response_text, tool_name=tool_call.name, field="result"),
            is_error=True,
            started_at=now,
            finished_at=now,
            duration_ms=0,
        )

    def call_tool(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        """Re-check governance, run the tool in-process and record the outcome in the audit."""
        in_pool = threading.current_thread().name.startswith("tool-calling")
        try:
            return self._governed_call(callback, tool_call, tool_context)
        finally:
            if in_pool:
                # Pool threads end with the batch; give their connections back.
                close_old_connections()
                from django.db import connections

                connections.close_all()

    def _governed_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> str:
        name = tool_call.name
        rows: list[models.ToolExecution] = []

        def start() -> None:
            rows.append(
                self._audit(
                    tool_call,
                    status=models.ExecutionStatus.RUNNING,
                    attempt=1,
                    started_at=timezone.now(),
                )
            )

        outcome = run_governed_call(
            name,
            self.user,
            lambda: super(GovernedToolCallingManager, self).call_tool(
                callback, tool_call, tool_context
            ),
            on_start=start,
        )
        fields = outcome.audit_fields(name)
        if rows:
            models.ToolExecution.objects.filter(pk=rows[0].pk).update(**fields)
        else:  # refused before it started
            self._audit(tool_call, started_at=fields["finished_at"], **fields)
        if outcome.exception is not None:
            raise outcome.exception
        return outcome.text


def default_chat_model() -> ChatModel:
    """The chat model the Django entry points use: ``OpenAIChatModel`` from settings."""
    from tool_calling.core.providers.openai import OpenAIChatModel

    return OpenAIChatModel()


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
) -> GovernedTurn:
    """Read the database's governance for one turn of ``user`` (a snapshot of the tools)."""
    governed = GovernedTools(user, tool_registry)
    manager = GovernedToolCallingManager(
        governed=governed,
        conversation_id=conversation_id,
        user=user,
        run_id=run_id,
        resolution_fallback_enabled=False,
    )
    context: dict[str, Any] = {}
    if getattr(user, "is_authenticated", False):
        context["user_id"] = user.pk
    if conversation_id is not None:
        context["conversation_id"] = str(conversation_id)
    return GovernedTurn(manager, governed.callbacks(tool_names), context)


def chat_memory() -> MessageWindowChatMemory:
    """The memory of stored conversations (the ``Message`` table, windowed by the setting)."""
    return MessageWindowChatMemory(
        DjangoChatMemoryRepository(), max_messages=app_settings.MEMORY_MAX_MESSAGES
    )


def memory_advisor(conversation_id: uuid.UUID) -> MessageChatMemoryAdvisor:
    """The memory advisor of governed turns: inside the tool loop, so every step is stored."""
    return MessageChatMemoryAdvisor(
        chat_memory(), order=ToolCallingAdvisor.order + 1, conversation_id=str(conversation_id)
    )


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
    responses, the answer) is stored as it happens.
    """
    conversation_id = conversation.pk if conversation is not None else None
    turn = governed_turn(
        user=user,
        conversation_id=conversation_id,
        tool_names=tool_names,
        tool_registry=tool_registry,
    )
    builder: ChatClientBuilder = (
        ChatClient.builder(model or default_chat_model())
        .default_tools(turn.callbacks)
        .default_tool_context(turn.tool_context)
        .tool_calling_manager(turn.manager)
    )
    if system:
        builder.default_system(system)
    if conversation is not None:
        # Inside the tool loop: every step is stored as it happens, not only the final answer.
        builder.default_advisors(
            ConversationTurnAdvisor(conversation.pk), memory_advisor(conversation.pk)
        )
    return builder.build()
