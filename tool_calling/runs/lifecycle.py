"""The life of a ``Run`` row: the only code that writes one (its events: ``runs.events``).

Every status change is one named transition: a conditional UPDATE guarded by the statuses it
expects. ``TRANSITIONS`` is the table the code checks (its tests write their own out, status by
status)::

    transition     from                                   to
    -------------  -------------------------------------  --------------------------
    (start_turn)   -                                      queued
    begin          queued                                 running
    wait           running                                awaiting_approval
    resume         awaiting_approval                      running
    succeed        queued | running | awaiting_approval   succeeded
    fail           queued | running | awaiting_approval   failed
    cancel         queued | running | awaiting_approval   cancelled
    retry          failed                                 queued

``succeeded``, ``failed`` and ``cancelled`` are terminal: the run then lets its conversation go.
Besides its status, a run holds a step lease (one step at a time, taken over when its worker
died) and the plan of the batch its calls are running for.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

from django.db import transaction
from django.db.models import Case, Exists, F, Q, QuerySet, Value, When
from django.utils import timezone

from tool_calling import _celery, models, signals
from tool_calling._lease import Heartbeat
from tool_calling.calls.approvals import deny_pending_for_run
from tool_calling.calls.dispatch import send_run_step
from tool_calling.conf import settings as app_settings
from tool_calling.conversations import claim_conversation, release_conversation
from tool_calling.core.chat.messages import UserMessage
from tool_calling.exceptions import ToolCallingError
from tool_calling.repositories import DjangoChatMemoryRepository
from tool_calling.runs import events

__all__ = [
    "TRANSITIONS",
    "CeleryUnavailableError",
    "RunQueueError",
    "begin",
    "cancel_run",
    "claim_step",
    "finish",
    "keep_waiting",
    "answered_batch",
    "lease",
    "model_answered",
    "model_called",
    "publish",
    "release_step",
    "renew_step",
    "resume",
    "retry_run",
    "start_turn",
    "step_heartbeat",
    "store_plan",
    "trace_saver",
    "wait",
    "wait_for_calls",
    "wake",
]

logger = logging.getLogger("tool_calling.runs")

R = models.RunStatus
_ACTIVE = frozenset(models.RUN_ACTIVE_STATUSES)

TRANSITIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "begin": (frozenset({R.QUEUED}), frozenset({R.RUNNING})),
    "wait": (frozenset({R.RUNNING}), frozenset({R.AWAITING_APPROVAL})),
    "resume": (frozenset({R.AWAITING_APPROVAL}), frozenset({R.RUNNING})),
    "succeed": (_ACTIVE, frozenset({R.SUCCEEDED})),
    "fail": (_ACTIVE, frozenset({R.FAILED})),
    "cancel": (_ACTIVE, frozenset({R.CANCELLED})),
    "retry": (frozenset({R.FAILED}), frozenset({R.QUEUED})),
}
"""Transition name -> (statuses it starts from, the status it ends in)."""

_ENDINGS: dict[str, str] = {R.SUCCEEDED: "succeed", R.FAILED: "fail", R.CANCELLED: "cancel"}


class RunQueueError(ToolCallingError):
    """The run's step could not be sent to the broker; the run is saved and marked failed."""

    def __init__(self, run: models.Run) -> None:
        super().__init__(run.error)
        self.run = run
        """The failed run: ``retry_run(error.run)`` queues it again."""


class CeleryUnavailableError(ToolCallingError):
    """Runs cannot be sent to Celery here (not installed, no broker): nothing was saved.

    A configuration problem, not a broker that is down: ``manage.py check`` reports it too
    (``problem.check_id``), and retrying cannot help until the configuration changes.
    """

    def __init__(self, problem: _celery.CeleryProblem) -> None:
        super().__init__(f"Turns run as Celery tasks, and {problem.text}.")
        self.problem = problem
        """What is wrong, the check that reports it and what to do."""


def _require_celery() -> None:
    problem = _celery.problem()
    if problem is not None:
        raise CeleryUnavailableError(problem)


