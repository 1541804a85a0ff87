"""Django signals of tool_calling, for projects that react to governance events.

Receivers run in the process that made the change, after its transaction committed, so they
see the stored rows; a receiver that raises is logged and does not undo anything.

``approval_requested``
    A call of a tool that requires approval is waiting for a person. Sent with
    ``execution`` (the ``ToolExecution``, status ``awaiting_approval``) and ``run`` (its
    ``Run``). Connect it to notify approvers (mail, chat) with a link to the approval queue.

``approval_decided``
    Someone approved or denied a waiting call, or it expired. Sent with ``execution`` (as
    stored after the decision: ``approval``, ``decided_by``, ``decided_at``,
    ``decision_reason``) and ``decision`` (``"approved"``, ``"denied"`` or ``"expired"``).

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

__all__ = ["approval_decided", "approval_requested", "send_on_commit"]

logger = logging.getLogger("tool_calling.signals")

approval_requested = Signal()
"""A call waits for a person's approval: ``execution``, ``run``."""

approval_decided = Signal()
"""A waiting call was approved, denied or expired: ``execution``, ``decision``."""


def send_on_commit(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` once the current transaction commits; receivers' errors are logged."""

    def send() -> None:
        for receiver, result in signal.send_robust(sender, **kwargs):
            if isinstance(result, Exception):
                logger.error(
                    "A receiver of a tool_calling signal failed: %r",
                    receiver,
                    exc_info=(type(result), result, result.__traceback__),
                )

    transaction.on_commit(send)
