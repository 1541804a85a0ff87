"""The life of a ``ToolExecution`` row: the only code that writes one.

Every change of a call's status is one named transition below: one conditional UPDATE guarded
by the status it expects (and, where a worker holds the call, by its attempt), so two writers
never both win and a late writer changes nothing. ``TRANSITIONS`` is the table the code checks
(its tests write their own out, status by status)::

    transition     from                              to
    -------------  --------------------------------  ----------------------------------------
    (record)       -                                 pending | awaiting_approval | running |
                                                     refused | failed (bad arguments)
    claim          pending                           running (attempt + 1, lease)
    take_over      running, lease expired            running (attempt + 1, lease)
    renew          running (same attempt)            running (lease extended)
    retry          running (same attempt)            pending (again after a pause; the failed
                                                     attempt kept in ``attempts``)
    end_lease      running (same worker)             running (lease ends now: worker died)
    finish         running (same attempt)            succeeded | failed | refused | timed_out
    settle_lost    running (attempt), lease expired  unknown | failed
    kill           running (same worker)             timed_out (hard time limit)
    withdraw       pending                           timed_out (the caller gave up)
    confirm        awaiting_approval, unconfirmed    awaiting_approval (the user confirmed;
                                                     an approver decides next)
    approve        awaiting_approval                 pending
    deny           awaiting_approval                 denied

``succeeded``, ``failed``, ``refused``, ``timed_out``, ``unknown`` and ``denied`` are terminal.
A call that starts sends ``tool_calling.signals.tool_call_started``; one that ends sends
``tool_call_finished`` (both once the change committed), which is how durable runs learn that
their batch ended.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from tool_calling import models, signals
from tool_calling._prepared import update_rows
from tool_calling.audit import audit_text
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.context import PROGRESS_KEY
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError

__all__ = [
    "TRANSITIONS",
    "STANDING_REASON",
    "UNKNOWN_OUTCOME_TEXT",
    "CallRef",
    "approve",
    "arguments_digest",
    "claim",
    "confirm",
    "deny",
    "detach_from_runs",
    "end_lease",
    "finish",
    "kill",
    "lease",
    "mark_dispatched",
    "mark_undispatched",
    "purge_payloads",
    "record_for_worker",
    "record_refused",
    "record_started",
    "renew",
    "retry",
    "settle_lost",
    "withdraw",
]

logger = logging.getLogger("tool_calling.calls")

S = models.ExecutionStatus

TRANSITIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "claim": (frozenset({S.PENDING}), frozenset({S.RUNNING})),
    "take_over": (frozenset({S.RUNNING}), frozenset({S.RUNNING})),
    "renew": (frozenset({S.RUNNING}), frozenset({S.RUNNING})),
    "retry": (frozenset({S.RUNNING}), frozenset({S.PENDING})),
    "end_lease": (frozenset({S.RUNNING}), frozenset({S.RUNNING})),
    "finish": (
        frozenset({S.RUNNING}),
        frozenset({S.SUCCEEDED, S.FAILED, S.REFUSED, S.TIMED_OUT}),
    ),
    "settle_lost": (frozenset({S.RUNNING}), frozenset({S.OUTCOME_UNKNOWN, S.FAILED})),
    "kill": (frozenset({S.RUNNING}), frozenset({S.TIMED_OUT})),
    "withdraw": (frozenset({S.PENDING}), frozenset({S.TIMED_OUT})),
    "confirm": (frozenset({S.AWAITING_APPROVAL}), frozenset({S.AWAITING_APPROVAL})),
    "approve": (frozenset({S.AWAITING_APPROVAL}), frozenset({S.PENDING})),
    "deny": (frozenset({S.AWAITING_APPROVAL}), frozenset({S.DENIED})),
}
"""Transition name -> (statuses it starts from, statuses it may end in)."""

STANDING_REASON = "Covered by a standing decision of this conversation."
"""The decision reason recorded on a call a standing decision let through without asking."""


def arguments_digest(text: str) -> str:
    """SHA-256 of a call's exact arguments: what an approval is bound to."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


UNKNOWN_OUTCOME_TEXT = (
    "The outcome of this call is unknown: the worker running it stopped mid-call, and the tool "
    "is not idempotent, so it was not run again."
)
"""What the model is told about a call of a non-idempotent tool whose worker died."""


