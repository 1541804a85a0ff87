"""Mirror the tool registry (code) into the Tool table (governance), keeping operator settings."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from tool_calling import models
from tool_calling.conf import settings as app_settings
from tool_calling.registry import ToolRegistry, registry

__all__ = ["SyncReport", "schema_hash", "sync_tools"]


def schema_hash(description: str, input_schema: dict[str, Any]) -> str:
    """Return the SHA-256 of a tool's description and schema (stable key order)."""
    payload = json.dumps(
        {"description": description, "input_schema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class SyncReport:
    """What a sync did (or, in a dry run, would do)."""

    created: list[str] = field(default_factory=list)
    """Tools new in code."""
    changed: list[str] = field(default_factory=list)
    """Tools whose description, schema or source (the app defining them) changed."""
    missing: list[str] = field(default_factory=list)
    """Tools that vanished from code (kept, marked missing)."""
    restored: list[str] = field(default_factory=list)
    """Tools marked missing earlier that are back in code."""
    unchanged: list[str] = field(default_factory=list)
    """Tools already up to date."""

    @property
    def has_changes(self) -> bool:
        """True when the sync changed (or would change) the database."""
        return bool(self.created or self.changed or self.missing or self.restored)


def sync_tools(target: ToolRegistry | None = None, *, dry_run: bool = False) -> SyncReport:
    """Mirror ``target`` (the project registry by default) into the ``Tool`` table.

    New tools are created (enabled per ``NEW_TOOLS_ENABLED``); changed descriptions and schemas
    are updated; tools that vanished from code are marked missing (never deleted, never
    callable); tools back in code are unmarked. Operator settings (enabled, approval, limits,
    groups, execution mode, queue, timeout) are never touched, with one exception: a tool whose
    code says ``@tool(requires_approval=True)`` always requires approval, and one whose code says
    ``@tool(requires_confirmation=True)`` always requires the user's confirmation (the code is a
    floor operators cannot lift; a condition on the arguments is applied by the gate per call).
    Return-direct follows the code for new tools only.
    """
    target = registry if target is None else target
    report = SyncReport()
    now = timezone.now()
    entries = {entry.callback.definition.name: entry for entry in target.entries()}
    with transaction.atomic():
        existing = {tool.name: tool for tool in models.Tool.objects.select_for_update()}
        for name, entry in entries.items():
            definition = entry.callback.definition
            digest = schema_hash(definition.description, definition.input_schema)
            tool = existing.get(name)
            if tool is None:
                report.created.append(name)
                if not dry_run:
                    models.Tool.objects.create(
                        name=name,
                        description=definition.description,
                        input_schema=definition.input_schema,
                        schema_hash=digest,
                        source=entry.source,
                        enabled=bool(app_settings.NEW_TOOLS_ENABLED),
                        return_direct=entry.callback.metadata.return_direct,
                        requires_approval=entry.callback.metadata.requires_approval,
                        requires_confirmation=entry.callback.metadata.requires_confirmation is True,
                        synced_at=now,
                    )
                continue
            fields: dict[str, Any] = {"synced_at": now}
            if tool.missing:
                report.restored.append(name)
                fields["missing"] = False
            if tool.schema_hash != digest:
                report.changed.append(name)
                fields.update(
                    description=definition.description,
                    input_schema=definition.input_schema,
                    schema_hash=digest,
                )
            if entry.callback.metadata.requires_approval and not tool.requires_approval:
                fields["requires_approval"] = True
                if name not in report.changed:
                    report.changed.append(name)
            if entry.callback.metadata.requires_confirmation is True and (
                not tool.requires_confirmation
            ):
                fields["requires_confirmation"] = True
                if name not in report.changed:
                    report.changed.append(name)
            if tool.source != entry.source:
                fields["source"] = entry.source
                if name not in report.changed:
                    report.changed.append(name)
            if len(fields) == 1:
                report.unchanged.append(name)
            if not dry_run:
                models.Tool.objects.filter(pk=tool.pk).update(**fields)
        for name, tool in existing.items():
            # The tools of MCP servers are mirrored by tool_calling.mcp.mirror, not from code.
            if tool.source.startswith("mcp:"):
                continue
            if name not in entries and not tool.missing:
                report.missing.append(name)
                if not dry_run:
                    models.Tool.objects.filter(pk=tool.pk).update(missing=True)
    return report


def post_migrate_sync(sender: Any, **kwargs: Any) -> None:
    """Sync tools after ``migrate`` (connected to ``post_migrate`` for this app only).

    Does nothing on databases other than ``default``, or when the migrated state has no
    ``Tool`` table (``migrate tool_calling zero``), as ``contenttypes`` does.
    """
    if kwargs.get("using", DEFAULT_DB_ALIAS) != DEFAULT_DB_ALIAS:
        return
    state_apps = kwargs.get("apps")
    if state_apps is not None:
        try:
            state_apps.get_model("tool_calling", "Tool")
        except LookupError:
            return
    sync_tools()
