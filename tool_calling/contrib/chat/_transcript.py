"""A conversation's stored messages as the chat page shows them (plain data; escaped later).

Each assistant message becomes one entry with its text and its tool calls; the tool responses
of the message after it are attached to their calls by id, and each call gets the status and
duration of its latest audit row. Tool messages therefore never show on their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from tool_calling import models


@dataclass
class ToolCallEntry:
    """One tool call of an assistant message."""

    id: str
    name: str
    arguments: str
    status: str = ""
    status_label: str = ""
    duration_ms: int | None = None
    note: str = ""
    result: str | None = None
    is_error: bool = False


@dataclass
class MessageEntry:
    """One user or assistant message."""

    sequence: int
    role: str
    text: str
    tool_calls: list[ToolCallEntry] = field(default_factory=list)


def pretty_json(text: str) -> str:
    """``text`` indented when it is JSON (arguments, most results), else as it is."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return text
    if not isinstance(value, (dict, list)):
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def transcript(
    conversation: models.Conversation, messages: Iterable[models.Message]
) -> list[MessageEntry]:
    """The entries of ``messages`` (in order) of ``conversation``."""
    rows = list(messages)
    call_ids = [str(call.get("id", "")) for row in rows for call in row.tool_calls or []]
    executions: dict[str, models.ToolExecution] = {}
    if call_ids:
        for execution in models.ToolExecution.objects.filter(
            conversation=conversation, tool_call_id__in=call_ids
        ).order_by("created_at", "pk"):
            executions[execution.tool_call_id] = execution  # the latest attempt wins
    entries: list[MessageEntry] = []
    calls: dict[str, ToolCallEntry] = {}
    for row in rows:
        if row.role == models.MessageRole.TOOL:
            for response in row.tool_responses or []:
                call = calls.get(str(response.get("id", "")))
                if call is not None:
                    call.result = pretty_json(str(response.get("response_data", "")))
                    call.is_error = bool(response.get("is_error"))
            continue
        if row.role not in (models.MessageRole.USER, models.MessageRole.ASSISTANT):
            continue
        entry = MessageEntry(row.sequence, str(row.role), row.text or "")
        for raw in row.tool_calls or []:
            call = ToolCallEntry(
                id=str(raw.get("id", "")),
                name=str(raw.get("name", "")),
                arguments=pretty_json(str(raw.get("arguments", ""))),
            )
            _describe(call, executions.get(call.id))
            calls[call.id] = call
            entry.tool_calls.append(call)
        entries.append(entry)
    return entries


def _describe(call: ToolCallEntry, execution: models.ToolExecution | None) -> None:
    if execution is None:
        return
    call.status = str(execution.status)
    call.status_label = str(execution.get_status_display())
    call.duration_ms = execution.duration_ms
    decision: Any = execution.approval
    if decision == models.ApprovalDecision.PENDING:
        call.note = _("Waiting for a person to approve this call.")
    elif decision == models.ApprovalDecision.APPROVED:
        edited = bool(execution.original_arguments)
        call.note = _("Approved, with edited arguments.") if edited else _("Approved.")
    elif decision in (models.ApprovalDecision.DENIED, models.ApprovalDecision.EXPIRED):
        reason = execution.decision_reason
        if decision == models.ApprovalDecision.EXPIRED:
            call.note = _("Nobody approved it in time.")
        elif reason:
            call.note = _("Denied: %(reason)s") % {"reason": reason}
        else:
            call.note = _("Denied.")
