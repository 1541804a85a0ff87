"""Durable turns: a turn driven as Celery steps, each stored before the next one starts.

``start_turn`` stores the user message and a ``Run`` and queues the first step
(``tool_calling.run_step``). A step reads the run's messages from the database and does what
they call for next::

    last message of the turn         the step
    user message / tool responses    calls the model (memory stores its message)
    assistant message with calls     decides as the in-process loop does: plans the calls,
                                     records them and sends them to workers, then returns;
                                     or ends the turn (round limit)
    ... whose calls all ended        builds the responses (complete_tool_calls), ends the turn
                                     (return-direct, limit) or stores them and goes on
    assistant answer                 the run succeeded

No step waits for a task: the last tool call of a batch to end queues the next step
(``tool_call_finished``). The decisions are the in-process loop's own (``decide_after_model``,
``decide_after_tools``, ``plan_tool_calls``, ``complete_tool_calls``), and memory is the
``MessageChatMemoryAdvisor`` of governed turns, so limits, return-direct and memory behave as
in ``governed_chat_client``. A step holds a lease on the run; a step redelivered after its
worker died takes over once the lease expired and continues from the database, never running
a finished tool again. The sweeper queues steps that were lost.
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from tool_calling import _notify, models, signals
from tool_calling._lease import Heartbeat
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat._stream import aggregate
from tool_calling.core.chat.advisors.base import AdvisorChain, ChatClientRequest, ChatClientResponse
from tool_calling.core.chat.advisors.tool_calling import (
    ANSWERED,
    DEFAULT_MAX_TOOL_ROUNDS,
    LoopEnding,
    decide_after_model,
    decide_after_tools,
)
from tool_calling.core.chat.memory import ChatMemory
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    ToolResponse,
    UserMessage,
)
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.execution.eligibility import DefaultToolExecutionEligibilityPredicate
from tool_calling.core.execution.plan import PlannedCall, ToolCallPlan, ToolOutcome
from tool_calling.core.execution.result import ToolExecutionResult
from tool_calling.exceptions import ToolCallingError, ToolCallLimitExceededException
from tool_calling.governance import (
    GovernedTurn,
    _assistant_message_id,
    claim_conversation,
    default_chat_model,
    governed_turn,
    memory_advisor,
    release_conversation,
    renew_conversation_claim,
)
from tool_calling.repositories import DjangoChatMemoryRepository, message_from_row
from tool_calling.signals import send_on_commit

__all__ = [
    "RunQueueError",
    "advance_run",
    "cancel_run",
    "retry_run",
    "start_turn",
    "sweep_runs",
    "tool_call_finished",
]

logger = logging.getLogger("tool_calling.runs")

_ACTIVE = models.RUN_ACTIVE_STATUSES


class RunQueueError(ToolCallingError):
    """The run's step could not be sent to the broker; the run is saved and marked failed."""

    def __init__(self, run: models.Run) -> None:
        super().__init__(run.error)
        self.run = run
        """The failed run: ``retry_run(error.run)`` queues it again."""


# -- events -------------------------------------------------------------------------------------


def _event(run_id: uuid.UUID, kind: str, data: dict[str, Any] | None = None) -> None:
    """Append an event; the UPDATE of the run's counter orders concurrent appends.

    Once it commits, the run's event streams are told (``_notify.run_event``).
    """
    with transaction.atomic():
        models.Run.objects.filter(pk=run_id).update(event_count=F("event_count") + 1)
        sequence = models.Run.objects.filter(pk=run_id).values_list("event_count", flat=True).get()
        models.RunEvent.objects.create(run_id=run_id, sequence=sequence, kind=kind, data=data or {})
        transaction.on_commit(lambda: _notify.run_event(run_id, sequence))


# -- starting, cancelling, retrying -------------------------------------------------------------


