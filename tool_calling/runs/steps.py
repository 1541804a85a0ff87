"""The steps of a durable run: what ``tool_calling.run_step`` does each time it is delivered.

A step reads the run's messages from the database and does what they call for next::

    last message of the turn         the step
    user message / tool responses    calls the model (memory stores its message)
    assistant message with calls     decides as the in-process loop does: plans the calls,
                                     records them and sends them to workers, then returns;
                                     or ends the turn (round limit)
    ... whose calls all ended        builds the responses (complete_tool_calls), ends the turn
                                     (return-direct, limit) or stores them and goes on
    assistant answer                 the run succeeded

No step waits for a task: the last tool call of a batch to end queues the next step
(``runs.receivers``). The decisions are the in-process loop's own (``decide_after_model``,
``decide_after_tools``, ``plan_tool_calls``, ``complete_tool_calls``), and memory is the
memory advisor of governed turns, so limits, return-direct and memory behave as in
``governed_chat_client``. A step holds a lease on the run; a step redelivered after its worker
died takes over once the lease expired and continues from the database, never running a
finished tool again.

With tool search (``TOOL_SEARCH``), each model call is offered what the in-process loop
offers (the search advisor's ``initialize_loop`` then ``before_call``, the finds read back from
the database), and a ``tool_search`` call runs in the step itself, audited, while the batch's
other calls go to workers. Augmented calls (``ARGUMENT_AUGMENTATION``) are sent with the tool's
own arguments; their values are stored on the call's row.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from tool_calling import models, observability, signals
from tool_calling._connections import give_back
from tool_calling.calls import deadlines, gate, worker
from tool_calling.calls import lifecycle as calls
from tool_calling.calls.dispatch import Dispatch, dispatch_on_commit
from tool_calling.calls.executors import outcome_of
from tool_calling.calls.inline import run_search_call
from tool_calling.conf import settings as app_settings
from tool_calling.conversations import TurnLog, memory_advisor
from tool_calling.core.chat._stream import aggregate
from tool_calling.core.chat.advisors.base import AdvisorChain, ChatClientRequest, ChatClientResponse
from tool_calling.core.chat.advisors.tool_calling import (
    ANSWERED,
    LoopEnding,
    decide_after_model,
    decide_after_tools,
)
from tool_calling.core.chat.memory import ChatMemory
from tool_calling.core.chat.messages import AssistantMessage, Message, ToolCall
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.execution.eligibility import DefaultToolExecutionEligibilityPredicate
from tool_calling.core.execution.plan import ToolCallPlan
from tool_calling.core.execution.result import ToolExecutionResult
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolCallingError, ToolCallLimitExceededException
from tool_calling.governance import GovernedTurn, chat_model, governed_turn
from tool_calling.repositories import message_from_row
from tool_calling.runs import events, lifecycle
from tool_calling.search import is_search_call

__all__ = ["advance_run"]

logger = logging.getLogger("tool_calling.runs")

R = models.RunStatus

_TEXT_FLUSH_SECONDS = 0.25
"""Streamed text is stored as ``text_delta`` events at most this often (one write per flush)."""

_OUTCOME_FIELDS = ("id", "tool_name", "status", "result", "payload", "error_id")


@dataclass
class _Step:
    """What one step works with (read again at every stage)."""

    run: models.Run
    step: int
    turn: GovernedTurn
    options: ToolCallingChatOptions
    log: TurnLog
    messages: list[models.Message]
    """The turn's stored messages, from the user's on."""
    search: ChatClientRequest | None = None
    """With tool search: the request the search advisor set up for this step's turn."""
    offered: ToolCallingChatOptions | None = None
    """The options the model was called with in this step (what its calls may run)."""


def advance_run(run_id: uuid.UUID | str) -> None:
    """Advance run ``run_id`` as far as it goes without waiting (the task's body).

    Each stage is stored before the next starts; the step ends when the run ended or its tool
    calls are running on workers (their last one queues the next step).
    """
    run_id = uuid.UUID(str(run_id))
    step = lifecycle.claim_step(run_id)
    if step is None:
        return
    heartbeat = lifecycle.step_heartbeat(run_id, step)
    heartbeat.start()
    try:
        with observability.run_step(run_id, step):
            _advance(run_id, step)
    except Exception as exc:
        logger.exception("Step %s of run %s failed", step, run_id)
        lifecycle.finish(
            run_id,
            R.FAILED,
            error=(
                f"Step {step} failed ({type(exc).__name__}); see the server log for run {run_id}."
            ),
        )
    finally:
        heartbeat.stop()
        lifecycle.release_step(run_id, step)


