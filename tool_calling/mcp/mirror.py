"""Mirror an MCP server's tool list into ``Tool`` rows, each definition pinned by its hash.

``manage.py mcp sync`` and the admin's "Sync tools" action call :func:`sync_server`. A new tool
gets a ``Tool`` row (source ``mcp:<alias>``, named ``<prefix>_<name on the server>``) that is
disabled until an operator enables it. The definition an operator enables is pinned: its
SHA-256 (name, title, description, schemas, annotations) is ``Tool.schema_hash``, and the model
is only ever offered the stored text. When the server later lists anything else for the tool,
the tool is disabled and held back (``McpServerTool.changed``) until an operator looks at the
difference (:func:`definition_diff`) and approves the new definition (:func:`approve_listed`).

A name is never taken from a local tool or from another server's tool: such a tool is not
mirrored and the report says why (S18).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from tool_calling import models
from tool_calling.core.errors import McpServerError
from tool_calling.mcp import clients
from tool_calling.registry import ToolRegistry, registry

__all__ = [
    "McpSyncReport",
    "approve_listed",
    "definition_diff",
    "listed_definition",
    "pinned_definition",
    "sync_server",
]

logger = logging.getLogger("tool_calling.mcp")


@dataclass
class McpSyncReport:
    """What one sync of one server did."""

    server: str
    """The server's alias."""
    created: list[str] = field(default_factory=list)
    """Tools new on the server: mirrored, disabled until an operator enables them."""
    changed: list[str] = field(default_factory=list)
    """Tools whose definition changed since it was approved: disabled, pending re-approval."""
    reverted: list[str] = field(default_factory=list)
    """Tools whose server lists the approved definition again (a pending change withdrawn)."""
    renamed: list[str] = field(default_factory=list)
    """Tools renamed after the server's name prefix changed (``"old -> new"``)."""
    missing: list[str] = field(default_factory=list)
    """Tools the server no longer lists (kept, marked missing, never run)."""
    restored: list[str] = field(default_factory=list)
    """Tools marked missing earlier that the server lists again."""
    unchanged: list[str] = field(default_factory=list)
    """Tools whose server lists what was approved (or what is pending approval)."""
    rejected: dict[str, str] = field(default_factory=dict)
    """The server's name of a tool that is not mirrored -> why."""
    error: str = ""
    """Why the server's tools could not be listed (nothing changed then)."""

    @property
    def ok(self) -> bool:
        """Whether the server was listed."""
        return not self.error

    def lines(self) -> list[str]:
        """The report as short lines for a command's output or an admin message."""
        if self.error:
            return [f"{self.server}: not synced: {self.error}"]
        parts = [
            (self.created, "new (disabled until enabled)"),
            (self.changed, "changed (disabled until the new definition is approved)"),
            (self.reverted, "back to the approved definition"),
            (self.renamed, "renamed"),
            (self.missing, "missing on the server"),
            (self.restored, "listed again"),
        ]
        lines = [f"{self.server}: {len(self.unchanged)} unchanged"]
        lines += [f"{self.server}: {label}: {', '.join(names)}" for names, label in parts if names]
        lines += [
            f"{self.server}: not mirrored: {name}: {why}" for name, why in self.rejected.items()
        ]
        return lines


def _digest(spec: Any) -> str:
    """The pin of ``spec`` as it will be stored: a blank title is stored (and hashed) as none."""
    if spec.title == "":
        spec = dataclasses.replace(spec, title=None)
    return str(spec.definition_hash)


def _spec_json(spec: Any) -> dict[str, Any]:
    return {
        "name": spec.name,
        "title": spec.title or None,
        "description": spec.description,
        "input_schema": spec.input_schema,
        "output_schema": spec.output_schema,
        "annotations": dict(spec.annotations),
    }


def pinned_definition(link: models.McpServerTool) -> dict[str, Any]:
    """The approved definition of ``link``'s tool, as the admin shows it."""
    tool = link.tool
    return {
        "name": tool.name,
        "title": link.title or None,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "output_schema": link.output_schema,
        "annotations": dict(link.annotations or {}),
    }


def listed_definition(link: models.McpServerTool) -> dict[str, Any]:
    """What the server lists now for ``link``'s tool: the pending definition, else the pinned."""
    return dict(link.listed) if link.changed and link.listed else pinned_definition(link)


def _lines(definition: dict[str, Any]) -> list[str]:
    lines = [f"title: {definition.get('title') or ''}", "description:"]
    lines += [f"  {line}" for line in str(definition.get("description") or "").splitlines()]
    for key in ("input_schema", "output_schema", "annotations"):
        text = json.dumps(definition.get(key), indent=2, sort_keys=True, ensure_ascii=False)
        lines.append(f"{key}:")
        lines += [f"  {line}" for line in text.splitlines()]
    return lines


