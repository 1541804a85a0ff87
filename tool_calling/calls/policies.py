"""Operators' decision policies: which calls wait for the user's confirmation or an approver.

A :class:`~tool_calling.models.DecisionPolicy` is edited in the admin, without a deploy. The gate
(``calls.gate``, rule 4) asks :func:`policy_deciders` for every call; a matching policy adds the
user's confirmation, an approval, or both to what the tool's code and row already ask for.
Policies can only add decisions: a call the code or the row gates stays gated.

The enabled policies are read once per process and kept for :data:`POLICY_CACHE_SECONDS`
(saving or deleting one in this process drops the copy at once), so a change reaches every
process within that time without a query per call.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from django.db.models.signals import post_delete, post_save
from django.utils.module_loading import import_string

from tool_calling import models

__all__ = ["POLICY_CACHE_SECONDS", "connect", "forget_policies", "matching", "policy_deciders"]

logger = logging.getLogger("tool_calling.calls")

POLICY_CACHE_SECONDS = 5.0
"""How long a process keeps the enabled policies before it reads them again."""

_lock = threading.Lock()
_cached: tuple[float, list[models.DecisionPolicy]] | None = None


def forget_policies(**kwargs: Any) -> None:
    """Drop this process's copy of the policies (a receiver of their saves and deletes)."""
    global _cached
    with _lock:
        _cached = None


def connect() -> None:
    """Drop the copy when a policy is saved or deleted here (``AppConfig.ready()`` calls it)."""
    post_save.connect(
        forget_policies, sender=models.DecisionPolicy, dispatch_uid="tc_policies_save"
    )
    post_delete.connect(
        forget_policies, sender=models.DecisionPolicy, dispatch_uid="tc_policies_delete"
    )


def _policies() -> list[models.DecisionPolicy]:
    global _cached
    now = time.monotonic()
    found = _cached
    if found is not None and now - found[0] < POLICY_CACHE_SECONDS:
        return found[1]
    policies = list(models.DecisionPolicy.objects.filter(enabled=True))
    with _lock:
        _cached = (now, policies)
    return policies


def _is_destructive(annotations: Mapping[str, Any]) -> bool:
    """MCP's reading of a tool's hints: destructive unless it says otherwise or is read-only."""
    if annotations.get("readOnlyHint") is True:
        return False
    return annotations.get("destructiveHint", True) is not False


def _tool_facts(name: str) -> tuple[str, bool]:
    """The tool's source and whether it is a destructive MCP tool (by its pinned hints)."""
    row = (
        models.Tool.objects.filter(name=name)
        .values_list("source", "mcp__pk", "mcp__annotations")
        .first()
    )
    if row is None:
        return "", False
    source, link, annotations = row
    destructive = link is not None and _is_destructive(annotations or {})
    return source or "", destructive


def _condition(path: str) -> Callable[[Mapping[str, Any]], Any]:
    return import_string(path)  # type: ignore[no-any-return]


def _condition_holds(policy: models.DecisionPolicy, arguments: Mapping[str, Any]) -> bool:
    try:
        return bool(_condition(policy.condition)(arguments))
    except Exception:
        # A condition that cannot answer applies: a policy never lets a call through unasked.
        logger.exception(
            "The condition %r of decision policy %r failed; the policy applies",
            policy.condition,
            policy.name,
        )
        return True


def matching(name: str, arguments: Mapping[str, Any]) -> list[models.DecisionPolicy]:
    """The enabled policies that apply to a call of tool ``name`` with ``arguments``."""
    policies = _policies()
    if not policies:
        return []
    facts: tuple[str, bool] | None = None
    found: list[models.DecisionPolicy] = []
    for policy in policies:
        if policy.tool_pattern and not fnmatch.fnmatchcase(name, policy.tool_pattern):
            continue
        if policy.source or policy.destructive_only:
            if facts is None:
                facts = _tool_facts(name)
            if policy.source and facts[0] != policy.source:
                continue
            if policy.destructive_only and not facts[1]:
                continue
        if policy.condition and not _condition_holds(policy, arguments):
            continue
        found.append(policy)
    return found


def policy_deciders(name: str, arguments: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether the policies ask for the user's confirmation, and for an approval, of a call.

    Args:
        name: The tool's name.
        arguments: The call's arguments (the tool's own, parsed).

    Returns:
        ``(confirmation, approval)``.
    """
    found = matching(name, arguments)
    return (
        any(p.requires_confirmation for p in found),
        any(p.requires_approval for p in found),
    )