def start_turn(
    conversation: models.Conversation,
    text: str,
    *,
    user: Any = None,
    tool_names: list[str] | None = None,
) -> models.Run:
    """Store ``text`` as the user's message and queue the turn that answers it.

    The run holds the conversation until it ends (a second turn meanwhile raises
    ``ConversationBusyError``). The first step is sent once the transaction commits.

    Args:
        conversation: Where the turn happens.
        text: The user's message.
        user: Whose tools and permissions the turn runs with.
        tool_names: Offer only these of the user's tools.

    Returns:
        The run (``queued``; already further along when Celery runs eagerly).

    Raises:
        ConversationBusyError: another turn holds the conversation.
        RunQueueError: the broker did not take the first step (called outside a transaction);
            the message and the run are saved, the run is ``failed`` and ``retry_run`` queues
            it again.
    """
    token = claim_conversation(conversation.pk)
    try:
        with transaction.atomic():
            DjangoChatMemoryRepository().add(str(conversation.pk), [UserMessage(text)])
            message = models.Message.objects.filter(conversation=conversation).latest("sequence")
            run = models.Run.objects.create(
                conversation=conversation,
                user=user if getattr(user, "is_authenticated", False) else None,
                text=text,
                user_message=message,
                tool_names=tool_names,
                turn_token=token,
            )
            _event(run.pk, "queued", {"message": message.sequence})
            run_id = run.pk
            transaction.on_commit(lambda: _publish(run_id))
    except BaseException:
        release_conversation(conversation.pk, token)
        raise
    run.refresh_from_db()
    if run.status == models.RunStatus.FAILED and run.started_at is None:
        raise RunQueueError(run)
    return run


def cancel_run(run: models.Run, *, user: Any = None) -> bool:
    """Ask the run to stop; its next step marks it ``cancelled``. False if it already ended.

    Calls still waiting for approval are denied (the run was cancelled), so the run does not
    wait for a decision nobody needs any more.
    """
    asked = models.Run.objects.filter(pk=run.pk, status__in=_ACTIVE, cancel_requested=False).update(
        cancel_requested=True
    )
    if asked:
        _event(run.pk, "cancel_requested")
        from tool_calling.approvals import deny_pending_for_run

        deny_pending_for_run(run.pk, user=user, reason="The run was cancelled.")
    return bool(asked)


def retry_run(run: models.Run) -> models.Run:
    """Queue a failed run again; it continues from what the database holds.

    Raises:
        ValueError: the run did not fail.
        ConversationBusyError: another turn holds the conversation now.
        RunQueueError: the broker is still unavailable.
    """
    run.refresh_from_db()
    if run.status != models.RunStatus.FAILED:
        raise ValueError(f"Run {run.pk} is {run.status}; only failed runs can be retried.")
    token = claim_conversation(run.conversation_id)
    reset = models.Run.objects.filter(pk=run.pk, status=models.RunStatus.FAILED).update(
        status=models.RunStatus.QUEUED,
        error="",
        finished_at=None,
        turn_token=token,
        started_at=None,
        step_lease_expires_at=None,
    )
    if not reset:
        release_conversation(run.conversation_id, token)
        raise ValueError(f"Run {run.pk} was retried meanwhile.")
    _event(run.pk, "retried")
    transaction.on_commit(lambda: _publish(run.pk))
    run.refresh_from_db()
    if run.status == models.RunStatus.FAILED and run.started_at is None:
        raise RunQueueError(run)
    return run


def _publish(run_id: uuid.UUID) -> bool:
    """Send a step of the run; a broker failure fails a run that has not started."""
    from tool_calling.tasks import run_step as run_step_task

    try:
        run_step_task.apply_async(args=[str(run_id)], queue=str(app_settings.EXECUTION["QUEUE"]))
    except Exception as exc:
        logger.exception("Could not send a step of run %s to the broker", run_id)
        text = (
            f"The turn could not be queued: the message broker is unavailable "
            f"({type(exc).__name__}). The message and the run are saved; retry the run."
        )
        failed = models.Run.objects.filter(
            pk=run_id, status=models.RunStatus.QUEUED, started_at=None
        ).update(status=models.RunStatus.FAILED, error=text, finished_at=timezone.now())
        if failed:
            _event(run_id, "failed", {"error": text})
            _release(run_id)
        return False
    return True


def _release(run_id: uuid.UUID) -> None:
    row = models.Run.objects.filter(pk=run_id).values("conversation_id", "turn_token").first()
    if row is not None:
        release_conversation(row["conversation_id"], row["turn_token"])


