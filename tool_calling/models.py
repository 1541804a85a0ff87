"""Governance and history models: tools, limit overrides, conversations, messages, audit, MCP."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils.module_loading import import_string
from django.utils.translation import gettext_lazy as _

from tool_calling._compat import check_constraint
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
    title = models.CharField(
        _("title"),
        max_length=200,
        blank=True,
        help_text=_(
            "A name for people, shown by MCP clients of /mcp/ (never sent to the model); blank "
            "uses the code's @tool(title=...)."
        ),
    )
    annotations = models.JSONField(
        _("MCP annotations"),
        default=dict,
        blank=True,
        help_text=_(
            'Hints served over /mcp/, e.g. {"readOnlyHint": true, "destructiveHint": false, '
            '"idempotentHint": true, "openWorldHint": false}; each key set here replaces the '
            "code's. Hints only: they never lift approval or any other check."
        ),
    )
    icons = models.JSONField(
        _("MCP icons"),
        default=list,
        blank=True,
        help_text=_(
            'Icons served over /mcp/, e.g. [{"src": "https://example.com/t.png", "mimeType": '
            '"image/png", "sizes": ["48x48"]}]; empty uses the code\'s.'
        ),
    )
    requires_confirmation = models.BooleanField(
        _("requires the user's confirmation"),
        default=False,
        help_text=_(
            "The person whose turn it is must confirm each call before it runs (with approval "
            "too: the user confirms first, then an approver approves)."
        ),
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
    search_tags = models.CharField(
        _("search tags"),
        max_length=500,
        blank=True,
        help_text=_(
            "Extra words, separated by commas, that help tool search find this tool (what "
            "users call it, synonyms); never sent to the model."
        ),
    )
    always_include = models.BooleanField(
        _("always include"),
        default=False,
        help_text=_(
            "With tool search on: offer this tool on every model call, without a search (pinned)."
        ),
    )
    augment_arguments = models.BooleanField(
        _("ask why it is called"),
        null=True,
        blank=True,
        choices=[
            (None, _("Default (from settings)")),
            (True, _("Yes")),
            (False, _("No")),
        ],
        help_text=_(
            "Ask the model, on each call, for the fields of "
            "TOOL_CALLING['ARGUMENT_AUGMENTATION']['TYPE'] (why it calls the tool); they are "
            "stored with the call and removed before the tool runs. Default: "
            "TOOL_CALLING['ARGUMENT_AUGMENTATION']['ENABLED']."
        ),
    )
    allowed_groups = models.ManyToManyField(
        "auth.Group",
        verbose_name=_("allowed groups"),
        blank=True,
        related_name="+",
        help_text=_("Only members of these groups may use the tool; none selected = everyone."),
    )
    permission = models.CharField(
        _("required permission"),
        max_length=255,
        blank=True,
        help_text=_(
            "A Django permission (app_label.codename) the user of the turn must hold for each "
            "call, on top of what the tool's code requires; checked when the call runs. Blank: "
            "none beyond the code's."
        ),
    )
    quota_per_user = models.PositiveIntegerField(
        _("calls per user per window"),
        null=True,
        blank=True,
        help_text=_(
            "Calls one user may make in each quota window, counted atomically in the database "
            "whatever the process; further calls are refused until the window ends. Blank: no "
            "per-user quota."
        ),
    )
    quota_total = models.PositiveIntegerField(
        _("calls per window, all users"),
        null=True,
        blank=True,
        help_text=_("Calls everyone together may make in each quota window. Blank: no quota."),
    )
    quota_window = models.PositiveIntegerField(
        _("quota window (seconds)"),
        default=60,
        help_text=_("The length of a quota window; windows start at multiples of it (UTC)."),
    )
    retries = models.PositiveSmallIntegerField(
        _("retries"),
        default=0,
        help_text=_(
            "Times a call that failed with a transient error is run again, after an "
            "exponential backoff with jitter (TransientToolError; for idempotent tools also "
            "ConnectionError and TimeoutError). Other errors are never retried."
        ),
    )
    retry_backoff = models.FloatField(
        _("retry backoff (seconds)"),
        default=1.0,
        help_text=_(
            "The pause before the first retry; it doubles for each further one, up to "
            "TOOL_CALLING['EXECUTION']['RETRY_BACKOFF_MAX'], and a random half of it is "
            "jitter."
        ),
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
        constraints = [
            check_constraint(
                condition=models.Q(quota_window__gte=1), name="tc_tool_quota_window_positive"
            ),
            check_constraint(
                condition=models.Q(retry_backoff__gt=0), name="tc_tool_retry_backoff_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse a permission that does not exist, and a timeout the broker would not wait for."""
        if self.permission:
            self._clean_permission()
        self._clean_timeout()

    def _clean_permission(self) -> None:
        app_label, dot, codename = self.permission.partition(".")
        if (
            not dot
            or not Permission.objects.filter(
                content_type__app_label=app_label, codename=codename
            ).exists()
        ):
            raise ValidationError(
                {
                    "permission": _(
                        "%(value)r is not a permission: give one as app_label.codename, e.g. "
                        "'shop.view_order' (the permissions are listed under Authentication "
                        "and Authorization > Groups)."
                    )
                    % {"value": self.permission}
                }
            )

    def _clean_timeout(self) -> None:
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

    @property
    def decided_by(self) -> str:
        """Who decides each call before it runs: the user, an approver, both, or nobody (-).

        The admin's tool list ("decided by") and ``manage.py tools list`` both show this.
        """
        deciders = [
            str(label)
            for flag, label in (
                (self.requires_confirmation, _("user")),
                (self.requires_approval, _("approver")),
            )
            if flag
        ]
        return ", ".join(deciders) or "-"

    @property
    def search_tag_list(self) -> tuple[str, ...]:
        """The search tags, split at commas, blanks dropped."""
        return tuple(tag.strip() for tag in self.search_tags.split(",") if tag.strip())


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
            check_constraint(
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
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="tc_conv_owner_updated"),
            # The admin's list: newest first (its order ends with the pk), its date hierarchy.
            models.Index(fields=["updated_at", "id"], name="tc_conv_updated"),
        ]

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
        indexes = [
            # The admin overview's token usage per day: the model's messages of a day.
            models.Index(
                fields=["created_at"],
                condition=models.Q(role="assistant"),
                name="tc_msg_assistant_created",
            ),
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


class Deciders(models.TextChoices):
    """Who decides a waiting call: the turn's user, an approver, or both in that order."""

    APPROVER = "approver", _("An approver")
    USER = "user", _("The user")
    USER_THEN_APPROVER = "user+approver", _("The user, then an approver")


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
    augmented_arguments = models.JSONField(
        _("why the model called it"),
        default=dict,
        blank=True,
        help_text=_(
            "The fields argument augmentation asked the model for (its reason, its "
            "confidence...), as it filled them in; they are not part of the tool's arguments."
        ),
    )
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
    deciders = models.CharField(
        _("decided by whom"),
        max_length=16,
        choices=Deciders.choices,
        default=Deciders.APPROVER,
        help_text=_(
            "For a call that waits for a decision: the user's confirmation, an approver's "
            "approval, or both (the user first)."
        ),
    )
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("confirmed by"),
        help_text=_("The user who confirmed the call before an approver decided it."),
    )
    confirmed_at = models.DateTimeField(_("confirmed"), null=True, blank=True)
    definition_sha256 = models.CharField(
        _("definition decided on (SHA-256)"),
        max_length=64,
        blank=True,
        editable=False,
        help_text=_(
            "The tool's definition when the call started waiting: a decision is void once it "
            "changes."
        ),
    )
    decision_basis = models.CharField(
        _("rules decided under"),
        max_length=64,
        blank=True,
        editable=False,
        help_text=_(
            "A digest of the rules that asked for the decision (flags, policies): a decision is "
            "void once they change."
        ),
    )
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
    error_id = models.CharField(
        _("error id"),
        max_length=32,
        blank=True,
        db_index=True,
        help_text=_(
            "The id the model (and whoever reads the conversation) was given for an unexpected "
            "error instead of its detail; the server log names it too."
        ),
    )
    attempts = models.JSONField(
        _("earlier attempts"),
        default=list,
        blank=True,
        help_text=_(
            "The attempts before the last one of a call that was retried after transient "
            "errors: when each started, how it failed and how long the pause before the next "
            "was."
        ),
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
            # The audit list: newest first (its order ends with the pk), its date hierarchy.
            models.Index(fields=["created_at", "id"], name="tc_exec_created"),
            # A tool's usage per day: every column the counts, error rates and durations
            # read, so that they come from the index alone.
            models.Index(
                fields=["tool_name", "created_at", "is_error", "status", "duration_ms"],
                name="tc_exec_tool_usage",
            ),
            # The audit's search: each identifier exactly. (SQLite would not use a partial index
            # "not blank" for an equality, so these hold every row.)
            models.Index(fields=["tool_call_id"], name="tc_exec_call_id"),
            models.Index(fields=["task_id"], name="tc_exec_task_id"),
            models.Index(fields=["error_id"], name="tc_exec_error_id"),
            models.Index(fields=["worker"], name="tc_exec_worker"),
            # A tool's last error, however long ago.
            models.Index(
                fields=["tool_name", "created_at"],
                condition=models.Q(is_error=True),
                name="tc_exec_tool_errors",
            ),
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


class DiscoveredTool(models.Model):
    """A tool a conversation's tool search found: offered to the model from then on."""

    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        related_name="discovered_tools",
        verbose_name=_("conversation"),
    )
    name = models.CharField(
        _("tool name"), max_length=200, help_text=_("The tool the search found.")
    )
    found_at = models.DateTimeField(
        _("found"), help_text=_("When a search last found it (the newest finds are kept).")
    )

    class Meta:
        verbose_name = _("discovered tool")
        verbose_name_plural = _("discovered tools")
        ordering = ["conversation", "found_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "name"], name="tc_discovered_conversation_name"
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id}: {self.name}"


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
        permissions = [
            ("cancel_run", _("Can cancel another user's run")),
            ("retry_run", _("Can retry another user's run (with the tools it offers)")),
        ]
        indexes = [
            models.Index(fields=["conversation", "-created_at"], name="tc_run_conv_created"),
            models.Index(fields=["status", "-created_at"], name="tc_run_status_created"),
            # The retention purge: ended runs, oldest first.
            models.Index(fields=["finished_at"], name="tc_run_finished"),
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


class QuotaCounter(models.Model):
    """Calls of one tool counted in one quota window, for one user or for everyone (S8).

    Written only by ``tool_calling.calls.quotas``: one conditional UPDATE per call, so
    concurrent calls from any number of processes never exceed the quota.
    """

    tool_name = models.CharField(_("tool name"), max_length=200)
    scope = models.CharField(
        _("scope"),
        max_length=64,
        help_text=_("'user:<id>' for one user's calls, '*' for everyone's."),
    )
    window_start = models.DateTimeField(_("window start"))
    window_end = models.DateTimeField(_("window end"))
    count = models.PositiveIntegerField(_("calls"), default=0)

    class Meta:
        verbose_name = _("quota counter")
        verbose_name_plural = _("quota counters")
        constraints = [
            models.UniqueConstraint(
                fields=["tool_name", "scope", "window_start"], name="tc_quota_counter_window"
            )
        ]
        indexes = [models.Index(fields=["window_end"], name="tc_quota_counter_end")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.scope} {self.window_start:%Y-%m-%d %H:%M:%S}: {self.count}"


class RequestHistory(models.Model):
    """When a client's requests of one rate-limited kind came, within its rate's window (S24).

    Written only by ``tool_calling.api.throttling``: read with a row lock and written back in
    the same transaction, so concurrent requests from any number of processes never pass more
    than the rate allows. One row per scope and client.
    """

    key = models.CharField(
        _("key"),
        max_length=255,
        unique=True,
        help_text=_("The scope and the client, as DRF's throttles name them."),
    )
    times = models.JSONField(
        _("times"),
        default=list,
        help_text=_("When the requests within the window came (seconds since the epoch)."),
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("request history")
        verbose_name_plural = _("request histories")
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.key}: {len(self.times)}"


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


class StandingDecision(models.Model):
    """A decision that covers the next calls of one tool in one conversation.

    "Always allow get_invoice in this conversation": made with a decision on a waiting call,
    it lets later calls of that tool in that conversation run without asking, for the kind of
    decision it was (the user's confirmation or an approver's approval), as long as the tool's
    definition and the rules that asked are those it was made under. Revoking it, or a change
    of either, asks again.
    """

    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        related_name="standing_decisions",
        verbose_name=_("conversation"),
    )
    tool_name = models.CharField(_("tool"), max_length=64)
    stage = models.CharField(
        _("kind of decision"),
        max_length=16,
        choices=[("user", _("The user's confirmation")), ("approver", _("An approval"))],
    )
    definition_sha256 = models.CharField(_("definition (SHA-256)"), max_length=64)
    decision_basis = models.CharField(_("rules decided under"), max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("made by"),
    )
    created_from = models.ForeignKey(
        ToolExecution,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("made on the call"),
    )
    created_at = models.DateTimeField(_("made"), auto_now_add=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("standing decision")
        verbose_name_plural = _("standing decisions")
        indexes = [
            models.Index(fields=["conversation", "tool_name"], name="tc_standing_conv_tool"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.stage})"


class DecisionPolicy(models.Model):
    """An operator's rule that some calls wait for the user's confirmation or an approver.

    Matched at call time by the gate (``calls.policies``), on top of what each tool's code and
    row say: a policy can ask for more decisions, never fewer. Every criterion that is set must
    hold: the tool's name (a glob pattern), its source, the pinned ``destructiveHint`` of an MCP
    server's tool, and a condition on the call's arguments.
    """

    name = models.CharField(
        _("name"), max_length=200, help_text=_("What the policy is for, for operators.")
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    tool_pattern = models.CharField(
        _("tool name pattern"),
        max_length=200,
        blank=True,
        help_text=_(
            "A shell-style pattern of tool names (refund_*, github__delete_*); blank: any tool."
        ),
    )
    source = models.CharField(
        _("source"),
        max_length=200,
        blank=True,
        help_text=_(
            "Only tools of this source: an app label, or mcp:<alias> for an MCP server's tools; "
            "blank: any source."
        ),
    )
    destructive_only = models.BooleanField(
        _("destructive MCP tools only"),
        default=False,
        help_text=_(
            "Only tools of MCP servers whose pinned definition says destructiveHint: true (a "
            "server's hint can add a decision here, never remove one)."
        ),
    )
    condition = models.CharField(
        _("condition"),
        max_length=300,
        blank=True,
        help_text=_(
            "The dotted path of a function taking the call's arguments (a dict) and returning "
            "whether the policy applies (myapp.policies.large_amount); blank: every call."
        ),
    )
    requires_confirmation = models.BooleanField(
        _("requires the user's confirmation"),
        default=False,
        help_text=_("The person whose turn it is confirms each matching call before it runs."),
    )
    requires_approval = models.BooleanField(
        _("requires approval"),
        default=False,
        help_text=_("An approver approves each matching call (after the user, if both)."),
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["name", "pk"]
        verbose_name = _("decision policy")
        verbose_name_plural = _("decision policies")

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Check that the policy asks for something and that its condition can be imported."""
        errors: dict[str, Any] = {}
        if not self.requires_confirmation and not self.requires_approval:
            errors["requires_confirmation"] = _(
                "A policy must ask for the user's confirmation, an approval, or both."
            )
        if self.condition:
            try:
                found = import_string(self.condition)
            except ImportError:
                errors["condition"] = _("%(path)r cannot be imported.") % {"path": self.condition}
            else:
                if not callable(found):
                    errors["condition"] = _("%(path)r is not a function.") % {
                        "path": self.condition
                    }
        if errors:
            raise ValidationError(errors)


# --- MCP servers ----------------------------------------------------------------------------------

MCP_ALIAS_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,31}"
"""An alias or name prefix: it starts tool names, so it follows the MCP tool name rule."""

ENVIRONMENT_VARIABLE_PATTERN = r"[A-Z_][A-Z0-9_]{0,63}"
"""The name of an environment variable (never its value): upper case, as names are by
convention, which also turns away most pasted secrets (tokens mix cases and symbols)."""


class McpTransport(models.TextChoices):
    """How an MCP server is reached."""

    STDIO = "stdio", _("stdio (a subprocess)")
    STREAMABLE_HTTP = "streamable_http", _("Streamable HTTP (a URL)")


class McpServer(models.Model):
    """An MCP server whose tools are mirrored into ``Tool`` and governed like local tools.

    Secrets are never stored: ``env`` and ``headers`` map each variable or header to the *name*
    of an environment variable of the processes that connect (web, workers), read when they
    connect.
    """

    alias = models.CharField(
        _("alias"),
        max_length=32,
        unique=True,
        validators=[
            RegexValidator(
                f"^{MCP_ALIAS_PATTERN}$",
                _(
                    "An alias is 1-32 letters, digits, '_', '.' or '-', starting with a letter "
                    "or a digit."
                ),
            )
        ],
        help_text=_(
            "The server's name here: its tools have source 'mcp:<alias>' and, unless a name "
            "prefix is set, names starting with '<alias>_'."
        ),
    )
    transport = models.CharField(
        _("transport"), max_length=32, choices=McpTransport.choices, default=McpTransport.STDIO
    )
    command = models.CharField(
        _("command"),
        max_length=500,
        blank=True,
        help_text=_("stdio: the executable that starts the server (looked up on PATH)."),
    )
    args = models.JSONField(
        _("arguments"),
        default=list,
        blank=True,
        help_text=_('stdio: the command\'s arguments, a JSON list of strings, e.g. ["--local"].'),
    )
    env = models.JSONField(
        _("environment"),
        default=dict,
        blank=True,
        help_text=_(
            "stdio: variables for the server process, each mapped to the NAME of an environment "
            'variable of this process (upper case), e.g. {"GITHUB_TOKEN": "MCP_GITHUB_TOKEN"}. '
            "Never a value: secrets stay in the environment."
        ),
    )
    url = models.URLField(
        _("URL"),
        max_length=500,
        blank=True,
        help_text=_("Streamable HTTP: the server's MCP endpoint, e.g. https://example.com/mcp."),
    )
    headers = models.JSONField(
        _("headers"),
        default=dict,
        blank=True,
        help_text=_(
            "Streamable HTTP: headers sent with every request, each mapped to the NAME of an "
            'environment variable holding its whole value, e.g. {"Authorization": '
            '"MCP_SEARCH_AUTHORIZATION"}. Never a value.'
        ),
    )
    enabled = models.BooleanField(
        _("enabled"),
        default=True,
        help_text=_("A disabled server's tools are never offered and never run."),
    )
    name_prefix = models.CharField(
        _("name prefix"),
        max_length=32,
        blank=True,
        validators=[
            RegexValidator(
                f"^{MCP_ALIAS_PATTERN}$",
                _(
                    "A name prefix is 1-32 letters, digits, '_', '.' or '-', starting with a "
                    "letter or a digit."
                ),
            )
        ],
        help_text=_(
            "Tool names are '<prefix>_<name on the server>'; blank uses the alias. Two servers "
            "never share a prefix, so their tools never share a name."
        ),
    )
    timeout = models.PositiveIntegerField(
        _("timeout (seconds)"),
        default=30,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Longest wait for one request to the server (a call, a page of its tool list), "
            "connecting included; a tool's own timeout, if set, bounds its calls instead."
        ),
    )
    context_keys = models.JSONField(
        _("context keys sent"),
        default=list,
        blank=True,
        help_text=_(
            "Keys of the tool context sent to the server with each call (as _meta), e.g. "
            '["conversation_id"]. None by default: the server learns nothing about the user.'
        ),
    )
    allowed_groups = models.ManyToManyField(
        "auth.Group",
        verbose_name=_("allowed groups"),
        blank=True,
        related_name="+",
        help_text=_(
            "Only members of these groups may use the server's tools (on top of each tool's own "
            "groups); none selected = everyone the tool allows."
        ),
    )
    last_synced_at = models.DateTimeField(_("last synced"), null=True, blank=True, editable=False)
    last_sync_error = models.TextField(
        _("last sync error"),
        blank=True,
        editable=False,
        help_text=_("Why the last sync could not list the server's tools; blank when it could."),
    )
    trust_annotations = models.BooleanField(
        _("trust its annotations"),
        default=False,
        help_text=_(
            "Serve the title and hints (readOnlyHint, ...) this server gives its tools, as "
            "approved with each tool's pinned definition, to the clients of /mcp/. Off: they "
            "are shown to operators only. Never lifts approval or any other check."
        ),
    )
    protocol_version = models.CharField(
        _("protocol revision"),
        max_length=20,
        blank=True,
        editable=False,
        help_text=_(
            "The MCP revision spoken with the server at the last sync: 2026-07-28 (no handshake, "
            "no session) when the server answers server/discover, else the older one it "
            "negotiated with the initialize handshake. Blank before the first sync."
        ),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("MCP server")
        verbose_name_plural = _("MCP servers")
        ordering = ["alias"]
        constraints = [
            check_constraint(
                condition=models.Q(timeout__gte=1), name="tc_mcpserver_timeout_positive"
            )
        ]

    def __str__(self) -> str:
        return self.alias

    @property
    def prefix(self) -> str:
        """What the names of the server's tools start with (before ``_``)."""
        return self.name_prefix or self.alias

    @property
    def source(self) -> str:
        """The ``Tool.source`` of the server's tools: ``mcp:<alias>``."""
        return f"mcp:{self.alias}"

    def clean(self) -> None:
        """Check what the transport needs, and that env and headers name variables."""
        errors: dict[str, Any] = {}
        if self.transport == McpTransport.STDIO:
            if not self.command:
                errors["command"] = _("A stdio server needs the command that starts it.")
            if self.url:
                errors["url"] = _("A stdio server has no URL; clear it or choose Streamable HTTP.")
            if self.headers:
                errors["headers"] = _("Headers are for Streamable HTTP servers; clear them.")
        elif self.transport == McpTransport.STREAMABLE_HTTP:
            if not self.url:
                errors["url"] = _("A Streamable HTTP server needs its MCP endpoint URL.")
            if self.command or self.args or self.env:
                errors["command"] = _(
                    "Command, arguments and environment are for stdio servers; clear them."
                )
            if self.url and urlsplit(self.url).password is not None:
                errors["url"] = _(
                    "The URL carries a password: put credentials in a header instead, named "
                    'by an environment variable ({"Authorization": "MCP_TOKEN"}).'
                )
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            errors["args"] = _('The arguments must be a JSON list of strings, e.g. ["--local"].')
        for field in ("env", "headers"):
            problem = _variable_names_problem(getattr(self, field))
            if problem:
                errors[field] = problem
        keys = self.context_keys
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            errors["context_keys"] = _(
                'The context keys must be a JSON list of key names, e.g. ["conversation_id"].'
            )
        if "name_prefix" not in errors and "alias" not in errors and self.alias:
            clash = (
                McpServer.objects.exclude(pk=self.pk)
                .filter(
                    models.Q(name_prefix=self.prefix) | models.Q(name_prefix="", alias=self.prefix)
                )
                .values_list("alias", flat=True)
                .first()
            )
            if clash is not None:
                errors["name_prefix"] = _(
                    "The MCP server %(other)r already names its tools '%(prefix)s_...'; choose "
                    "another prefix so the tools of the two servers keep apart."
                ) % {"other": clash, "prefix": self.prefix}
        if errors:
            raise ValidationError(errors)


def _variable_names_problem(mapping: Any) -> Any:
    """Why ``mapping`` is not ``{name: ENVIRONMENT_VARIABLE_NAME}``; ``None`` when it is."""
    if not isinstance(mapping, dict):
        return _('Give a JSON object of names, e.g. {"TOKEN": "MCP_TOKEN"}.')
    pattern = re.compile(ENVIRONMENT_VARIABLE_PATTERN)
    for key, value in mapping.items():
        if not isinstance(value, str) or pattern.fullmatch(value) is None:
            return _(
                "%(key)r must name an environment variable (upper-case letters, digits and '_', "
                "e.g. MCP_TOKEN), not give its value: secrets are never stored here, only the "
                "name of the variable that holds them."
            ) % {"key": key}
    return None


class McpServerTool(models.Model):
    """The link of a ``Tool`` to the MCP server tool it mirrors, with its pinned definition.

    The approved definition is the ``Tool``'s name, description and input schema plus the
    title, output schema and annotations here; ``Tool.schema_hash`` is its SHA-256. When the
    server lists something else, the tool is disabled and does not run until an operator
    approves the new definition (``listed``).
    """

    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="tools", verbose_name=_("MCP server")
    )
    tool = models.OneToOneField(
        Tool, on_delete=models.CASCADE, related_name="mcp", verbose_name=_("tool")
    )
    server_name = models.CharField(
        _("name on the server"),
        max_length=500,
        help_text=_("What the server calls the tool (the model sees the tool's name)."),
    )
    title = models.CharField(_("title"), max_length=500, blank=True)
    output_schema = models.JSONField(_("output schema"), null=True, blank=True)
    annotations = models.JSONField(
        _("annotations"),
        default=dict,
        blank=True,
        help_text=_(
            "The server's hints (readOnlyHint, destructiveHint, ...): shown, never trusted. A "
            "tool that claims to be read-only still needs approval if its tool requires it."
        ),
    )
    changed = models.BooleanField(
        _("changed on the server"),
        default=False,
        help_text=_(
            "The server now describes the tool differently from the approved definition: it "
            "does not run until an operator approves the new one."
        ),
    )
    listed = models.JSONField(
        _("definition listed by the server"),
        default=dict,
        blank=True,
        editable=False,
        help_text=_("While changed: what the server lists now, waiting for approval."),
    )
    listed_hash = models.CharField(_("listed hash"), max_length=64, blank=True, editable=False)
    changed_at = models.DateTimeField(_("changed"), null=True, blank=True, editable=False)
    enabled_before_change = models.BooleanField(
        _("enabled before the change"),
        default=False,
        editable=False,
        help_text=_("Approving the new definition enables the tool again if it was enabled."),
    )
    approved_at = models.DateTimeField(_("approved"), null=True, blank=True, editable=False)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
        verbose_name=_("approved by"),
        help_text=_("Who approved the current definition; empty for the first sync."),
    )

    class Meta:
        verbose_name = _("MCP tool")
        verbose_name_plural = _("MCP tools")
        ordering = ["server", "server_name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "server_name"], name="tc_mcptool_server_name")
        ]

    def __str__(self) -> str:
        return f"{self.server.alias}: {self.server_name}"
