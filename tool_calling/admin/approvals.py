"""The approval queue: calls waiting for a person, approved or denied one by one or in bulk."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tool_calling import models
from tool_calling._compat import log_actions
from tool_calling.admin.display import admin_url, conversation_link, pretty
from tool_calling.admin.forms import DecisionForm, DenyForm, editable_arguments, same_arguments
from tool_calling.admin.messages import (
    APPROVED_CALLS,
    DENIED_CALLS,
    ActionText,
)
from tool_calling.calls import approvals
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError

# How much of a call's arguments the queue shows per row (the decision page shows them all).
ARGUMENTS_PREVIEW_CHARS = 120


@admin.register(models.PendingApproval)
class ApprovalQueueAdmin(admin.ModelAdmin):
    """The calls awaiting a person's approval, oldest first: approve them or deny them.

    A call is approved with the model's arguments or with arguments the approver edited
    (checked against the tool's schema), or denied with a reason the model reads.

    Who may decide is :func:`tool_calling.calls.approvals.can_decide` (the ``approve_toolexecution``
    permission; superusers have it), the rule the API applies too; the admin site itself still
    admits staff only, so here an approver is staff holding it. Every decision goes through
    :mod:`tool_calling.calls.approvals`, so two approvers deciding at once cannot both win (the
    second is told the call was skipped), and is written to the admin log of the call's audit row.
    Everything shown is escaped.
    """

    list_display = (
        "tool_name",
        "user",
        "deciders",
        "conversation_link",
        "run_link",
        "arguments_preview",
        "created_at",
        "approval_expires_at",
    )
    list_display_links = ("tool_name",)
    list_filter = ("tool_name",)
    list_select_related = ("user", "conversation", "run")
    search_fields = ("tool_name", "tool_call_id")
    ordering = ("created_at", "pk")
    actions = ("approve_selected", "deny_selected")
    change_list_template = "tool_calling/admin/approval/change_list.html"
    decision_template = "tool_calling/admin/approval/decision.html"
    deny_confirmation_template = "tool_calling/admin/approval/deny_confirmation.html"

    # -- queryset and columns --------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.PendingApproval]:
        """The calls awaiting approval (``approvals.pending_approvals``)."""
        return super().get_queryset(request).filter(status=models.ExecutionStatus.AWAITING_APPROVAL)

    @admin.display(description=_("conversation"), ordering="conversation")
    def conversation_link(self, obj: models.ToolExecution) -> str:
        """The conversation, linked to its transcript."""
        return conversation_link(obj, self.get_empty_value_display())

    @admin.display(description=_("run"), ordering="run")
    def run_link(self, obj: models.ToolExecution) -> str:
        """The run waiting for the call (its id's start and status), linked when it has a page."""
        if obj.run is None:
            return self.get_empty_value_display()
        label = f"{str(obj.run.pk)[:8]} ({obj.run.get_status_display()})"
        url = admin_url(obj.run)
        if url is None:
            return label
        return format_html('<a href="{}">{}</a>', url, label)

    @admin.display(description=_("arguments"))
    def arguments_preview(self, obj: models.ToolExecution) -> str:
        """The start of the arguments, on one line, escaped."""
        if not obj.arguments:
            return self.get_empty_value_display()
        text = Truncator(" ".join(obj.arguments.split())).chars(ARGUMENTS_PREVIEW_CHARS)
        return format_html('<code class="tool-calling-arguments">{}</code>', text)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The queue, titled as one (not "Select call awaiting approval to change")."""
        context = {"title": _("Approval queue: calls awaiting a decision, oldest first")}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    # -- permissions -----------------------------------------------------------------------------

    def has_module_permission(self, request: HttpRequest) -> bool:
        """The queue is listed on the admin index for whoever may decide."""
        return approvals.can_decide(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may decide sees the queue (``approvals.can_decide``)."""
        return approvals.can_decide(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deciding is the only change; whoever may decide may (``approvals.can_decide``)."""
        return approvals.can_decide(request.user)

    def has_decide_permission(self, request: HttpRequest) -> bool:
        """The permission of the approve and deny actions."""
        return approvals.can_decide(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Calls are made by runs, never here."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A waiting call is denied, never deleted (its run waits for it)."""
        return False

    def _require_decide(self, request: HttpRequest) -> None:
        # get_actions() already hides the actions; this guards direct calls and custom views.
        if not self.has_decide_permission(request) or request.user.pk is None:
            raise PermissionDenied

    # -- deciding --------------------------------------------------------------------------------

    def _selected(
        self, request: HttpRequest, queryset: QuerySet[models.PendingApproval]
    ) -> tuple[list[models.ToolExecution], int]:
        """The calls chosen for an action, in any state, and how many chosen ids are gone.

        The action's queryset holds only the calls still awaiting approval; a call chosen on the
        page and decided since (by someone else, or the sweeper) is taken too, so that it is
        reported as skipped instead of vanishing from the count.
        """
        ids = set(queryset.values_list("pk", flat=True))
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                ids.add(int(value))
            except ValueError:
                continue
        rows = list(models.ToolExecution.objects.filter(pk__in=ids).order_by("created_at", "pk"))
        return rows, len(ids) - len(rows)

    def _log(self, request: HttpRequest, execution_id: int, message: str) -> None:
        """Write the decision to the admin log of the call's audit row (its history)."""
        user_id = request.user.pk
        if user_id is None:  # admin views require a logged-in user; never log anonymously
            raise PermissionDenied
        log_actions(
            user_id=user_id,
            queryset=list(models.ToolExecution.objects.filter(pk=execution_id)),
            action_flag=CHANGE,
            change_message=message,
            single_object=True,
        )

    def _decide_each(
        self,
        request: HttpRequest,
        rows: list[models.ToolExecution],
        gone: int,
        decide: Callable[[models.ToolExecution], object],
        text: ActionText,
    ) -> None:
        """Apply ``decide`` to each call, log each decision, and report done and skipped."""
        done, skipped, forbidden = 0, gone, 0
        for row in rows:
            try:
                decide(row)
            except approvals.ApprovalForbiddenError:
                forbidden += 1
                continue
            except (approvals.ApprovalStateError, models.ToolExecution.DoesNotExist):
                skipped += 1
                continue
            self._log(request, row.pk, text.log)
            done += 1
        self._report(request, text, done, skipped)
        if forbidden:
            self.message_user(
                request,
                ngettext(
                    "%(count)d call was left waiting: you asked for it yourself, so another "
                    "person must approve it, or it waits for the confirmation of the person "
                    "who asked for it.",
                    "%(count)d calls were left waiting: you asked for them yourself, so another "
                    "person must approve them, or they wait for the confirmation of the people "
                    "who asked for them.",
                    forbidden,
                )
                % {"count": forbidden},
                messages.WARNING,
            )

    def _report(self, request: HttpRequest, text: ActionText, done: int, skipped: int) -> None:
        parts = []
        if done:
            parts.append(text.done % {"count": done})
        if skipped:
            parts.append(text.unchanged % {"count": skipped})
        if parts:
            level = messages.WARNING if skipped else messages.SUCCESS
            self.message_user(request, " ".join(parts), level)

    @admin.action(permissions=["decide"], description=_("Approve selected calls"))
    def approve_selected(
        self, request: HttpRequest, queryset: QuerySet[models.PendingApproval]
    ) -> None:
        """Approve the calls with the model's arguments; each runs now, its run goes on after."""
        self._require_decide(request)
        rows, gone = self._selected(request, queryset)
        self._decide_each(
            request,
            rows,
            gone,
            lambda row: approvals.approve(row, user=request.user),
            APPROVED_CALLS,
        )

    @admin.action(permissions=["decide"], description=_("Deny selected calls"))
    def deny_selected(
        self, request: HttpRequest, queryset: QuerySet[models.PendingApproval]
    ) -> HttpResponse | None:
        """Ask for a reason on a confirmation page, then deny the calls with it."""
        self._require_decide(request)
        confirmed = request.POST.get("post") == "yes"
        form = DenyForm(request.POST if confirmed else None)
        if confirmed and form.is_valid():
            rows, gone = self._selected(request, queryset)
            reason = form.cleaned_data["reason"]
            self._decide_each(
                request,
                rows,
                gone,
                lambda row: approvals.deny(row, user=request.user, reason=reason),
                DENIED_CALLS,
            )
            return None
        calls = list(queryset.select_related("user", "conversation"))
        if not calls:  # every chosen call was decided meanwhile: nothing to confirm
            rows, gone = self._selected(request, queryset)
            self._report(request, DENIED_CALLS, 0, len(rows) + gone)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": _("Deny tool calls"),
            "subtitle": None,
            "opts": self.opts,
            "calls": [{"call": call, "arguments": pretty(call.arguments)} for call in calls],
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action_name": "deny_selected",
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.deny_confirmation_template, context)

    # -- the decision page -------------------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """One call: its details, its arguments to edit, Approve or Deny (with a reason)."""
        self._require_decide(request)
        call = self.get_object(request, unquote(object_id))
        if call is None:
            return self._not_waiting(request, object_id)
        shown = editable_arguments(call.arguments)
        if request.method == "POST":
            form = DecisionForm(request.POST)
            if form.is_valid():
                response = self._decide(request, call, form, shown)
                if response is not None:
                    return response
        else:
            form = DecisionForm(initial={"arguments": shown})
        exact = (call.payload or {}).get("arguments")
        tool = call.tool
        may_approve = approvals.may_decide(request.user, call)
        waits_for = ""
        if not may_approve:
            if approvals.stage(call) == approvals.USER:
                waits_for = _(
                    "This call waits for the confirmation of %(user)s, who asked for it; only "
                    "they can confirm it. You may still deny it."
                ) % {"user": call.user or _("its user")}
            else:
                waits_for = str(
                    _(
                        "You asked for this call yourself, so another person must approve it. "
                        "You may still deny it."
                    )
                )
        context = {
            "may_approve": may_approve,
            "waits_for": waits_for,
            **self.admin_site.each_context(request),
            "title": _("Approve or deny a tool call"),
            "subtitle": call.tool_name,
            "opts": self.opts,
            "original": call,
            "call": call,
            "form": form,
            "conversation_link": self.conversation_link(call),
            "run_link": self.run_link(call),
            "tool_description": tool.description if tool is not None else "",
            "input_schema": pretty(tool.input_schema) if tool is not None else "",
            # The audit's text may be redacted or cut; the call itself keeps the exact one.
            "arguments_abridged": exact is not None and not same_arguments(exact, shown),
            "audit_url": (
                admin_url(models.ToolExecution(pk=call.pk))
                if request.user.has_perm("tool_calling.view_toolexecution")
                else None
            ),
            "has_view_permission": True,
            "preserved_filters": self.get_preserved_filters(request),
            "media": self.media + form.media,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.decision_template, context)

    def _decide(
        self,
        request: HttpRequest,
        call: models.PendingApproval,
        form: DecisionForm,
        shown: str,
    ) -> HttpResponse | None:
        """Apply the decision posted for ``call``; ``None`` re-shows the form with its errors."""
        reason = form.cleaned_data["reason"]
        name = call.tool_name
        try:
            if "_deny" in request.POST:
                approvals.deny(call, user=request.user, reason=reason)
                self._log(request, call.pk, "Denied.")
                message = _("The call to tool “%(name)s” was denied; the model is told so.")
            elif "_approve" in request.POST:
                arguments = form.cleaned_data["arguments"]
                edited = not same_arguments(arguments, shown)
                approvals.approve(
                    call, user=request.user, arguments=arguments if edited else None, note=reason
                )
                if edited:
                    self._log(request, call.pk, "Approved with edited arguments.")
                    message = _(
                        "The call to tool “%(name)s” was approved with your arguments; it runs now."
                    )
                else:
                    self._log(request, call.pk, "Approved.")
                    message = _("The call to tool “%(name)s” was approved; it runs now.")
            else:
                form.add_error(None, _("Choose Approve or Deny."))
                return None
        except approvals.ApprovalForbiddenError as exc:
            # Not an error in the form: this person may not take this decision. Said as such,
            # and the call stays waiting.
            self.message_user(request, str(exc), messages.WARNING)
            return self._back_to_queue(request)
        except approvals.DecisionVoidError as exc:
            self.message_user(request, str(exc), messages.WARNING)
            return self._back_to_queue(request)
        except approvals.ApprovalStateError:
            return self._not_waiting(request, str(call.pk))
        except ToolArgumentsError as exc:
            form.add_error("arguments", str(exc))
            return None
        except ToolCallingError as exc:  # the tool is no longer installed
            form.add_error(None, str(exc))
            return None
        self.message_user(request, message % {"name": name}, messages.SUCCESS)
        return self._back_to_queue(request)

    def _back_to_queue(self, request: HttpRequest) -> HttpResponseRedirect:
        from django.contrib.admin.templatetags.admin_urls import add_preserved_filters

        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        preserved: dict[str, Any] = {
            "preserved_filters": self.get_preserved_filters(request),
            "opts": self.opts,
        }
        return HttpResponseRedirect(add_preserved_filters(preserved, url))

    def _not_waiting(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Back to the queue, saying what became of a call that is no longer waiting."""
        try:
            call = (
                models.ToolExecution.objects.select_related("decided_by")
                .filter(pk=unquote(object_id))
                .first()
            )
        except (ValueError, TypeError):
            call = None
        if call is None:
            self.message_user(
                request,
                _("No tool call with ID “%(id)s” exists. Perhaps it was deleted?")
                % {"id": object_id},
                messages.WARNING,
            )
            return self._back_to_queue(request)
        state = call.get_approval_display() if call.approval else call.get_status_display()
        if call.decided_by is not None:
            state = _("%(state)s by %(user)s") % {"state": state, "user": call.decided_by}
        self.message_user(
            request,
            _("The call to tool “%(name)s” is no longer awaiting approval: %(state)s.")
            % {"name": call.tool_name, "state": state},
            messages.WARNING,
        )
        return self._back_to_queue(request)
