"""The API's views: tools, conversations (and the turns sent to them), runs.

Every view requires the permissions of ``TOOL_CALLING["API"]["PERMISSION_CLASSES"]``
(default: an authenticated user), whatever the project's DRF defaults say, and reads through
the owner-scoped querysets of ``tool_calling.api.permissions`` (S14).
Failures are ``APIException`` subclasses, so clients get a status code and a ``detail``
(``tool_calling.api.errors``: a 400 also lists the ``errors`` by field).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from tool_calling import models, runs
from tool_calling.api import serializers
from tool_calling.api._digits import MAX_WHOLE_NUMBER, whole_number
from tool_calling.api.errors import exception_handler
from tool_calling.api.parsers import PARSERS
from tool_calling.api.permissions import (
    IsOwnerOrPermitted,
    configured_permissions,
    visible_conversations,
    visible_executions,
    visible_runs,
)
from tool_calling.api.schema import errors
from tool_calling.api.throttling import RateLimiterUnavailable, TurnRateThrottle
from tool_calling.calls import approvals
from tool_calling.conversations import ConversationBusyError
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError
from tool_calling.resolvers import GovernedTools

__all__ = [
    "BrokerUnavailable",
    "CeleryUnavailable",
    "RateLimiterUnavailable",
    "ConversationBusy",
    "ConversationViewSet",
    "Pagination",
    "RunEnded",
    "RunViewSet",
    "ToolExecutionViewSet",
    "ToolViewSet",
    "TurnRateThrottle",
]

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.25
"""How often ``?wait=N`` looks at the run again."""

_MAX_SEQUENCE = 2**31 - 1
"""The largest ``Message.sequence`` (a ``PositiveIntegerField``)."""


# -- failures -----------------------------------------------------------------------------------


class ConversationBusy(APIException):
    """409: another turn holds the conversation."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = (
        "This conversation is already answering another message; send this one when that turn "
        "has ended."
    )
    default_code = "conversation_busy"


class BrokerUnavailable(APIException):
    """503: the turn's first step could not be queued; the message and the run are saved."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = (
        "The turn could not be queued: the message broker is unavailable. Your message and "
        "the run are saved; the run is marked failed and can be retried."
    )
    default_code = "broker_unavailable"


class CeleryUnavailable(APIException):
    """503: the server cannot send turns to Celery (not installed, no broker); nothing saved."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The turn was not started: the server cannot send turns to Celery workers."
    default_code = "celery_unavailable"


def _celery_unavailable(exc: runs.CeleryUnavailableError, what: str) -> CeleryUnavailable:
    """The 503 naming the cause ``manage.py check`` reports, for ``what`` was not done."""
    problem = exc.problem
    return CeleryUnavailable(
        f"{what}: turns run as Celery tasks, and {problem.text} (manage.py check reports it as "
        f"{problem.check_id})."
    )


# -- shared pieces ------------------------------------------------------------------------------


class Pagination(PageNumberPagination):
    """Pages of 20; ``?page=N``."""

    page_size = 20


class _ErrorShape:
    """Every failure answers a ``detail`` (``tool_calling.api.errors``)."""

    def get_exception_handler(self) -> Callable[..., Response | None]:
        """The API's handler, whatever ``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` names."""
        return exception_handler


class _Governed:
    """Views that require ``API["PERMISSION_CLASSES"]`` on top of their own object rules."""

    permission_classes: list[type[BasePermission]] = [IsOwnerOrPermitted]

    def get_permissions(self) -> list[BasePermission]:
        """The configured permissions, then the view's own (owners, approvers)."""
        return [*configured_permissions(), *(cls() for cls in self.permission_classes)]


_INVALID_PAGE = (404, "`?page=` is not a page of the list.")


