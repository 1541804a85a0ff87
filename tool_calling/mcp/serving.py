"""The governed tools served over MCP: per-user tool lists, audited calls, limits per session.

:func:`tool_server` builds one :class:`~tool_calling.core.mcp.McpToolServer` whose
``tools/list`` is what the user may use now (``GovernedTools``: enabled, present, the user's
groups) and whose ``tools/call`` runs through the governed manager, exactly as a call the model
asks for in a turn: re-checked when it runs, inline or on a Celery worker per the tool's
execution mode, audited as a ``ToolExecution`` row with the user, limited (an MCP session
counts as one turn for ``LIMITS`` and the operators' overrides). A call an approver must decide
answers with an error text and never runs: an MCP call cannot wait for a person. A call only the
user must confirm asks the client's user (``input_required``, bound to the call: see
:func:`_users_confirmation`) and runs, through the rest of the gate, once they confirm it.

:func:`http_app` serves it over streamable HTTP (``tool_calling.asgi.with_mcp`` mounts it at
``/mcp/``): every request needs ``Authorization: Bearer <token>``, ``Host`` must be one of
``MCP["ALLOWED_HOSTS"]`` and ``Origin`` (when sent) one of ``MCP["ALLOWED_ORIGINS"]``. The
token is a DRF token (scripts), or, with ``MCP["RESOURCE"]`` set, an OAuth access token of
django-oauth-toolkit issued for that resource: then ``/mcp/`` is an OAuth 2.1 resource server
(the MCP authorization spec), and ``MCP["SCOPE"]`` and ``MCP["TOOL_SCOPES"]`` decide what the
token's scopes let it list and call.
:func:`serve_stdio` serves one user over stdin/stdout (``manage.py mcp_serve --user NAME``).

Calls over MCP are audited with ``tool_call_id = "mcp:<session>:<n>"``: the session is the MCP
session id the SDK issued (``stdio-<id>`` over stdio), ``n`` counts the session's calls.

Clients of the sessionless revision (2026-07-28: no ``initialize``, no ``Mcp-Session-Id``, every
request stands alone; the SDK's ``Client`` and the agent frameworks on it default to it) get the
same limits: their principal's calls of the last :data:`SESSIONLESS_WINDOW_SECONDS` are their
session, read from the audit (so they hold however many processes serve ``/mcp/``), and each
call is audited as ``mcp:<client>:<id>`` (``client``: a digest of the credential; ``id``: the
call's own).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.apps import apps
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections
from django.utils import timezone
from django.utils.crypto import salted_hmac
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from tool_calling import models
from tool_calling.calls import gate, lifecycle
from tool_calling.calls.executors import execution_mode
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
)
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.errors import ToolFailure
from tool_calling.core.execution.limits import ToolCallLimitExceededException
from tool_calling.core.mcp import McpHttpApp, McpToolServer, ProtectedResource
from tool_calling.core.mcp.server import SERVER_CONTEXT_KEYS, ASGIApp
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import (
    CLIENT_CAPABILITIES_KEY,
    INPUT_RESPONSES_KEY,
    REQUEST_STATE_KEY,
    ToolContext,
)
from tool_calling.core.tools.result import InputRequired
from tool_calling.governance import governed_turn
from tool_calling.resolvers import GovernedTools

__all__ = [
    "CONFIRMATION_KEY",
    "CONFIRMATION_SECONDS",
    "SESSIONLESS_WINDOW_SECONDS",
    "McpPrincipal",
    "approval_text",
    "authenticate",
    "declined_text",
    "http_app",
    "insufficient_scope",
    "protected_resource",
    "serve_stdio",
    "tool_server",
]

logger = logging.getLogger("tool_calling.mcp")

T = TypeVar("T")

SESSION_CONTEXT_KEY = "mcp_session"
"""The tool context key holding the MCP session of a call made over MCP."""

_MAX_SESSIONS = 10_000  # sessions whose calls are counted; the least recently used go first
_SESSION_IDLE_SECONDS = 3600.0  # the SDK closes a session idle for 30 minutes

SESSIONLESS_WINDOW_SECONDS = 1800
"""How far back a sessionless client's calls count as its session (the SDK closes a session
idle this long)."""


@dataclass(frozen=True)
class McpPrincipal:
    """Who an MCP request is from: the user, the MCP session it belongs to, the client."""

    user: Any
    """The authenticated user (the token's)."""
    session: str = ""
    """The MCP session id (``stdio-<id>`` over stdio); blank without one (the sessionless
    revision, or before a session exists)."""
    client: str = ""
    """Who calls, across requests without a session: a digest of the credential."""
    scopes: frozenset[str] | None = None
    """The scopes of an OAuth access token; ``None`` for a DRF token, which scopes do not
    limit."""


def _principal_key(principal: McpPrincipal) -> str:
    # Sessions are bound to users: another user's token never reaches this session.
    return f"user:{principal.user.pk}"


def _with_fresh_connections(function: Callable[..., T]) -> Callable[..., T]:
    """Run ``function`` (on an anyio worker thread), then give the database connection back."""

    def run(*args: Any) -> T:
        try:
            return function(*args)
        finally:
            close_old_connections()

    return run


def authenticate(headers: Mapping[str, str]) -> McpPrincipal | None:
    """The principal of an HTTP request: ``Authorization: Bearer <token>`` of an active user.

    The token is a DRF token, or (with ``MCP["RESOURCE"]`` set and django-oauth-toolkit
    installed) an OAuth access token that has not expired and was issued for that resource
    (RFC 8707). The two are told apart by lookup: a DRF token's key is its primary key, an
    access token is found by its checksum.

    ``None`` (401) without that header, with another scheme, or with a token that is unknown,
    expired, issued for another resource, or belongs to an inactive user. The token
    authenticates here and is never sent on: the MCP servers this project calls get their own
    credentials (``McpServer.headers``).
    """
    scheme, _, key = headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or " " in key:
        return None
    client = "client-" + salted_hmac("tool_calling.mcp.client", key).hexdigest()[:16]
    session = headers.get("mcp-session-id", "")
    try:
        user, _token = TokenAuthentication().authenticate_credentials(key)
    except AuthenticationFailed:
        pass
    else:
        return McpPrincipal(user, session, client)
    scopes = _access_token_scopes(key)
    if scopes is None:
        return None
    user, granted = scopes
    return McpPrincipal(user, session, client, granted)


def _same_resource(issued: str, resource: str) -> bool:
    return issued.rstrip("/") == resource.rstrip("/")


def _access_token_scopes(key: str) -> tuple[Any, frozenset[str]] | None:
    """The user and scopes of OAuth access token ``key``, if ``/mcp/`` accepts it."""
    resource = app_settings.MCP["RESOURCE"]
    if not resource or not apps.is_installed("oauth2_provider"):
        return None
    from oauth2_provider.models import get_access_token_model

    checksum = hashlib.sha256(key.encode()).hexdigest()
    token = (
        get_access_token_model()
        .objects.select_related("user")
        .filter(token_checksum=checksum)
        .first()
    )
    if token is None or token.is_expired() or token.user is None or not token.user.is_active:
        return None
    # A token names the resources it is for; one without any (unrestricted, to
    # django-oauth-toolkit) or for another resource is not for /mcp/.
    if not any(_same_resource(issued, resource) for issued in token.resource or ()):
        return None
    return token.user, frozenset(token.scope.split())


def _tool_scope(name: str) -> str | None:
    scope = app_settings.MCP["TOOL_SCOPES"].get(name)
    return scope if isinstance(scope, str) else None


def _scope_allows(principal: McpPrincipal, name: str) -> bool:
    scope = _tool_scope(name)
    return principal.scopes is None or scope is None or scope in principal.scopes


def insufficient_scope(principal: McpPrincipal, message: Mapping[str, Any]) -> list[str]:
    """The scopes ``principal``'s token lacks for JSON-RPC ``message`` (403 when any).

    Every request needs ``MCP["SCOPE"]``; a ``tools/call`` also needs the scope
    ``MCP["TOOL_SCOPES"]`` names for its tool. A DRF token lacks none.
    """
    if principal.scopes is None:
        return []
    needed = [app_settings.MCP["SCOPE"]] if app_settings.MCP["SCOPE"] else []
    params = message.get("params")
    if message.get("method") == "tools/call" and isinstance(params, Mapping):
        scope = _tool_scope(str(params.get("name", "")))
        if scope is not None:
            needed.append(scope)
    return [scope for scope in needed if scope not in principal.scopes]


def protected_resource() -> ProtectedResource | None:
    """``/mcp/`` as an OAuth protected resource, from ``MCP`` (read now).

    ``None`` without ``MCP["RESOURCE"]``: DRF tokens only.
    """
    options = app_settings.MCP
    if not options["RESOURCE"]:
        return None
    base = options["SCOPE"]
    tool_scopes = {scope for scope in options["TOOL_SCOPES"].values() if scope}
    return ProtectedResource(
        resource=options["RESOURCE"],
        authorization_servers=tuple(options["AUTHORIZATION_SERVERS"]),
        scopes_supported=tuple(([base] if base else []) + sorted(tool_scopes - {base})),
        scope=base,
    )


class _Sessions:
    """The calls made in each MCP session, as the tool responses the limits count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, tuple[float, list[ToolResponse]]] = OrderedDict()
        self._numbers: dict[str, int] = {}

    def _evict(self, now: float) -> None:
        while self._sessions:
            key, (seen, _) = next(iter(self._sessions.items()))
            if len(self._sessions) <= _MAX_SESSIONS and now - seen < _SESSION_IDLE_SECONDS:
                return
            del self._sessions[key]
            self._numbers.pop(key, None)

    def begin(self, key: str) -> tuple[int, list[Message]]:
        """The next call's number in session ``key``, and the session's calls so far."""
        now = time.monotonic()
        with self._lock:
            _, responses = self._sessions.pop(key, (now, []))
            self._sessions[key] = (now, responses)
            number = self._numbers[key] = self._numbers.get(key, 0) + 1
            self._evict(now)
            history: list[Message] = [ToolResponseMessage(list(responses))] if responses else []
        return number, history

    def add(self, key: str, response: ToolResponse) -> None:
        """Count ``response`` (a call that ran or was answered) in session ``key``."""
        with self._lock:
            entry = self._sessions.get(key)
            if entry is not None:
                entry[1].append(ToolResponse(response.id, response.name, ""))


_sessions = _Sessions()


def approval_text(name: str) -> str:
    """What an MCP client gets for a tool that needs a person's approval before each call."""
    return (
        f"Tool {name!r} requires a person's approval before each call, and a call over MCP "
        "cannot wait for one: it was not run. Use it from a conversation of this project, "
        "whose background runs wait for approvals."
    )


def _client_history(user: Any, client: str) -> list[Message]:
    """The calls a sessionless client made in the last :data:`SESSIONLESS_WINDOW_SECONDS`.

    What the limits count for its next call, as a session's calls are for a session's.
    """
    since = timezone.now() - datetime.timedelta(seconds=SESSIONLESS_WINDOW_SECONDS)
    prefix = f"mcp:{client}:"
    names = models.ToolExecution.objects.filter(
        # The audited call ids of this client (a range on the call ids' index).
        tool_call_id__gte=prefix,
        tool_call_id__lt=prefix[:-1] + ";",
        user=user if getattr(user, "is_authenticated", False) else None,
        created_at__gte=since,
    ).values_list("tool_call_id", "tool_name")
    responses = [ToolResponse(call_id, name, "") for call_id, name in names]
    return [ToolResponseMessage(responses)] if responses else []


def _list_tools(principal: McpPrincipal) -> list[ToolCallback]:
    # By name: the same list in the same order whichever process answers. An OAuth token
    # sees only the tools its scopes allow.
    callbacks = [
        c for c in GovernedTools(principal.user).callbacks() if _scope_allows(principal, c.name)
    ]
    return sorted(callbacks, key=lambda callback: callback.name)


def _call_tool(
    principal: McpPrincipal, name: str, arguments: dict[str, Any], meta: Mapping[str, Any]
) -> str:
    # ``meta`` is client-controlled: it never decides anything here, and tools do not get it
    # (but for SERVER_CONTEXT_KEYS, which McpToolServer sets and clients cannot).
    user = principal.user
    session = principal.session
    if session:
        number, history = _sessions.begin(session)
        call_id = f"mcp:{session}:{number}"
    else:
        # The sessionless revision: the client's recent calls, as audited, are its session.
        session = principal.client or f"single-{uuid.uuid4().hex}"
        history = _client_history(user, session)
        call_id = f"mcp:{session}:{uuid.uuid4().hex[:12]}"
    call = ToolCall(call_id, name, json.dumps(arguments))
    # Every rule of the gate applies, through the governed manager; a call that needs an
    # approver's approval is refused in this path's own words, one only the user decides asks
    # them first (their confirmation then lets it through rule 4, for these arguments only).
    turn = governed_turn(user=user, approval_text=approval_text)
    context = {**turn.tool_context, SESSION_CONTEXT_KEY: session}
    # Set by McpToolServer, never by the client: progress, input responses, the checked state.
    context.update({key: meta[key] for key in SERVER_CONTEXT_KEYS if key in meta})
    asked = _users_confirmation(user, call, turn, context)
    if isinstance(asked, InputRequired):
        return asked  # nothing ran, nothing counted: the client asks its user, then calls again
    if isinstance(asked, _Declined):
        lifecycle.record_declined(
            asked.call,
            asked.text,
            tool=turn.manager.governed.rows.get(name),
            user=turn.manager.user,
            definition_sha256=asked.definition_sha256,
            basis=asked.basis,
        )
        if principal.session:
            _sessions.add(principal.session, ToolResponse(call.id, name, asked.text))
        raise ToolFailure(asked.text)
    if asked is not None:
        turn.manager.confirmation = asked.confirmation
        if asked.continuing:
            # A later round of a confirmed call: the answers are the tool's, and so is the state.
            if asked.tool_state is None:
                context.pop(REQUEST_STATE_KEY, None)
            else:
                context[REQUEST_STATE_KEY] = asked.tool_state
        else:
            # The answer was for this server, not for the tool.
            context.pop(INPUT_RESPONSES_KEY, None)
            context.pop(REQUEST_STATE_KEY, None)
    prompt = Prompt(
        history, ToolCallingChatOptions(tool_callbacks=turn.callbacks, tool_context=context)
    )
    response = ChatResponse([Generation(AssistantMessage(tool_calls=[call]))])
    try:
        result = turn.manager.execute_tool_calls(prompt, response)
    except ToolCallLimitExceededException as exc:
        # LIMITS["ON_LIMIT_EXCEEDED"] = "THROW": the call did not run; the session's next calls
        # breach the same limit.
        partial = exc.partial_result
        last = partial.conversation_history[-1] if partial is not None else None
        if isinstance(last, ToolResponseMessage) and last.responses:
            raise ToolFailure(last.responses[-1].response_data) from None
        raise ToolFailure(str(exc)) from None
    answer = result.conversation_history[-1]
    if not isinstance(answer, ToolResponseMessage) or not answer.responses:
        raise RuntimeError(f"The governed manager answered call {call.id!r} with no response.")
    reply = answer.responses[-1]
    if principal.session:
        _sessions.add(principal.session, reply)
    if reply.is_error:
        raise ToolFailure(reply.response_data)
    text = reply.response_data
    if asked is not None and isinstance(text, InputRequired):
        # The confirmed tool asks for input in turn: its state travels inside the confirmation's,
        # so that its next round is still the confirmed call (and is not asked again).
        return InputRequired(text.input_requests, request_state=asked.carrying(text.request_state))
    return text


CONFIRMATION_KEY = "confirm"
"""The key of the user's confirmation among an ``input_required`` result's requests."""

CONFIRMATION_SECONDS = 600
"""How long the user's answer to a confirmation may take: an older request state asks again."""

_CONFIRMATION_STATE = "tool_calling.confirmation:"  # the prefix of the request state's text
_SUMMARY_CHARS = 300  # of the arguments, in the question


def declined_text(name: str) -> str:
    """What an MCP client gets for a call its user declined when asked to confirm it."""
    return f"The user declined the call of tool {name!r}: it was not run."


@dataclass(frozen=True)
class _Confirmed:
    confirmation: gate.Confirmation
    bound: Mapping[str, str]
    continuing: bool = False
    """A later round of the confirmed call (the tool asked for input after it was confirmed)."""
    tool_state: str | None = None
    """The tool's own request state in such a round."""

    def carrying(self, tool_state: str | None) -> str:
        """The request state of the confirmed call's next round, with the tool's own."""
        return _state({**self.bound, "confirmed": True, "inner": tool_state})


def _state(values: Mapping[str, Any]) -> str:
    return _CONFIRMATION_STATE + json.dumps({**values, "asked": int(time.time())})


@dataclass(frozen=True)
class _Declined:
    call: ToolCall
    text: str
    definition_sha256: str
    basis: str


def _question(name: str, arguments: str) -> str:
    summary = arguments if len(arguments) <= _SUMMARY_CHARS else arguments[:_SUMMARY_CHARS] + "…"
    return f"Confirm: call {name} with {summary}?"


def _users_confirmation(
    user: Any, call: ToolCall, turn: Any, context: dict[str, Any]
) -> InputRequired | _Declined | _Confirmed | None:
    """Ask the client's user to confirm a call only they decide (rule 4), or read the answer.

    ``None`` when the call needs no such question: nobody decides it, an approver does (the
    governed manager refuses it: a call over MCP cannot wait), a rule before rule 4 refuses it,
    the tool runs on a Celery worker, or the client cannot be asked (it did not declare
    elicitation): the manager answers as without a question. Else an ``InputRequired``
    asking (a form with one boolean), bound by its request state to the tool, the digest of
    the exact arguments, the tool's definition and the rules that asked; on the client's next
    call with that state (sealed by the SDK, checked before this runs) and these same things,
    the answer: ``_Confirmed`` (the user's :class:`~tool_calling.calls.gate.Confirmation`), or
    ``_Declined``. Another state, or one for other arguments, another tool, definition or rules,
    or older than :data:`CONFIRMATION_SECONDS`, asks again. A confirmed tool that asks for
    input in turn gets its answers and its own state on the next round, still confirmed.
    """
    name = call.name
    callback = next((c for c in turn.callbacks if c.name == name), None)
    if callback is None or "elicitation" not in (context.get(CLIENT_CAPABILITIES_KEY) or {}):
        return None
    if execution_mode(turn.manager.governed.rows.get(name)) != models.ExecutionMode.INLINE:
        return None
    verdict = gate.admit(
        gate.GateCall(
            call, callback, user, ToolContext(context), can_wait=True, through=gate.Rule.APPROVAL
        )
    )
    if not verdict.awaits_approval or verdict.deciders != models.Deciders.USER:
        return None
    assert verdict.rules is not None  # read by rule 2
    bound = {
        "tool": name,
        "arguments": gate.arguments_sha256(call.arguments),
        "definition": verdict.rules.schema_hash,
        "basis": verdict.basis,
    }
    given = _given(bound, context)
    answer = None if given is None else given.get("confirmed") is True or _answer(context)
    if given is None or answer is None:
        form = {
            "type": "object",
            "properties": {
                "confirm": {"type": "boolean", "title": f"Run {name}", "default": False}
            },
            "required": ["confirm"],
        }
        return InputRequired(
            {CONFIRMATION_KEY: InputRequired.elicitation(_question(name, call.arguments), form)},
            request_state=_state(bound),
        )
    if answer:
        confirmation = gate.Confirmation(
            user,
            name,
            bound["arguments"],
            bound["definition"],
            bound["basis"],
            timezone.now(),
        )
        inner = given.get("inner")
        return _Confirmed(
            confirmation,
            bound,
            continuing=given.get("confirmed") is True,
            tool_state=inner if isinstance(inner, str) else None,
        )
    return _Declined(call, declined_text(name), bound["definition"], bound["basis"])


def _given(bound: Mapping[str, str], context: Mapping[str, Any]) -> dict[str, Any] | None:
    """The confirmation's state the client gave back, if it is for the call ``bound`` describes.

    ``None`` (ask) for another state, one of another call, or one older than
    :data:`CONFIRMATION_SECONDS`.
    """
    state = context.get(REQUEST_STATE_KEY)
    if not isinstance(state, str) or not state.startswith(_CONFIRMATION_STATE):
        return None
    try:
        given = json.loads(state[len(_CONFIRMATION_STATE) :])
    except ValueError:
        return None
    if not isinstance(given, dict) or any(given.get(key) != value for key, value in bound.items()):
        return None
    asked = given.get("asked")
    if not isinstance(asked, int) or not 0 <= time.time() - asked <= CONFIRMATION_SECONDS:
        return None
    return given


def _answer(context: Mapping[str, Any]) -> bool | None:
    """The user's answer to the question: yes, no, or ``None`` (none given: ask)."""
    response = (context.get(INPUT_RESPONSES_KEY) or {}).get(CONFIRMATION_KEY)
    if not isinstance(response, Mapping):
        return None
    content = response.get("content")
    confirmed = isinstance(content, Mapping) and content.get("confirm") is True
    return response.get("action") == "accept" and confirmed


def request_state_keys() -> list[str]:
    """The keys sealing an ``InputRequired``'s request state, derived from the secret key.

    ``SECRET_KEY`` seals, it and each of ``SECRET_KEY_FALLBACKS`` unseal: every process of the
    site shares them, and a rotated secret keeps the state it sealed readable.
    """
    secrets = [django_settings.SECRET_KEY, *getattr(django_settings, "SECRET_KEY_FALLBACKS", [])]
    return [
        salted_hmac(_STATE_SALT, "", secret=secret, algorithm="sha256").hexdigest()
        for secret in secrets
    ]


_STATE_SALT = "tool_calling.mcp.request_state"


def tool_server() -> McpToolServer[McpPrincipal]:
    """The MCP server of the governed tools (see the module docstring).

    Its ``tools/list`` answers are per user (``cacheScope: "private"``), sorted by name, and
    fresh for ``MCP["LIST_TTL_MS"]`` milliseconds (read now). The request state of an
    ``InputRequired`` is sealed with :func:`request_state_keys`.
    """
    return McpToolServer(
        list_ttl_ms=app_settings.MCP["LIST_TTL_MS"],
        request_state_keys=request_state_keys(),
        list_tools=_with_fresh_connections(_list_tools),
        call_tool=_with_fresh_connections(_call_tool),
        name="tool_calling",
        instructions=(
            "The tools this project's operators let you use. Calls are audited; a call that "
            "needs the user's confirmation asks them first, one that needs an approver's "
            "approval answers with an error instead of running."
        ),
    )


def http_app(*, fallback: ASGIApp | None = None, path: str = "/mcp/") -> McpHttpApp:
    """The streamable-HTTP app of :func:`tool_server` at ``path``; other paths to ``fallback``.

    It owns the ASGI lifespan (the SDK's session manager starts there) and never forwards it.
    Reads ``MCP`` now (the hosts, the origins, and the OAuth resource with its scopes).

    Raises:
        ImproperlyConfigured: ``rest_framework.authtoken`` is not installed.
    """
    if not apps.is_installed("rest_framework.authtoken"):
        raise ImproperlyConfigured(
            "The MCP endpoint authenticates with Django REST framework tokens: add "
            "'rest_framework.authtoken' to INSTALLED_APPS (and migrate)."
        )
    options = app_settings.MCP
    resource = protected_resource()
    return tool_server().streamable_http_app(
        authenticate=_with_fresh_connections(authenticate),
        allowed_hosts=options["ALLOWED_HOSTS"],
        allowed_origins=options["ALLOWED_ORIGINS"],
        path=path,
        principal_key=_principal_key,
        fallback=fallback,
        protected_resource=resource,
        # Without OAuth every principal holds a DRF token, which scopes do not limit.
        insufficient_scope=insufficient_scope if resource is not None else None,
    )


def serve_stdio(user: Any) -> None:
    """Serve the governed tools of ``user`` over this process's stdin and stdout until EOF."""
    tool_server().serve_stdio(McpPrincipal(user, f"stdio-{uuid.uuid4().hex}"))
