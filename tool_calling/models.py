"""Governance and history models: tools, limit overrides, conversations, messages, audit."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from tool_calling.conf import broker_visibility_timeout, hard_time_limit


class ExecutionMode(models.TextChoices):
    """Where a tool's calls run."""

    DEFAULT = "", _("Default (from settings)")
    INLINE = "inline", _("In the web/worker process")
    CELERY = "celery", _("On a Celery worker")


class Tool(models.Model):
    """A tool known from code, with the governance operators set on it."""

    name = models.CharField(
        _("name"),
        max_length=64,
        unique=True,
        help_text=_("The tool's name as the model sees it; set in code."),
    )
    description = models.TextField(
        _("description"), blank=True, help_text=_("What the model is told the tool does.")
    )
    input_schema = models.JSONField(
        _("input schema"), default=dict, help_text=_("JSON Schema of the tool's arguments.")
    )
    schema_hash = models.CharField(
        _("schema hash"),
        max_length=64,
        blank=True,
        help_text=_("SHA-256 of the description and schema; changes when the code changes."),
    )
    source = models.CharField(
        _("source"),
        max_length=200,
        blank=True,
        help_text=_("The app (or other source) that defines the tool."),
    )
    enabled = models.BooleanField(
        _("enabled"),
        default=True,
        help_text=_("Disabled tools are never sent to the model and never run."),
    )
    missing = models.BooleanField(
        _("missing from code"),
        default=False,
        help_text=_("The tool no longer exists in code; it is kept for history and never runs."),
    )
    return_direct = models.BooleanField(
        _("return direct"),
        default=False,
        help_text=_("Return the tool's result to the user instead of sending it to the model."),
    )
    requires_approval = models.BooleanField(
        _("requires approval"),
        default=False,
        help_text=_("A person must approve each call before it runs."),
    )
    execution_mode = models.CharField(
        _("execution mode"),
        max_length=16,
        choices=ExecutionMode.choices,
        default=ExecutionMode.DEFAULT,
        blank=True,
        help_text=_("Where calls run; blank uses TOOL_CALLING['EXECUTION']['MODE']."),
    )
    queue = models.CharField(
        _("queue"),
        max_length=100,
        blank=True,
        help_text=_("Celery queue for this tool's calls; blank uses the default queue."),
    )
    timeout = models.PositiveIntegerField(
        _("timeout (seconds)"),
        null=True,
        blank=True,
        help_text=_("Time limit of one call; blank uses TOOL_CALLING['EXECUTION']['TIMEOUT']."),
    )
    idempotent = models.BooleanField(
        _("idempotent"),
        default=False,
        help_text=_(
            "Running a call twice has the same effect as running it once. A call on a Celery "
            "worker that dies mid-call is then run again; otherwise it is never run twice and "
            "the model is told its outcome is unknown."
        ),
    )
    allowed_groups = models.ManyToManyField(
        "auth.Group",
        verbose_name=_("allowed groups"),
        blank=True,
        related_name="+",
        help_text=_("Only members of these groups may use the tool; none selected = everyone."),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    synced_at = models.DateTimeField(
        _("last synced"),
        null=True,
        blank=True,
        help_text=_("When sync_tools (or migrate) last saw the tool in code."),
    )

    class Meta:
        verbose_name = _("tool")
        verbose_name_plural = _("tools")
        ordering = ["name"]
        indexes = [models.Index(fields=["enabled", "missing"], name="tc_tool_enabled_missing")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse a timeout whose hard limit the broker would not wait for (R7)."""
        visibility = broker_visibility_timeout()
        if self.timeout is not None and visibility is not None:
            if hard_time_limit(self.timeout) >= visibility:
                raise ValidationError(
                    {
                        "timeout": _(
                            "A call may run %(limit)d s (this timeout plus "
                            "TOOL_CALLING['EXECUTION']['TIMEOUT_GRACE']), which is not less "
                            "than the broker's visibility timeout of %(visibility)d s: the "
                            "broker would deliver the call again while it runs. Lower the "
                            "timeout or raise the visibility timeout."
                        )
                        % {"limit": hard_time_limit(self.timeout), "visibility": visibility}
                    }
                )

    @property
    def is_available(self) -> bool:
        """True when the tool may be offered and run: enabled and present in code."""
        return self.enabled and not self.missing


class ToolLimitOverride(models.Model):
    """An operator's per-turn call limit for one tool, or its exclusion from limits."""

    tool = models.OneToOneField(
        Tool,
        on_delete=models.CASCADE,
        related_name="limit_override",
        verbose_name=_("tool"),
    )
    max_calls_per_turn = models.PositiveIntegerField(
        _("max calls per turn"),
        null=True,
        blank=True,
        help_text=_("Calls allowed per turn; blank keeps TOOL_CALLING['LIMITS']."),
    )
    excluded = models.BooleanField(
        _("excluded from limits"),
        default=False,
        help_text=_("No per-tool limit; the calls still count toward the total per turn."),
    )

    class Meta:
        verbose_name = _("tool limit override")
        verbose_name_plural = _("tool limit overrides")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_calls_per_turn__isnull=True)
                | models.Q(max_calls_per_turn__gte=1),
                name="tc_limit_positive",
            )
        ]

    def __str__(self) -> str:
        if self.excluded:
            return f"{self.tool}: excluded"
        return f"{self.tool}: {self.max_calls_per_turn or 'default'}"


