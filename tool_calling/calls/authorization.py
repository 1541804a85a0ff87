"""Who may make a call: permissions and per-call checks, in the end user's context (S4).

Every governed call runs for the user of its turn (``ToolContext["user_id"]`` tells the tool who
that is). Before the tool runs, in-process and on workers alike, the runtime checks:

- the permissions the tool's code requires (:func:`authorize`), and the one an operator set on
  the tool in the admin (``Tool.permission``): ``user.has_perm`` each, so groups and
  superusers work as everywhere in Django;
- the tool's own check, if its code declares one: a callable that sees the user, the call's
  arguments and its tool context, and may refuse. That is where "user A's turn, the model
  passes user B's order id" is stopped: the check looks the object up *for this user*.

A refused call does not run; it is audited as ``refused`` with the reason, and the model reads
the reason. The declaration sits beside ``@tool`` rather than in it (``@tool`` keeps its list of
options short) and, like ``@tool``, marks the function and returns it
unchanged::

    def owns_order(call: CallRequest) -> bool:
        return Order.objects.filter(pk=call.arguments.get("order_id"), owner=call.user).exists()

    @authorize(permission="shop.view_order", check=owns_order)
    @tool
    def get_order(order_id: int) -> dict: ...
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolFailure

__all__ = [
    "AUTHORIZATION_ATTRIBUTE",
    "Authorization",
    "CallRequest",
    "ToolPermissionError",
    "authorize",
    "declared",
    "missing_permission",
    "refusal",
]

logger = logging.getLogger("tool_calling.calls")

F = TypeVar("F")

AUTHORIZATION_ATTRIBUTE = "__tool_authorization__"
"""Where :func:`authorize` puts a tool function's :class:`Authorization`."""


class ToolPermissionError(ToolFailure):
    """Raise from an authorization check to refuse a call with a message for the model."""


@dataclass(frozen=True)
class CallRequest:
    """What an authorization check sees of one call."""

    tool_name: str
    """The tool the model called."""
    user: Any
    """The user of the turn (a Django user), or ``None`` for a turn without one."""
    arguments: Mapping[str, Any]
    """The call's arguments as the model sent them (``{}`` when they are not a JSON object)."""
    context: ToolContext = field(default_factory=ToolContext)
    """The call's server-side tool context (``user_id``, ``conversation_id``, ...)."""


Check = Callable[[CallRequest], bool]


@dataclass(frozen=True)
class Authorization:
    """Who may call a tool, as its code declares it."""

    permissions: tuple[str, ...] = ()
    """Django permissions (``app_label.codename``) the user must hold, all of them."""
    check: Check | None = None
    """Called for every call: ``True`` lets it run, anything else refuses it (raise
    :class:`ToolPermissionError` to tell the model why)."""


def authorize(*, permission: str | Iterable[str] = (), check: Check | None = None) -> Any:
    """Declare who may call a tool: permissions the user needs, and a check per call.

    Put it above or below ``@tool``; the function is returned unchanged.

    Args:
        permission: One ``"app_label.codename"`` or several (all are required).
        check: ``check(call: CallRequest) -> bool``: ``True`` lets the call run.

    Raises:
        TypeError: a permission is not ``"app_label.codename"``, or ``check`` is not callable.
    """
    permissions = (permission,) if isinstance(permission, str) else tuple(permission)
    for name in permissions:
        if not isinstance(name, str) or name.count(".") != 1 or name.startswith("."):
            raise TypeError(f"authorize(permission=...) takes 'app_label.codename', got {name!r}")
    if check is not None and not callable(check):
        raise TypeError(f"authorize(check=...) takes a callable, got {type(check).__name__}")
    declaration = Authorization(permissions, check)

    def mark(target: F) -> F:
        function = getattr(target, "__func__", target)  # staticmethod, classmethod
        setattr(function, AUTHORIZATION_ATTRIBUTE, declaration)
        return target

    return mark


def declared(callback: ToolCallback | None) -> Authorization | None:
    """The :class:`Authorization` the code of a tool callback declares, if any.

    Read from the callback's function (a wrapper's is the wrapped tool's); a remote tool has
    none.
    """
    function = callback.function if callback is not None else None
    found = getattr(getattr(function, "__func__", function), AUTHORIZATION_ATTRIBUTE, None)
    return found if isinstance(found, Authorization) else None


def _arguments(text: str | None) -> Mapping[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def missing_permission(
    name: str, user: Any, *, callback: ToolCallback | None, permission: str = ""
) -> str | None:
    """Why ``user`` may not call tool ``name`` at all; ``None`` when they hold what it needs.

    What a tool requires of everyone who calls it: the permissions its code declares
    (:func:`authorize`) and the one its operator set (``Tool.permission``), each checked with
    ``user.has_perm``. Its per-call check is not part of it (it needs a call). The gate asks
    this for every call; the tool lists (``resolvers.GovernedTools``: the API's, ``/mcp/``'s,
    the model's) leave out a tool for which it says no.

    Args:
        name: The tool.
        user: The user (``None`` or anonymous: every permission is missing then).
        callback: The tool's callback (its code's declaration is read from it).
        permission: The permission an operator requires on the tool.
    """
    declaration = declared(callback)
    wanted = [
        *(declaration.permissions if declaration else ()),
        *([permission] if permission else []),
    ]
    holder = user if getattr(user, "is_authenticated", False) else None
    for needed in wanted:
        if holder is None or not holder.has_perm(needed):
            return (
                f"Tool {name!r} needs the permission {needed!r}, which the user of this "
                "conversation does not have. The call was not made; do not try it again."
            )
    return None


def refusal(
    name: str,
    user: Any,
    *,
    callback: Any,
    permission: str = "",
    arguments: str | None = None,
    context: ToolContext | None = None,
) -> str | None:
    """Why ``user`` may not make this call of tool ``name`` now; ``None`` when they may.

    Args:
        name: The tool.
        user: The user of the turn (``None``: no user; every permission is missing then).
        callback: The tool's callback (its code's declaration is read from it).
        permission: The permission an operator requires on the tool (``Tool.permission``).
        arguments: The call's arguments as JSON text.
        context: The call's tool context.
    """
    missing = missing_permission(name, user, callback=callback, permission=permission)
    if missing is not None:
        return missing
    declaration = declared(callback) or Authorization()
    if declaration.check is None:
        return None
    holder = user if getattr(user, "is_authenticated", False) else None
    request = CallRequest(name, holder, _arguments(arguments), context or ToolContext())
    try:
        allowed = declaration.check(request)
    except ToolPermissionError as exc:
        return str(exc) or _refused(name)
    except Exception:
        logger.exception("The authorization check of tool %r failed; the call is refused", name)
        return _refused(name)
    return None if allowed is True else _refused(name)


def _refused(name: str) -> str:
    return (
        f"Tool {name!r} refused the call: the user of this conversation may not do that "
        "(with these arguments). The call was not made."
    )