def _guarded(name: str, run_id: uuid.UUID) -> QuerySet[models.Run]:
    return models.Run.objects.filter(pk=run_id, status__in=TRANSITIONS[name][0])


def _to(name: str) -> str:
    (status,) = TRANSITIONS[name][1]
    return status


def lease() -> datetime.timedelta:
    """How long a step may go without renewing its hold (a heartbeat renews it as it works)."""
    return datetime.timedelta(seconds=int(app_settings.EXECUTION["LEASE_SECONDS"]))


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
        CeleryUnavailableError: Celery is not installed, or its app has no broker; nothing is
            saved.
        ConversationBusyError: another turn holds the conversation.
        RunQueueError: the broker did not take the first step (called outside a transaction);
            the message and the run are saved, the run is ``failed`` and ``retry_run`` queues
            it again.
    """
    _require_celery()
    # One transaction: the claim, the message, the run and its first event commit together (a
    # failure rolls the claim back too), and the write lock is taken once.
    with transaction.atomic():
        token = claim_conversation(conversation.pk)
        (message,) = DjangoChatMemoryRepository().append(conversation.pk, [UserMessage(text)])
        run = models.Run.objects.create(
            conversation=conversation,
            user=user if getattr(user, "is_authenticated", False) else None,
            text=text,
            user_message=message,
            tool_names=tool_names,
            turn_token=token,
        )
        events.append(run.pk, "queued", {"message": message.sequence})
        run_id = run.pk
        transaction.on_commit(lambda: publish(run_id))
    run.refresh_from_db()
    if run.status == R.FAILED and run.started_at is None:
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
        events.append(run.pk, "cancel_requested")
        deny_pending_for_run(run.pk, user=user, reason="The run was cancelled.")
    return bool(asked)


def retry_run(run: models.Run) -> models.Run:
    """Queue a failed run again; it continues from what the database holds.

    Raises:
        ValueError: the run did not fail.
        CeleryUnavailableError: Celery is not installed, or its app has no broker.
        ConversationBusyError: another turn holds the conversation now.
        RunQueueError: the broker is still unavailable.
    """
    run.refresh_from_db()
    if run.status != R.FAILED:
        raise ValueError(f"Run {run.pk} is {run.status}; only failed runs can be retried.")
    _require_celery()
    token = claim_conversation(run.conversation_id)
    reset = _guarded("retry", run.pk).update(
        status=_to("retry"),
        error="",
        finished_at=None,
        turn_token=token,
        started_at=None,
        step_lease_expires_at=None,
        # The failed attempt's turn was recorded when it failed: the retry is a turn of its own.
        trace_context="",
    )
    if not reset:
        release_conversation(run.conversation_id, token)
        raise ValueError(f"Run {run.pk} was retried meanwhile.")
    events.append(run.pk, "retried")
    transaction.on_commit(lambda: publish(run.pk))
    run.refresh_from_db()
    if run.status == R.FAILED and run.started_at is None:
        raise RunQueueError(run)
    return run


def publish(run_id: uuid.UUID) -> bool:
    """Send a step of the run; a broker failure fails a run that has not started."""
    try:
        send_run_step(run_id)
    except Exception as exc:
        logger.exception("Could not send a step of run %s to the broker", run_id)
        text = (
            f"The turn could not be queued: the message broker is unavailable "
            f"({type(exc).__name__}). The message and the run are saved; retry the run."
        )
        failed = (
            _guarded("fail", run_id)
            .filter(status=R.QUEUED, started_at=None)
            .update(status=_to("fail"), error=text, finished_at=timezone.now())
        )
        if failed:
            conversation_id = _release(run_id)
            events.append(run_id, "failed", {"error": text})
            _announce(run_id, conversation_id, R.FAILED, "", text)
        return False
    return True


def _release(run_id: uuid.UUID) -> Any:
    """Let the run's conversation go; return the conversation's id."""
    row = models.Run.objects.filter(pk=run_id).values("conversation_id", "turn_token").first()
    if row is None:
        return None
    release_conversation(row["conversation_id"], row["turn_token"])
    return row["conversation_id"]


def _announce(
    run_id: uuid.UUID, conversation_id: Any, status: str, finish_reason: str, error: str
) -> None:
    """Send ``turn_finished`` once the ending commits (receivers see the ended run)."""
    signals.send_on_commit(
        signals.turn_finished,
        models.Run,
        conversation_id=conversation_id,
        run_id=run_id,
        status=str(status),
        finish_reason=finish_reason,
        error=error,
    )


# -- status ------------------------------------------------------------------------------------


def begin(run_id: uuid.UUID) -> bool:
    """``queued`` -> ``running`` (the first step started); records the ``running`` event."""
    started = _guarded("begin", run_id).update(status=_to("begin"), started_at=timezone.now())
    if started:
        events.append(run_id, "running")
    return bool(started)


def wait(run_id: uuid.UUID) -> bool:
    """``running`` -> ``awaiting_approval``: a call of the batch waits for a person."""
    return bool(_guarded("wait", run_id).update(status=_to("wait")))


def resume(run_id: uuid.UUID) -> bool:
    """``awaiting_approval`` -> ``running`` once no call of the run waits for a person."""
    waiting = models.ToolExecution.objects.filter(
        run_id=run_id, status=models.ExecutionStatus.AWAITING_APPROVAL
    )
    return bool(_guarded("resume", run_id).filter(~Exists(waiting)).update(status=_to("resume")))


def finish(
    run_id: uuid.UUID,
    status: str,
    *,
    answer: str | None = None,
    error: str = "",
    finish_reason: str | None = None,
    claim: tuple[uuid.UUID, str] | None = None,
) -> bool:
    """End an active run (``succeeded``, ``failed`` or ``cancelled``) and let its conversation go.

    Records the ending as an event (with the answer or the error). False if it had ended. A
    failed run keeps its batch's plan, so that ``retry_run`` never runs a recorded call twice.
    ``claim`` is the run's ``(conversation_id, turn_token)`` when the caller has them.
    """
    fields: dict[str, Any] = {
        "status": status,
        "error": error,
        "finished_at": timezone.now(),
        "waiting_for": None,
    }
    if status != R.FAILED:
        # A failed run keeps the plan of its batch: retried, it completes the calls it recorded
        # instead of planning (and running) them again.
        fields["plan"] = {}
    if answer is not None:
        fields["answer"] = answer
    if finish_reason is not None:
        fields["finish_reason"] = finish_reason
    with transaction.atomic():
        ended = _guarded(_ENDINGS[status], run_id).update(**fields)
        if ended:
            # Free before the ending is visible: a client that reads it may send the next turn.
            if claim is not None:
                release_conversation(*claim)
                conversation_id = claim[0]
            else:
                conversation_id = _release(run_id)
            data: dict[str, Any] = {"error": error} if error else {}
            if answer is not None:
                data["answer"] = answer
            events.append(run_id, str(status), data)
            _announce(run_id, conversation_id, status, finish_reason or "", error)
    return bool(ended)


# -- steps -------------------------------------------------------------------------------------


def claim_step(run_id: uuid.UUID) -> int | None:
    """Hold the run for one step and return its number; ``None`` if it ended or is held.

    The first step also begins the run (``queued`` -> ``running``, in the same UPDATE), and
    records the ``running`` event.
    """
    now = timezone.now()
    for _ in range(3):
        row = models.Run.objects.filter(pk=run_id).values("status", "step").first()
        if row is None or row["status"] not in _ACTIVE:
            return None
        fields: dict[str, Any] = {"step": row["step"] + 1, "step_lease_expires_at": now + lease()}
        begins = row["status"] in TRANSITIONS["begin"][0]
        if begins:
            fields.update(status=_to("begin"), started_at=now)
        claimed = (
            models.Run.objects.filter(pk=run_id, step=row["step"], status=row["status"])
            .filter(Q(step_lease_expires_at=None) | Q(step_lease_expires_at__lt=now))
            .update(**fields)
        )
        if claimed:
            if begins:
                events.append(run_id, "running")
            return int(row["step"]) + 1
        if (
            models.Run.objects.filter(pk=run_id, step_lease_expires_at__gte=now)
            .exclude(step_lease_expires_at=None)
            .exists()
        ):
            return None
    return None


def renew_step(run_id: uuid.UUID, step: int) -> bool:
    """Extend the lease of ``step``; False once it let go (or another step took over)."""
    return bool(
        models.Run.objects.filter(pk=run_id, step=step)
        .exclude(step_lease_expires_at=None)
        .update(step_lease_expires_at=timezone.now() + lease())
    )


def release_step(run_id: uuid.UUID, step: int) -> None:
    """Let go of ``step``'s hold: the next step may start at once."""
    models.Run.objects.filter(pk=run_id, step=step).update(step_lease_expires_at=None)


