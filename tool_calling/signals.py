"""Django signals of tool_calling: what happened to tool calls, turns and approvals, for anyone.

Every signal is sent once the transaction that made the change committed (``send_on_commit``),
in the process that made it, so receivers see the stored rows; a receiver that raises is logged
and undoes nothing. tool_calling itself listens to them: a durable run advances when one of its
calls ends (``tool_calling.runs.receivers``), so the code that ends a call never has to know
about runs.

``tool_call_started``
    A call began to run (in-process, or claimed by a Celery worker). Sent with
    ``execution_id``, ``run_id`` (``None`` outside durable runs), ``tool_call_id``,
    ``tool_name`` and ``attempt``.

``tool_call_finished``
    A call ended in a terminal state (succeeded, failed, refused, timed out, outcome unknown,
    denied). Sent with ``execution_id``, ``run_id``, ``assistant_message_id``,
    ``tool_call_id``, ``tool_name``, ``status``, ``is_error``, ``duration_ms`` and ``attempt``.

``turn_finished``
    A turn ended: a durable run (succeeded, failed or cancelled; sender ``Run``) or a governed
    turn in-process (sender ``ChatClient``, from ``governed_chat_client``). Sent with
    ``conversation_id``, ``run_id`` (``None`` in-process), ``status`` (``"succeeded"``,
    ``"failed"``, ``"cancelled"``), ``finish_reason`` and ``error`` (blank unless it failed:
    the run's error text, or the type of the exception an in-process turn raised).

``approval_requested``
    A call is waiting for a person: the user's confirmation, an approver's approval, or both
    (``execution.deciders``). Sent with ``execution`` (the ``ToolExecution``, status
    ``awaiting_approval``) and ``run`` (its ``Run``). Connect it to notify approvers (mail,
    chat) with a link to the approval queue.

``approval_decided``
    Someone approved or denied a waiting call, or it expired. Sent with ``execution`` (as
    stored after the decision: ``approval``, ``decided_by``, ``decided_at``,
    ``decision_reason``) and ``decision`` (``"approved"``, ``"denied"`` or ``"expired"``; or
    ``"confirmed"`` when the user confirmed a call an approver decides next).

Example::

    from django.dispatch import receiver
    from tool_calling.signals import approval_requested

    @receiver(approval_requested)
    def notify_approvers(sender, execution, run, **kwargs):
        send_mail("Approval needed", f"{execution.tool_name} in run {run.pk}", ...)
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

__all__ = [
    "approval_decided",
    "approval_requested",
    "send_on_commit",
    "tool_call_finished",
    "tool_call_started",
    "turn_finished",
]

logger = logging.getLogger("tool_calling.signals")

tool_call_started = Signal()
"""A call began to run: ``execution_id``, ``run_id``, ``tool_call_id``, ``tool_name``,
``attempt``."""

tool_call_finished = Signal()
"""A call ended: ``execution_id``, ``run_id``, ``assistant_message_id``, ``tool_call_id``,
``tool_name``, ``status``, ``is_error``, ``duration_ms``, ``attempt``."""

turn_finished = Signal()
"""A turn ended: ``conversation_id``, ``run_id``, ``status``, ``finish_reason``, ``error``."""

approval_requested = Signal()
"""A call waits for a person's approval: ``execution``, ``run``."""

approval_decided = Signal()
"""A waiting call was approved, denied or expired: ``execution``, ``decision``."""


def send_robust(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` now; a receiver's error is logged, not raised."""
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "A receiver of a tool_calling signal failed: %r",
                receiver,
                exc_info=(type(result), result, result.__traceback__),
            )


def send_on_commit(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` once the current transaction commits; receivers' errors are logged."""
    if not signal.receivers or not signal.has_listeners(sender):  # the first test is cheaper
        return
    transaction.on_commit(lambda: send_robust(signal, sender, **kwargs))