# -- tools --------------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(responses={200: serializers.ToolSerializer(many=True), **errors(401)}),
)
class ToolViewSet(_ErrorShape, _Governed, viewsets.ViewSet):
    """``GET tools/``: the tools the requesting user may use (enabled, in their groups)."""

    parser_classes = PARSERS

    def list(self, request: Request) -> Response:
        """Name, description, input schema and approval gate of each tool, in registry order."""
        tools = GovernedTools(request.user)
        entries = [
            {
                "name": callback.definition.name,
                "description": callback.definition.description,
                "input_schema": callback.definition.input_schema,
                "requires_approval": bool(
                    tools.rows[callback.definition.name].requires_approval
                    or callback.metadata.requires_approval
                ),
            }
            for callback in tools.callbacks()
        ]
        return Response(serializers.ToolSerializer(entries, many=True).data)


# -- conversations ------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        description="The user's conversations (every one with the permission "
        "`tool_calling.view_conversation`), most recently updated "
        "first, in pages of 20.",
        responses={200: serializers.ConversationSerializer, **errors(401, _INVALID_PAGE)},
    ),
    create=extend_schema(
        description="Start a conversation; the requesting user owns it.",
        responses={201: serializers.ConversationSerializer, **errors(400, 401, 403, 413)},
    ),
    retrieve=extend_schema(
        description="A conversation with its messages in order, tool calls and tool "
        "responses included; `?after=N` includes only the messages after sequence N (what a "
        "client following a run has not read yet).",
        parameters=[
            OpenApiParameter(
                "after",
                {"type": "integer", "minimum": 0, "maximum": MAX_WHOLE_NUMBER},
                OpenApiParameter.QUERY,
                description="Only the messages whose `sequence` is greater than this.",
            ),
        ],
        responses={
            200: serializers.ConversationDetailSerializer,
            **errors((400, "`?after=` is not a message sequence (digits 0-9)."), 401, 404),
        },
    ),
    destroy=extend_schema(
        description="Delete a conversation, its messages and runs.",
        responses={
            204: OpenApiResponse(description="Deleted."),
            **errors(
                401,
                403,
                404,
                (409, "A run is answering in the conversation: cancel it or wait for it to end."),
            ),
        },
    ),
)
class ConversationViewSet(
    _ErrorShape,
    _Governed,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """The user's conversations; ``POST {id}/messages/`` starts a turn in one."""

    parser_classes = PARSERS
    pagination_class = Pagination
    serializer_class = serializers.ConversationSerializer
    throttle_scope: str | None = None
    """Set on the ``messages`` action only: ``tool_calling_turns``."""

    def get_queryset(self) -> QuerySet[models.Conversation]:
        """The requesting user's conversations (all with ``view_conversation``), newest first."""
        conversations = visible_conversations(self.request.user)
        if self.action == "retrieve":
            messages = models.Message.objects.order_by("sequence")
            after = self.request.query_params.get("after")
            if after is not None:
                messages = messages.filter(sequence__gt=_message_sequence(after))
            conversations = conversations.prefetch_related(Prefetch("messages", queryset=messages))
        return conversations.order_by("-updated_at", "-created_at")

    def get_serializer_class(self) -> type[Any]:
        """With messages for one conversation; the turn's body for ``messages``."""
        if self.action == "retrieve":
            return serializers.ConversationDetailSerializer
        if self.action == "messages":
            return serializers.TurnSerializer
        return serializers.ConversationSerializer

    def perform_create(self, serializer: Any) -> None:
        """The requesting user owns the new conversation."""
        serializer.save(owner=self.request.user)

    def perform_destroy(self, instance: models.Conversation) -> None:
        """Delete, unless a run is answering in the conversation (409)."""
        if instance.runs.exclude(status__in=models.RUN_TERMINAL_STATUSES).exists():
            raise ConversationBusy(
                "This conversation is answering a message; cancel the run or wait for it to end "
                "before deleting the conversation."
            )
        instance.delete()

    @extend_schema(
        request=serializers.TurnSerializer,
        parameters=[
            OpenApiParameter(
                "wait",
                {"type": "integer", "minimum": 1},
                OpenApiParameter.QUERY,
                description="Seconds to wait for the run to end (or to pause for an approval) "
                'before answering; at most `TOOL_CALLING["API"]["MAX_WAIT_SECONDS"]`.',
            ),
            OpenApiParameter(
                "Location",
                OpenApiTypes.URI,
                OpenApiParameter.HEADER,
                description="The run's URL.",
                response=[200, 202],
            ),
            OpenApiParameter(
                "Retry-After",
                OpenApiTypes.INT,
                OpenApiParameter.HEADER,
                description="Seconds until a new turn is accepted.",
                response=[429],
            ),
        ],
        responses={
            202: OpenApiResponse(
                serializers.RunSerializer,
                description="The turn started (or, with `?wait`, had not ended in time): "
                "follow the run's URL or its events.",
            ),
            200: OpenApiResponse(
                serializers.RunDetailSerializer,
                description="With `?wait`: the run, which ended within the wait, with its "
                "events and tool calls. (A run that paused for an approval answers 202 at once.)",
            ),
            **errors(
                400,
                401,
                (
                    403,
                    "Only the conversation's owner may send messages into it (staff included); "
                    "or a session-authenticated request without its CSRF token.",
                ),
                404,
                (409, "Another turn is running in this conversation: send when it ended."),
                413,
                429,
                (
                    503,
                    "The turn could not be queued (the message broker is unavailable); the "
                    "message and the run are saved, the run is failed and can be retried. Or "
                    "the database that counts turns for the rate limit did not answer, or the "
                    "server cannot send turns to Celery (not installed, no broker): nothing is "
                    "saved.",
                ),
            ),
        },
    )
    @action(
        detail=True,
        methods=["post"],
        url_path="messages",
        throttle_classes=[TurnRateThrottle],
        throttle_scope="tool_calling_turns",
    )
    def messages(self, request: Request, pk: str | None = None) -> Response:
        """Store the message and start the turn that answers it.

        202 with the run, or 200 once the run ended when ``?wait=N`` (seconds) was given and
        it ended within them.
        """
        conversation = self.get_object()
        query = serializers.WaitSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        body = self.get_serializer(data=request.data)
        # The JSON parser takes objects only, and form bodies are QueryDicts: a mapping either way.
        if isinstance(request.data, Mapping) and "tools" in request.data:
            body.context["available_tools"] = list(GovernedTools(request.user).available)
        body.is_valid(raise_exception=True)
        try:
            run = runs.start_turn(
                conversation,
                body.validated_data["text"],
                user=request.user,
                tool_names=body.validated_data.get("tools"),
            )
        except runs.CeleryUnavailableError as exc:
            raise _celery_unavailable(exc, "The turn was not started, nothing was saved") from exc
        except ConversationBusyError as exc:
            raise ConversationBusy() from exc
        except runs.RunQueueError as exc:
            raise BrokerUnavailable(
                "The turn could not be queued: the message broker is unavailable. Your message "
                f"and run {exc.run.pk} are saved; the run is marked failed and can be retried."
            ) from exc
        wait = query.validated_data.get("wait")
        if wait:
            run = _wait_for(run, wait)
        context = self.get_serializer_context()
        # Without ?wait the answer is 202 even if the run already ended (eager Celery): a
        # client polls the run's URL either way.
        ended = bool(wait) and run.status in models.RUN_TERMINAL_STATUSES
        serializer_class = serializers.RunDetailSerializer if ended else serializers.RunSerializer
        data = serializer_class(run, context=context).data
        return Response(
            data,
            status=status.HTTP_200_OK if ended else status.HTTP_202_ACCEPTED,
            headers={"Location": data["urls"]["self"]},
        )


def _message_sequence(raw: str) -> int:
    """``?after=`` of a conversation: a message sequence in ASCII digits (else a 400 naming it)."""
    value = whole_number(raw)
    if value is None:
        raise ValidationError(
            {"after": [f"Expected a message sequence number (digits 0-9), got {raw!r}."]}
        )
    # Beyond the largest sequence a message can have, nothing comes after.
    return min(value, _MAX_SEQUENCE)


def _wait_for(run: models.Run, seconds: int) -> models.Run:
    """The run, read again until it ended, waits for an approval, or ``seconds`` passed."""
    deadline = time.monotonic() + seconds
    while True:
        run.refresh_from_db()
        if (
            run.status in models.RUN_TERMINAL_STATUSES
            or run.status == models.RunStatus.AWAITING_APPROVAL
        ):
            return run
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return run
        time.sleep(min(_POLL_SECONDS, remaining))


# -- runs ---------------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        description="The runs of the user's conversations (every one with the permission "
        "`tool_calling.view_run`), newest "
        "first, in pages of 20.",
        parameters=[
            OpenApiParameter(
                "status",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                enum=models.RunStatus.values,
                description="Only the runs in this status.",
            ),
        ],
        responses={
            200: serializers.RunSerializer,
            **errors((400, "`?status=` is not a run status."), 401, _INVALID_PAGE),
        },
    ),
    retrieve=extend_schema(
        description="A run with its events and a summary of its tool calls.",
        responses={200: serializers.RunDetailSerializer, **errors(401, 404)},
    ),
)
class RunViewSet(_ErrorShape, _Governed, viewsets.ReadOnlyModelViewSet):
    """The user's runs (``?status=`` filters the list); ``POST {id}/cancel/`` stops one."""

    parser_classes = PARSERS
    pagination_class = Pagination

    def get_queryset(self) -> QuerySet[models.Run]:
        """The runs of the user's conversations (all with ``view_run``); ``?status=`` filters."""
        found = visible_runs(self.request.user).select_related("conversation")
        if self.action == "retrieve":
            found = found.prefetch_related(
                Prefetch("events", queryset=models.RunEvent.objects.order_by("sequence")),
                Prefetch("tool_executions", queryset=models.ToolExecution.objects.order_by("pk")),
            )
        if self.action == "list":
            wanted = self.request.query_params.get("status")
            if wanted is not None:
                if wanted not in models.RunStatus.values:
                    choices = ", ".join(models.RunStatus.values)
                    raise ValidationError(
                        {"status": [f"Unknown status {wanted!r}; one of: {choices}."]}
                    )
                found = found.filter(status=wanted)
        return found.order_by("-created_at")

    def get_serializer_class(self) -> type[Any]:
        """Summaries in lists; events and tool calls for one run."""
        if self.action == "list":
            return serializers.RunSerializer
        return serializers.RunDetailSerializer

    @extend_schema(
        request=None,
        responses={
            202: OpenApiResponse(serializers.RunSerializer, description="Cancelling was asked."),
            **errors(401, 403, 404, (409, "The run already ended.")),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Ask the run to stop (its next step ends it ``cancelled``); 409 if it already ended."""
        run = self.get_object()
        asked = runs.cancel_run(run, user=request.user)
        run.refresh_from_db()
        if not asked and run.status in models.RUN_TERMINAL_STATUSES:
            raise RunEnded(f"The run already ended ({run.status}); there is nothing to cancel.")
        data = serializers.RunSerializer(run, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=None,
        responses={
            202: OpenApiResponse(serializers.RunSerializer, description="The run is queued again."),
            **errors(
                401,
                403,
                404,
                (409, "The run did not fail, or another turn is running in its conversation."),
                (
                    503,
                    "The run could not be queued: the message broker is unavailable, or the "
                    "server cannot send turns to Celery (not installed, no broker).",
                ),
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """Queue a failed run again (it continues from what is stored): 202 with the run.

        409 unless the run failed, or while another turn holds the conversation; 503 when the
        broker is still unavailable.
        """
        run = self.get_object()
        try:
            run = runs.retry_run(run)
        except ValueError as exc:
            raise RunNotRetryable(str(exc)) from exc
        except runs.CeleryUnavailableError as exc:
            raise _celery_unavailable(exc, f"Run {run.pk} was not queued again") from exc
        except ConversationBusyError as exc:
            raise ConversationBusy() from exc
        except runs.RunQueueError as exc:
            raise BrokerUnavailable(
                f"The run could not be queued again: the message broker is unavailable. Run "
                f"{exc.run.pk} stays failed; retry it later."
            ) from exc
        data = serializers.RunSerializer(run, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_202_ACCEPTED)


class RunEnded(APIException):
    """409: the run already ended."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The run already ended; there is nothing to cancel."
    default_code = "run_ended"


class RunNotRetryable(APIException):
    """409: only failed runs are retried."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "Only a failed run can be retried."
    default_code = "run_not_retryable"


# -- tool executions and approvals --------------------------------------------------------------


class NotAwaitingApproval(APIException):
    """409: the call is not waiting for a decision (decided, expired, or never gated)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "This tool call is not awaiting approval."
    default_code = "not_awaiting_approval"


class CanDecide(IsOwnerOrPermitted):
    """Reads for whoever sees the call; decisions for approvers and the call's own user.

    Approve: an approver, or the person whose turn made the call (who confirms it when it
    waits for their confirmation; ``approvals.approve`` refuses the rest with a reason). Deny:
    an approver, or that person while the call waits for their confirmation. Everyone else:
    403.
    """

    message = (
        "Only approvers, and the person who asked for a call when it waits for their "
        "confirmation, may decide tool calls; being staff is not enough."
    )

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        """Approvers and the call's own user may decide; reads were scoped by the queryset."""
        action = getattr(view, "action", None)
        if action == "approve":
            user = request.user
            own = obj.user_id is not None and obj.user_id == getattr(user, "pk", None)
            return approvals.can_decide(user) or (own and getattr(user, "is_active", True))
        if action == "deny":
            return approvals.may_deny(request.user, obj)
        return True


_EXECUTION_READ = (
    "Approvers (holders of the permission `tool_calling.approve_toolexecution`; superusers "
    "have it) also see the gated calls of every user (those that needed a decision), with "
    "`arguments` and `original_arguments`, as in `ReviewedToolExecution`; other users' ungated "
    "calls stay out of their view."
)
_DECISION_REFUSED = (
    403,
    "A call waiting for the user's confirmation (`stage` `user`) is confirmed (approve) only by "
    "the person whose turn made it; one waiting for an approver (`stage` `approver`) only by "
    "holders of the permission `tool_calling.approve_toolexecution` (superusers have it; being "
    'staff is not enough), and with `APPROVALS["ALLOW_SELF_APPROVAL"]` off (the default) not '
    "by the person whose turn made it. Denying: approvers, and that person while the call "
    "waits for their confirmation. Also a session-authenticated request without its CSRF token.",
)


@extend_schema_view(
    list=extend_schema(
        description="The user's tool calls (and the gated ones for approvers), oldest first, "
        f"in pages of 20. `?status=awaiting_approval` is the approval queue. {_EXECUTION_READ}",
        parameters=[
            OpenApiParameter(
                "status",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                enum=models.ExecutionStatus.values,
                description="Only the calls in this status.",
            ),
            OpenApiParameter(
                "approval",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                enum=[v for v in models.ApprovalDecision.values if v],
                description="Only the calls with this approval state.",
            ),
            OpenApiParameter(
                "run",
                OpenApiTypes.UUID,
                OpenApiParameter.QUERY,
                description="Only the calls of this run.",
            ),
        ],
        responses={
            200: serializers.ToolExecutionSerializer,
            **errors(
                (400, "`?status=`, `?approval=` or `?run=` is not one of its values."),
                401,
                _INVALID_PAGE,
            ),
        },
    ),
    retrieve=extend_schema(
        description=f"One tool call with its approval state. {_EXECUTION_READ}",
        responses={200: serializers.ToolExecutionSerializer, **errors(401, 404)},
    ),
)
class ToolExecutionViewSet(_ErrorShape, _Governed, viewsets.ReadOnlyModelViewSet):
    """Tool calls: the user's own (and every gated one for approvers); approve or deny gated ones.

    ``?status=awaiting_approval`` is the approval queue; ``?run=<id>`` one run's calls.
    """

    permission_classes = [CanDecide]
    parser_classes = PARSERS
    pagination_class = Pagination

    def get_queryset(self) -> QuerySet[models.ToolExecution]:
        """Visible calls, oldest first, filtered by ``?status=``, ``?approval=``, ``?run=``."""
        found = visible_executions(self.request.user).select_related(
            "decided_by", "user", "confirmed_by", "conversation", "run__user_message"
        )
        params = self.request.query_params
        for field, choices in (
            ("status", models.ExecutionStatus.values),
            ("approval", [v for v in models.ApprovalDecision.values if v]),
        ):
            wanted = params.get(field)
            if wanted is not None and self.action == "list":
                if wanted not in choices:
                    raise ValidationError(
                        {field: [f"Unknown {field} {wanted!r}; one of: {', '.join(choices)}."]}
                    )
                found = found.filter(**{field: wanted})
        run = params.get("run")
        if run is not None and self.action == "list":
            try:
                found = found.filter(run_id=uuid.UUID(run))
            except ValueError:
                raise ValidationError({"run": [f"{run!r} is not a run id."]}) from None
        return found.order_by("created_at", "pk")

    def get_serializer_class(self) -> type[Any]:
        """With the arguments for approvers, without them for everyone else."""
        if approvals.can_decide(self.request.user):
            return serializers.ReviewedToolExecutionSerializer
        return serializers.ToolExecutionSerializer

    def _decided(self, execution: models.ToolExecution) -> Response:
        data = self.get_serializer(execution).data
        return Response(data, status=status.HTTP_200_OK)

    @extend_schema(
        request=serializers.ApproveSerializer,
        responses={
            200: OpenApiResponse(
                serializers.ReviewedToolExecutionSerializer, description="The approved call."
            ),
            **errors(
                (400, "The body is invalid, or edited `arguments` fail the tool's schema."),
                401,
                _DECISION_REFUSED,
                404,
                (
                    409,
                    "The call is not awaiting approval (decided, expired, or never gated), or "
                    "the tool or the rules that asked for the decision changed while it waited "
                    "(then it is denied and the model told to ask again).",
                ),
                413,
            ),
        },
    )
    @action(detail=True, methods=["post"], serializer_class=serializers.ApproveSerializer)
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve the call (optionally with edited ``arguments``); the run resumes.

        400 when edited arguments fail the tool's schema, 409 when it is not awaiting approval.
        """
        execution = self.get_object()
        body = serializers.ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            decided = approvals.approve(
                execution,
                user=request.user,
                arguments=body.validated_data.get("arguments"),
                note=body.validated_data.get("note", ""),
                remember=body.validated_data.get("remember", False),
            )
        except ToolArgumentsError as exc:
            raise ValidationError({"arguments": [str(exc)]}) from exc
        except approvals.ApprovalForbiddenError as exc:
            raise PermissionDenied(str(exc)) from exc
        except approvals.ApprovalStateError as exc:
            raise NotAwaitingApproval(str(exc)) from exc
        except ToolCallingError as exc:
            raise NotAwaitingApproval(str(exc)) from exc
        return self._decided(decided)

    @extend_schema(
        request=serializers.DenySerializer,
        responses={
            200: OpenApiResponse(
                serializers.ReviewedToolExecutionSerializer, description="The denied call."
            ),
            **errors(
                400,
                401,
                _DECISION_REFUSED,
                404,
                (409, "The call is not awaiting approval (decided, expired, or never gated)."),
                413,
            ),
        },
    )
    @action(detail=True, methods=["post"], serializer_class=serializers.DenySerializer)
    def deny(self, request: Request, pk: str | None = None) -> Response:
        """Deny the call with a ``reason`` the model reads; the run goes on without it.

        409 when it is not awaiting approval.
        """
        execution = self.get_object()
        body = serializers.DenySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            decided = approvals.deny(
                execution, user=request.user, reason=body.validated_data.get("reason", "")
            )
        except approvals.ApprovalStateError as exc:
            raise NotAwaitingApproval(str(exc)) from exc
        return self._decided(decided)