@dataclass(frozen=True)
class CallRef:
    """What the signals of a call carry: enough for receivers never to read the row."""

    execution_id: int
    """The ``ToolExecution`` row."""
    tool_name: str
    """The tool the model called."""
    tool_call_id: str = ""
    """The model's id of the call."""
    run_id: Any = None
    """The durable run that made the call, if any."""
    assistant_message_id: int | None = None
    """The stored assistant message that asked for the call."""
    attempt: int = 0
    """The attempt this reference acts for (0: not started)."""

    @classmethod
    def of(
        cls, row: Mapping[str, Any] | models.ToolExecution, attempt: int | None = None
    ) -> CallRef:
        """The reference of a row: an instance, or a ``values(*REF_FIELDS)`` dict."""
        values: Mapping[str, Any] = (
            row if isinstance(row, Mapping) else {f: getattr(row, f) for f in REF_FIELDS}
        )
        return cls(
            int(values["id"]),
            str(values["tool_name"]),
            str(values.get("tool_call_id") or ""),
            values.get("run_id"),
            values.get("assistant_message_id"),
            int(values["attempt"] if attempt is None else attempt),
        )


REF_FIELDS = ("id", "tool_name", "tool_call_id", "run_id", "assistant_message_id", "attempt")
"""The ``values()`` fields :meth:`CallRef.of` reads."""


def lease() -> datetime.timedelta:
    """How long a worker's hold on a call lasts without renewal (``EXECUTION["LEASE_SECONDS"]``)."""
    return datetime.timedelta(seconds=int(app_settings.EXECUTION["LEASE_SECONDS"]))


def _starts(name: str, to: str | None) -> Any:
    """The states transition ``name`` starts from; it must be able to end in ``to``."""
    starts, ends = TRANSITIONS[name]
    if to is not None and to not in ends:
        raise ToolCallingError(f"Transition {name!r} cannot end in status {str(to)!r}.")
    return starts


def _guarded(name: str, execution_id: int, to: str | None = None) -> QuerySet[models.ToolExecution]:
    return models.ToolExecution.objects.filter(pk=execution_id, status__in=_starts(name, to))


def _guarded_update(name: str, ref: CallRef, to: str, values: dict[str, Any], **where: Any) -> int:
    """Transition ``name`` of attempt ``ref.attempt`` as one UPDATE whose SQL is written once.

    The same guard as :func:`_guarded` plus the attempt (and ``where``): for the transitions
    every call makes.
    """
    starts = _starts(name, to)
    guard = {"pk": ref.execution_id, "status": tuple(starts), "attempt": ref.attempt}
    if "status" in where:  # a narrower start than the transition allows
        start = where.pop("status")
        if start not in starts:
            return 0
        guard["status"] = (start,)
    return update_rows(models.ToolExecution, {**guard, **where}, values)


def _started(ref: CallRef) -> None:
    signals.send_on_commit(
        signals.tool_call_started,
        models.ToolExecution,
        execution_id=ref.execution_id,
        run_id=ref.run_id,
        tool_call_id=ref.tool_call_id,
        tool_name=ref.tool_name,
        attempt=ref.attempt,
    )


def _finished(ref: CallRef, status: str, *, is_error: bool, duration_ms: int | None) -> None:
    signals.send_on_commit(
        signals.tool_call_finished,
        models.ToolExecution,
        execution_id=ref.execution_id,
        run_id=ref.run_id,
        assistant_message_id=ref.assistant_message_id,
        tool_call_id=ref.tool_call_id,
        tool_name=ref.tool_name,
        status=status,
        is_error=is_error,
        duration_ms=duration_ms,
        attempt=ref.attempt,
    )


def _outcome_payload(outcome: ToolOutcome) -> dict[str, Any]:
    return {"outcome": outcome.to_json()}


# -- recording ----------------------------------------------------------------------------------