# -- the steps ----------------------------------------------------------------------------------


def _lease() -> datetime.timedelta:
    """How long a step may go without renewing its hold (a heartbeat renews it as it works)."""
    return datetime.timedelta(seconds=int(app_settings.EXECUTION["LEASE_SECONDS"]))


def _step_heartbeat(run_id: uuid.UUID, step: int) -> Heartbeat:
    """Renews the step's lease while it works (a model call may take minutes).

    Only a lease the step still holds: once the step lets go (its calls run on workers, and
    the step after them may start any moment), the heartbeat stops.
    """
    lease = _lease()

    def renew() -> bool:
        return bool(
            models.Run.objects.filter(pk=run_id, step=step)
            .exclude(step_lease_expires_at=None)
            .update(step_lease_expires_at=timezone.now() + lease)
        )

    return Heartbeat(f"tool-calling-step-{run_id}-{step}", lease, renew)


def _claim_step(run_id: uuid.UUID) -> int | None:
    """Hold the run for one step; ``None`` when it ended or another step holds it."""
    now = timezone.now()
    for _ in range(3):
        row = models.Run.objects.filter(pk=run_id).values("status", "step").first()
        if row is None or row["status"] not in _ACTIVE:
            return None
        claimed = (
            models.Run.objects.filter(pk=run_id, step=row["step"], status__in=_ACTIVE)
            .filter(Q(step_lease_expires_at=None) | Q(step_lease_expires_at__lt=now))
            .update(step=row["step"] + 1, step_lease_expires_at=now + _lease())
        )
        if claimed:
            return int(row["step"]) + 1
        if (
            models.Run.objects.filter(pk=run_id, step_lease_expires_at__gte=now)
            .exclude(step_lease_expires_at=None)
            .exists()
        ):
            return None
    return None


@dataclass
class _Step:
    """What one step works with (read again at every stage)."""

    run: models.Run
    step: int
    turn: GovernedTurn
    options: ToolCallingChatOptions
    messages: list[models.Message]
    """The turn's stored messages, from the user's on."""


def advance_run(run_id: uuid.UUID | str) -> None:
    """Advance run ``run_id`` as far as it goes without waiting (the task's body).

    Each stage is stored before the next starts; the step ends when the run ended or its tool
    calls are running on workers (their last one queues the next step).
    """
    run_id = uuid.UUID(str(run_id))
    step = _claim_step(run_id)
    if step is None:
        return
    heartbeat = _step_heartbeat(run_id, step)
    heartbeat.start()
    try:
        _advance(run_id, step)
    except Exception as exc:
        logger.exception("Step %s of run %s failed", step, run_id)
        _finish(
            run_id,
            models.RunStatus.FAILED,
            error=(
                f"Step {step} failed ({type(exc).__name__}); see the server log for run {run_id}."
            ),
        )
    finally:
        heartbeat.stop()
        models.Run.objects.filter(pk=run_id, step=step).update(step_lease_expires_at=None)


def _advance(run_id: uuid.UUID, step: int) -> None:
    started = models.Run.objects.filter(pk=run_id, status=models.RunStatus.QUEUED).update(
        status=models.RunStatus.RUNNING, started_at=timezone.now()
    )
    if started:
        _event(run_id, "running")
    while True:
        run = models.Run.objects.select_related("user", "user_message").get(pk=run_id)
        if run.status not in _ACTIVE or run.step != step:
            return
        if run.cancel_requested:
            _finish(run_id, models.RunStatus.CANCELLED)
            return
        models.Run.objects.filter(pk=run_id, step=step).update(
            step_lease_expires_at=timezone.now() + _lease()
        )
        renew_conversation_claim(run.conversation_id, run.turn_token)
        state = _state(run, step)
        last = state.messages[-1]
        if last.role in (models.MessageRole.USER, models.MessageRole.TOOL):
            _model_round(state, last)
        elif last.role == models.MessageRole.ASSISTANT and not last.tool_calls:
            _finish(run_id, models.RunStatus.SUCCEEDED, answer=last.text or "")
            return
        elif last.role == models.MessageRole.ASSISTANT:
            if run.plan.get("message") != last.pk:
                if not _decide_and_plan(state, last):
                    return
            elif not _complete(state, last):
                return
        else:
            raise ToolCallingError(f"Run {run_id}: cannot continue after a {last.role} message")