def definition_diff(link: models.McpServerTool) -> str:
    """A unified diff from the approved definition to the one the server lists now.

    Empty when the server lists the approved definition.
    """
    if not link.changed:
        return ""
    diff = difflib.unified_diff(
        _lines(pinned_definition(link)),
        _lines(listed_definition(link)),
        fromfile="approved",
        tofile="listed by the server",
        lineterm="",
    )
    return "\n".join(diff)


def _taken_by(
    name: str,
    rows: dict[str, tuple[str, str, int]],
    target: ToolRegistry,
    *,
    source: str,
    own: int | None = None,
) -> str | None:
    """Who holds ``name`` (case-insensitively), if not the tool itself: a text for the report.

    ``own`` is the tool's row (a rename); without it, a row of this server that lost its link
    is free (:func:`_create` takes it back).
    """
    folded = name.casefold()
    for local in target:
        if local.casefold() == folded:
            return f"the local tool {local!r} (remote tools never shadow local ones)"
    found = rows.get(folded)
    if found is None or found[2] == own or (own is None and found[1] == source):
        return None
    held, held_source, _ = found
    if held_source.startswith("mcp:"):
        return f"the tool {held!r} of MCP server {held_source[4:]!r}"
    return f"the tool {held!r} from {held_source or 'another source'!r}"


def _fail(server: models.McpServer, report: McpSyncReport, error: str) -> McpSyncReport:
    report.error = error
    models.McpServer.objects.filter(pk=server.pk).update(
        last_sync_error=error, updated_at=timezone.now()
    )
    logger.warning("MCP server %r: tools not synced: %s", server.alias, error)
    return report


def sync_server(
    server: models.McpServer, *, tool_registry: ToolRegistry | None = None
) -> McpSyncReport:
    """List ``server``'s tools now and mirror them into ``Tool`` rows (see the module docstring).

    A server that cannot be listed changes nothing: the report's ``error`` says why (also
    stored in ``McpServer.last_sync_error``). A disabled server is listed too, so an operator
    can review its tools before enabling it.

    Args:
        server: The server to sync.
        tool_registry: The local tools whose names remote tools never take (default: the
            project's registry).
    """
    target = registry if tool_registry is None else tool_registry
    report = McpSyncReport(server.alias)
    try:
        session = clients.provider(server)
        specs = [callback.spec for callback in session.refresh()]
    except ModuleNotFoundError as exc:
        return _fail(server, report, str(exc))
    except McpServerError as exc:
        reason = getattr(exc, "reason", "")
        return _fail(server, report, f"{exc} ({reason})" if reason else str(exc))
    report.rejected.update(session.rejected)
    now = timezone.now()
    with transaction.atomic():
        links = {
            link.server_name: link
            for link in models.McpServerTool.objects.select_for_update()
            .select_related("tool")
            .filter(server=server)
        }
        rows = {
            name.casefold(): (name, row_source, pk)
            for name, row_source, pk in models.Tool.objects.values_list("name", "source", "pk")
        }
        listed: set[str] = set()
        for spec in specs:
            listed.add(spec.server_name)
            link = links.get(spec.server_name)
            if link is not None and not link.tool.source.startswith("mcp:"):
                # A local tool took the row over (sync_tools): the remote one is not mirrored.
                report.rejected[spec.server_name] = (
                    f"its name {link.tool.name!r} now belongs to {link.tool.source!r}"
                )
                link.delete()
                continue
            if link is None:
                _create(server, spec, rows, target, report, now)
            else:
                _update(server, link, spec, rows, target, report, now)
        for server_name, link in links.items():
            if server_name in listed or not link.tool.source.startswith("mcp:"):
                continue
            if not link.tool.missing:
                report.missing.append(link.tool.name)
                models.Tool.objects.filter(pk=link.tool_id).update(missing=True, updated_at=now)
        models.McpServer.objects.filter(pk=server.pk).update(
            last_synced_at=now,
            last_sync_error="",
            protocol_version=session.connection.protocol_version or "",
            updated_at=now,
        )
    for why in report.rejected.values():
        logger.warning("MCP server %r: a tool is not mirrored: %s", server.alias, why)
    return report