def _json_context(tool_context: Mapping[str, Any], tool_name: str) -> dict[str, Any]:
    # A progress reporter talks to the requesting client from this process; a worker has no
    # way back to it, so the call runs there without progress.
    context = {key: value for key, value in tool_context.items() if key != PROGRESS_KEY}
    try:
        json.dumps(context)
    except (TypeError, ValueError) as exc:
        raise ToolCallingError(
            f"Tool {tool_name!r} runs on a Celery worker, so its tool context must be JSON: "
            f"{exc}. Pass ids (user_id, tenant_id) rather than objects."
        ) from exc
    return context


def _user(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


def _create(
    tool_call: ToolCall,
    *,
    tool: models.Tool | None,
    user: Any,
    conversation_id: Any,
    assistant_message_id: int | None,
    run_id: Any,
    **fields: Any,
) -> models.ToolExecution:
    """Insert the row of a call: what every call records, then ``fields``."""
    name = tool_call.name
    return models.ToolExecution.objects.create(
        conversation_id=conversation_id,
        run_id=run_id,
        assistant_message_id=assistant_message_id,
        tool_call_id=tool_call.id[:200],
        tool=tool,
        tool_name=name[:200],
        arguments=audit_text(tool_call.arguments, tool_name=name, field="arguments"),
        user=_user(user),
        idempotent=bool(tool is not None and tool.idempotent),
        **fields,
    )


def _audited_values(value: Any, tool_name: str) -> Any:
    """Augmented values as the audit keeps them: each text redacted and capped like arguments."""
    if isinstance(value, str):
        return audit_text(value, tool_name=tool_name, field="arguments")
    if isinstance(value, Mapping):
        return {str(k): _audited_values(v, tool_name) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_audited_values(v, tool_name) for v in value]
    return value


def record_for_worker(
    tool_call: ToolCall,
    tool_context: Mapping[str, Any],
    *,
    tool: models.Tool | None,
    user: Any = None,
    conversation_id: Any = None,
    assistant_message_id: int | None = None,
    run_id: Any = None,
    needs_approval: bool = False,
    deciders: str = "",
    definition_sha256: str = "",
    decision_basis: str = "",
    standing: models.StandingDecision | None = None,
    augmented: Mapping[str, Any] | None = None,
    sent: bool = True,
) -> models.ToolExecution:
    """Record a call for a Celery worker: ``pending`` (or ``awaiting_approval``), with its data.

    The row holds the exact arguments and tool context the worker runs with (``payload``); the
    caller sends it with ``calls.dispatch.dispatch_on_commit``, or (``sent`` False) runs it
    itself as a worker would: then it is recorded as never sent, so that the sweeper sends it
    if the caller dies before it claimed the call. A call that needs approval
    waits until a person approves it (``calls.approvals``), or expires after
    ``APPROVALS["EXPIRE_AFTER"]`` seconds. ``tool_call`` carries the tool's own arguments;
    ``augmented`` the values argument augmentation split from them (``augmentation``).
    ``deciders`` says who decides a call that waits (``models.Deciders``; an approver when
    blank), ``definition_sha256`` and ``decision_basis`` what its decision will be bound to. A
    call a ``standing`` decision of its conversation covers is recorded approved, by whoever
    made that decision, for exactly these arguments.

    Raises:
        ToolCallingError: the tool context is not JSON.
    """
    name = tool_call.name
    execution = app_settings.EXECUTION
    timeout = int(tool.timeout if tool is not None and tool.timeout else execution["TIMEOUT"])
    arguments = tool_call.arguments
    expires = None
    if needs_approval and app_settings.APPROVALS["EXPIRE_AFTER"] is not None:
        seconds = int(app_settings.APPROVALS["EXPIRE_AFTER"])
        expires = timezone.now() + datetime.timedelta(seconds=seconds)
    decided: dict[str, Any] = {}
    if standing is not None and not needs_approval:
        text = arguments if arguments and not arguments.isspace() else "{}"
        decided = {
            "approval": models.ApprovalDecision.APPROVED,
            "deciders": standing.stage,
            "decided_by_id": standing.created_by_id,
            "decided_at": timezone.now(),
            "decision_reason": STANDING_REASON,
            "approved_arguments_sha256": arguments_digest(text),
        }
    return _create(
        tool_call,
        tool=tool,
        user=user,
        conversation_id=conversation_id,
        assistant_message_id=assistant_message_id,
        run_id=run_id,
        augmented_arguments=_audited_values(augmented or {}, name),
        definition_sha256=definition_sha256,
        decision_basis=decision_basis,
        status=S.AWAITING_APPROVAL if needs_approval else S.PENDING,
        **{
            "approval": (
                models.ApprovalDecision.PENDING
                if needs_approval
                else models.ApprovalDecision.NOT_REQUIRED
            ),
            "deciders": deciders or models.Deciders.APPROVER,
            **decided,
        },
        approval_expires_at=expires,
        # Sent once committed (calls.dispatch): marked now, cleared if the publish fails.
        dispatched_at=timezone.now() if sent and not needs_approval else None,
        mode=models.ExecutionMode.CELERY,
        queue=(tool.queue if tool is not None and tool.queue else "") or str(execution["QUEUE"]),
        timeout=timeout,
        payload={
            "arguments": arguments if arguments and not arguments.isspace() else "{}",
            "context": _json_context(tool_context, name),
        },
    )


def record_started(
    tool_call: ToolCall,
    *,
    tool: models.Tool | None,
    user: Any = None,
    conversation_id: Any = None,
    assistant_message_id: int | None = None,
    run_id: Any = None,
    augmented: Mapping[str, Any] | None = None,
    decided: Mapping[str, Any] | None = None,
) -> CallRef:
    """Record an in-process call as ``running`` (attempt 1) just before it runs.

    ``augmented``: the values argument augmentation split from the call's arguments;
    ``decided``: the decision the call ran under, as :func:`confirmed_fields` records it.
    """
    row = _create(
        tool_call,
        tool=tool,
        user=user,
        conversation_id=conversation_id,
        assistant_message_id=assistant_message_id,
        run_id=run_id,
        augmented_arguments=_audited_values(augmented or {}, tool_call.name),
        status=S.RUNNING,
        attempt=1,
        started_at=timezone.now(),
        **(decided or {}),
    )
    ref = CallRef(row.pk, row.tool_name, row.tool_call_id, run_id, assistant_message_id, 1)
    _started(ref)
    return ref


def confirmed_fields(
    user: Any, at: datetime.datetime, arguments_sha256: str, definition_sha256: str, basis: str
) -> dict[str, Any]:
    """The audit of a call only its user decides, confirmed by them when asked (over MCP).

    As a durable run records a confirmed call (approved, decided by the user, bound to the
    exact arguments, the definition and the rules), with ``confirmed_by`` and ``confirmed_at``.
    """
    who = _user(user)
    return {
        "approval": models.ApprovalDecision.APPROVED,
        "deciders": models.Deciders.USER,
        "decided_by": who,
        "decided_at": at,
        "confirmed_by": who,
        "confirmed_at": at,
        "approved_arguments_sha256": arguments_sha256,
        "definition_sha256": definition_sha256,
        "decision_basis": basis,
    }


def record_declined(
    tool_call: ToolCall,
    text: str,
    *,
    tool: models.Tool | None,
    user: Any,
    definition_sha256: str,
    basis: str,
    conversation_id: Any = None,
    assistant_message_id: int | None = None,
    run_id: Any = None,
) -> CallRef:
    """Record a call its user declined when asked (over MCP): ``denied`` by them, never run.

    As a durable run records a call its user declined; ``text`` is what the caller was told.
    """
    now = timezone.now()
    row = _create(
        tool_call,
        tool=tool,
        user=user,
        conversation_id=conversation_id,
        assistant_message_id=assistant_message_id,
        run_id=run_id,
        status=S.DENIED,
        approval=models.ApprovalDecision.DENIED,
        deciders=models.Deciders.USER,
        decided_by=_user(user),
        decided_at=now,
        definition_sha256=definition_sha256,
        decision_basis=basis,
        result=audit_text(text, tool_name=tool_call.name, field="result"),
        is_error=True,
        started_at=now,
        finished_at=now,
        duration_ms=0,
    )
    ref = CallRef(row.pk, row.tool_name, row.tool_call_id, run_id, assistant_message_id, 0)
    _finished(ref, S.DENIED, is_error=True, duration_ms=0)
    return ref


def record_refused(
    tool_call: ToolCall,
    text: str,
    *,
    tool: models.Tool | None,
    user: Any = None,
    conversation_id: Any = None,
    assistant_message_id: int | None = None,
    run_id: Any = None,
    outcome: ToolOutcome | None = None,
    keep: bool = False,
) -> CallRef:
    """Record a call answered without running: an unknown or withdrawn tool, a limit, a rule.

    A refusal is ``refused``; arguments that fail the tool's schema (``outcome`` holds the
    ``ToolArgumentsError``) are the call's own failure, ``failed``. With ``keep`` (a durable
    run's plan reads it back) the exact outcome goes to the working data.
    """
    now = timezone.now()
    invalid = outcome is not None and outcome.is_a(ToolArgumentsError)
    status = S.FAILED if invalid else S.REFUSED
    row = _create(
        tool_call,
        tool=tool,
        user=user,
        conversation_id=conversation_id,
        assistant_message_id=assistant_message_id,
        run_id=run_id,
        status=status,
        result=audit_text(text, tool_name=tool_call.name, field="result"),
        error_type=outcome.error_type[:200] if outcome is not None else "",
        is_error=True,
        started_at=now,
        finished_at=now,
        duration_ms=0,
        payload=_outcome_payload(outcome) if keep and outcome is not None else {},
    )
    ref = CallRef(row.pk, row.tool_name, row.tool_call_id, run_id, assistant_message_id, 0)
    _finished(ref, status, is_error=True, duration_ms=0)
    return ref


# -- a worker's hold on a call ------------------------------------------------------------------


def claim(ref: CallRef, status: str, *, task_id: str, worker: str) -> CallRef | None:
    """Start attempt ``ref.attempt + 1`` of a call found ``status``; ``None`` if another did.

    ``claim`` (a ``pending`` call) or ``take_over`` (a ``running`` call whose lease expired:
    its worker died). Returns the reference of the new attempt.
    """
    now = timezone.now()
    name = "take_over" if status == S.RUNNING else "claim"
    attempt = ref.attempt + 1
    values = {
        "status": S.RUNNING,
        "attempt": attempt,
        "lease_expires_at": now + lease(),
        "task_id": task_id[:255],
        "worker": worker[:255],
        "started_at": now,
    }
    if name == "claim":  # every call's: the UPDATE written once
        claimed = _guarded_update(name, ref, S.RUNNING, values, status=status)
    else:
        rows = _guarded(name, ref.execution_id, S.RUNNING).filter(
            status=status, attempt=ref.attempt
        )
        rows = rows.filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at=None))
        claimed = rows.update(**values)
    if not claimed:
        return None
    started = CallRef(
        ref.execution_id,
        ref.tool_name,
        ref.tool_call_id,
        ref.run_id,
        ref.assistant_message_id,
        attempt,
    )
    _started(started)
    return started