def _state(run: models.Run, step: int) -> _Step:
    turn = governed_turn(
        user=run.user,
        conversation_id=run.conversation_id,
        tool_names=run.tool_names,
        run_id=run.pk,
    )
    options = ToolCallingChatOptions(tool_callbacks=turn.callbacks, tool_context=turn.tool_context)
    start = run.user_message.sequence if run.user_message is not None else 0
    messages = list(
        models.Message.objects.filter(
            conversation_id=run.conversation_id, sequence__gte=start
        ).order_by("sequence")
    )
    if not messages:
        raise ToolCallingError(f"Run {run.pk}: the turn's user message is gone")
    return _Step(run, step, turn, options, messages)


def _model_round(state: _Step, last: models.Message) -> None:
    """Call the model through the memory advisor, which stores its message."""
    run = state.run
    rounds = 1 + sum(m.role == models.MessageRole.ASSISTANT for m in state.messages)
    models.Run.objects.filter(pk=run.pk).update(rounds=rounds)
    _event(run.pk, "model_call", {"round": rounds})
    model = default_chat_model()

    def call_model(request: ChatClientRequest) -> ChatClientResponse:
        return ChatClientResponse(model.call(request.prompt), request.context)

    def stream_model(request: ChatClientRequest) -> Any:
        return (
            ChatClientResponse(chunk, request.context) for chunk in model.stream(request.prompt)
        )

    # What the in-process loop sends with memory inside it: the last message; the memory
    # advisor puts the stored history before it and stores the model's message.
    request = ChatClientRequest(
        Prompt([message_from_row(last)], state.options),
        {ChatMemory.CONVERSATION_ID: str(run.conversation_id)},
    )
    chain = AdvisorChain([memory_advisor(run.conversation_id)], call_model, stream_model)
    response = _streamed(run.pk, rounds, chain.next_stream(request))
    generation = response.result if response is not None else None
    stored = models.Message.objects.filter(conversation_id=run.conversation_id).latest("sequence")
    if generation is None or stored.sequence == state.messages[-1].sequence:
        # Nothing was stored (an empty answer): the turn ends with it.
        _finish(
            run.pk,
            models.RunStatus.SUCCEEDED,
            answer=generation.output.text or "" if generation else "",
            finish_reason=(generation.finish_reason or "") if generation else "",
        )
        return
    models.Run.objects.filter(pk=run.pk).update(finish_reason=generation.finish_reason or "")
    _event(
        run.pk,
        "model_message",
        {
            "message": stored.sequence,
            "tool_calls": len(stored.tool_calls),
            # Token counts as the model reported them (None when it did not).
            "usage": response.metadata.get("usage") if response is not None else None,
        },
    )


_TEXT_FLUSH_SECONDS = 0.25
"""Streamed text is stored as ``text_delta`` events at most this often (one write per flush)."""


def _streamed(
    run_id: uuid.UUID, round_number: int, chunks: Iterator[ChatClientResponse]
) -> ChatResponse | None:
    """Consume the model's stream, recording its text as ``text_delta`` events; the whole.

    The memory advisor stores the aggregated message when the stream ends; clients following
    the run's events see the text as it comes (text written before tool calls included).
    """
    received: list[ChatResponse] = []
    pending: list[str] = []
    flushed = time.monotonic()

    def flush() -> None:
        nonlocal flushed
        if pending:
            _event(run_id, "text_delta", {"round": round_number, "text": "".join(pending)})
            pending.clear()
        flushed = time.monotonic()

    for chunk in chunks:
        response = chunk.chat_response
        if response is None:
            continue
        received.append(response)
        for generation in response.generations[:1]:
            if generation.output.text:
                pending.append(generation.output.text)
        if time.monotonic() - flushed >= _TEXT_FLUSH_SECONDS:
            flush()
    flush()
    return aggregate(received) if received else None