def step_heartbeat(run_id: uuid.UUID, step: int) -> Heartbeat:
    """Renews the step's lease while it works (a model call may take minutes).

    Only a lease the step still holds: once the step lets go (its calls run on workers, and
    the step after them may start any moment), the heartbeat stops.
    """
    return Heartbeat(
        f"tool-calling-step-{run_id}-{step}", lease(), lambda: renew_step(run_id, step)
    )


def wait_for_calls(run_id: uuid.UUID, step: int, plan: dict[str, Any], message_id: int) -> None:
    """Store the batch's ``plan`` and let go of the step: the batch's last call wakes the run.

    The calls may end before this step returns (eager Celery, fast workers): the step that
    follows them must be able to take the run.
    """
    models.Run.objects.filter(pk=run_id, step=step).update(
        plan=plan, waiting_for_id=message_id, step_lease_expires_at=None
    )


def keep_waiting(run_id: uuid.UUID, step: int, message_id: int) -> None:
    """The batch's calls still run: let go of the step until the last one wakes the run."""
    models.Run.objects.filter(pk=run_id, step=step).update(
        waiting_for_id=message_id, step_lease_expires_at=None
    )


def wake(run_id: uuid.UUID, message_id: int) -> bool:
    """Queue the next step once, whoever notices first that the batch ended.

    A run that waited for approvals is ``running`` again (``resume``): none of its calls waits
    any more, the batch ended.
    """
    resumed = Case(
        When(status__in=TRANSITIONS["resume"][0], then=Value(_to("resume"))),
        default=F("status"),
    )
    woken = models.Run.objects.filter(pk=run_id, waiting_for_id=message_id).update(
        waiting_for=None, status=resumed
    )
    if woken:
        transaction.on_commit(lambda: publish(run_id))
    return bool(woken)


def store_plan(run_id: uuid.UUID, step: int, plan: dict[str, Any]) -> None:
    """Store the plan of a batch that waits for no call (every call ended in the step)."""
    models.Run.objects.filter(pk=run_id, step=step).update(plan=plan)


def answered_batch(run_id: uuid.UUID, message: int) -> None:
    """The batch's responses are stored (as message ``message``): its plan goes, with the event."""
    events.append(run_id, "tool_results", {"message": message}, batch_answered=True)


# -- what a step records of its model calls ----------------------------------------------------


def model_called(run_id: uuid.UUID, rounds: int) -> None:
    """A model call of the turn starts: its round number, counted on the run and as an event."""
    events.append(run_id, "model_call", {"round": rounds}, rounds=rounds)


def model_answered(run_id: uuid.UUID, data: dict[str, Any], finish_reason: str) -> None:
    """The model's message is stored: the event, and the finish reason on the run."""
    events.append(run_id, "model_message", data, finish_reason=finish_reason)


def trace_saver(run_id: uuid.UUID) -> Any:
    """Stores the turn's trace context once, when the first step opens the turn's span."""
    return lambda text: models.Run.objects.filter(pk=run_id, trace_context="").update(
        trace_context=text
    )