def renew(ref: CallRef) -> bool:
    """Extend the lease of attempt ``ref.attempt``; False once another attempt took over."""
    return bool(
        _guarded("renew", ref.execution_id)
        .filter(attempt=ref.attempt)
        .update(lease_expires_at=timezone.now() + lease())
    )


def end_lease(execution_id: int, worker: str) -> bool:
    """End the lease of a call whose worker process died, so it is taken over at once."""
    return bool(
        _guarded("end_lease", execution_id)
        .filter(worker=worker[:255])
        .update(lease_expires_at=timezone.now())
    )


def retry(
    ref: CallRef,
    outcome: ToolOutcome,
    *,
    earlier: list[dict[str, Any]],
    duration_ms: int,
    pause: float,
) -> list[dict[str, Any]] | None:
    """Make a call whose attempt ``ref.attempt`` failed transiently ``pending`` again (R6).

    The failed attempt joins ``earlier`` in the audit (``attempts``); the call is due again in
    ``pause`` seconds (``dispatched_at``, the sweeper's clock, is set to then). The caller sends
    it (with that countdown) or, in-process, claims it again itself. Returns the attempts now
    recorded; ``None`` when the attempt no longer holds the call.
    """
    now = timezone.now()
    started = now - datetime.timedelta(milliseconds=duration_ms)
    attempts = [
        *earlier,
        retry_record(ref, outcome, started=started, duration_ms=duration_ms, pause=pause),
    ]
    retried = (
        _guarded("retry", ref.execution_id, S.PENDING)
        .filter(attempt=ref.attempt)
        .update(
            status=S.PENDING,
            attempts=attempts,
            lease_expires_at=None,
            dispatched_at=now + datetime.timedelta(seconds=pause),
        )
    )
    return attempts if retried else None


