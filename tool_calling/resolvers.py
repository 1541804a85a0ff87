"""Governance over the registry and MCP servers: which tools a user may use, and their limits."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, fields
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import (
    BooleanField,
    Exists,
    ExpressionWrapper,
    F,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import JSONObject

from tool_calling import models
from tool_calling._prepared import PreparedQuery
from tool_calling.calls.authorization import missing_permission
from tool_calling.core.errors import ToolDefinitionError
from tool_calling.core.execution.limits import ToolCallLimits
from tool_calling.core.execution.resolvers import ToolCallbackResolver
from tool_calling.core.tools.callback import DelegatingToolCallback, ToolCallback
from tool_calling.core.tools.definition import ToolAnnotations, ToolIcon, ToolMetadata
from tool_calling.mcp import clients as mcp_clients
from tool_calling.registry import ToolRegistry, registry

logger = logging.getLogger("tool_calling.resolvers")

__all__ = [
    "CallRules",
    "DatabaseToolCallbackResolver",
    "GovernedTools",
    "approval_required",
    "call_rules",
    "call_rules_of_call",
    "effective_limits",
    "installed_callback",
    "is_available_to",
]


def _user_groups(user_pk: Any) -> QuerySet[Group]:
    """The groups of the user ``user_pk``, as a subquery (one round trip, however many groups)."""
    return Group.objects.filter(user=user_pk)


def _group_rules(groups: Any) -> tuple[Any, Any]:
    """``(allowed by the tool's groups, allowed by its MCP server's groups)`` for ``groups``.

    Conditions on ``Tool`` rows: a tool (a server) with no allowed groups is open to everyone;
    otherwise to members of one of its groups. ``groups`` is a subquery of the user's groups,
    or ``None`` for an anonymous user (a member of none).
    """
    through = models.Tool.allowed_groups.through
    restricted = Exists(through.objects.filter(tool_id=OuterRef("pk")))
    server_through = models.McpServer.allowed_groups.through
    server = server_through.objects.filter(mcpserver__tools__tool_id=OuterRef("pk"))
    if groups is None:
        return ~restricted, ~Exists(server)
    member = Exists(through.objects.filter(tool_id=OuterRef("pk"), group_id__in=groups))
    server_member = Exists(server.filter(group_id__in=groups))
    return ~restricted | member, ~Exists(server) | server_member


_SUPERUSER, _ANONYMOUS, _MEMBER = "superuser", "anonymous", "member"


def _user_kind(user: Any) -> str:
    if not getattr(user, "is_authenticated", False):  # None too
        return _ANONYMOUS
    return _SUPERUSER if getattr(user, "is_superuser", False) else _MEMBER


def _usable_by(kind: str, user_pk: Any) -> Any:
    """A condition on ``Tool`` rows: their allowed groups let a user of ``kind`` use them.

    A tool with no allowed groups is open to everyone; otherwise to superusers and members of
    one of its groups (``user_pk``'s, for a ``member``). A tool of an MCP server also needs the
    server's allowed groups to let the user in, in the same way. Enablement is not part of it
    (callers filter on it or read it).
    """
    if kind == _SUPERUSER:
        return Value(True)
    by_tool, by_server = _group_rules(None if kind == _ANONYMOUS else _user_groups(user_pk))
    return ExpressionWrapper(by_tool & by_server, BooleanField())


_MCP_READY = ~Q(mcp__changed=True) & ~Q(mcp__server__enabled=False)
"""A condition on ``Tool`` rows: not an MCP tool held back (definition changed on the server,
pending re-approval; or its server disabled). Local tools pass."""


def _mcp_ready(row: models.Tool) -> bool:
    """:data:`_MCP_READY` of a row loaded with ``mcp__server`` (``select_related``)."""
    try:
        link = row.mcp
    except models.McpServerTool.DoesNotExist:
        return True
    return not link.changed and link.server.enabled


@dataclass(frozen=True)
class CallRules:
    """What an operator set on a tool that governs each call, as read when the call runs."""

    requires_approval: bool = False
    """A person must approve the call first."""
    requires_confirmation: bool = False
    """The user whose turn it is must confirm the call first (before an approver, if both)."""
    permission: str = ""
    """A Django permission the user must hold (``app_label.codename``); blank: none."""
    quota_per_user: int | None = None
    """Calls one user may make per quota window; ``None``: no quota."""
    quota_total: int | None = None
    """Calls everyone may make per quota window; ``None``: no quota."""
    quota_window: int = 60
    """Seconds of a quota window."""
    retries: int = 0
    """Times a call failing with a transient error is run again."""
    retry_backoff: float = 1.0
    """Seconds before the first retry."""
    idempotent: bool = False
    """Whether running a call twice does no harm."""
    schema_hash: str = ""
    """The SHA-256 of the tool's definition now: what a person's decision on a call is bound to."""

    @classmethod
    def of_column(cls, value: dict[str, Any] | None) -> CallRules | None:
        """The rules read by :func:`call_rules_of_call` (``None``: the user may not use it)."""
        if value is None:
            return None
        rules = cls(**value)
        # Booleans come back from SQLite's JSON as 0 and 1.
        return dataclasses.replace(
            rules,
            requires_approval=bool(rules.requires_approval),
            requires_confirmation=bool(rules.requires_confirmation),
            idempotent=bool(rules.idempotent),
        )


_RULE_FIELDS = tuple(f.name for f in fields(CallRules))


def call_rules(name: str, user: Any = None) -> CallRules | None:
    """The rules of tool ``name`` for a call now; ``None`` when ``user`` may not use it now.

    ``None`` unless the ``Tool`` row is enabled, present and allowed for ``user`` (and, for a
    tool of an MCP server, its definition is approved as the server lists it and the server is
    enabled).

    One query, read at call time: the re-check before a call runs (an operator may have changed
    the tool since the turn's snapshot).
    """
    kind = _user_kind(user)
    values = (name, user.pk) if kind == _MEMBER else (name,)
    row = _RULES.first(*values, shape=kind)
    return None if row is None else CallRules(*(getattr(row, field) for field in _RULE_FIELDS))


def _rules_query(kind: str, name: str, user_pk: Any = None) -> QuerySet[models.Tool]:
    return models.Tool.objects.filter(
        _usable_by(kind, user_pk), _MCP_READY, name=name, enabled=True, missing=False
    ).only(*_RULE_FIELDS)


# Every in-process call's re-check: compiled once per kind of user.
_RULES = PreparedQuery(models.Tool, _rules_query, shaped=True)


def approval_required(name: str, user: Any = None) -> bool | None:
    """Whether calls of tool ``name`` need approval; ``None`` when ``user`` may not use it now."""
    rules = call_rules(name, user)
    return None if rules is None else rules.requires_approval


def call_rules_of_call() -> Subquery:
    """:func:`call_rules` as a subquery of a ``ToolExecution`` query, for the call's own user.

    ``ToolExecution.objects.annotate(rules=call_rules_of_call())`` reads the re-check with the
    call itself (one query); :meth:`CallRules.of_column` turns the column into the rules:
    ``None`` when the call's user may not use its tool now. The same conditions as
    :func:`call_rules`, in SQL (a deleted user counts as anonymous).
    """
    # The call's user, seen from the Tool subquery (two levels down) and from the group
    # subqueries inside its conditions (three levels down).
    user = OuterRef(OuterRef("user_id"))
    by_tool, by_server = _group_rules(Group.objects.filter(user=OuterRef(user)))
    superuser = Exists(get_user_model().objects.filter(pk=user, is_superuser=True))
    usable = ExpressionWrapper(superuser | (by_tool & by_server), BooleanField())
    tools = models.Tool.objects.filter(
        usable, _MCP_READY, name=OuterRef("tool_name"), enabled=True, missing=False
    ).values(rules=JSONObject(**{field: F(field) for field in _RULE_FIELDS}))[:1]
    return Subquery(tools, output_field=JSONField())


def is_available_to(name: str, user: Any = None) -> bool:
    """Return whether the ``Tool`` row ``name`` is enabled, present and allowed for ``user`` now."""
    return approval_required(name, user) is not None


class OperatorSettingsToolCallback(DelegatingToolCallback):
    """A registered tool with the metadata an operator set in the admin.

    Return-direct, and what MCP clients are shown: the title, the hints (each key the operator
    set replaces the code's) and the icons (when set, instead of the code's).
    """

    def __init__(
        self,
        delegate: ToolCallback,
        return_direct: bool,
        *,
        title: str = "",
        annotations: dict[str, Any] | None = None,
        icons: list[Any] | None = None,
    ) -> None:
        super().__init__(delegate)
        # Everything else of the delegate's metadata (approval, search tags) is kept.
        code = delegate.metadata
        hints = {**code.annotations.as_mcp(), **(annotations or {})}
        self._metadata = dataclasses.replace(
            code,
            return_direct=return_direct,
            title=title or code.title,
            annotations=ToolAnnotations.from_mcp(hints),
            icons=_icons(icons) or code.icons,
        )

    @property
    def metadata(self) -> ToolMetadata:
        """The operator's settings over the code's metadata."""
        return self._metadata


def _icons(stored: Any) -> tuple[ToolIcon, ...]:
    """Icons as an operator stored them (a list of MCP icon objects); bad entries are left out."""
    icons: list[ToolIcon] = []
    for entry in stored if isinstance(stored, list) else []:
        if not isinstance(entry, dict):
            continue
        try:
            sizes = entry.get("sizes") or ()
            icons.append(ToolIcon(str(entry.get("src")), entry.get("mimeType"), tuple(sizes)))
        except (ToolDefinitionError, TypeError):
            logger.warning("An MCP icon stored for a tool is not valid; it is not served")
    return tuple(icons)


def _pk(user: Any) -> Any:
    return user.pk if _user_kind(user) == _MEMBER else None


def _snapshot(kind: str, names: tuple[str, ...], only: str | None, user_pk: Any) -> Any:
    """The ``Tool`` rows a :class:`GovernedTools` snapshot reads."""
    remote = Q(mcp__isnull=False) if only is None else Q(mcp__isnull=False, name=only)
    return (
        models.Tool.objects.filter(Q(name__in=list(names)) | remote)
        .select_related("limit_override", "mcp__server")
        .annotate(usable=_usable_by(kind, user_pk))
    )


_SNAPSHOT = PreparedQuery(
    models.Tool,
    lambda shape, *user_pk: _snapshot(shape[0], shape[1], None, *(user_pk or (None,))),
    shaped=True,
)


class GovernedTools:
    """A snapshot, taken once per turn, of the tools a user may use and their limits.

    A tool is available when it is registered in code, has a ``Tool`` row that is enabled and
    not missing, either has no allowed groups or shares one with the user, and the user holds
    the permissions its code and its operator require (its per-call check aside). The tools of MCP
    servers (``Tool`` rows linked to an ``McpServer``) are available on the same terms, as long
    as their server is enabled and allows the user, and the definition the server lists is the
    approved one; their callbacks call the server with the approved (pinned) definition. A
    registered tool always wins over a remote tool of the same name.
    """

    def __init__(
        self,
        user: Any = None,
        tool_registry: ToolRegistry | None = None,
        *,
        only: str | None = None,
    ) -> None:
        self.user = user
        self.registry = registry if tool_registry is None else tool_registry
        # One query: the rows, their limit overrides, their MCP server if any, and whether the
        # user's groups allow them.
        kind = _user_kind(user)
        rows: list[Any] = (
            # Every turn's: compiled once per tool set and kind of user.
            _SNAPSHOT.all(
                *((user.pk,) if kind == _MEMBER else ()), shape=(kind, tuple(self.registry))
            )
            if only is None
            else list(_snapshot(kind, tuple(self.registry), only, _pk(user)))
        )
        self.rows: dict[str, models.Tool] = {row.name: row for row in rows}
        """The ``Tool`` rows of the registered tools and of MCP servers' tools, by name (any
        state)."""
        self.available: dict[str, ToolCallback] = {}
        """The callbacks ``user`` may use now: registered tools in registry order, then the
        tools of MCP servers by name."""
        for name in self.registry:
            row = self.rows.get(name)
            if row is None or not row.is_available or not getattr(row, "usable", False):
                continue
            callback = self.registry.get(name)
            if callback is not None and self._permitted(name, callback, row):
                if (
                    callback.metadata.return_direct != row.return_direct
                    or row.title
                    or row.annotations
                    or row.icons
                ):
                    callback = OperatorSettingsToolCallback(
                        callback,
                        row.return_direct,
                        title=row.title,
                        annotations=row.annotations,
                        icons=row.icons,
                    )
                self.available[name] = callback
        for name in sorted(self.rows):
            row = self.rows[name]
            if name in self.registry or not row.is_available or not getattr(row, "usable", False):
                continue
            if _mcp_ready(row):
                remote = mcp_clients.server_tool_callback(row.mcp)
                if self._permitted(name, remote, row):
                    self.available[name] = remote

    def _permitted(self, name: str, callback: ToolCallback, row: models.Tool) -> bool:
        """Whether the user holds the permissions the tool requires of every caller (S4).

        The gate's own rule (``calls.authorization.missing_permission``): a tool the user may
        not call is neither listed nor offered, rather than refused at call time.
        """
        return (
            missing_permission(name, self.user, callback=callback, permission=row.permission)
            is None
        )

    def rules(self, name: str) -> CallRules | None:
        """The rules of tool ``name`` as of this snapshot; ``None`` when it is not available.

        For a decision taken with the snapshot (which calls of a durable run's batch wait for a
        person); :func:`call_rules` reads them again where a call runs.
        """
        row = self.rows.get(name)
        if name not in self.available or row is None:
            return None
        return CallRules(*(getattr(row, field) for field in _RULE_FIELDS))

    def callbacks(self, names: list[str] | None = None) -> list[ToolCallback]:
        """The available callbacks (only ``names``, if given), in registry order."""
        if names is None:
            return list(self.available.values())
        return [self.available[n] for n in names if n in self.available]

    def limits(self, base: ToolCallLimits) -> ToolCallLimits:
        """``base`` (from settings) with the operators' per-tool overrides and exclusions."""
        return effective_limits(base, self.rows.values())


def effective_limits(base: ToolCallLimits, rows: Any = None) -> ToolCallLimits:
    """Merge ``ToolLimitOverride`` rows into ``base`` (the ``LIMITS`` from settings).

    An override's exclusion adds the tool to ``excluded_tools``; its ``max_calls_per_turn``
    replaces the tool's limit from settings, even when settings exclude the tool (the operator's
    row wins over the deployed configuration). ``rows`` are ``Tool`` rows with their
    ``limit_override`` loaded; ``None`` reads every override.
    """
    if rows is None:
        overrides = models.ToolLimitOverride.objects.select_related("tool")
        pairs = [(o.tool.name, o) for o in overrides]
    else:
        pairs = []
        for row in rows:
            try:
                pairs.append((row.name, row.limit_override))
            except models.ToolLimitOverride.DoesNotExist:
                continue
    per_tool = dict(base.per_tool)
    excluded = list(base.excluded_tools)
    for name, override in pairs:
        if override.excluded:
            if name not in excluded:
                excluded.append(name)
        elif override.max_calls_per_turn is not None:
            per_tool[name] = override.max_calls_per_turn
            if name in excluded:
                excluded.remove(name)
    return ToolCallLimits(
        max_calls_per_tool=base.max_calls_per_tool,
        per_tool=per_tool,
        excluded_tools=excluded,
        max_total_tool_calls=base.max_total_tool_calls,
        on_limit_exceeded=base.on_limit_exceeded,
    )


class DatabaseToolCallbackResolver(ToolCallbackResolver):
    """Resolves names to tools that are enabled, present and allowed for ``user``.

    Registered tools, and the tools of MCP servers, on the terms of :class:`GovernedTools`.
    """

    def __init__(self, user: Any = None, tool_registry: ToolRegistry | None = None) -> None:
        self.user = user
        self.registry = registry if tool_registry is None else tool_registry

    def resolve(self, tool_name: str) -> ToolCallback | None:
        """Return the callback if ``user`` may use the tool now, else ``None``."""
        governed = GovernedTools(self.user, _single(self.registry, tool_name), only=tool_name)
        return governed.available.get(tool_name)


def installed_callback(name: str) -> ToolCallback | None:
    """The callback that runs tool ``name`` in this process, governance aside.

    The registry's tool, else the approved definition of an MCP server's tool (one query);
    ``None`` when neither exists. Callers re-check governance before they run it (a worker
    asks the gate, ``calls.gate``).
    """
    callback = registry.get(name)
    if callback is not None:
        return callback
    link = (
        models.McpServerTool.objects.select_related("tool", "server")
        .filter(tool__name=name)
        .first()
    )
    return None if link is None else mcp_clients.server_tool_callback(link)


def _single(source: ToolRegistry, name: str) -> ToolRegistry:
    one = ToolRegistry()
    entry = source.entry(name)
    if entry is not None:
        one._registry[name] = entry
    return one