def _chat_response(message: models.Message) -> ChatResponse:
    assistant = message_from_row(message)
    assert isinstance(assistant, AssistantMessage)
    return ChatResponse([Generation(assistant)])


def _history(state: _Step, before: models.Message) -> list[Message]:
    return [message_from_row(m) for m in state.messages if m.sequence < before.sequence]


def _decide_and_plan(state: _Step, last: models.Message) -> bool:
    """Decide after the model's calls; plan, record and send them. True to go on now."""
    run = state.run
    chat_response = _chat_response(last)
    rounds = sum(m.role == models.MessageRole.ASSISTANT for m in state.messages)
    decision = decide_after_model(
        state.options,
        chat_response,
        rounds=rounds,
        max_tool_rounds=DEFAULT_MAX_TOOL_ROUNDS,
        eligibility=DefaultToolExecutionEligibilityPredicate(),
    )
    if decision == ANSWERED:
        _finish(run.pk, models.RunStatus.SUCCEEDED, answer=last.text or "")
        return False
    if isinstance(decision, LoopEnding):
        _end(run, decision)
        return False
    from tool_calling.execution import record_call
    from tool_calling.tasks import dispatch_on_commit

    manager = state.turn.manager
    prompt = Prompt(_history(state, last), state.options)
    token = _assistant_message_id.set(last.pk)
    try:
        with transaction.atomic():
            plan = manager.plan_tool_calls(prompt, chat_response)
            jobs = []
            gated = []
            offered = {cb.definition.name: cb for cb in state.turn.callbacks}
            for job in plan.jobs:
                index, call = job.index, job.call
                callback = offered[call.name]
                tool = manager.governed.rows.get(call.name)
                needs_approval = bool(tool is not None and tool.requires_approval) or bool(
                    callback.metadata.requires_approval
                )
                row = record_call(
                    call,
                    state.options.tool_context,
                    user=run.user,
                    conversation_id=run.conversation_id,
                    assistant_message_id=last.pk,
                    run_id=run.pk,
                    tool=tool,
                    needs_approval=needs_approval,
                )
                jobs.append([index, row.pk, job.return_direct])
                if needs_approval:
                    gated.append(row)
                else:
                    dispatch_on_commit(row.pk)
            stored_plan = {
                "message": last.pk,
                "responses": [_response_data(r) for r in plan.responses],
                "jobs": jobs,
                "breach": list(plan.breach) if plan.breach is not None else None,
                "strict": plan.strict,
            }
            waiting = bool(jobs)
            models.Run.objects.filter(pk=run.pk, step=state.step).update(
                plan=stored_plan,
                waiting_for=last if waiting else None,
                # The calls' tasks may end before this step returns (eager Celery, fast
                # workers): the step that follows them must be able to take the run.
                step_lease_expires_at=None if waiting else F("step_lease_expires_at"),
            )
            _event(
                run.pk,
                "tool_calls",
                {"message": last.sequence, "calls": [row[1] for row in jobs]},
            )
            if gated:
                models.Run.objects.filter(pk=run.pk, status=models.RunStatus.RUNNING).update(
                    status=models.RunStatus.AWAITING_APPROVAL
                )
                run.status = models.RunStatus.AWAITING_APPROVAL  # as receivers will see it
                for row in gated:
                    send_on_commit(
                        signals.approval_requested, models.ToolExecution, execution=row, run=run
                    )
                    _event(
                        run.pk,
                        "approval_needed",
                        {
                            "execution": row.pk,
                            "tool_call_id": row.tool_call_id,
                            "tool": row.tool_name,
                            "expires_at": (
                                row.approval_expires_at.isoformat()
                                if row.approval_expires_at
                                else None
                            ),
                        },
                    )
    finally:
        _assistant_message_id.reset(token)
    return not waiting


def _response_data(response: ToolResponse | None) -> dict[str, Any] | None:
    if response is None:
        return None
    return {
        "id": response.id,
        "name": response.name,
        "response_data": response.response_data,
        "is_error": response.is_error,
    }


_OUTCOME_FIELDS = ("id", "tool_name", "status", "result", "error_type", "payload")


