"""Governance over the registry: which tools a user may use, and their effective limits."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.contrib.auth.models import Group
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, QuerySet, Value

from tool_calling import models
from tool_calling.core.execution.limits import ToolCallLimits
from tool_calling.core.execution.resolvers import ToolCallbackResolver
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.core.tools.definition import ToolDefinition, ToolMetadata
from tool_calling.registry import ToolRegistry, registry

__all__ = [
    "CallRules",
    "DatabaseToolCallbackResolver",
    "GovernedTools",
    "approval_required",
    "call_rules",
    "effective_limits",
    "is_available_to",
]


def _user_groups(user: Any) -> QuerySet[Group]:
    """The user's groups, as a subquery (one round trip, however many groups)."""
    return Group.objects.filter(user=user.pk)


def _usable(user: Any) -> Any:
    """A condition on ``Tool`` rows: their allowed groups let ``user`` use them.

    A tool with no allowed groups is open to everyone; otherwise to superusers and members of
    one of its groups. Enablement is not part of it (callers filter on it or read it).
    """
    through = models.Tool.allowed_groups.through
    restricted = Exists(through.objects.filter(tool_id=OuterRef("pk")))
    if user is None or not getattr(user, "is_authenticated", False):
        return ~restricted
    if getattr(user, "is_superuser", False):
        return Value(True)
    member = Exists(through.objects.filter(tool_id=OuterRef("pk"), group_id__in=_user_groups(user)))
    return ExpressionWrapper(~restricted | member, BooleanField())


@dataclass(frozen=True)
class CallRules:
    """What an operator set on a tool that governs each call, as read when the call runs."""

    requires_approval: bool = False
    """A person must approve the call first."""
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


_RULE_FIELDS = tuple(f.name for f in fields(CallRules))


def call_rules(name: str, user: Any = None) -> CallRules | None:
    """The rules of tool ``name`` for a call now; ``None`` when ``user`` may not use it now.

    ``None`` unless the ``Tool`` row is enabled, present and allowed for ``user``.

    One query, read at call time: the re-check before a call runs (an operator may have changed
    the tool since the turn's snapshot).
    """
    tools = models.Tool.objects.filter(_usable(user), name=name, enabled=True, missing=False)
    found = list(tools.values_list(*_RULE_FIELDS)[:1])
    return None if not found else CallRules(*found[0])


def approval_required(name: str, user: Any = None) -> bool | None:
    """Whether calls of tool ``name`` need approval; ``None`` when ``user`` may not use it now."""
    rules = call_rules(name, user)
    return None if rules is None else rules.requires_approval


def is_available_to(name: str, user: Any = None) -> bool:
    """Return whether the ``Tool`` row ``name`` is enabled, present and allowed for ``user`` now."""
    return approval_required(name, user) is not None


class OperatorSettingsToolCallback(ToolCallback):
    """A registered tool with the metadata an operator set in the admin (return-direct)."""

    def __init__(self, delegate: ToolCallback, return_direct: bool) -> None:
        self.delegate = delegate
        self._metadata = ToolMetadata(
            return_direct=return_direct, requires_approval=delegate.metadata.requires_approval
        )

    @property
    def definition(self) -> ToolDefinition:
        """The delegate's definition."""
        return self.delegate.definition

    @property
    def metadata(self) -> ToolMetadata:
        """The operator's return-direct setting."""
        return self._metadata

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Run the delegate."""
        return self.delegate.call(tool_input, tool_context)

    async def acall(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        """Run the delegate (async)."""
        return await self.delegate.acall(tool_input, tool_context)


class GovernedTools:
    """A snapshot, taken once per turn, of the tools a user may use and their limits.

    A tool is available when it is registered in code, has a ``Tool`` row that is enabled and
    not missing, and either has no allowed groups or shares one with the user.
    """

    def __init__(self, user: Any = None, tool_registry: ToolRegistry | None = None) -> None:
        self.user = user
        self.registry = registry if tool_registry is None else tool_registry
        # One query: the rows, their limit overrides, and whether the user's groups allow them.
        rows = (
            models.Tool.objects.filter(name__in=list(self.registry))
            .select_related("limit_override")
            .annotate(usable=_usable(user))
        )
        self.rows: dict[str, models.Tool] = {row.name: row for row in rows}
        """The ``Tool`` rows of the registered tools, by name (any state)."""
        self.available: dict[str, ToolCallback] = {}
        """The callbacks ``user`` may use now, in registry order."""
        for name in self.registry:
            row = self.rows.get(name)
            if row is None or not row.is_available or not getattr(row, "usable", False):
                continue
            callback = self.registry.get(name)
            if callback is not None:
                if callback.metadata.return_direct != row.return_direct:
                    callback = OperatorSettingsToolCallback(callback, row.return_direct)
                self.available[name] = callback

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
    """Resolves names to registered tools that are enabled, present and allowed for ``user``."""

    def __init__(self, user: Any = None, tool_registry: ToolRegistry | None = None) -> None:
        self.user = user
        self.registry = registry if tool_registry is None else tool_registry

    def resolve(self, tool_name: str) -> ToolCallback | None:
        """Return the callback if ``user`` may use the tool now, else ``None``."""
        if tool_name not in self.registry:
            return None
        return GovernedTools(self.user, _single(self.registry, tool_name)).available.get(tool_name)


def _single(source: ToolRegistry, name: str) -> ToolRegistry:
    one = ToolRegistry()
    entry = source.entry(name)
    if entry is not None:
        one._registry[name] = entry
    return one