def _advance(run_id: uuid.UUID, step: int) -> None:
    state: _Step | None = None
    while True:
        # Read again at every stage: a cancel request, or another step that took over.
        run = models.Run.objects.select_related("user", "user_message").get(pk=run_id)
        if run.status not in models.RUN_ACTIVE_STATUSES or run.step != step:
            return
        claim = (run.conversation_id, run.turn_token)
        if run.cancel_requested:
            lifecycle.finish(run_id, R.CANCELLED, claim=claim)
            return
        if state is None:
            # The tools and the turn's messages are read once a step; what the step stores is
            # added as it goes (the run holds the conversation: nobody else writes to it).
            state = _state(run, step)
            # One trace per turn: join the turn's span (the first step opens and stores it).
            observability.resume_turn(
                run.trace_context, run.conversation_id, lifecycle.trace_saver(run_id)
            )
        else:
            state.run = run
            state.messages.extend(state.log.take_stored())
        last = state.messages[-1]
        if last.role in (models.MessageRole.USER, models.MessageRole.TOOL):
            _model_round(state, last)
        elif last.role == models.MessageRole.ASSISTANT and not last.tool_calls:
            lifecycle.finish(run_id, R.SUCCEEDED, answer=last.text or "", claim=claim)
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
    log = TurnLog(run.conversation_id)
    turn = governed_turn(
        user=run.user,
        conversation_id=run.conversation_id,
        tool_names=run.tool_names,
        run_id=run.pk,
        log=log,
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
    log.observe(messages)
    return _Step(run, step, turn, options, log, messages)


def _no_model(request: ChatClientRequest) -> ChatClientResponse:
    raise ToolCallingError("The search advisor's hooks never call the model.")


def _no_stream(request: ChatClientRequest) -> Iterator[ChatClientResponse]:
    raise ToolCallingError("The search advisor's hooks never call the model.")


def _offered(state: _Step) -> ToolCallingChatOptions:
    """The tools offered to the model now, as the in-process loop offers them.

    All of them; with tool search, the search tool, the pinned tools and what the conversation
    found so far (read from the store, so a step on another worker sees it).
    """
    advisor = state.turn.search
    if advisor is None:
        return state.options
    chain = AdvisorChain([], _no_model, _no_stream)
    if state.search is None:
        setup = ChatClientRequest(
            Prompt([], state.options),
            {ChatMemory.CONVERSATION_ID: str(state.run.conversation_id)},
        )
        state.search = advisor.initialize_loop(setup, chain)
    options = advisor.before_call(state.search, chain).prompt.options
    assert isinstance(options, ToolCallingChatOptions)
    return options


def _model_round(state: _Step, last: models.Message) -> None:
    """Call the model through the memory advisor, which stores its message."""
    run = state.run
    rounds = 1 + sum(m.role == models.MessageRole.ASSISTANT for m in state.messages)
    lifecycle.model_called(run.pk, rounds)
    model = chat_model()

    def call_model(request: ChatClientRequest) -> ChatClientResponse:
        give_back()  # no database connection held while the model thinks
        return ChatClientResponse(model.call(request.prompt), request.context)

    def stream_model(request: ChatClientRequest) -> Any:
        give_back()  # no database connection held while the model thinks
        return (
            ChatClientResponse(chunk, request.context) for chunk in model.stream(request.prompt)
        )

    # What the in-process loop sends with memory inside it: the last message; the memory
    # advisor puts the stored history before it and stores the model's message.
    state.offered = _offered(state)
    request = ChatClientRequest(
        Prompt([message_from_row(last)], state.offered),
        {ChatMemory.CONVERSATION_ID: str(run.conversation_id)},
    )
    advisors = [memory_advisor(state.log), *observability.chat_advisors(model)]
    chain = AdvisorChain(advisors, call_model, stream_model)
    response = _streamed(run.pk, rounds, chain.next_stream(request))
    generation = response.result if response is not None else None
    stored = state.log.last_sequence
    if generation is None or stored is None:
        # Nothing was stored (an empty answer): the turn ends with it.
        lifecycle.finish(
            run.pk,
            R.SUCCEEDED,
            answer=generation.output.text or "" if generation else "",
            finish_reason=(generation.finish_reason or "") if generation else "",
            claim=(run.conversation_id, run.turn_token),
        )
        return
    lifecycle.model_answered(
        run.pk,
        {
            "message": stored,
            "tool_calls": len(generation.output.tool_calls),
            # Token counts as the model reported them (None when it did not).
            "usage": response.metadata.get("usage") if response is not None else None,
        },
        generation.finish_reason or "",
    )


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
            events.append(run_id, "text_delta", {"round": round_number, "text": "".join(pending)})
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
    # Only the tools the model was offered may run (with tool search, fewer than all).
    options = state.offered if state.offered is not None else _offered(state)
    state.offered = None  # a search of this batch changes what the next call offers
    decision = decide_after_model(
        options,
        chat_response,
        rounds=rounds,
        max_tool_rounds=int(app_settings.LIMITS["MAX_TOOL_ROUNDS"]),
        eligibility=DefaultToolExecutionEligibilityPredicate(),
    )
    if decision == ANSWERED:
        lifecycle.finish(
            run.pk,
            R.SUCCEEDED,
            answer=last.text or "",
            claim=(run.conversation_id, run.turn_token),
        )
        return False
    if isinstance(decision, LoopEnding):
        _end(state, decision)
        return False
    manager = state.turn.manager
    prompt = Prompt(_history(state, last), options)
    offered = {cb.definition.name: cb for cb in options.tool_callbacks}
    context = state.options.tool_context
    scope: dict[str, Any] = {
        "user": run.user,
        "conversation_id": run.conversation_id,
        "assistant_message_id": last.pk,
        "run_id": run.pk,
    }
    with transaction.atomic():
        plan = manager.plan_tool_calls(prompt, chat_response)
        executions: list[int] = []
        gated: list[models.ToolExecution] = []
        pending: list[tuple[models.Tool | None, gate.Verdict]] = []
        for job in plan.jobs:
            call = job.call
            tool = manager.governed.rows.get(call.name)
            # What the call was offered as, or what the resolver found (the fallback planned it).
            callback = offered.get(call.name)
            if callback is None and manager.resolver is not None:
                callback = manager.resolver.resolve(call.name)
            if callback is None:
                raise ToolCallingError(f"Run {run.pk}: no tool for planned call {call.id!r}")
            if callback is not None and is_search_call(callback):
                # It searches the turn's tools: here, now; its row ends before the batch's.
                ref, _ = run_search_call(callback, call, ToolContext(context), keep=True, **scope)
                executions.append(ref.execution_id)
                continue
            verdict = _planned(state, call, callback)
            if verdict.refused_by is not None:
                # Refused before anything was queued (bad arguments, withdrawn, forbidden).
                assert verdict.outcome is not None
                ref = calls.record_refused(
                    call, verdict.text, tool=tool, outcome=verdict.outcome, keep=True, **scope
                )
                executions.append(ref.execution_id)
                continue
            executions.append(0)  # its row's id, once recorded below
            pending.append((tool, verdict))
        here = _runs_here(pending)
        rows: list[models.ToolExecution] = []
        for tool, verdict in pending:
            row = calls.record_for_worker(
                # The worker runs the plain registered tool: it gets the tool's own arguments.
                verdict.call,
                context,
                tool=tool,
                user=run.user,
                conversation_id=run.conversation_id,
                assistant_message_id=last.pk,
                run_id=run.pk,
                needs_approval=verdict.awaits_approval,
                deciders=verdict.deciders,
                definition_sha256=verdict.rules.schema_hash if verdict.rules else "",
                decision_basis=verdict.basis,
                standing=verdict.standing,
                augmented=verdict.augmented,
                sent=not here,
            )
            executions[executions.index(0)] = row.pk
            rows.append(row)
            if verdict.awaits_approval:
                gated.append(row)
            elif not here:
                dispatch_on_commit(Dispatch.of(row))
        # Calls that ended here (a search, rejected arguments) or that this step runs itself
        # need no worker to wake the run.
        waiting = bool(rows) and not here
        stored = {"message": last.pk, "plan": plan.to_json(), "executions": executions}
        if waiting:
            lifecycle.wait_for_calls(run.pk, state.step, stored, last.pk)
        else:
            lifecycle.store_plan(run.pk, state.step, stored)
        events.append(run.pk, "tool_calls", {"message": last.sequence, "calls": executions})
        if gated:
            lifecycle.wait(run.pk)
            run.status = R.AWAITING_APPROVAL  # as receivers will see it
            for row in gated:
                signals.send_on_commit(
                    signals.approval_requested, models.ToolExecution, execution=row, run=run
                )
                events.append(
                    run.pk,
                    "approval_needed",
                    {
                        "execution": row.pk,
                        "tool_call_id": row.tool_call_id,
                        "tool": row.tool_name,
                        # Whose decision it waits for: the user's confirmation, or an approver.
                        "stage": "user" if row.deciders != models.Deciders.APPROVER else "approver",
                        "expires_at": (
                            row.approval_expires_at.isoformat() if row.approval_expires_at else None
                        ),
                    },
                )
    if here:
        _run_here_now(rows)
    return not waiting


def _runs_here(pending: list[tuple[models.Tool | None, gate.Verdict]]) -> bool:
    """Whether this step runs the batch's calls itself rather than sending them to workers.

    On a worker pool where Celery enforces no time limits (threads: this process enforces each
    call's own, ``calls.deadlines``), a call whose tool runs on the step's own queue would only
    travel to a thread like this one: the step runs it, sparing two tasks (the call's and the
    step that follows it) and the next step's reading of the turn again. Calls that wait for a
    person, or go to another queue (a prefork queue for CPU-heavy tools, a tool's own), are sent
    as before, and then so is the whole batch: one way to wait per batch.
    """
    if not pending or not deadlines.needed():
        return False
    own = str(app_settings.EXECUTION["QUEUE"])
    return all(
        not verdict.awaits_approval and (tool is None or not tool.queue or tool.queue == own)
        for tool, verdict in pending
    )


def _run_here_now(rows: list[models.ToolExecution]) -> None:
    """Run the batch's calls in this process as a worker runs each (claimed, leased, audited).

    The step keeps the run meanwhile (its heartbeat renews the lease), so nobody else takes it.
    If this process dies, the run's lease and the calls' expire: the sweeper settles or sends
    the calls and queues a step, as for calls lost with their worker.
    """
    name = worker.worker_name(None, os.getpid())

    def run(execution_id: int) -> None:
        try:
            worker.execute(execution_id, task_id="", worker=name)
        finally:
            give_back()

    if len(rows) == 1:
        run(rows[0].pk)
        return
    threads = [
        threading.Thread(
            target=contextvars.copy_context().run,
            args=(run, row.pk),
            name=f"tool-call-in-step {row.pk}",
            daemon=True,
        )
        for row in rows
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _planned(state: _Step, call: ToolCall, callback: ToolCallback) -> gate.Verdict:
    """The gate's rules through the approval floor, for a call the run sends to a worker.

    Nothing is counted here: the worker asks the gate again, every rule, when the call runs.
    Availability is the step's snapshot's (no read per call).
    """
    governed = state.turn.manager.governed
    return gate.admit(
        gate.GateCall(
            call,
            callback,
            state.run.user,
            ToolContext(state.options.tool_context),
            can_wait=True,
            rules=governed.rules(call.name),
            through=gate.Rule.APPROVAL,
            conversation_id=state.run.conversation_id,
        )
    )


def _complete(state: _Step, last: models.Message) -> bool:
    """Build the responses of a batch whose calls all ended. True to go on now."""
    run = state.run
    stored = run.plan
    ids: list[int] = stored["executions"]
    rows = {
        row["id"]: row
        for row in models.ToolExecution.objects.filter(pk__in=ids).values(
            *_OUTCOME_FIELDS, "status"
        )
    }
    if any(rows.get(i) is None or rows[i]["status"] not in models.TERMINAL_STATUSES for i in ids):
        # Calls still run: their last one queues the next step.
        lifecycle.keep_waiting(run.pk, state.step, last.pk)
        if all(
            s in models.TERMINAL_STATUSES
            for s in models.ToolExecution.objects.filter(pk__in=ids).values_list(
                "status", flat=True
            )
        ):
            lifecycle.wake(run.pk, last.pk)
        return False
    plan = ToolCallPlan.from_json(stored["plan"])
    outcomes = [outcome_of(rows[i]) for i in ids]
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
        calls.purge_payloads(models.ToolExecution.objects.filter(pk__in=ids))
        if ending is not None:
            _end(state, ending)
            return False
        assert isinstance(outcome, ToolExecutionResult)
        state.log.add(str(run.conversation_id), [outcome.conversation_history[-1]])
        # The batch is done: its plan goes with the event that says so.
        lifecycle.answered_batch(run.pk, last.sequence + 1)
    return True


def _end(state: _Step, ending: LoopEnding) -> None:
    """End the turn as the loop does: store its messages and the answer, in one transaction."""
    run = state.run
    generation = ending.response.result
    with transaction.atomic():
        state.log.add(str(run.conversation_id), ending.messages)
        lifecycle.finish(
            run.pk,
            R.SUCCEEDED,
            answer=(generation.output.text or "") if generation else "",
            finish_reason=(generation.finish_reason or "") if generation else "",
            claim=(run.conversation_id, run.turn_token),
        )
