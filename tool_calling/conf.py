"""Settings of tool_calling: one ``TOOL_CALLING`` dict, read lazily through ``settings``.

A project sets only the keys it changes, for example::

    TOOL_CALLING = {
        "CHAT_MODEL": {"MODEL": "gpt-4o-mini", "BASE_URL": "http://localhost:11434/v1"},
        "EXECUTION": {"MODE": "celery", "QUEUE": "tools"},
        "LIMITS": {"MAX_TOTAL_TOOL_CALLS": 50, "MAX_CALLS_PER_TOOL": {"web_search": 5}},
        "THROW_EXCEPTION_ON_ERROR": False,
        "NEW_TOOLS_ENABLED": False,  # operators enable each new tool in the admin
        "AUDIT_REDACTOR": "myproject.audit.redact",
    }

and reads them as attributes::

    from tool_calling.conf import settings

    settings.LIMITS["MAX_TOTAL_TOOL_CALLS"]  # 50
    settings.LIMITS["MAX_CALLS_PER_TOOL_DEFAULT"]  # 40, the default: LIMITS was merged

Dict-valued keys (``CHAT_MODEL``, ``EXECUTION``, ``LIMITS``, ``RETENTION``, ``API``, ``APPROVALS``,
``TOOL_SEARCH``, ``ARGUMENT_AUGMENTATION``, ``MCP``) are merged one level deep with their
defaults, so overriding one limit keeps the others. Unlike Django REST framework, which replaces
a dict-valued setting whole. Values one level further
down (``LIMITS["MAX_CALLS_PER_TOOL"]``, ``CHAT_MODEL["OPTIONS"]``) are taken as given.

Keys listed in ``IMPORT_STRINGS`` (``AUDIT_REDACTOR``, ``EXCEPTION_PROCESSOR``) take a dotted
path, imported on first access (a callable or ``None`` is taken as given); a path that does not
import raises an ``ImportError`` naming the key, and the system checks report it at startup.

Nothing is read at import time. Values are resolved on first access, cached, and the cache is
dropped when ``TOOL_CALLING`` changes (``override_settings`` in tests). Unknown or misspelled
keys are reported by the system checks in ``tool_calling.checks``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from tool_calling.core._settings import CoreSettings
from tool_calling.core.execution.limits import ToolCallLimits

__all__ = [
    "DEFAULTS",
    "DEFAULT_TURN_RATE",
    "IMPORT_STRINGS",
    "TURN_THROTTLE_SCOPE",
    "ToolCallingSettings",
    "broker_visibility_timeout",
    "django_core_settings",
    "hard_time_limit",
    "settings",
]

SETTING_NAME = "TOOL_CALLING"

DEFAULTS: dict[str, Any] = {
    # --- Chat model ------------------------------------------------------------------------
    # The chat model of every governed path (manage.py chat, the background runs, the API).
    "CHAT_MODEL": {
        # Dotted path to a ChatModel subclass, or to a function returning a ChatModel, called
        # with ARGUMENTS for each turn. The default is the OpenAI-compatible adapter, which
        # reads the keys below.
        "CLASS": "tool_calling.core.providers.openai.OpenAIChatModel",
        # Keyword arguments for CLASS.
        "ARGUMENTS": {},
        # Model name sent with every request, e.g. "gpt-4o-mini" or "llama3.1" (Spring AI's
        # default for OpenAI is "gpt-4o-mini", too).
        "MODEL": "gpt-4o-mini",
        # Base URL of an OpenAI-compatible server (vLLM, Ollama, LM Studio); None = the openai
        # SDK's default (its OPENAI_BASE_URL environment variable, else api.openai.com).
        "BASE_URL": None,
        # API key; None = the openai SDK's default (its OPENAI_API_KEY environment variable).
        "API_KEY": None,
        # Seconds to wait for one model response.
        "TIMEOUT": 60,
        # Retries of failed model requests (connection errors, 429, 5xx) by the openai SDK.
        "MAX_RETRIES": 2,
        # Extra keyword arguments for every chat completion, e.g. {"temperature": 0.2}.
        "OPTIONS": {},
    },
    # --- Execution -------------------------------------------------------------------------
    "EXECUTION": {
        # "inline" runs tool calls in the process that runs the turn; "celery" sends each call
        # to a Celery worker listening on QUEUE.
        "MODE": "inline",
        # How many calls of one assistant message run at the same time in-process.
        "MAX_CONCURRENT_CALLS": 8,
        # Default Celery queue of tool calls (and of durable runs' steps); a tool in the admin
        # may name its own. Run it on a thread pool (celery worker -P threads): a call waiting
        # on the network holds a thread, not a process.
        "QUEUE": "tool_calling",
        # The queue an operator picks in the admin for CPU-heavy or untrusted tools: run it on
        # a prefork pool (celery worker -P prefork), where a call's hard time limit kills its
        # process.
        "PROCESS_QUEUE": "tool_calling_processes",
        # Default time limit of one tool call, in seconds; a tool in the admin may set its own.
        # On a Celery worker this is the soft limit: the call ends with a "timed out" error
        # response the model sees.
        "TIMEOUT": 30,
        # Seconds after the soft limit at which a call still running on a worker is killed (the
        # hard limit) and its worker process replaced; the model gets the same "timed out".
        "TIMEOUT_GRACE": 5,
        # Seconds a worker's claim on a call lasts without renewal. The worker renews it every
        # third of that while the tool runs, so a call whose worker died is noticed this long
        # after: an idempotent tool then runs again, any other ends "outcome unknown".
        "LEASE_SECONDS": 15,
        # Times an idempotent call may be started on a worker: a call whose worker dies on every
        # try (a poison call) ends FAILED after this many.
        "MAX_ATTEMPTS": 3,
        # Seconds a caller waits for a call on a worker beyond its time limit (time in the queue,
        # a re-run after a crash) before it tells the model the call did not finish.
        "WAIT_MARGIN": 30,
        # Seconds after which the sweeper sends a call that no worker has started to the broker
        # again (a message lost with the broker); a call that never reached the broker is sent
        # again on the next sweep.
        "REDISPATCH_AFTER": 300,
        # Seconds one socket operation with the broker may take when tool_calling publishes (a
        # tool call, a run's step): a publish is tried twice, so a broker that is down or
        # stalled costs about twice this, never a hang (the API then answers 503).
        "BROKER_TIMEOUT": 2,
        # Longest pause, in seconds, before a retry of a call that failed with a transient error
        # (the backoff doubles from the tool's "retry backoff" up to this, with jitter).
        "RETRY_BACKOFF_MAX": 60,
    },
    # --- Limits (Spring AI: spring.ai.tools.limits.*) ---------------------------------------
    # Counted per turn: the calls after the last user message. None = unlimited.
    "LIMITS": {
        # Calls allowed per tool per turn, unless MAX_CALLS_PER_TOOL or EXCLUDED_TOOLS says
        # otherwise.
        "MAX_CALLS_PER_TOOL_DEFAULT": 40,
        # Per-tool overrides: {"tool_name": 5}; a value of None exempts that tool.
        "MAX_CALLS_PER_TOOL": {},
        # Tools with no per-tool limit; their calls still count toward MAX_TOTAL_TOOL_CALLS.
        "EXCLUDED_TOOLS": [],
        # Calls allowed across all tools per turn.
        "MAX_TOTAL_TOOL_CALLS": 150,
        # Model calls one turn may make before the loop stops, whatever the call limits say
        # (in-process turns and background runs alike).
        "MAX_TOOL_ROUNDS": 100,
        # "THROW" ends the turn with ToolCallLimitExceededException; "RETURN_ERROR_RESPONSE"
        # answers the breaching call with an error the model sees, and goes on.
        "ON_LIMIT_EXCEEDED": "THROW",
    },
    # --- Errors and validation --------------------------------------------------------------
    # spring.ai.tools.throw-exception-on-error: re-raise a tool's exception instead of sending
    # its message to the model.
    "THROW_EXCEPTION_ON_ERROR": False,
    # Dotted path of (or the) ToolExecutionExceptionProcessor of governed turns, or of a class
    # or function making one with no arguments, e.g. to re-raise some exception types
    # (DefaultToolExecutionExceptionProcessor(rethrown=[...])), wherever the call ran. None =
    # the default processor, which THROW_EXCEPTION_ON_ERROR configures.
    "EXCEPTION_PROCESSOR": None,
    # Raise instead of telling the model when it sends arguments that are not a JSON object or
    # fail the schema, or names a tool that is unknown or disabled.
    "STRICT_TOOL_CALLS": False,
    # Longest tool result, in characters, sent to the model; longer results are cut with a
    # note. None = no cap.
    "MAX_RESULT_CHARS": 65536,
    # --- Resolution and advisors ------------------------------------------------------------
    # spring.ai.tools.resolution.fallback.enabled: let a tool call the request did not attach
    # be looked up by name in the resolver. Off: only the request's tools can run.
    "RESOLUTION_FALLBACK_ENABLED": False,
    # spring.ai.chat.client.tool-calling.enabled: ChatClient adds a ToolCallingAdvisor to a
    # request that has none.
    "TOOL_CALLING_ADVISOR_AUTO_REGISTER": True,
    # --- Tool search (tool_calling.search) ---------------------------------------------------
    "TOOL_SEARCH": {
        # Offer the model a tool_search tool (and the tools marked "always include") instead of
        # every tool definition, in governed turns with more than THRESHOLD tools; what the
        # searches find is offered from then on and stored per conversation.
        "ENABLED": False,
        # Dotted path of the ToolIndex class (or a function making one) that searches:
        # LexicalToolIndex (BM25, in process), RegexToolIndex (the model sends a pattern),
        # "tool_calling.search.PostgresToolIndex" (PostgreSQL full-text search).
        "INDEX": "tool_calling.core.search.lexical.LexicalToolIndex",
        # Tools one search returns when the model does not say how many (1-10).
        "MAX_RESULTS": 5,
        # A turn with at most this many tools offers them all directly, without search.
        "THRESHOLD": 20,
    },
    # --- Argument augmentation (tool_calling.augmentation) ----------------------------------
    "ARGUMENT_AUGMENTATION": {
        # Ask the model, on every call of every tool, for the fields of TYPE (why it calls the
        # tool); stored with the call, removed before the tool runs. A tool's own "ask why it
        # is called" in the admin wins.
        "ENABLED": False,
        # Dotted path of the pydantic model (or dataclass, TypedDict) whose fields the model
        # fills in: by default a one-sentence reason and a confidence (low, medium, high).
        "TYPE": "tool_calling.augmentation.CallReason",
    },
    # --- Governance and audit ---------------------------------------------------------------
    # Seconds a turn may hold its conversation: a second message to the same conversation is
    # refused (ConversationBusyError) until the first turn ends, or until this long after it
    # started (a crashed turn never blocks a conversation for good).
    "CONVERSATION_TURN_TIMEOUT": 900,
    # Messages of a stored conversation sent to the model at most (the newest ones; a tool
    # call is never separated from its responses).
    "MEMORY_MAX_MESSAGES": 100,
    # Whether tools that appear in code (sync_tools / migrate) start enabled in the database.
    "NEW_TOOLS_ENABLED": True,
    # Longest arguments / result text kept in a ToolExecution audit row; longer ones are cut
    # with a note. None = keep everything.
    "AUDIT_MAX_CHARS": 10000,
    # Dotted path of (or the) callable (text: str, *, tool_name: str, field: str) -> str
    # applied to a call's "arguments", "result" and "error" before they are stored in the
    # audit, then cut to AUDIT_MAX_CHARS (mask secrets there). None = store them as they are.
    "AUDIT_REDACTOR": None,
    # --- Retention (tool_calling.retention: manage.py purge_expired, the purge_expired task) -
    "RETENTION": {
        # Days to keep the audit of a finished tool call (ToolExecution rows whose call ended;
        # a call still pending or running is never purged). None = keep them for ever.
        "AUDIT_DAYS": None,
        # Days to keep the events of a run after it ended (RunEvent rows; the run itself stays
        # until FINISHED_RUN_DAYS). None = keep them as long as their run.
        "RUN_EVENT_DAYS": None,
        # Days to keep a run after it ended (succeeded, failed or cancelled), with its events.
        # Its conversation and messages stay; its audit rows stay until AUDIT_DAYS. None = keep.
        "FINISHED_RUN_DAYS": None,
        # Rows deleted per statement: each batch is a transaction of its own, so writers wait
        # at most one batch for the tables (SQLite's one writer, PostgreSQL's row locks).
        "BATCH_SIZE": 1000,
    },
    # --- Observability (tool_calling.observability) -----------------------------------------
    # spring.ai.tools.observations.include-content: put tool arguments and results and the
    # messages of model calls on OpenTelemetry spans, redacted by AUDIT_REDACTOR and cut to
    # AUDIT_MAX_CHARS (a warning is logged when on). Off: names, ids, outcomes, token counts.
    "OBSERVATIONS_INCLUDE_CONTENT": False,
    # --- HTTP API (tool_calling.api) --------------------------------------------------------
    "API": {
        # Dotted paths of the DRF permission classes every view of tool_calling.api requires
        # (on top of each view's own owner and approver rules, which always apply).
        "PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
        # Longest user message, in characters, that POST .../messages/ accepts (400 beyond).
        "MAX_MESSAGE_CHARS": 32000,
        # Longest ?wait=N, in seconds, a client may ask POST .../messages/ to wait for its run.
        "MAX_WAIT_SECONDS": 60,
        # Seconds the SSE stream of a run (GET .../runs/{id}/events/) stays quiet before it
        # sends a keep-alive comment (proxies close idle connections).
        "SSE_KEEPALIVE_SECONDS": 15,
        # Longest an SSE stream stays open, in seconds; the client reconnects with
        # Last-Event-ID and misses nothing.
        "SSE_MAX_SECONDS": 600,
    },
    # --- Approval gates (tool_calling.calls.approvals) -------------------------------------
    "APPROVALS": {
        # Seconds a call may wait for a person's approval; then it is denied ("expired") and
        # the run goes on. None = pending approvals never expire.
        "EXPIRE_AFTER": 86400,
        # Whether the user whose turn made a call may approve it. False (four eyes, the
        # production default) = someone else must approve; anyone who may decide may still
        # deny. True suits a one-person development setup testing its own gated tools.
        "ALLOW_SELF_APPROVAL": False,
        # Send an e-mail (Django's mail settings) to every approver with an address when a call
        # starts waiting for an approver: its tool, who asked, the conversation and when it
        # expires; never its arguments. False = the signal approval_requested only.
        "NOTIFY_BY_EMAIL": False,
    },
    # --- MCP server (tool_calling.mcp.serving: /mcp/ of tool_calling.asgi.with_mcp) ---------
    "MCP": {
        # Host header values the /mcp/ endpoint accepts (421 otherwise): "name" (any port),
        # "name:port", or "*" (any; only behind a proxy that checks Host). Loopback only by
        # default, against DNS rebinding.
        "ALLOWED_HOSTS": ["127.0.0.1", "localhost", "[::1]"],
        # Origin header values it accepts (403 otherwise; requests without Origin pass):
        # "scheme://host[:port]" or "scheme://host:*". None = the http(s) origins whose host
        # passes ALLOWED_HOSTS.
        "ALLOWED_ORIGINS": None,
        # How long, in milliseconds, an MCP client may reuse a tools/list answer (its ttlMs;
        # the answer is per user: cacheScope "private"). 0 = ask again each time, so an
        # operator's change shows at once; calls are re-checked when they run either way.
        "LIST_TTL_MS": 0,
        # OAuth 2.1 on /mcp/ (the MCP authorization spec): the endpoint's URL as clients reach
        # it, e.g. "https://example.com/mcp/". Access tokens of the project's authorization
        # server (django-oauth-toolkit) are accepted only when issued for this resource
        # (RFC 8707). None = no OAuth: DRF tokens only (they are accepted either way).
        "RESOURCE": None,
        # Issuer URLs of the authorization servers clients get tokens from (published in the
        # protected resource metadata, RFC 9728), e.g. ["https://example.com"].
        "AUTHORIZATION_SERVERS": [],
        # The scope every OAuth access token needs for /mcp/ (asked for in the 401 challenge).
        "SCOPE": "mcp",
        # Tool name -> the further scope an OAuth access token needs to list and call that tool,
        # e.g. {"refund_order": "mcp:payments"}. DRF tokens are not limited by scopes.
        "TOOL_SCOPES": {},
    },
}


TURN_THROTTLE_SCOPE = "tool_calling_turns"
"""The DRF throttle scope of new turns (``POST .../messages/``), a key of
``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``; ``None`` there turns the limit off."""

DEFAULT_TURN_RATE = "30/min"
"""New turns a user may start, when ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` names no rate
for ``TURN_THROTTLE_SCOPE``."""

IMPORT_STRINGS: frozenset[str] = frozenset({"AUDIT_REDACTOR", "EXCEPTION_PROCESSOR"})
"""Keys whose value may be a dotted path, imported when the key is first read."""


def _perform_import(value: Any, key: str) -> Any:
    """Return the object a dotted path names; anything that is not a string is returned as is.

    Raises:
        ImportError: the path does not import (the message names the key).
    """
    if not isinstance(value, str):
        return value
    try:
        return import_string(value)
    except ImportError as exc:
        raise ImportError(
            f"Could not import {value!r} for '{SETTING_NAME}[\"{key}\"]': {exc}"
        ) from exc


class ToolCallingSettings:
    """Lazy, cached attribute access to ``settings.TOOL_CALLING`` merged with ``DEFAULTS``.

    ``settings.LIMITS`` returns the defaults of ``LIMITS`` updated with the project's
    ``TOOL_CALLING["LIMITS"]`` (one level deep; DRF replaces dicts whole instead). Keys in
    ``IMPORT_STRINGS`` return the imported object. An unknown attribute raises
    ``AttributeError`` naming it.
    """

    def __init__(
        self,
        user_settings: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        if user_settings is not None:
            self._user_settings: Any = user_settings
        self.defaults: Mapping[str, Any] = DEFAULTS if defaults is None else defaults
        self._cached_attrs: set[str] = set()

    @property
    def user_settings(self) -> Any:
        """The project's ``TOOL_CALLING`` as written (``{}`` when it is not set)."""
        if not hasattr(self, "_user_settings"):
            self._user_settings = getattr(django_settings, SETTING_NAME, {})
        return self._user_settings

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr not in self.defaults:
            raise AttributeError(f"Invalid {SETTING_NAME} setting: {attr!r}")
        user = self.user_settings
        if not isinstance(user, Mapping):
            raise ImproperlyConfigured(f"The value of {SETTING_NAME!r} must be a dict.")
        value = copy.deepcopy(self.defaults[attr])
        if attr in user:
            override = user[attr]
            if isinstance(value, dict):
                if not isinstance(override, Mapping):
                    raise ImproperlyConfigured(
                        f"The value of '{SETTING_NAME}[\"{attr}\"]' must be a dict."
                    )
                value.update(override)
            else:
                value = override
        if attr in IMPORT_STRINGS:
            value = _perform_import(value, attr)
        self._cached_attrs.add(attr)
        setattr(self, attr, value)
        return value

    def reload(self) -> None:
        """Forget every cached value; the next access reads Django's settings again."""
        for attr in self._cached_attrs:
            delattr(self, attr)
        self._cached_attrs.clear()
        if hasattr(self, "_user_settings"):
            del self._user_settings


settings = ToolCallingSettings()


@functools.cache
def django_core_settings() -> CoreSettings:
    """Return the core's settings built from ``TOOL_CALLING``; cached until it changes.

    ``ToolCallingConfig.ready()`` installs this as the core's settings provider.

    Raises:
        ImproperlyConfigured: ``TOOL_CALLING`` holds a value the core rejects.
    """
    limits = settings.LIMITS
    try:
        tool_call_limits = ToolCallLimits(
            max_calls_per_tool=limits["MAX_CALLS_PER_TOOL_DEFAULT"],
            per_tool=limits["MAX_CALLS_PER_TOOL"],
            excluded_tools=limits["EXCLUDED_TOOLS"],
            max_total_tool_calls=limits["MAX_TOTAL_TOOL_CALLS"],
            on_limit_exceeded=limits["ON_LIMIT_EXCEEDED"],
        )
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f'Invalid {SETTING_NAME}["LIMITS"]: {exc}') from exc
    return CoreSettings(
        strict_tool_calls=settings.STRICT_TOOL_CALLS,
        throw_exception_on_error=settings.THROW_EXCEPTION_ON_ERROR,
        max_result_chars=settings.MAX_RESULT_CHARS,
        max_concurrent_calls=settings.EXECUTION["MAX_CONCURRENT_CALLS"],
        limits=tool_call_limits,
        tool_calling_advisor_auto_register=settings.TOOL_CALLING_ADVISOR_AUTO_REGISTER,
        max_tool_rounds=limits["MAX_TOOL_ROUNDS"],
        chat_model=MappingProxyType(copy.deepcopy(settings.CHAT_MODEL)),
    )


def hard_time_limit(timeout: int) -> int:
    """Return the hard time limit, in seconds, of a call whose (soft) time limit is ``timeout``."""
    return int(timeout) + int(settings.EXECUTION["TIMEOUT_GRACE"])


_VISIBILITY_TIMEOUT_TRANSPORTS = {"redis": 3600, "rediss": 3600, "sentinel": 3600, "sqs": 1800}
"""Brokers that redeliver an unacknowledged message after a visibility timeout: its default."""


def broker_visibility_timeout() -> int | None:
    """Return the seconds after which the broker redelivers a message nobody acknowledged.

    Read from ``CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]``, else the transport's
    default; ``None`` when the broker (``CELERY_BROKER_URL``) has no visibility timeout.
    """
    url = getattr(django_settings, "CELERY_BROKER_URL", None)
    if not isinstance(url, str) or "://" not in url:
        return None
    scheme = url.split("://", 1)[0].split("+")[0].lower()
    if scheme not in _VISIBILITY_TIMEOUT_TRANSPORTS:
        return None
    options = getattr(django_settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    value = options.get("visibility_timeout") if isinstance(options, Mapping) else None
    if value is None:
        return _VISIBILITY_TIMEOUT_TRANSPORTS[scheme]
    return int(value)


def reload_settings(*, setting: str, **kwargs: Any) -> None:
    """Drop the cached settings when ``TOOL_CALLING`` changes (connected to ``setting_changed``)."""
    if setting == SETTING_NAME:
        settings.reload()
        django_core_settings.cache_clear()


setting_changed.connect(reload_settings)