def retry_record(
    ref: CallRef,
    outcome: ToolOutcome,
    *,
    started: datetime.datetime,
    duration_ms: int,
    pause: float,
) -> dict[str, Any]:
    """One failed attempt as the audit keeps it: its message (redacted), not its traceback."""
    return {
        "attempt": ref.attempt,
        "started_at": started.isoformat(),
        "duration_ms": duration_ms,
        "error_type": outcome.error_type,
        "error": audit_text(outcome.text[:2000], tool_name=ref.tool_name, field="error"),
        "retry_after_s": round(pause, 3),
    }


def finish(
    ref: CallRef,
    status: str,
    outcome: ToolOutcome,
    *,
    duration_ms: int,
    keep: bool = True,
    error_id: str = "",
) -> bool:
    """End attempt ``ref.attempt`` with ``outcome``; False when it no longer holds the call.

    The audit gets the redacted, capped texts (and ``error_id``, the id the model was given for
    an unexpected error); with ``keep`` (a call on a worker) the working data gets the exact
    outcome, for the caller waiting on it (the sweeper drops it later), unless the audited
    result already is the exact text of a success. A late result of an
    attempt that was fenced off changes nothing.
    """
    name = ref.tool_name
    is_error = status != S.SUCCEEDED
    result = audit_text(outcome.text, tool_name=name, field="result")
    extra: dict[str, Any] = {}
    if keep:
        # A success whose audited text is exact needs no working data: the caller reads the
        # result column, and has nothing to purge.
        exact = outcome.kind is ToolOutcomeKind.OK and not outcome.error_type
        extra["payload"] = {} if exact and result == outcome.text else _outcome_payload(outcome)
    values = {
        "status": status,
        "result": result,
        "error": audit_text(outcome.traceback, tool_name=name, field="error"),
        "error_type": outcome.error_type[:200],
        "error_id": error_id,
        "is_error": is_error,
        "finished_at": timezone.now(),
        "duration_ms": duration_ms,
        "lease_expires_at": None,
        **extra,
    }
    written = _guarded_update("finish", ref, status, values)
    if written:
        _finished(ref, status, is_error=is_error, duration_ms=duration_ms)
    else:
        logger.warning(
            "Discarded the late result (%s) of attempt %s of tool call %s (%r): another attempt "
            "took the call over, or it was settled, meanwhile",
            status,
            ref.attempt,
            ref.execution_id,
            name,
        )
    return bool(written)