class Conversation(models.Model):
    """A conversation with the model: its messages are stored in order."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="tool_calling_conversations",
        verbose_name=_("owner"),
        help_text=_("The user the conversation belongs to; empty for CLI and script runs."),
    )
    title = models.CharField(_("title"), max_length=200, blank=True)
    turn_token = models.CharField(
        _("turn in progress"),
        max_length=64,
        blank=True,
        editable=False,
        help_text=_("Set while a turn runs, so two turns never interleave their messages."),
    )
    turn_started_at = models.DateTimeField(_("turn started"), null=True, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="tc_conv_owner_updated")]

    def __str__(self) -> str:
        return self.title or str(self.id)


class MessageRole(models.TextChoices):
    """Who a message is from."""

    SYSTEM = "system", _("System")
    USER = "user", _("User")
    ASSISTANT = "assistant", _("Assistant")
    TOOL = "tool", _("Tool responses")


class Message(models.Model):
    """One message of a conversation; tool calls and tool responses included."""

    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        related_name="messages",
        verbose_name=_("conversation"),
    )
    sequence = models.PositiveIntegerField(
        _("sequence"), help_text=_("Position in the conversation, from 1.")
    )
    role = models.CharField(_("role"), max_length=16, choices=MessageRole.choices)
    text = models.TextField(_("text"), null=True, blank=True)
    tool_calls = models.JSONField(
        _("tool calls"),
        default=list,
        blank=True,
        help_text=_("Assistant messages: [{id, name, arguments}] in call order."),
    )
    tool_responses = models.JSONField(
        _("tool responses"),
        default=list,
        blank=True,
        help_text=_("Tool messages: [{id, name, response_data, is_error}] in call order."),
    )
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    usage = models.JSONField(_("token usage"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["conversation", "sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "sequence"], name="tc_message_conversation_sequence"
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} #{self.sequence} {self.role}"


class ExecutionStatus(models.TextChoices):
    """The state of one tool call."""

    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    REFUSED = "refused", _("Refused")
    TIMED_OUT = "timed_out", _("Timed out")
    OUTCOME_UNKNOWN = "unknown", _("Outcome unknown")
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    DENIED = "denied", _("Denied")


class ApprovalDecision(models.TextChoices):
    """What became of a call that needed a person's approval."""

    NOT_REQUIRED = "", _("Not required")
    PENDING = "pending", _("Pending")
    APPROVED = "approved", _("Approved")
    DENIED = "denied", _("Denied")
    EXPIRED = "expired", _("Expired")


TERMINAL_STATUSES = frozenset(
    {
        ExecutionStatus.DENIED,
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.REFUSED,
        ExecutionStatus.TIMED_OUT,
        ExecutionStatus.OUTCOME_UNKNOWN,
    }
)
"""Statuses a call never leaves: nothing runs it again."""