def _create(
    server: models.McpServer,
    spec: Any,
    rows: dict[str, tuple[str, str, int]],
    target: ToolRegistry,
    report: McpSyncReport,
    now: Any,
) -> None:
    holder = _taken_by(spec.name, rows, target, source=server.source)
    if holder is not None:
        report.rejected[spec.server_name] = (
            f"the name {spec.name!r} is taken by {holder}; give the server another name prefix"
        )
        return
    definition = {
        "description": spec.description,
        "input_schema": spec.input_schema,
        "schema_hash": _digest(spec),
        "enabled": False,
        "missing": False,
        "synced_at": now,
    }
    found = rows.get(spec.name.casefold())
    if found is not None and models.McpServerTool.objects.filter(tool_id=found[2]).exists():
        report.rejected[spec.server_name] = (
            f"the name {spec.name!r} is taken by another tool of this server"
        )
        return
    if found is not None:
        # A row of this server without a link (the server was deleted and added again): it is
        # taken back as a new tool, disabled, keeping its history.
        models.Tool.objects.filter(pk=found[2]).update(name=spec.name, updated_at=now, **definition)
        tool = models.Tool.objects.get(pk=found[2])
    else:
        tool = models.Tool.objects.create(name=spec.name, source=server.source, **definition)
    models.McpServerTool.objects.create(
        server=server,
        tool=tool,
        server_name=spec.server_name,
        title=spec.title or "",
        output_schema=spec.output_schema,
        annotations=dict(spec.annotations),
    )
    rows[spec.name.casefold()] = (spec.name, server.source, tool.pk)
    report.created.append(spec.name)


def _update(
    server: models.McpServer,
    link: models.McpServerTool,
    spec: Any,
    rows: dict[str, tuple[str, str, int]],
    target: ToolRegistry,
    report: McpSyncReport,
    now: Any,
) -> None:
    tool = link.tool
    fields: dict[str, Any] = {"synced_at": now}
    if tool.source != server.source:
        fields["source"] = server.source  # the server's alias changed
    if tool.name != spec.name:
        holder = _taken_by(spec.name, rows, target, source=server.source, own=tool.pk)
        if holder is not None:
            report.rejected[link.server_name] = (
                f"the name {spec.name!r} is taken by {holder}; it keeps the name {tool.name!r}"
            )
        else:
            report.renamed.append(f"{tool.name} -> {spec.name}")
            rows.pop(tool.name.casefold(), None)
            rows[spec.name.casefold()] = (spec.name, server.source, tool.pk)
            fields["name"] = spec.name
            # The name is part of the pinned definition: the pin follows the rename.
            spec_digest = _renamed_digest(link, spec.name)
            fields["schema_hash"] = spec_digest
            tool.schema_hash = spec_digest
    if tool.missing:
        report.restored.append(spec.name)
        fields["missing"] = False
    digest = _digest(spec)
    link_fields: dict[str, Any] = {}
    if digest == tool.schema_hash:
        if link.changed:
            # The server lists the approved definition again: the hold is lifted.
            report.reverted.append(spec.name)
            link_fields = {"changed": False, "listed": {}, "listed_hash": "", "changed_at": None}
            fields["enabled"] = link.enabled_before_change
        else:
            report.unchanged.append(spec.name)
    elif link.changed and link.listed_hash == digest:
        report.unchanged.append(spec.name)  # still waiting for the same approval
    else:
        report.changed.append(spec.name)
        link_fields = {
            "changed": True,
            "listed": _spec_json(spec),
            "listed_hash": digest,
            "changed_at": now,
            "enabled_before_change": (link.enabled_before_change if link.changed else tool.enabled),
        }
        fields["enabled"] = False
    models.Tool.objects.filter(pk=tool.pk).update(**fields, updated_at=now)
    if link_fields:
        models.McpServerTool.objects.filter(pk=link.pk).update(**link_fields)


def _renamed_digest(link: models.McpServerTool, name: str) -> str:
    definition = pinned_definition(link)
    spec = clients.sdk().McpToolSpec(
        server_name=link.server_name,
        name=name,
        title=definition["title"],
        description=definition["description"],
        input_schema=definition["input_schema"],
        output_schema=definition["output_schema"],
        annotations=definition["annotations"],
    )
    return str(spec.definition_hash)


def approve_listed(links: Iterable[models.McpServerTool], *, user: Any) -> list[str]:
    """Pin what the server lists now for each changed tool of ``links``; return their names.

    The approved definition replaces the stored one (the model is offered the new text from the
    next turn), and a tool the change disabled is enabled again. Tools without a pending change
    are left alone.
    """
    approved: list[str] = []
    pks = [link.pk for link in links]
    now = timezone.now()
    with transaction.atomic():
        pending = (
            models.McpServerTool.objects.select_for_update()
            .select_related("tool")
            .filter(pk__in=pks, changed=True)
            .order_by("tool__name")
        )
        for link in pending:
            listed = dict(link.listed)
            models.Tool.objects.filter(pk=link.tool_id).update(
                description=listed.get("description") or "",
                input_schema=listed.get("input_schema") or {"type": "object"},
                schema_hash=link.listed_hash,
                enabled=link.enabled_before_change,
                updated_at=now,
            )
            models.McpServerTool.objects.filter(pk=link.pk).update(
                title=listed.get("title") or "",
                output_schema=listed.get("output_schema"),
                annotations=listed.get("annotations") or {},
                changed=False,
                listed={},
                listed_hash="",
                changed_at=None,
                approved_at=now,
                approved_by=user if getattr(user, "is_authenticated", False) else None,
            )
            approved.append(link.tool.name)
    return approved