def settle_lost(ref: CallRef, *, idempotent: bool) -> bool | None:
    """End a call whose worker died, when it may not run again.

    Returns True when it ended it (``unknown`` for a tool that is not idempotent, ``failed``
    when the idempotent call used its ``MAX_ATTEMPTS``), False when another writer changed the
    call first, and ``None`` when the call may run again (the caller takes it over).
    """
    if not idempotent:
        status, text = S.OUTCOME_UNKNOWN, UNKNOWN_OUTCOME_TEXT
        outcome = ToolOutcome(ToolOutcomeKind.UNKNOWN, text)
    elif ref.attempt >= int(app_settings.EXECUTION["MAX_ATTEMPTS"]):
        status = S.FAILED
        text = (
            f"Tool {ref.tool_name!r} failed: the worker running it stopped mid-call "
            f"{ref.attempt} times, so it was not run again."
        )
        outcome = ToolOutcome.failure(text)
    else:
        return None
    now = timezone.now()
    settled = (
        _guarded("settle_lost", ref.execution_id, status)
        .filter(attempt=ref.attempt)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at=None))
        .update(
            status=status,
            result=audit_text(text, tool_name=ref.tool_name, field="result"),
            is_error=True,
            finished_at=now,
            payload=_outcome_payload(outcome),
        )
    )
    if settled:
        logger.warning(
            "Tool call %s (%r): the worker of attempt %s stopped mid-call; ended %s",
            ref.execution_id,
            ref.tool_name,
            ref.attempt,
            status,
        )
        _finished(ref, status, is_error=True, duration_ms=None)
    return bool(settled)