class ToolExecution(models.Model):
    """The audit of one tool call: who, what, with which arguments, and what came back."""

    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="tool_executions",
        verbose_name=_("conversation"),
    )
    assistant_message = models.ForeignKey(
        Message,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="tool_executions",
        verbose_name=_("assistant message"),
        help_text=_("The message in which the model asked for this call."),
    )
    run = models.ForeignKey(
        "Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="tool_executions",
        verbose_name=_("run"),
        help_text=_("The durable run (background turn) that made the call; empty otherwise."),
    )
    tool_call_id = models.CharField(_("tool call id"), max_length=200, blank=True)
    tool = models.ForeignKey(
        Tool,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="executions",
        verbose_name=_("tool"),
    )
    tool_name = models.CharField(
        _("tool name"), max_length=200, help_text=_("As the model sent it, even if unknown.")
    )
    arguments = models.TextField(_("arguments"), blank=True)
    result = models.TextField(_("result"), blank=True)
    is_error = models.BooleanField(
        _("error response"), default=False, help_text=_("The model was told the call failed.")
    )
    status = models.CharField(
        _("status"),
        max_length=32,
        choices=ExecutionStatus.choices,
        default=ExecutionStatus.PENDING,
    )
    approval = models.CharField(
        _("approval"),
        max_length=16,
        choices=ApprovalDecision.choices,
        default=ApprovalDecision.NOT_REQUIRED,
        blank=True,
        help_text=_("For tools that require approval: the decision on this call."),
    )
    approval_expires_at = models.DateTimeField(
        _("approval expires"),
        null=True,
        blank=True,
        help_text=_("A pending approval not decided by then is denied (APPROVALS[EXPIRE_AFTER])."),
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("decided by"),
        help_text=_("Who approved or denied the call."),
    )
    decided_at = models.DateTimeField(_("decided"), null=True, blank=True)
    decision_reason = models.TextField(
        _("decision reason"),
        blank=True,
        help_text=_("Why the call was denied (the model is told), or a note on the approval."),
    )
    original_arguments = models.TextField(
        _("original arguments"),
        blank=True,
        help_text=_("The model's arguments, when the approver edited them before approving."),
    )
    approved_arguments_sha256 = models.CharField(
        _("approved arguments (SHA-256)"),
        max_length=64,
        blank=True,
        editable=False,
        help_text=_(
            "The digest of the exact arguments that were approved: a worker runs the call only "
            "with those."
        ),
    )
    error = models.TextField(
        _("error"), blank=True, help_text=_("The exception and traceback, for operators only.")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("user"),
    )
    error_type = models.CharField(
        _("exception type"),
        max_length=200,
        blank=True,
        help_text=_("The class of the exception the tool raised (module.Name); blank if none."),
    )
    mode = models.CharField(
        _("execution mode"),
        max_length=16,
        choices=[c for c in ExecutionMode.choices if c[0]],
        default=ExecutionMode.INLINE,
        help_text=_("Where the call ran: in the process of the turn, or on a Celery worker."),
    )
    queue = models.CharField(
        _("queue"),
        max_length=100,
        blank=True,
        help_text=_("The Celery queue the call was sent to."),
    )
    timeout = models.PositiveIntegerField(
        _("timeout (seconds)"),
        null=True,
        blank=True,
        help_text=_("The call's time limit on the worker (the soft limit; the hard one is later)."),
    )
    idempotent = models.BooleanField(
        _("idempotent"),
        default=False,
        help_text=_("Copied from the tool when the call was made: may it run again after a crash?"),
    )
    attempt = models.PositiveIntegerField(
        _("attempt"),
        default=0,
        help_text=_(
            "How many times a worker started the call; more than one when a worker died mid-call "
            "and the (idempotent) call ran again."
        ),
    )
    lease_expires_at = models.DateTimeField(
        _("lease expires"),
        null=True,
        blank=True,
        help_text=_(
            "The worker running the call renews this while the tool runs; once it passes, the "
            "worker is presumed dead and the call is taken over or reported unknown."
        ),
    )
    dispatched_at = models.DateTimeField(
        _("dispatched"),
        null=True,
        blank=True,
        help_text=_("When the call was last sent to the broker; empty if sending failed."),
    )
    payload = models.JSONField(
        _("working data"),
        default=dict,
        blank=True,
        editable=False,
        help_text=_(
            "A call on a worker: the exact arguments and tool context it runs with, then the "
            "exact text for the model. Not redacted, so never shown, and cleared once the "
            "caller has the result."
        ),
    )
    task_id = models.CharField(_("task id"), max_length=255, blank=True)
    worker = models.CharField(_("worker"), max_length=255, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), null=True, blank=True)

    class Meta:
        verbose_name = _("tool execution")
        verbose_name_plural = _("tool executions")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tool_name", "-created_at"], name="tc_exec_tool_created"),
            models.Index(fields=["status", "-created_at"], name="tc_exec_status_created"),
            models.Index(fields=["conversation", "tool_call_id"], name="tc_exec_conv_call"),
            models.Index(fields=["approval", "created_at"], name="tc_exec_approval"),
        ]
        permissions = [("approve_toolexecution", _("Can approve or deny tool calls"))]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"

    def as_dict(self) -> dict[str, Any]:
        """A plain summary (for logs and signals), without arguments or result content."""
        return {
            "id": self.pk,
            "tool": self.tool_name,
            "status": self.status,
            "conversation": str(self.conversation_id) if self.conversation_id else None,
            "tool_call_id": self.tool_call_id,
            "duration_ms": self.duration_ms,
            "mode": self.mode,
            "attempt": self.attempt,
        }


