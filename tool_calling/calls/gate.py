"""The gate of every governed call: each rule that decides whether a call may run, in one order.

Every path that runs a governed tool asks :func:`admit` before the tool runs: a turn's call in
its own process (``calls.inline``), a call on a Celery worker (``calls.worker``), a durable
run's batch when it is planned (``runs.steps``), a call over MCP to the served tools
(``mcp.serving``, through the governed manager), the tools of MCP servers (callbacks like any),
an approved call when it resumes (on its worker, ``approved``) and every retry (not counted
again). The rules, in this order; the first that refuses answers the call and the rules after
it are not applied:

1. **validation**: the arguments fit the tool's schema as its own call checks them
   (``ToolCallback.validate_arguments``: a function tool's types, an MCP tool's JSON Schema, an
   augmented tool's fields too). Nothing invalid is counted, queued for approval or run.
2. **availability**: the tool's ``Tool`` row is enabled, present in code and open to the user's
   groups (an MCP tool's server enabled, its definition the approved one), read now (S2).
3. **permission**: the permissions the tool's code and its operator require, then the tool's
   own check of this call, in the end user's context (``calls.authorization``, S4).
4. **approval**: who must decide the call before it runs. The user whose turn it is confirms
   it when the code says so (``@tool(requires_confirmation=True)``, or a condition on these
   arguments) or the row does (``Tool.requires_confirmation``); an approver approves it when
   the code's flag (``@tool(requires_approval=True)``) or the row's says so; both, the user
   first. Operators' decision policies (``calls.policies``: by name pattern, source, an MCP
   tool's pinned ``destructiveHint``, a condition on the arguments) add to both. The code is
   a floor the row can only raise. Unless the call was decided for these exact arguments (an
   approval, or the user's confirmation an MCP client gave when asked, ``GateCall.confirmed``,
   for a call only the user decides), a path that can wait (a durable run) queues it for its
   deciders (``Verdict.deciders``), and any other refuses it (S6).
5. **quota**: the call takes one from its tool's quotas, atomically (S8); a retry of a call is
   not counted again.
6. **limit**: the turn's per-tool and total caps (``LIMITS``, the operators' overrides; S7).
   The turn counts the model's calls in order, every one of them (so a model that loops on bad
   arguments still meets its cap), and the cap decides only a call that no rule above refused:
   such a call reads the first refusal, and a call the cap refuses takes nothing from the
   quotas.

The turn's ``tool_search`` is the one call that does not come here: it has no ``Tool`` row and
runs nothing governed (it searches the turn's own tools; what it finds comes here when called).
Nothing here writes a call's row: the callers record the :class:`Verdict`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from tool_calling import models
from tool_calling.augmentation import split_call
from tool_calling.calls import authorization, policies, quotas
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.errors import ToolArgumentsError
from tool_calling.core.execution.confirmation import needs_confirmation, parse_arguments
from tool_calling.core.execution.plan import ToolOutcome
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolFailure
from tool_calling.resolvers import CallRules, call_rules

__all__ = [
    "RULES",
    "Confirmation",
    "GateCall",
    "Rule",
    "ToolApprovalRequiredError",
    "ToolNotAvailableError",
    "ToolQuotaExceededError",
    "UNREAD",
    "Verdict",
    "admit",
    "approval_refusal_text",
    "confirmation_refusal_text",
    "decision_rules",
    "deciders",
    "refusal_text",
    "standing_decision",
]

logger = logging.getLogger("tool_calling.calls")


class Rule(str, enum.Enum):  # noqa: UP042 - str-mixin keeps "quota" == Rule.QUOTA
    """One rule of the gate (see the module's docstring)."""

    VALIDATION = "validation"
    AVAILABILITY = "availability"
    PERMISSION = "permission"
    APPROVAL = "approval"
    QUOTA = "quota"
    LIMIT = "limit"


RULES: tuple[Rule, ...] = tuple(Rule)
"""The rules in the order the gate applies them."""


class ToolNotAvailableError(ToolFailure):
    """A tool was disabled, removed or forbidden between the model's request and the call."""


class ToolApprovalRequiredError(ToolFailure):
    """The call needs a person's approval, and the path that made it cannot wait for one."""


class ToolQuotaExceededError(ToolFailure):
    """The call would exceed a quota of its tool (``calls.quotas``); it did not run."""


def refusal_text(name: str) -> str:
    """The text the model gets for a call of a tool an operator withdrew after it asked (S2)."""
    return (
        f"Tool {name!r} is not available: an operator disabled, removed or restricted "
        "it. Do not call it again in this conversation."
    )


def approval_refusal_text(name: str) -> str:
    """The text the model gets for a call that needs approval where no one can give it."""
    return (
        f"Tool {name!r} requires a person's approval before each call, and this conversation "
        "cannot wait for one (approvals pause background runs only). The call was not made."
    )


def confirmation_refusal_text(name: str) -> str:
    """The text the model gets for a call the user must confirm where nobody can be asked."""
    return (
        f"Tool {name!r} needs the user's confirmation before each call, and this conversation "
        "cannot wait for one (confirmations pause background runs only). The call was not made."
    )


def deciders(callback: ToolCallback, arguments: str | None, rules: CallRules) -> str:
    """Who must decide a call before it runs (a ``models.Deciders`` value); blank: nobody.

    The user confirms when the tool's code asks (its flag, or its condition on ``arguments``),
    its row does, or an operator's decision policy does (``calls.policies``); an approver
    approves when the code's flag, the row's or a policy says so.
    """
    return decision_rules(callback, arguments, rules)[0]


def decision_rules(
    callback: ToolCallback, arguments: str | None, rules: CallRules
) -> tuple[str, str]:
    """:func:`deciders`, and a digest of the rules that asked (flags and matching policies).

    A decision is made under that digest; once it changes (a flag, a policy edited, added or
    removed), the decision no longer covers the tool's calls and the gate asks again.
    """
    metadata = callback.metadata
    parsed = parse_arguments(arguments) or {}
    found = policies.matching(callback.definition.name, parsed)
    code_confirms = bool(metadata.requires_confirmation) and needs_confirmation(callback, parsed)
    approval = (
        metadata.requires_approval
        or rules.requires_approval
        or any(p.requires_approval for p in found)
    )
    confirmation = (
        rules.requires_confirmation or any(p.requires_confirmation for p in found) or code_confirms
    )
    who: str = ""
    if confirmation:
        who = models.Deciders.USER_THEN_APPROVER if approval else models.Deciders.USER
    elif approval:
        who = models.Deciders.APPROVER
    basis = json.dumps(
        [
            str(who),
            bool(metadata.requires_approval),
            code_confirms,
            rules.requires_approval,
            rules.requires_confirmation,
            sorted((p.pk, p.updated_at.isoformat()) for p in found),
        ]
    )
    return who, hashlib.sha256(basis.encode()).hexdigest()


@dataclass(frozen=True)
class Confirmation:
    """The user's confirmation of one call, given where the path asked them at once.

    An MCP client's user answers a question about the call (``mcp.serving``): the answer is
    bound to the tool, the digest of the exact arguments, the tool's definition and the rules
    that asked (``decision_rules``); the gate lets the call through rule 4 only while all of
    them are still the same, and only when nobody but the user must decide it.
    """

    user: Any
    """Who confirmed (the user whose call it is)."""
    tool_name: str
    """The tool confirmed."""
    arguments_sha256: str
    """The SHA-256 of the exact arguments confirmed (blank arguments are ``{}``)."""
    definition_sha256: str
    """The tool's definition when the user was asked (``CallRules.schema_hash``)."""
    basis: str
    """The digest of the rules that asked for the confirmation."""
    at: Any
    """When the user answered."""

    def covers(self, tool_call: ToolCall) -> bool:
        """Whether this confirmation is of ``tool_call``: the same tool, the same arguments."""
        return (
            tool_call.name == self.tool_name
            and arguments_sha256(tool_call.arguments) == self.arguments_sha256
        )


def arguments_sha256(arguments: str | None) -> str:
    """The SHA-256 of a call's exact arguments (blank arguments are ``{}``)."""
    text = arguments if arguments and not arguments.isspace() else "{}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _Unread:
    def __repr__(self) -> str:
        return "UNREAD"


UNREAD: Any = _Unread()
"""``GateCall.rules`` when the gate reads the tool's rules itself (the default)."""


@dataclass(frozen=True)
class GateCall:
    """One call at the gate: what it is, for whom, and what its path allows."""

    tool_call: ToolCall
    """The model's call (its arguments as ``callback`` takes them; blank means ``{}``)."""
    callback: ToolCallback
    """The tool as the turn offers it (augmented, under an operator's settings, ...)."""
    user: Any = None
    """The user of the turn (``None``: no user, who holds no permission)."""
    context: ToolContext = field(default_factory=ToolContext)
    """The call's tool context (for the tool's own authorization check)."""
    approved: bool = False
    """A person approved exactly these arguments (``calls.approvals``)."""
    can_wait: bool = False
    """The path can wait for a person: a call needing approval is queued, not refused."""
    approval_text: Callable[[str], str] = approval_refusal_text
    """What the model reads of a call refused for want of an approval (the path's words)."""
    count_quota: bool = True
    """Take one from the tool's quotas (not for a retry: it is the same call)."""
    over_limit: str | None = None
    """The turn's verdict for this call: the text of the limit it exceeds, ``None`` if none."""
    rules: Any = UNREAD
    """The tool's :class:`CallRules` for the user (``None``: not available) when the caller read
    them already (a worker reads them with its call); else the gate reads them now."""
    through: Rule = Rule.LIMIT
    """The last rule to apply: a plan asks through ``APPROVAL`` (nothing is counted then)."""
    conversation_id: Any = None
    """The call's conversation, whose standing decisions may cover it (``None``: none do)."""
    confirmed: Confirmation | None = None
    """The user's confirmation given for this call where it was asked (an MCP client's
    answer); it decides a call only the user must decide, for its own tool, arguments,
    definition and rules."""


@dataclass(frozen=True)
class Verdict:
    """What the gate decided about one call, and what runs it when it may."""

    call: ToolCall
    """The call with the tool's own arguments (argument augmentation's values split off)."""
    callback: ToolCallback
    """The tool that runs ``call`` (an augmented tool's wrapped one)."""
    augmented: Mapping[str, Any] = field(default_factory=dict)
    """The values argument augmentation split from the arguments (stored on the audit row)."""
    rules: CallRules | None = None
    """The tool's rules as read for this call (retries, idempotence); ``None`` if not read."""
    refused_by: Rule | None = None
    """The rule that refused the call; ``None`` when it was not refused."""
    outcome: ToolOutcome | None = None
    """Why it was refused, as the model reads it (the error's type included)."""
    awaits_approval: bool = False
    """The call waits for a person (a path that can wait, and no approval yet)."""
    deciders: str = ""
    """Who it waits for, when it waits: a ``models.Deciders`` value."""
    basis: str = ""
    """The digest of the rules that ask for its decision (``decision_rules``), when it waits."""
    standing: Any = None
    """The conversation's ``StandingDecision`` that let it through without asking, if one did."""
    confirmed: Confirmation | None = None
    """The user's confirmation that let it through rule 4, if one did (``GateCall.confirmed``)."""

    @property
    def admitted(self) -> bool:
        """Whether the tool may run now."""
        return self.refused_by is None and not self.awaits_approval

    @property
    def text(self) -> str:
        """The text of the refusal (blank when there is none)."""
        return self.outcome.text if self.outcome is not None else ""


def _refused(
    call: GateCall,
    rule: Rule,
    text: str,
    error: type[ToolFailure],
    rules: CallRules | None,
    split: Verdict,
) -> Verdict:
    logger.warning(
        "Refused a call of tool %r for user %s (%s)",
        call.tool_call.name,
        _who(call.user),
        rule.value,
    )
    return Verdict(
        split.call,
        split.callback,
        split.augmented,
        rules,
        rule,
        ToolOutcome.failure(text, error),
    )


def _who(user: Any) -> object:
    return getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None


def admit(call: GateCall) -> Verdict:
    """Apply the rules to ``call``, in order, through ``call.through``; what they decided.

    Returns:
        A :class:`Verdict`: admitted (the tool may run ``verdict.call`` now), waiting for a
        person (``awaits_approval``), or refused by one rule (``refused_by``, with the text
        for the model in ``outcome``). A refused call was counted nowhere.
    """
    name = call.tool_call.name
    # 1. Validation, before anything is read, counted or queued.
    try:
        call.callback.validate_arguments(call.tool_call.arguments)
        own, augmented, runs = split_call(call.callback, call.tool_call, call.context)
    except ToolArgumentsError as exc:
        return Verdict(
            call.tool_call,
            call.callback,
            refused_by=Rule.VALIDATION,
            outcome=ToolOutcome.from_exception(exc),
        )
    split = Verdict(own, runs, augmented)
    if call.through is Rule.VALIDATION:
        return split
    # 2. Availability, read now (or with the caller's read of the call).
    rules: CallRules | None = call_rules(name, call.user) if call.rules is UNREAD else call.rules
    if rules is None:
        return _refused(
            call, Rule.AVAILABILITY, refusal_text(name), ToolNotAvailableError, None, split
        )
    admitted = Verdict(own, runs, augmented, rules)
    if call.through is Rule.AVAILABILITY:
        return admitted
    # 3. Permission: the code's and the operator's, then the tool's own check of this call.
    denied = authorization.refusal(
        name,
        call.user,
        callback=runs,
        permission=rules.permission,
        arguments=own.arguments,
        context=call.context,
    )
    if denied is not None:
        return _refused(
            call, Rule.PERMISSION, denied, authorization.ToolPermissionError, rules, split
        )
    if call.through is Rule.PERMISSION:
        return admitted
    # 4. Who decides: the user's confirmation, an approver's approval (code floor, row,
    #    policies), unless decided already: for these arguments, or by a standing decision of
    #    the conversation made under the same definition and rules.
    who, basis = ("", "") if call.approved else decision_rules(runs, own.arguments, rules)
    confirmed = call.confirmed
    if (
        who == models.Deciders.USER
        and confirmed is not None
        and confirmed.covers(call.tool_call)
        and confirmed.definition_sha256 == rules.schema_hash
        and confirmed.basis == basis
    ):
        who = ""
        admitted = Verdict(own, runs, augmented, rules, confirmed=confirmed)
    if who and call.conversation_id is not None:
        standing = standing_decision(call.conversation_id, name, who, rules.schema_hash, basis)
        if standing is not None:
            who = ""
            admitted = Verdict(own, runs, augmented, rules, standing=standing)
    if who:
        if not call.can_wait:
            if who == models.Deciders.USER:
                text = confirmation_refusal_text(name)
            else:
                text = call.approval_text(name)
            return _refused(call, Rule.APPROVAL, text, ToolApprovalRequiredError, rules, split)
        if call.over_limit is None:  # a call over the limit is never queued for a person
            return Verdict(
                own, runs, augmented, rules, awaits_approval=True, deciders=who, basis=basis
            )
    if call.through is Rule.APPROVAL:
        return admitted
    # 5. Quotas; 6. the turn's limits. A call the limits refuse gives back what it took.
    if call.count_quota and (rules.quota_per_user is not None or rules.quota_total is not None):
        if call.over_limit is None:
            over = _take_quota(name, call.user, rules)
        else:
            over = _quota_without_taking(name, call.user, rules)
        if over is not None:
            return _refused(call, Rule.QUOTA, over, ToolQuotaExceededError, rules, split)
    if call.over_limit is not None:
        return _refused(call, Rule.LIMIT, call.over_limit, ToolFailure, rules, split)
    return admitted


def standing_decision(
    conversation_id: Any, name: str, who: str, definition: str, basis: str
) -> models.StandingDecision | None:
    """The conversation's standing decision(s) covering a call that ``who`` must decide.

    Each kind of decision ``who`` asks for (the user's, an approver's) must be covered by a
    decision not revoked, made under this definition of the tool and these rules; returns the
    newest of them (for the audit), or ``None``.
    """
    found = list(
        models.StandingDecision.objects.filter(
            conversation_id=conversation_id,
            tool_name=name,
            revoked_at__isnull=True,
            definition_sha256=definition,
            decision_basis=basis,
        ).order_by("-created_at", "-pk")
    )
    needed = {"user", "approver"} if who == models.Deciders.USER_THEN_APPROVER else {str(who)}
    if not found or not needed <= {d.stage for d in found}:
        return None
    return found[0]


def _take_quota(name: str, user: Any, rules: CallRules) -> str | None:
    """Take one call from the tool's quotas; the text for the model when a quota refuses it."""
    try:
        return quotas.consume(
            name,
            user,
            per_user=rules.quota_per_user,
            total=rules.quota_total,
            window=rules.quota_window,
        )
    except Exception:  # the database did not count it: fail closed, the call does not run
        logger.exception("Could not count a call of tool %r toward its quotas", name)
        return (
            f"Tool {name!r} could not check its quota just now; the call was not made. "
            "Try again shortly."
        )


class _GiveBack(Exception):
    """Rolls back what a quota took for a call the turn's limits refuse anyway."""


def _quota_without_taking(name: str, user: Any, rules: CallRules) -> str | None:
    """Whether a quota refuses the call (it comes before the limits), counting nothing."""
    over: str | None = None
    try:
        with transaction.atomic():
            over = _take_quota(name, user, rules)
            raise _GiveBack
    except _GiveBack:
        pass
    return over