def _complete(state: _Step, last: models.Message) -> bool:
    """Build the responses of a batch whose calls all ended. True to go on now."""
    from tool_calling.execution import outcome_of

    run = state.run
    stored = run.plan
    ids = [job[1] for job in stored["jobs"]]
    rows = {
        row["id"]: row
        for row in models.ToolExecution.objects.filter(pk__in=ids).values(*_OUTCOME_FIELDS)
    }
    if any(rows.get(i) is None or rows[i]["status"] not in models.TERMINAL_STATUSES for i in ids):
        # Calls still run: their last one queues the next step.
        models.Run.objects.filter(pk=run.pk, step=state.step).update(
            waiting_for=last, step_lease_expires_at=None
        )
        if all(
            s in models.TERMINAL_STATUSES
            for s in models.ToolExecution.objects.filter(pk__in=ids).values_list(
                "status", flat=True
            )
        ):
            _wake(run.pk, last.pk)
        return False
    assistant = message_from_row(last)
    assert isinstance(assistant, AssistantMessage)
    calls = assistant.tool_calls
    outcomes: list[ToolOutcome] = []
    jobs: list[PlannedCall] = []
    for index, execution_id, return_direct in stored["jobs"]:
        jobs.append(PlannedCall(index, calls[index], return_direct))
        try:
            outcomes.append(ToolOutcome.ok(outcome_of(rows[execution_id])))
        except Exception as exc:
            outcomes.append(ToolOutcome.from_exception(exc))
    plan = ToolCallPlan(
        assistant=assistant,
        responses=[
            ToolResponse(r["id"], r["name"], r["response_data"], r["is_error"]) if r else None
            for r in stored["responses"]
        ],
        jobs=jobs,
        breach=tuple(stored["breach"]) if stored["breach"] else None,  # type: ignore[arg-type]
        strict=bool(stored["strict"]),
    )
    outcome: ToolExecutionResult | ToolCallLimitExceededException
    try:
        outcome = state.turn.manager.complete_tool_calls(
            Prompt(_history(state, last), state.options), plan, outcomes
        )
    except ToolCallLimitExceededException as exc:
        outcome = exc
    ending = decide_after_tools(_chat_response(last), outcome)
    with transaction.atomic():
        # The exact texts may hold what the audit redacts: keep them no longer than needed.
        models.ToolExecution.objects.filter(pk__in=ids).update(payload={})
        if ending is not None:
            _end(run, ending)
            return False
        assert isinstance(outcome, ToolExecutionResult)
        message = outcome.conversation_history[-1]
        memory_advisor(run.conversation_id).chat_memory.add(str(run.conversation_id), [message])
        models.Run.objects.filter(pk=run.pk).update(plan={}, waiting_for=None)
        _event(run.pk, "tool_results", {"message": last.sequence + 1})
    return True


def _end(run: models.Run, ending: LoopEnding) -> None:
    """End the turn as the loop does: store its messages and the answer, in one transaction."""
    generation = ending.response.result
    with transaction.atomic():
        memory_advisor(run.conversation_id).chat_memory.add(
            str(run.conversation_id), ending.messages
        )
        _finish(
            run.pk,
            models.RunStatus.SUCCEEDED,
            answer=(generation.output.text or "") if generation else "",
            finish_reason=(generation.finish_reason or "") if generation else "",
        )


def _finish(
    run_id: uuid.UUID,
    status: str,
    *,
    answer: str | None = None,
    error: str = "",
    finish_reason: str | None = None,
) -> None:
    fields: dict[str, Any] = {
        "status": status,
        "error": error,
        "finished_at": timezone.now(),
        "waiting_for": None,
        "plan": {},
    }
    if answer is not None:
        fields["answer"] = answer
    if finish_reason is not None:
        fields["finish_reason"] = finish_reason
    with transaction.atomic():
        ended = models.Run.objects.filter(pk=run_id, status__in=_ACTIVE).update(**fields)
        if ended:
            data: dict[str, Any] = {"error": error} if error else {}
            if answer is not None:
                data["answer"] = answer
            _event(run_id, str(status), data)
    if ended:
        _release(run_id)