class RunStatus(models.TextChoices):
    """The state of a durable run (a turn driven by Celery steps)."""

    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


RUN_TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
"""Statuses a run leaves only when it is retried (failed) or never (succeeded, cancelled)."""

RUN_ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)
"""Statuses of a run that holds its conversation and will move on (steps, calls, approvals)."""


class Run(models.Model):
    """One turn of a conversation driven as Celery steps; every step is stored as it happens."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        related_name="runs",
        verbose_name=_("conversation"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("user"),
        help_text=_("The user whose tools and permissions the turn runs with."),
    )
    status = models.CharField(
        _("status"), max_length=32, choices=RunStatus.choices, default=RunStatus.QUEUED
    )
    text = models.TextField(_("user message"), help_text=_("What the user sent."))
    user_message = models.ForeignKey(
        Message,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("stored user message"),
        help_text=_("The message that starts the turn; the turn is every message from it on."),
    )
    tool_names = models.JSONField(
        _("tool names"),
        null=True,
        blank=True,
        help_text=_("Only these of the user's tools are offered; empty = all of them."),
    )
    answer = models.TextField(_("answer"), null=True, blank=True)
    finish_reason = models.CharField(_("finish reason"), max_length=64, blank=True)
    error = models.TextField(_("error"), blank=True, help_text=_("Why the run failed."))
    rounds = models.PositiveIntegerField(
        _("model rounds"), default=0, help_text=_("Model calls made in this turn.")
    )
    step = models.PositiveIntegerField(
        _("step"),
        default=0,
        help_text=_("Steps started so far; only the step holding the lease may advance the run."),
    )
    step_lease_expires_at = models.DateTimeField(
        _("step lease expires"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("Set while a step runs; a step whose worker died is taken over after it."),
    )
    waiting_for = models.ForeignKey(
        Message,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
        verbose_name=_("waiting for the calls of"),
        help_text=_("The assistant message whose tool calls run on workers now."),
    )
    plan = models.JSONField(
        _("planned calls"),
        default=dict,
        blank=True,
        editable=False,
        help_text=_("The calls of the waited-for message: which run, which were answered."),
    )
    turn_token = models.CharField(_("conversation claim"), max_length=64, blank=True)
    trace_context = models.CharField(
        _("trace context"),
        max_length=128,
        blank=True,
        editable=False,
        help_text=_(
            "The W3C traceparent of the turn's span (OpenTelemetry): every step of the run "
            "joins that trace, however late it runs."
        ),
    )
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    event_count = models.PositiveIntegerField(_("events"), default=0, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["conversation", "-created_at"], name="tc_run_conv_created"),
            models.Index(fields=["status", "-created_at"], name="tc_run_status_created"),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} run {self.pk} ({self.status})"


class RunEvent(models.Model):
    """One thing that happened in a run, in order (streamed to clients)."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="events", verbose_name=_("run")
    )
    sequence = models.PositiveIntegerField(
        _("sequence"), help_text=_("Position in the run, from 1.")
    )
    kind = models.CharField(_("kind"), max_length=64)
    data = models.JSONField(_("data"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("run event")
        verbose_name_plural = _("run events")
        ordering = ["run", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["run", "sequence"], name="tc_runevent_run_sequence")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.sequence} {self.kind}"


class PendingApproval(ToolExecution):
    """The approval queue: tool calls as the people who approve or deny them see them.

    A proxy of :class:`ToolExecution` for the admin's queue (``tool_calling.admin``), which
    lists the calls awaiting approval. Who may decide is ``approvals.can_decide``, not a
    permission of this model, so it has none of its own.
    """

    class Meta:
        proxy = True
        verbose_name = _("call awaiting approval")
        verbose_name_plural = _("calls awaiting approval")
        default_permissions = ()
