"""Approval gates: a person approves or denies a tool call before it runs.

A call of a tool that requires approval (the admin's flag, or ``@tool(requires_approval=True)``)
made in a background run is recorded ``AWAITING_APPROVAL`` and not sent to a worker; the run
waits (``awaiting_approval``). Then one of:

- :func:`approve` (optionally with edited arguments, validated against the tool's schema)
  sends the call to its worker, which runs it;
- :func:`deny` answers the call with an error response carrying the reason, which the model
  reads;
- the sweeper denies it once ``APPROVALS["EXPIRE_AFTER"]`` seconds passed
  (:func:`expire_approvals`).

Either way the run goes on when the batch's last call ended: a decision sends
``signals.approval_decided`` and a denial ends the call (``signals.tool_call_finished``), which
the run listens to. Every decision is a transition of ``calls.lifecycle`` (two approvers
clicking at once: one wins, the other gets :class:`ApprovalStateError`) and is recorded on the
row: who, when, why, and the model's original arguments when they were edited. Turns that
cannot wait (``manage.py chat``, in-process clients) refuse such calls instead
(``calls.gate.approval_refusal_text``).
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

from django.db import transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from tool_calling import models, signals
from tool_calling.audit import audit_text
from tool_calling.calls import gate, lifecycle
from tool_calling.calls.dispatch import Dispatch, dispatch_on_commit
from tool_calling.conf import settings as app_settings
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError
from tool_calling.resolvers import call_rules, installed_callback
from tool_calling.signals import send_on_commit

__all__ = [
    "APPROVE_PERMISSION",
    "ApprovalForbiddenError",
    "APPROVER",
    "ApprovalStateError",
    "DecisionVoidError",
    "USER",
    "approve",
    "can_decide",
    "deny",
    "deny_pending_for_run",
    "expire_approvals",
    "may_decide",
    "may_deny",
    "pending_approvals",
    "reviewable",
    "revoke_standing",
    "stage",
    "waiting",
]

logger = logging.getLogger("tool_calling.approvals")

APPROVE_PERMISSION = "tool_calling.approve_toolexecution"
"""The permission that lets a user approve and deny calls (superusers hold every permission)."""

MAX_REASON_CHARS = 2000
"""Longest denial reason kept (the model reads it)."""


class ApprovalStateError(ToolCallingError):
    """The call is not waiting for approval (any more): decided, expired, or never gated."""

    def __init__(self, execution: models.ToolExecution) -> None:
        # Read by people (the chat page shows it): what became of the call, no row ids.
        if execution.approval:
            became = str(execution.get_approval_display()).lower()
        else:
            became = str(execution.get_status_display()).lower()
        super().__init__(
            f"This call of {execution.tool_name!r} is not awaiting approval any more ({became})."
        )
        self.execution = execution


class ApprovalForbiddenError(ToolCallingError):
    """This user may not decide this call now (the message says why, in the user's words).

    The call is their own and self-approval is off, or it waits for the confirmation of the
    person whose turn it was and this is someone else.
    """

    def __init__(self, execution: models.ToolExecution, message: str | None = None) -> None:
        super().__init__(
            message
            or (
                f"You asked for this call of {execution.tool_name!r} yourself, so another "
                "person must approve it."
            )
        )
        self.execution = execution


class DecisionVoidError(ApprovalStateError):
    """The tool or the rules that asked for a decision changed while the call waited.

    The call is denied instead (the model is told to ask again).
    """

    def __init__(self, execution: models.ToolExecution) -> None:
        ToolCallingError.__init__(
            self,
            f"The tool {execution.tool_name!r} or the rules that asked for this decision changed "
            "since the call was asked for, so it was not made; if it is still needed, the "
            "assistant asks again and it is decided under the tool and rules as they are now.",
        )
        self.execution = execution


def void_text(name: str) -> str:
    """What the model reads of a call whose decision no longer matched the tool or the rules."""
    return (
        f"The call to tool {name!r} was not run: the tool or the rules that asked for a "
        "decision on it changed while it waited. Call it again if it is still needed."
    )


def _void(row: models.ToolExecution) -> bool:
    """Whether the decision a waiting call asks for was asked under another tool or rules."""
    if not row.definition_sha256 and not row.decision_basis:
        return False  # recorded before decisions were bound to them
    rules = call_rules(row.tool_name, row.user)
    if rules is None:
        return False  # withdrawn: the worker's gate refuses it for that reason
    if row.definition_sha256 and rules.schema_hash != row.definition_sha256:
        return True
    callback = installed_callback(row.tool_name)
    if callback is None or not row.decision_basis:
        return False
    arguments = str((row.payload or {}).get("arguments") or "{}")
    return gate.decision_rules(callback, arguments, rules)[1] != row.decision_basis


def _refuse_if_void(row: models.ToolExecution) -> None:
    """Deny a call whose decision is void (the model is told), then raise for the decider."""
    if _void(row):
        _deny(row.pk, user=None, reason="", text=void_text(row.tool_name))
        raise DecisionVoidError(row)


USER = "user"
""":func:`stage`: the call waits for the confirmation of the person whose turn it was."""
APPROVER = "approver"
""":func:`stage`: the call waits for an approver's approval."""


def stage(execution: models.ToolExecution) -> str:
    """Whose decision a waiting call waits for now: :data:`USER` or :data:`APPROVER`.

    A call the user confirms and an approver approves waits for the user first.
    """
    deciders = execution.deciders
    if deciders == models.Deciders.USER:
        return USER
    if deciders == models.Deciders.USER_THEN_APPROVER and execution.confirmed_at is None:
        return USER
    return APPROVER


def may_decide(user: Any, execution: models.ToolExecution) -> bool:
    """Whether ``user`` may approve (or confirm) ``execution`` at its current stage.

    The user's stage: only the person whose turn made the call. The approver's stage: a holder
    of ``APPROVE_PERMISSION``, and not for a call of their own turn unless
    ``APPROVALS["ALLOW_SELF_APPROVAL"]``.
    """
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    own = execution.user_id is not None and execution.user_id == user.pk
    if stage(execution) == USER:
        return own
    return can_decide(user) and (not own or bool(app_settings.APPROVALS["ALLOW_SELF_APPROVAL"]))


def may_deny(user: Any, execution: models.ToolExecution) -> bool:
    """Whether ``user`` may deny ``execution``.

    An approver may; so may the person whose turn made the call, while it waits for their
    confirmation (they decline it).
    """
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    if can_decide(user):
        return True
    own = execution.user_id is not None and execution.user_id == user.pk
    return own and stage(execution) == USER


def can_decide(user: Any) -> bool:
    """Whether ``user`` may approve and deny calls: an active holder of ``APPROVE_PERMISSION``.

    Being staff is not enough: staff operate the admin, approving is a decision of its own
    (superusers hold every permission, so they may). ``APPROVALS["ALLOW_SELF_APPROVAL"]``
    decides separately whether a call of one's own turn may be approved.
    """
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    return bool(user.has_perm(APPROVE_PERMISSION))


def reviewable(user: Any) -> Any:
    """The calls an approver may read, arguments included: every gated call, and their own.

    A gated call is one that needed a person's decision (awaiting, approved, denied, expired);
    their own are the calls of their conversations. Other users' ungated calls stay private:
    deciding needs none of them.
    """
    gated = ~Q(approval=models.ApprovalDecision.NOT_REQUIRED)
    return models.ToolExecution.objects.filter(gated | Q(conversation__owner=user.pk))


def pending_approvals() -> Any:
    """The calls waiting for a decision, oldest first (the approval queue)."""
    return models.ToolExecution.objects.filter(
        status=models.ExecutionStatus.AWAITING_APPROVAL
    ).order_by("created_at", "pk")


def waiting() -> tuple[int, float]:
    """How many calls wait for a decision now, and how many seconds the oldest has waited.

    Read by the approval gauges of ``tool_calling.observability`` (one aggregate query).
    """
    found = pending_approvals().order_by().aggregate(count=Count("pk"), oldest=Min("created_at"))
    oldest = found["oldest"]
    age = (timezone.now() - oldest).total_seconds() if oldest is not None else 0.0
    return int(found["count"]), max(0.0, age)


def denial_text(name: str, reason: str, *, expired: bool = False, by_user: bool = False) -> str:
    """What the model is told about a call a person denied (or nobody approved in time).

    ``by_user``: the person whose turn made the call declined it (rather than a reviewer).
    """
    if expired:
        return (
            f"The call to tool {name!r} was not run: it needed a person's approval and nobody "
            "approved it in time."
        )
    if by_user:
        text = f"The user declined the call to tool {name!r}; it was not run."
    else:
        text = f"The call to tool {name!r} was denied by a reviewer and was not run."
    return f"{text} Reason: {reason}" if reason else text


def validate_arguments(name: str, arguments: Any) -> str:
    """Return edited ``arguments`` as JSON text after checking them against the tool's schema.

    ``arguments`` is a JSON object (``dict``) or its text.

    Raises:
        ToolArgumentsError: not a JSON object, or it fails the schema (the message lists the
            fields).
        ToolCallingError: the tool is no longer installed.
    """
    if isinstance(arguments, dict):
        text = json.dumps(arguments, ensure_ascii=False)
    elif isinstance(arguments, str):
        text = arguments
    else:
        raise ToolArgumentsError(
            name,
            f"Arguments for tool {name!r} must be a JSON object, got {type(arguments).__name__}.",
        )
    if "\x00" in text or "\\u0000" in text:
        # PostgreSQL cannot store NUL in text or JSON: refused here, not a database error later.
        raise ToolArgumentsError(
            name, f"Arguments for tool {name!r} must not contain NUL characters (\\u0000)."
        )
    callback = installed_callback(name)
    if callback is None:
        raise ToolCallingError(f"Tool {name!r} is not installed; its calls cannot be approved.")
    # The tool's own check, the one its call makes (an MCP tool's: its JSON Schema).
    callback.validate_arguments(text)
    return text


arguments_digest = lifecycle.arguments_digest


def approved_as_recorded(row: models.ToolExecution) -> bool:
    """Whether ``row`` was approved and will run with exactly the arguments approved."""
    if row.approval != models.ApprovalDecision.APPROVED or not row.approved_arguments_sha256:
        return False
    text = (row.payload or {}).get("arguments")
    return isinstance(text, str) and arguments_digest(text) == row.approved_arguments_sha256


def _lock_waiting(execution: models.ToolExecution) -> models.ToolExecution:
    """The call's row, locked until the transaction ends, while it waits for a decision.

    Raises :class:`ApprovalStateError` when it no longer waits (decided meanwhile).
    """
    row = (
        models.ToolExecution.objects.select_for_update()
        .filter(pk=execution.pk, status=models.ExecutionStatus.AWAITING_APPROVAL)
        .first()
    )
    if row is None:
        raise ApprovalStateError(_decided(execution))
    return row


def _decided(execution: models.ToolExecution | int) -> models.ToolExecution:
    """The row as stored now (the given one if it was deleted meanwhile)."""
    pk = execution if isinstance(execution, int) else execution.pk
    found = models.ToolExecution.objects.select_related("decided_by").filter(pk=pk).first()
    if found is None and isinstance(execution, models.ToolExecution):
        return execution
    if found is None:
        raise models.ToolExecution.DoesNotExist(f"Tool call {pk} does not exist.")
    return found


def approve(
    execution: models.ToolExecution,
    *,
    user: Any,
    arguments: Any = None,
    note: str = "",
    remember: bool = False,
) -> models.ToolExecution:
    """Approve a waiting call and send it to its worker; the run resumes when it ends.

    Args:
        execution: A call ``AWAITING_APPROVAL``.
        user: Who approves (recorded).
        arguments: Edited arguments (a dict or JSON text) to run the call with instead of the
            model's; validated against the tool's schema. The model's are kept in the audit.
        note: An optional note kept with the decision.
        remember: Also make a standing decision of this kind for the tool in the call's
            conversation ("always allow it here"), bound to the tool's definition and the rules
            this call was decided under.

    Returns:
        The row as stored after the decision.

    Raises:
        ApprovalStateError: the call is not waiting for approval (decided meanwhile, or its
            approval expired: it is denied as expired then, as the sweeper would).
        DecisionVoidError: the tool's definition or the rules that asked changed while it
            waited: it is denied, the model told to ask again.
        ApprovalForbiddenError: ``user`` made the call and ``APPROVALS["ALLOW_SELF_APPROVAL"]``
            is off (denying one's own call is always allowed).
        ToolArgumentsError: the edited arguments fail the schema (nothing changed).
    """
    name = execution.tool_name
    if execution.status != models.ExecutionStatus.AWAITING_APPROVAL:
        raise ApprovalStateError(_decided(execution))  # decided already: whose it was is moot
    own = execution.user_id is not None and execution.user_id == getattr(user, "pk", None)
    confirming = stage(execution) == USER
    if confirming and not own:
        raise ApprovalForbiddenError(
            execution,
            f"This call of {name!r} waits for the confirmation of the person who asked for it; "
            "only they can confirm it.",
        )
    if not confirming and own and not app_settings.APPROVALS["ALLOW_SELF_APPROVAL"]:
        raise ApprovalForbiddenError(execution)
    _refuse_if_void(execution)
    if confirming and execution.deciders == models.Deciders.USER_THEN_APPROVER:
        confirmed = _confirm(execution, user=user, arguments=arguments, note=note)
        if remember:
            _remember(confirmed, user, USER)
        return confirmed
    now = timezone.now()
    fields: dict[str, Any] = {
        "approval": models.ApprovalDecision.APPROVED,
        "dispatched_at": now,
        "decided_by": user if getattr(user, "is_authenticated", False) else None,
        "decided_at": now,
        "decision_reason": note.strip()[:MAX_REASON_CHARS],
    }
    edited = arguments is not None
    with transaction.atomic():
        row = _lock_waiting(execution)
        expired = row.approval_expires_at is not None and row.approval_expires_at <= now
    if expired:
        # Too late: what the sweeper would do at its next pass, done now.
        _deny(row.pk, user=None, reason="", expired=True)
        raise ApprovalStateError(_decided(execution))
    with transaction.atomic():
        text = str((row.payload or {}).get("arguments") or "{}")
        if edited:
            text = validate_arguments(name, arguments)
            payload = dict(row.payload or {})
            payload["arguments"] = text
            fields.update(
                payload=payload,
                original_arguments=row.arguments,
                arguments=audit_text(text, tool_name=name, field="arguments"),
            )
        fields["approved_arguments_sha256"] = arguments_digest(text)
        if not lifecycle.approve(row.pk, **fields):
            raise ApprovalStateError(_decided(execution))
        decided = _decided(row.pk)
        # Receivers (the run's event stream) hear of the decision before the call runs.
        send_on_commit(
            signals.approval_decided,
            models.ToolExecution,
            execution=decided,
            decision="approved",
            edited=edited,
        )
        dispatch_on_commit(Dispatch.of(row))
        if remember:
            _remember(decided, user, USER if confirming else APPROVER)
    logger.info(
        "Tool call %s (%r) approved by %s%s",
        row.pk,
        name,
        getattr(user, "pk", None),
        " with edited arguments" if edited else "",
    )
    return decided


def _remember(row: models.ToolExecution, user: Any, kind: str) -> None:
    """Make the standing decision of ``kind`` for ``row``'s tool in its conversation."""
    if row.conversation_id is None:
        return
    models.StandingDecision.objects.create(
        conversation_id=row.conversation_id,
        tool_name=row.tool_name,
        stage=kind,
        definition_sha256=row.definition_sha256,
        decision_basis=row.decision_basis,
        created_by=user if getattr(user, "is_authenticated", False) else None,
        created_from=row,
    )
    logger.info(
        "Standing decision (%s) for tool %r in conversation %s made by %s",
        kind,
        row.tool_name,
        row.conversation_id,
        getattr(user, "pk", None),
    )


def revoke_standing(decision: models.StandingDecision) -> bool:
    """Revoke a standing decision: the tool's next calls in its conversation are asked again."""
    return bool(
        models.StandingDecision.objects.filter(pk=decision.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
    )


def _confirm(
    execution: models.ToolExecution, *, user: Any, arguments: Any, note: str
) -> models.ToolExecution:
    """Record the user's confirmation; the call waits for an approver next."""
    name = execution.tool_name
    now = timezone.now()
    fields: dict[str, Any] = {"confirmed_by": user, "confirmed_at": now}
    edited = arguments is not None
    with transaction.atomic():
        row = _lock_waiting(execution)
        if edited:
            text = validate_arguments(name, arguments)
            payload = dict(row.payload or {})
            payload["arguments"] = text
            fields.update(
                payload=payload,
                original_arguments=row.arguments,
                arguments=audit_text(text, tool_name=name, field="arguments"),
            )
        if note.strip():
            fields["decision_reason"] = note.strip()[:MAX_REASON_CHARS]
        if not lifecycle.confirm(row.pk, **fields):
            raise ApprovalStateError(_decided(execution))
        decided = _decided(row.pk)
        send_on_commit(
            signals.approval_decided,
            models.ToolExecution,
            execution=decided,
            decision="confirmed",
            edited=edited,
        )
    logger.info("Tool call %s (%r) confirmed by its user; an approver decides next", row.pk, name)
    return decided


def deny(execution: models.ToolExecution, *, user: Any, reason: str = "") -> models.ToolExecution:
    """Deny a waiting call: the model is told it was denied, with ``reason``; the run goes on.

    Raises:
        ApprovalStateError: the call is not waiting for approval (decided meanwhile).
    """
    own = execution.user_id is not None and execution.user_id == getattr(user, "pk", None)
    row = _deny(execution.pk, user=user, reason=reason.strip()[:MAX_REASON_CHARS], by_user=own)
    if row is None:
        raise ApprovalStateError(_decided(execution))
    logger.info("Tool call %s (%r) denied by %s", row.pk, row.tool_name, getattr(user, "pk", None))
    return row


class _NotWaiting(Exception):
    """Rolls a denial back: the call was decided by someone else meanwhile."""


def _deny(
    execution_id: int,
    *,
    user: Any,
    reason: str,
    expired: bool = False,
    by_user: bool = False,
    text: str | None = None,
) -> models.ToolExecution | None:
    """Deny one waiting call (conditionally); ``None`` when it was not waiting any more."""
    decision = "expired" if expired else "denied"

    def announce() -> None:
        signals.send_robust(
            signals.approval_decided,
            models.ToolExecution,
            execution=_decided(execution_id),
            decision=decision,
            reason=reason,
        )

    try:
        with transaction.atomic():
            row = (
                models.ToolExecution.objects.filter(
                    pk=execution_id, status=models.ExecutionStatus.AWAITING_APPROVAL
                )
                .values(*lifecycle.REF_FIELDS)
                .first()
            )
            if row is None:
                raise _NotWaiting
            # Before the denial's own tool_call_finished: receivers hear of the decision first.
            transaction.on_commit(announce)
            said = text or denial_text(row["tool_name"], reason, expired=expired, by_user=by_user)
            if not lifecycle.deny(
                lifecycle.CallRef.of(row), said, expired=expired, user=user, reason=reason
            ):
                raise _NotWaiting
    except _NotWaiting:
        return None
    return _decided(execution_id)


def deny_pending_for_run(run_id: Any, *, user: Any = None, reason: str) -> int:
    """Deny every call of run ``run_id`` still waiting for approval; returns how many."""
    ids = models.ToolExecution.objects.filter(
        run_id=run_id, status=models.ExecutionStatus.AWAITING_APPROVAL
    ).values_list("pk", flat=True)
    return sum(_deny(pk, user=user, reason=reason) is not None for pk in list(ids))


def expire_approvals(now: datetime.datetime | None = None) -> int:
    """Deny the waiting calls whose approval expired (the sweeper calls it); returns how many."""
    now = now or timezone.now()
    ids = pending_approvals().filter(approval_expires_at__lt=now).values_list("pk", flat=True)[:500]
    count = 0
    for pk in list(ids):
        if _deny(pk, user=None, reason="", expired=True) is not None:
            count += 1
    if count:
        logger.info("Denied %s tool calls whose approval expired", count)
    return count