# -- waking a run up ----------------------------------------------------------------------------


def _wake(run_id: uuid.UUID, message_id: int) -> bool:
    """Queue the next step once, whoever notices first that the batch ended."""
    woken = models.Run.objects.filter(pk=run_id, waiting_for_id=message_id).update(waiting_for=None)
    if woken:
        transaction.on_commit(lambda: _publish(run_id))
    return bool(woken)


def tool_call_started(
    execution_id: int, *, run_id: uuid.UUID, tool_call_id: str, tool: str, attempt: int
) -> None:
    """Record the ``tool_call_started`` event of call ``execution_id`` of run ``run_id``."""
    _event(
        run_id,
        "tool_call_started",
        {"execution": execution_id, "tool_call_id": tool_call_id, "tool": tool, "attempt": attempt},
    )


def record_approval_event(
    execution_id: int, decision: str, *, user: Any = None, **data: Any
) -> None:
    """Record a decision on a gated call (``approved``, ``denied``, ``expired``) in its run."""
    row = (
        models.ToolExecution.objects.filter(pk=execution_id)
        .values("run_id", "tool_call_id", "tool_name")
        .first()
    )
    if row is None or row["run_id"] is None:
        return
    _event(
        row["run_id"],
        "approval_decided",
        {
            "execution": execution_id,
            "tool_call_id": row["tool_call_id"],
            "tool": row["tool_name"],
            "decision": decision,
            "by": getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None,
            **data,
        },
    )


def approvals_decided(run_id: uuid.UUID) -> None:
    """Back to ``running`` once no call of the run waits for a person any more."""
    waiting = models.ToolExecution.objects.filter(
        run_id=run_id, status=models.ExecutionStatus.AWAITING_APPROVAL
    ).exists()
    if not waiting:
        models.Run.objects.filter(pk=run_id, status=models.RunStatus.AWAITING_APPROVAL).update(
            status=models.RunStatus.RUNNING
        )


def tool_call_finished(execution_id: int, *, report: bool = True) -> None:
    """Queue the run's next step if ``execution_id`` was the last call of its batch to end.

    ``report`` records a ``tool_call_ended`` event (not for a redelivered task's check).
    """
    row = (
        models.ToolExecution.objects.filter(pk=execution_id)
        .values(
            "run_id",
            "assistant_message_id",
            "tool_call_id",
            "tool_name",
            "status",
            "duration_ms",
            "is_error",
        )
        .first()
    )
    if row is None or row["run_id"] is None or row["assistant_message_id"] is None:
        return
    if report and row["status"] in models.TERMINAL_STATUSES:
        _event(
            row["run_id"],
            "tool_call_ended",
            {
                "execution": execution_id,
                "tool_call_id": row["tool_call_id"],
                "tool": row["tool_name"],
                "status": row["status"],
                "is_error": row["is_error"],
                "duration_ms": row["duration_ms"],
            },
        )
    running = (
        models.ToolExecution.objects.filter(
            run_id=row["run_id"], assistant_message_id=row["assistant_message_id"]
        )
        .exclude(status__in=models.TERMINAL_STATUSES)
        .exists()
    )
    if not running:
        _wake(row["run_id"], row["assistant_message_id"])


def sweep_runs() -> int:
    """Queue a step for each active run no step holds or will be queued for (lost messages).

    Returns:
        How many steps were queued.
    """
    now = timezone.now()
    grace = now - _lease()
    count = 0
    idle = models.Run.objects.filter(status__in=_ACTIVE).filter(
        Q(step_lease_expires_at=None) | Q(step_lease_expires_at__lt=now)
    )
    for run_id, waiting_for, created in idle.values_list("pk", "waiting_for_id", "created_at")[
        :500
    ]:
        if waiting_for is None:
            if created < grace:
                count += _publish(run_id)
            continue
        running = (
            models.ToolExecution.objects.filter(run_id=run_id, assistant_message_id=waiting_for)
            .exclude(status__in=models.TERMINAL_STATUSES)
            .exists()
        )
        if not running and _wake(run_id, waiting_for):
            count += 1
    return count