def kill(execution_id: int, worker: str, text: str) -> bool:
    """End a call its worker killed at the hard time limit as ``timed_out``."""
    row = _guarded("kill", execution_id).filter(worker=worker[:255]).values(*REF_FIELDS).first()
    if row is None:
        return False
    ref = CallRef.of(row)
    outcome = ToolOutcome(ToolOutcomeKind.TIMEOUT, text)
    killed = (
        _guarded("kill", execution_id, S.TIMED_OUT)
        .filter(worker=worker[:255], attempt=ref.attempt)
        .update(
            status=S.TIMED_OUT,
            result=audit_text(text, tool_name=ref.tool_name, field="result"),
            is_error=True,
            finished_at=timezone.now(),
            lease_expires_at=None,
            payload=_outcome_payload(outcome),
        )
    )
    if killed:
        _finished(ref, S.TIMED_OUT, is_error=True, duration_ms=None)
    return bool(killed)


def withdraw(ref: CallRef, text: str) -> bool:
    """End a call no worker started before its caller gave up: it will never run now.

    The caller, the only reader of the call's working data, knows the text: the data goes.
    """
    withdrawn = _guarded("withdraw", ref.execution_id, S.TIMED_OUT).update(
        status=S.TIMED_OUT,
        result=audit_text(text, tool_name=ref.tool_name, field="result"),
        is_error=True,
        finished_at=timezone.now(),
        payload={},
    )
    if withdrawn:
        _finished(ref, S.TIMED_OUT, is_error=True, duration_ms=None)
    return bool(withdrawn)


# -- decisions ----------------------------------------------------------------------------------


def confirm(execution_id: int, **fields: Any) -> bool:
    """Record the user's confirmation of a call an approver decides next (who, when, edits)."""
    guarded = _guarded("confirm", execution_id, S.AWAITING_APPROVAL).filter(
        confirmed_at__isnull=True
    )
    return bool(guarded.update(**fields))


def approve(execution_id: int, **fields: Any) -> bool:
    """Approve a waiting call (``fields``: who, when, the approved digest, edited arguments)."""
    return bool(_guarded("approve", execution_id, S.PENDING).update(status=S.PENDING, **fields))


def deny(ref: CallRef, text: str, *, expired: bool, user: Any, reason: str) -> bool:
    """Deny a waiting call (a person did, or nobody approved in time); the model gets ``text``."""
    now = timezone.now()
    outcome = ToolOutcome.failure(text)
    denied = _guarded("deny", ref.execution_id, S.DENIED).update(
        status=S.DENIED,
        approval=models.ApprovalDecision.EXPIRED if expired else models.ApprovalDecision.DENIED,
        decided_by=_user(user),
        decided_at=now,
        decision_reason=reason,
        result=text,
        is_error=True,
        finished_at=now,
        duration_ms=0,
        payload=_outcome_payload(outcome),
    )
    if denied:
        _finished(ref, S.DENIED, is_error=True, duration_ms=0)
    return bool(denied)


# -- bookkeeping that changes no status ---------------------------------------------------------


def mark_dispatched(execution_ids: list[int]) -> None:
    """Record that the calls were (re-)sent to the broker now (the sweeper's clock)."""
    models.ToolExecution.objects.filter(pk__in=execution_ids, status=S.PENDING).update(
        dispatched_at=timezone.now()
    )


def mark_undispatched(execution_id: int) -> None:
    """Record that sending the call failed: the sweeper sends it again after a short grace."""
    models.ToolExecution.objects.filter(pk=execution_id, status=S.PENDING).update(
        dispatched_at=None
    )


def detach_from_runs(run_ids: list[Any]) -> int:
    """Unlink the audit rows of runs about to be deleted, in one UPDATE.

    What the foreign key's SET_NULL does; the calls' audit stays until its own retention.
    """
    return models.ToolExecution.objects.filter(run__in=run_ids).update(run=None)


def purge_payloads(rows: QuerySet[models.ToolExecution]) -> int:
    """Drop the exact working data (not redacted) of finished calls nobody waits for."""
    return rows.filter(status__in=models.TERMINAL_STATUSES).exclude(payload={}).update(payload={})
