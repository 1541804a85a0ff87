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

Either way the run goes on when the batch's last call ended. Every decision is a conditional
UPDATE of the row (two approvers clicking at once: one wins, the other gets
:class:`ApprovalStateError`) and is recorded on it: who, when, why, and the model's original
arguments when they were edited. Turns that cannot wait (``manage.py chat``, in-process
clients) refuse such calls instead (``governance.approval_refusal_text``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from tool_calling import models, signals
from tool_calling.conf import settings as app_settings
from tool_calling.core.tools.callback import FunctionToolCallback
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError
from tool_calling.governance import audit_text
from tool_calling.registry import registry
from tool_calling.signals import send_on_commit

__all__ = [
    "APPROVE_PERMISSION",
    "ApprovalForbiddenError",
    "ApprovalStateError",
    "approve",
    "can_decide",
    "deny",
    "deny_pending_for_run",
    "expire_approvals",
    "pending_approvals",
]

logger = logging.getLogger("tool_calling.approvals")

APPROVE_PERMISSION = "tool_calling.approve_toolexecution"
"""The permission that lets a user who is not staff approve and deny calls."""

MAX_REASON_CHARS = 2000
"""Longest denial reason kept (the model reads it)."""


class ApprovalStateError(ToolCallingError):
    """The call is not waiting for approval (any more): decided, expired, or never gated."""

    def __init__(self, execution: models.ToolExecution) -> None:
        super().__init__(
            f"Tool call {execution.pk} ({execution.tool_name!r}) is not awaiting approval "
            f"(status {execution.status!r}, approval {execution.approval or 'not required'!r})."
        )
        self.execution = execution


class ApprovalForbiddenError(ToolCallingError):
    """This user may not approve this call: it is their own, and self-approval is off."""

    def __init__(self, execution: models.ToolExecution) -> None:
        super().__init__(
            f"Tool call {execution.pk} ({execution.tool_name!r}) was made in your own turn, and "
            "APPROVALS['ALLOW_SELF_APPROVAL'] is off: another person must approve it."
        )
        self.execution = execution


def can_decide(user: Any) -> bool:
    """Whether ``user`` may approve and deny calls: staff, or holders of the permission."""
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    return bool(getattr(user, "is_staff", False) or user.has_perm(APPROVE_PERMISSION))


def pending_approvals() -> Any:
    """The calls waiting for a decision, oldest first (the approval queue)."""
    return models.ToolExecution.objects.filter(
        status=models.ExecutionStatus.AWAITING_APPROVAL
    ).order_by("created_at", "pk")


def denial_text(name: str, reason: str, *, expired: bool = False) -> str:
    """What the model is told about a call a person denied (or nobody approved in time)."""
    if expired:
        return (
            f"The call to tool {name!r} was not run: it needed a person's approval and nobody "
            "approved it in time."
        )
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
    callback = registry.get(name)
    if callback is None:
        raise ToolCallingError(f"Tool {name!r} is not installed; its calls cannot be approved.")
    if isinstance(callback, FunctionToolCallback):
        callback.validate_arguments(text)
        return text
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ToolArgumentsError(name, f"Arguments for tool {name!r} are not JSON: {exc}.") from exc
    if not isinstance(value, dict):
        raise ToolArgumentsError(name, f"Arguments for tool {name!r} must be a JSON object.")
    schema = callback.definition.input_schema
    missing = [key for key in schema.get("required", []) if key not in value]
    unknown = sorted(set(value) - set(schema.get("properties", {})))
    if missing or (unknown and schema.get("additionalProperties") is False):
        problems = [f"missing {k!r}" for k in missing] + [f"unknown {k!r}" for k in unknown]
        raise ToolArgumentsError(
            name, f"Invalid arguments for tool {name!r}: {', '.join(problems)}."
        )
    return text


def arguments_digest(text: str) -> str:
    """SHA-256 of a call's exact arguments: what an approval is bound to."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def approved_as_recorded(row: models.ToolExecution) -> bool:
    """Whether ``row`` was approved and will run with exactly the arguments approved."""
    if row.approval != models.ApprovalDecision.APPROVED or not row.approved_arguments_sha256:
        return False
    text = (row.payload or {}).get("arguments")
    return isinstance(text, str) and arguments_digest(text) == row.approved_arguments_sha256


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
) -> models.ToolExecution:
    """Approve a waiting call and send it to its worker; the run resumes when it ends.

    Args:
        execution: A call ``AWAITING_APPROVAL``.
        user: Who approves (recorded).
        arguments: Edited arguments (a dict or JSON text) to run the call with instead of the
            model's; validated against the tool's schema. The model's are kept in the audit.
        note: An optional note kept with the decision.

    Returns:
        The row as stored after the decision.

    Raises:
        ApprovalStateError: the call is not waiting for approval (decided meanwhile, or its
            approval expired: it is denied as expired then, as the sweeper would).
        ApprovalForbiddenError: ``user`` made the call and ``APPROVALS["ALLOW_SELF_APPROVAL"]``
            is off (denying one's own call is always allowed).
        ToolArgumentsError: the edited arguments fail the schema (nothing changed).
    """
    from tool_calling.runs import approvals_decided, record_approval_event
    from tool_calling.tasks import dispatch_on_commit

    name = execution.tool_name
    if (
        not app_settings.APPROVALS["ALLOW_SELF_APPROVAL"]
        and execution.user_id is not None
        and execution.user_id == getattr(user, "pk", None)
    ):
        raise ApprovalForbiddenError(execution)
    now = timezone.now()
    fields: dict[str, Any] = {
        "status": models.ExecutionStatus.PENDING,
        "approval": models.ApprovalDecision.APPROVED,
        "decided_by": user if getattr(user, "is_authenticated", False) else None,
        "decided_at": now,
        "decision_reason": note.strip()[:MAX_REASON_CHARS],
    }
    edited = arguments is not None
    with transaction.atomic():
        row = (
            models.ToolExecution.objects.select_for_update()
            .filter(pk=execution.pk, status=models.ExecutionStatus.AWAITING_APPROVAL)
            .first()
        )
        if row is None:
            raise ApprovalStateError(_decided(execution))
        expired = row.approval_expires_at is not None and row.approval_expires_at <= now
    if expired:
        # Too late: what the sweeper would do at its next pass, done now.
        _deny(row.pk, user=None, reason="", expired=True, now=now)
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
        approved = models.ToolExecution.objects.filter(
            pk=row.pk, status=models.ExecutionStatus.AWAITING_APPROVAL
        ).update(**fields)
        if not approved:
            raise ApprovalStateError(_decided(execution))
        dispatch_on_commit(row.pk)
        if row.run_id is not None:
            approvals_decided(row.run_id)
            record_approval_event(row.pk, "approved", user=user, edited=edited)
        decided = _decided(row.pk)
        send_on_commit(
            signals.approval_decided, models.ToolExecution, execution=decided, decision="approved"
        )
    logger.info(
        "Tool call %s (%r) approved by %s%s",
        row.pk,
        name,
        getattr(user, "pk", None),
        " with edited arguments" if edited else "",
    )
    return decided


def deny(execution: models.ToolExecution, *, user: Any, reason: str = "") -> models.ToolExecution:
    """Deny a waiting call: the model is told it was denied, with ``reason``; the run goes on.

    Raises:
        ApprovalStateError: the call is not waiting for approval (decided meanwhile).
    """
    row = _deny(execution.pk, user=user, reason=reason.strip()[:MAX_REASON_CHARS])
    if row is None:
        raise ApprovalStateError(_decided(execution))
    logger.info("Tool call %s (%r) denied by %s", row.pk, row.tool_name, getattr(user, "pk", None))
    return row


def _deny(
    execution_id: int,
    *,
    user: Any,
    reason: str,
    expired: bool = False,
    now: datetime.datetime | None = None,
) -> models.ToolExecution | None:
    """Deny one waiting call (conditionally); ``None`` when it was not waiting any more."""
    from tool_calling.runs import approvals_decided, record_approval_event, tool_call_finished

    now = now or timezone.now()
    with transaction.atomic():
        row = (
            models.ToolExecution.objects.filter(
                pk=execution_id, status=models.ExecutionStatus.AWAITING_APPROVAL
            )
            .values("tool_name", "run_id")
            .first()
        )
        if row is None:
            return None
        text = denial_text(row["tool_name"], reason, expired=expired)
        denied = models.ToolExecution.objects.filter(
            pk=execution_id, status=models.ExecutionStatus.AWAITING_APPROVAL
        ).update(
            status=models.ExecutionStatus.DENIED,
            approval=(
                models.ApprovalDecision.EXPIRED if expired else models.ApprovalDecision.DENIED
            ),
            decided_by=user if getattr(user, "is_authenticated", False) else None,
            decided_at=now,
            decision_reason=reason,
            result=text,
            is_error=True,
            finished_at=now,
            duration_ms=0,
            payload={"response": text},
        )
        if not denied:
            return None
        decision = "expired" if expired else "denied"
        if row["run_id"] is not None:
            approvals_decided(row["run_id"])
            record_approval_event(execution_id, decision, user=user, reason=reason)
            tool_call_finished(execution_id)
        decided = _decided(execution_id)
        send_on_commit(
            signals.approval_decided, models.ToolExecution, execution=decided, decision=decision
        )
    return decided


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
        if _deny(pk, user=None, reason="", expired=True, now=now) is not None:
            count += 1
    if count:
        logger.info("Denied %s tool calls whose approval expired", count)
    return count
