"""System checks of the ``TOOL_CALLING`` setting, registered by ``ToolCallingConfig.ready()``.

=================== =======================================================================
Id                  Problem
=================== =======================================================================
tool_calling.E001   Unknown key in ``TOOL_CALLING``.
tool_calling.E002   Unknown key in a dict-valued setting (``TOOL_CALLING["LIMITS"]``, ...).
tool_calling.E003   A limit that is not a positive integer (or None where that means
                    unlimited), or an ``ON_LIMIT_EXCEEDED`` that is not a known behaviour.
tool_calling.E004   ``EXECUTION["MODE"]`` is neither ``"inline"`` nor ``"celery"``.
tool_calling.E005   ``EXECUTION["MODE"]`` is ``"celery"`` but ``CELERY_BROKER_URL`` is not set.
tool_calling.E006   ``TOOL_CALLING``, or one of its dict-valued keys, is not a dict.
tool_calling.E007   ``EXECUTION["MODE"]`` is ``"celery"`` but Celery is not installed.
tool_calling.E008   A flag (``NEW_TOOLS_ENABLED``, ``STRICT_TOOL_CALLS``, ...) that is not
                    ``True`` or ``False``.
tool_calling.E009   A dotted path (``AUDIT_REDACTOR``, ``CHAT_MODEL["CLASS"]``,
                    ``API["PERMISSION_CLASSES"]``) that does not import, or does not name a
                    callable; ``CHAT_MODEL["ARGUMENTS"]`` that is not a dict.
tool_calling.E010   The broker's visibility timeout is not longer than the longest time a task
                    may hold its message (the hard time limit of a tool call, or
                    ``CELERY_TASK_TIME_LIMIT``, plus ``EXECUTION["RETRY_BACKOFF_MAX"]``): the
                    broker would deliver it again while it waits or runs (R7).
tool_calling.E011   ``EXECUTION["QUEUE"]`` is not a non-empty string.
tool_calling.E012   ``EXECUTION["MODE"]`` is ``"celery"`` and ``CELERY_ACCEPT_CONTENT`` lets workers
                    deserialize pickle or YAML: a message pushed into the queue could run code
                    (S20).
tool_calling.E013   ``TOOL_SEARCH``: ``MAX_RESULTS`` not an integer from 1 to 10, ``THRESHOLD``
                    not an integer >= 0, or ``INDEX`` not a ``ToolIndex`` class (or a function
                    returning one).
tool_calling.E014   ``TOOL_SEARCH["INDEX"]`` is ``PostgresToolIndex`` but the default database is
                    not PostgreSQL.
tool_calling.E015   ``ARGUMENT_AUGMENTATION["TYPE"]`` is not an object type with fields (a
                    pydantic model, dataclass or TypedDict).
tool_calling.E016   ``MCP["ALLOWED_HOSTS"]`` is not a list of host names,
                    ``MCP["ALLOWED_ORIGINS"]`` is neither None nor a list of origins, or
                    ``MCP["LIST_TTL_MS"]`` is not a non-negative integer.
tool_calling.E017   The API is mounted (its turns run as Celery tasks) but Celery is not
                    installed, whatever ``EXECUTION["MODE"]`` says about tool calls.
tool_calling.E018   The API is mounted but the current Celery app has no broker URL (the
                    project defines no Celery app that reads the Django settings), and does not
                    run tasks eagerly.
tool_calling.E019   The API is mounted and ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` gives
                    ``tool_calling_turns`` a value that is not a rate (``"30/min"``) or None.
tool_calling.E020   OAuth on ``/mcp/``: ``MCP["RESOURCE"]`` is neither None nor an http(s) URL,
                    ``MCP["AUTHORIZATION_SERVERS"]`` is not a list of http(s) URLs (or is
                    empty while ``RESOURCE`` is set), ``MCP["SCOPE"]`` is not a string,
                    ``MCP["TOOL_SCOPES"]`` is not a dict of tool names to scopes, or
                    ``RESOURCE`` is set but django-oauth-toolkit (``oauth2_provider``) is not
                    in ``INSTALLED_APPS``.
tool_calling.W001   A Redis broker without ``socket_timeout`` in
                    ``CELERY_BROKER_TRANSPORT_OPTIONS``: a worker's connection (and Celery's own
                    publishes) would wait forever on a stalled Redis (S9). tool_calling's own
                    publishes are bounded by ``EXECUTION["BROKER_TIMEOUT"]`` either way.
tool_calling.W002   ``OBSERVATIONS_INCLUDE_CONTENT`` is on: tool arguments and results and the
                    messages of model calls go on OpenTelemetry spans (S12).
tool_calling.W003   A Redis cache that pickles (Django's default serializer) shares the Redis
                    database of the Celery broker: whoever can write to the broker could run
                    code in every process that reads the cache (S21).
tool_calling.W004   A Celery task time limit (``CELERY_TASK_SOFT_TIME_LIMIT`` or
                    ``CELERY_TASK_TIME_LIMIT``) that a run step on a prefork worker reaches
                    before the model client gives up on its own (``CHAT_MODEL["TIMEOUT"]`` x
                    (``MAX_RETRIES`` + 1)): a stalled model would fail the run through Celery's
                    limit, before the client's timeout and retries acted (R13).
=================== =======================================================================
"""

from __future__ import annotations

import copy
import difflib
import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.apps import apps
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from django.urls import NoReverseMatch, reverse
from django.utils.module_loading import import_string

from tool_calling import _celery
from tool_calling.conf import (
    DEFAULT_TURN_RATE,
    DEFAULTS,
    IMPORT_STRINGS,
    SETTING_NAME,
    TURN_THROTTLE_SCOPE,
    broker_visibility_timeout,
    settings,
)
from tool_calling.core.augment import AugmentedToolCallbackProvider
from tool_calling.core.chat.advisors.tool_search import MAX_SEARCH_RESULTS
from tool_calling.core.errors import ToolDefinitionError
from tool_calling.core.execution.exception_processor import ToolExecutionExceptionProcessor
from tool_calling.core.execution.limits import ToolCallLimitBehavior
from tool_calling.core.search.base import ToolIndex

__all__ = ["TAG", "check_settings"]

TAG = "tool_calling"
"""The check tag: ``manage.py check --tag tool_calling`` runs only these checks."""

EXECUTION_MODES = ("inline", "celery")

_EXECUTION_POSITIVE_INTS = (
    "MAX_CONCURRENT_CALLS",
    "TIMEOUT",
    "TIMEOUT_GRACE",
    "LEASE_SECONDS",
    "MAX_ATTEMPTS",
    "WAIT_MARGIN",
    "REDISPATCH_AFTER",
)


def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Check ``settings.TOOL_CALLING``: keys, limits, flags, import paths, execution mode."""
    user = settings.user_settings
    if not isinstance(user, Mapping):
        return [Error(f"The value of {SETTING_NAME!r} must be a dict.", id="tool_calling.E006")]
    errors = _check_keys(user)
    values: dict[str, Any] = {}
    for key in DEFAULTS:
        if key in IMPORT_STRINGS:
            # Checked as written by _check_import_strings: reading the key would import it.
            values[key] = user.get(key, DEFAULTS[key])
            continue
        try:
            values[key] = getattr(settings, key)
        except ImproperlyConfigured as exc:
            errors.append(Error(str(exc), id="tool_calling.E006"))
            values[key] = copy.deepcopy(DEFAULTS[key])
    errors += _check_limits(values)
    errors += _check_flags(values)
    errors += _check_import_strings(values)
    errors += _check_execution(values["EXECUTION"])
    errors += _check_visibility_timeout(values["EXECUTION"])
    errors += _check_tool_search(values["TOOL_SEARCH"])
    errors += _check_augmentation(values["ARGUMENT_AUGMENTATION"])
    errors += _check_mcp(values["MCP"])
    errors += _check_broker_socket_timeout()
    errors += _check_step_time_limit(values["CHAT_MODEL"])
    errors += _check_cache_serializer()
    errors += _check_content(values["OBSERVATIONS_INCLUDE_CONTENT"])
    errors += _check_api()
    return errors


def _api_mounted() -> bool:
    """Whether the project's URLconf includes ``tool_calling.api.urls`` (as ``tool_calling``)."""
    try:
        reverse("tool_calling:api-root")
    except NoReverseMatch:
        return False
    return True


def _check_api() -> list[CheckMessage]:
    """What the API needs beyond its URLs: Celery for its turns, a valid rate of new turns."""
    if not _api_mounted():
        return []
    errors: list[CheckMessage] = []
    problem = _celery.problem()
    if problem is not None:
        errors.append(
            Error(
                "tool_calling's API is mounted, and the turns it starts run as Celery tasks, "
                f"but {problem.text}.",
                hint=problem.hint,
                id=problem.check_id,
            )
        )
    rates = (getattr(django_settings, "REST_FRAMEWORK", None) or {}).get(
        "DEFAULT_THROTTLE_RATES"
    ) or {}
    if TURN_THROTTLE_SCOPE in rates and not _is_rate(rates[TURN_THROTTLE_SCOPE]):
        key = f'REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["{TURN_THROTTLE_SCOPE}"]'
        errors.append(
            Error(
                f"The value of '{key}' must be a rate such as '30/min', or None; got "
                f"{rates[TURN_THROTTLE_SCOPE]!r}.",
                hint="A number of turns, '/', then 's', 'm', 'h' or 'd' (per second, minute, "
                "hour or day), as Django REST framework's throttles read it; None turns the "
                f"limit off. Without the key the rate is {DEFAULT_TURN_RATE}.",
                id="tool_calling.E019",
            )
        )
    return errors


def _is_rate(rate: object) -> bool:
    """Whether Django REST framework's throttles can read ``rate`` (else no new turn starts)."""
    from rest_framework.throttling import SimpleRateThrottle  # the API is mounted: DRF is there

    if rate is not None and not isinstance(rate, str):
        return False
    try:
        SimpleRateThrottle.parse_rate(SimpleRateThrottle.__new__(SimpleRateThrottle), rate)
    except (ValueError, KeyError, IndexError):
        return False
    return True


def _check_content(include_content: object) -> list[CheckMessage]:
    if include_content is not True:
        return []  # a value that is not a flag is reported as E008
    return [
        Warning(
            f"'{_path('OBSERVATIONS_INCLUDE_CONTENT')}' is on: tool arguments and results and "
            "the messages of model calls are recorded on OpenTelemetry spans.",
            hint="Spans then hold what users and tools send, redacted only by AUDIT_REDACTOR; "
            "turn it off in production unless your traces are as protected as your database.",
            id="tool_calling.W002",
        )
    ]


def _path(*keys: object) -> str:
    return SETTING_NAME + "".join(
        f"[{key}]" if isinstance(key, int) else f'["{key}"]' for key in keys
    )


def _did_you_mean(value: object, choices: Iterable[str]) -> str | None:
    # Compared case-insensitively, so "throw" finds "THROW" and "limits" finds "LIMITS".
    by_folded = {choice.casefold(): choice for choice in choices}
    matches = difflib.get_close_matches(str(value).casefold(), list(by_folded), n=1)
    return f"Did you mean {by_folded[matches[0]]!r}?" if matches else None


def _unknown_key_hint(key: object, accepted: Iterable[str]) -> str:
    accepted = sorted(accepted)
    return _did_you_mean(key, accepted) or f"The accepted keys are: {', '.join(accepted)}."


def _check_keys(user: Mapping[Any, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key, value in user.items():
        if key not in DEFAULTS:
            errors.append(
                Error(
                    f"Unknown key {key!r} in {SETTING_NAME}.",
                    hint=_unknown_key_hint(key, DEFAULTS),
                    id="tool_calling.E001",
                )
            )
            continue
        default = DEFAULTS[key]
        if not isinstance(default, dict) or not isinstance(value, Mapping):
            continue
        for sub_key in value:
            if sub_key not in default:
                errors.append(
                    Error(
                        f"Unknown key {sub_key!r} in {_path(key)}.",
                        hint=_unknown_key_hint(sub_key, default),
                        id="tool_calling.E002",
                    )
                )
    return errors


def _is_positive_int(value: object) -> bool:
    # bool is an int subclass: True would otherwise pass as the limit 1.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _limit_error(*keys: object, allow_none: bool = True) -> Error:
    expected = "a positive integer or None" if allow_none else "a positive integer"
    return Error(f"The value of '{_path(*keys)}' must be {expected}.", id="tool_calling.E003")


def _check_limits(values: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    limits = values["LIMITS"]
    for key in ("MAX_CALLS_PER_TOOL_DEFAULT", "MAX_TOTAL_TOOL_CALLS"):
        if limits[key] is not None and not _is_positive_int(limits[key]):
            errors.append(_limit_error("LIMITS", key))
    if not _is_positive_int(limits["MAX_TOOL_ROUNDS"]):
        errors.append(_limit_error("LIMITS", "MAX_TOOL_ROUNDS", allow_none=False))

    per_tool = limits["MAX_CALLS_PER_TOOL"]
    if not isinstance(per_tool, Mapping):
        errors.append(
            Error(
                f"The value of '{_path('LIMITS', 'MAX_CALLS_PER_TOOL')}' must be a dict mapping "
                "tool names to a positive integer or None.",
                id="tool_calling.E003",
            )
        )
    else:
        for name, limit in per_tool.items():
            if limit is not None and not _is_positive_int(limit):
                errors.append(_limit_error("LIMITS", "MAX_CALLS_PER_TOOL", name))

    excluded = limits["EXCLUDED_TOOLS"]
    if not isinstance(excluded, list | tuple | set | frozenset) or not all(
        isinstance(name, str) for name in excluded
    ):
        errors.append(
            Error(
                f"The value of '{_path('LIMITS', 'EXCLUDED_TOOLS')}' must be a list of tool names.",
                id="tool_calling.E003",
            )
        )

    behaviours = [behaviour.value for behaviour in ToolCallLimitBehavior]
    on_limit_exceeded = limits["ON_LIMIT_EXCEEDED"]
    if on_limit_exceeded not in behaviours:
        errors.append(
            Error(
                f"The value of '{_path('LIMITS', 'ON_LIMIT_EXCEEDED')}' must be "
                + " or ".join(repr(behaviour) for behaviour in behaviours)
                + ".",
                hint=_did_you_mean(on_limit_exceeded, behaviours),
                id="tool_calling.E003",
            )
        )

    max_result_chars = values["MAX_RESULT_CHARS"]
    if max_result_chars is not None and not _is_positive_int(max_result_chars):
        errors.append(_limit_error("MAX_RESULT_CHARS"))
    for key in _EXECUTION_POSITIVE_INTS:
        if not _is_positive_int(values["EXECUTION"][key]):
            errors.append(_limit_error("EXECUTION", key, allow_none=False))
    for key in ("BROKER_TIMEOUT", "RETRY_BACKOFF_MAX"):
        if not _is_positive_number(values["EXECUTION"][key]):
            errors.append(
                Error(
                    f"The value of '{_path('EXECUTION', key)}' must be a positive number of "
                    "seconds.",
                    id="tool_calling.E003",
                )
            )
    audit_max_chars = values["AUDIT_MAX_CHARS"]
    if audit_max_chars is not None and not _is_positive_int(audit_max_chars):
        errors.append(_limit_error("AUDIT_MAX_CHARS"))
    if not _is_positive_int(values["MEMORY_MAX_MESSAGES"]):
        errors.append(_limit_error("MEMORY_MAX_MESSAGES", allow_none=False))
    if not _is_positive_int(values["CONVERSATION_TURN_TIMEOUT"]):
        errors.append(_limit_error("CONVERSATION_TURN_TIMEOUT", allow_none=False))
    api_keys = ("MAX_MESSAGE_CHARS", "MAX_WAIT_SECONDS", "SSE_KEEPALIVE_SECONDS", "SSE_MAX_SECONDS")
    for key in api_keys:
        if not _is_positive_int(values["API"][key]):
            errors.append(_limit_error("API", key, allow_none=False))
    expire_after = values["APPROVALS"]["EXPIRE_AFTER"]
    if expire_after is not None and not _is_positive_int(expire_after):
        errors.append(_limit_error("APPROVALS", "EXPIRE_AFTER"))
    retention = values["RETENTION"]
    for key in ("AUDIT_DAYS", "RUN_EVENT_DAYS", "FINISHED_RUN_DAYS"):
        if retention[key] is not None and not _is_positive_int(retention[key]):
            errors.append(_limit_error("RETENTION", key))
    if not _is_positive_int(retention["BATCH_SIZE"]):
        errors.append(_limit_error("RETENTION", "BATCH_SIZE", allow_none=False))
    return errors


def _check_flags(values: Mapping[str, Any]) -> list[CheckMessage]:
    # A string such as "False" is truthy: NEW_TOOLS_ENABLED = "False" would enable every tool.
    flags: list[tuple[str, ...]] = [
        (key,) for key, default in DEFAULTS.items() if isinstance(default, bool)
    ]
    flags += [
        (key, inner)
        for key, default in DEFAULTS.items()
        if isinstance(default, dict)
        for inner, value in default.items()
        if isinstance(value, bool)
    ]
    errors: list[CheckMessage] = []
    for path in flags:
        value = values[path[0]] if len(path) == 1 else values[path[0]][path[1]]
        if not isinstance(value, bool):
            errors.append(
                Error(
                    f"The value of '{_path(*path)}' must be True or False.", id="tool_calling.E008"
                )
            )
    return errors


def _closest_import_path(path: str) -> str | None:
    """Return ``path`` with its first part that does not resolve replaced by the closest name."""
    parts = path.split(".")
    obj: Any = None
    index = 0
    while index < len(parts):
        try:
            obj = importlib.import_module(".".join(parts[: index + 1]))
        except Exception:
            break
        index += 1
    if obj is None:
        return None
    while index < len(parts) and hasattr(obj, parts[index]):
        obj = getattr(obj, parts[index])
        index += 1
    if index == len(parts):
        return None
    candidates = {name for name in dir(obj) if not name.startswith("_")}
    if hasattr(obj, "__path__"):
        candidates.update(module.name for module in pkgutil.iter_modules(obj.__path__))
    matches = difflib.get_close_matches(parts[index], sorted(candidates), n=1)
    return ".".join([*parts[:index], matches[0], *parts[index + 1 :]]) if matches else None


def _import_hint(value: str, exc: Exception, *, allow_none: bool) -> str:
    """What to do about a dotted path that failed to import.

    A module the path itself names that is missing gets a "Did you mean" (never the refused
    value itself); a missing module *inside* an existing one is a dependency to install.
    """
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ModuleNotFoundError):
        cause = cause.__cause__  # e.g. the provider's "needs the 'openai' package" ImportError
    missing = cause.name if isinstance(cause, ModuleNotFoundError) else None
    if missing and not value.startswith(missing + ".") and value != missing:
        return (
            f"{value!r} exists but needs the {missing.split('.')[0]!r} package, which is not "
            f"installed: pip install {missing.split('.')[0]}"
        )
    closest = _closest_import_path(value)
    if closest and closest != value:
        return f"Did you mean {closest!r}?"
    return "Use the dotted path of a callable, e.g. 'myproject.audit.redact'" + (
        ", or None." if allow_none else "."
    )


def _check_dotted(
    keys: tuple[object, ...], value: Any, *, allow_none: bool, instance_of: type | None = None
) -> list[CheckMessage]:
    """One dotted path (or a callable, or an ``instance_of``) at ``TOOL_CALLING[keys...]``."""
    if (value is None and allow_none) or callable(value):
        return []
    if instance_of is not None and isinstance(value, instance_of):
        return []
    path = _path(*keys)
    if not isinstance(value, str):
        expected = (
            "a dotted import path, a callable or None"
            if allow_none
            else ("a dotted import path or a callable")
        )
        return [Error(f"The value of '{path}' must be {expected}.", id="tool_calling.E009")]
    try:
        imported = import_string(value)
    except Exception as exc:  # a module that fails on import is a bad path, not a crash
        return [
            Error(
                f"The value of '{path}' must be an importable dotted path; {value!r} could "
                f"not be imported ({type(exc).__name__}: {exc}).",
                hint=_import_hint(value, exc, allow_none=allow_none),
                id="tool_calling.E009",
            )
        ]
    if not callable(imported) and not (
        instance_of is not None and isinstance(imported, instance_of)
    ):
        return [
            Error(
                f"The value of '{path}' must name a callable; {value!r} is a "
                f"{type(imported).__name__}.",
                id="tool_calling.E009",
            )
        ]
    return []


def _check_import_strings(values: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key in sorted(IMPORT_STRINGS):
        instance_of = ToolExecutionExceptionProcessor if key == "EXCEPTION_PROCESSOR" else None
        errors += _check_dotted((key,), values[key], allow_none=True, instance_of=instance_of)
    errors += _check_dotted(
        ("CHAT_MODEL", "CLASS"), values["CHAT_MODEL"]["CLASS"], allow_none=False
    )
    arguments = values["CHAT_MODEL"]["ARGUMENTS"]
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        errors.append(
            Error(
                f"The value of '{_path('CHAT_MODEL', 'ARGUMENTS')}' must be a dict of keyword "
                "arguments for CHAT_MODEL['CLASS'].",
                id="tool_calling.E009",
            )
        )
    classes = values["API"]["PERMISSION_CLASSES"]
    if not isinstance(classes, list | tuple):
        errors.append(
            Error(
                f"The value of '{_path('API', 'PERMISSION_CLASSES')}' must be a list of dotted "
                "paths of DRF permission classes.",
                id="tool_calling.E009",
            )
        )
    else:
        for index, value in enumerate(classes):
            errors += _check_dotted(("API", "PERMISSION_CLASSES", index), value, allow_none=False)
    return errors


def _celery_installed() -> bool:
    return _celery.installed()


def _is_positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


_VISIBILITY_OPTION = 'CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]'


def _check_visibility_timeout(execution: Mapping[str, Any]) -> list[CheckMessage]:
    """R7: the broker must not redeliver a task's message while the task may still run."""
    options = getattr(django_settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    raw = options.get("visibility_timeout") if isinstance(options, Mapping) else None
    if raw is not None and not _is_positive_number(raw):
        return [
            Error(
                f"The value of '{_VISIBILITY_OPTION}' must be a positive number of seconds.",
                id="tool_calling.E010",
            )
        ]
    visibility = broker_visibility_timeout()
    if visibility is None:
        return []  # a broker without a visibility timeout, or no broker at all
    timeout, grace = execution["TIMEOUT"], execution["TIMEOUT_GRACE"]
    backoff = execution["RETRY_BACKOFF_MAX"]
    if not (_is_positive_int(timeout) and _is_positive_int(grace) and _is_positive_number(backoff)):
        return []  # reported as E003
    holders = [
        (
            timeout + grace,
            f"{_path('EXECUTION', 'TIMEOUT')} + {_path('EXECUTION', 'TIMEOUT_GRACE')}",
        )
    ]
    task_limit = getattr(django_settings, "CELERY_TASK_TIME_LIMIT", None)
    if _is_positive_number(task_limit):
        holders.append((task_limit, "CELERY_TASK_TIME_LIMIT"))
    running, source = max(holders)
    # A retry is published with a countdown: a worker holds it, unacknowledged, until it runs.
    longest = running + backoff
    source = f"{source} + {_path('EXECUTION', 'RETRY_BACKOFF_MAX')}"
    if visibility > longest:
        return []
    where = _VISIBILITY_OPTION if raw is not None else "the transport's default"
    return [
        Error(
            f"The broker's visibility timeout ({where} = {visibility:g} s) must be longer than "
            f"the longest a task's message may wait unacknowledged: a retry's pause, then the "
            f"time the task may run ({source} = {longest:g} s). Else the broker would "
            "deliver the task again while it waits or runs.",
            hint="Set CELERY_BROKER_TRANSPORT_OPTIONS = {'visibility_timeout': "
            f"{max(1800, int(longest) * 2)}}} (and the same value in "
            "CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS and CELERY_VISIBILITY_TIMEOUT), or lower "
            "the time limit.",
            id="tool_calling.E010",
        )
    ]


_REDIS_SCHEMES = frozenset({"redis", "rediss", "sentinel", "redis+socket", "rediss+socket"})


def _check_broker_socket_timeout() -> list[CheckMessage]:
    """S9: a worker's Redis connection must give up on a broker that stopped answering."""
    url = getattr(django_settings, "CELERY_BROKER_URL", None)
    if not isinstance(url, str) or "://" not in url or not _celery_installed():
        return []
    if url.split("://", 1)[0].lower() not in _REDIS_SCHEMES:
        return []
    options = getattr(django_settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    if isinstance(options, Mapping) and _is_positive_number(options.get("socket_timeout")):
        return []
    return [
        Warning(
            "CELERY_BROKER_TRANSPORT_OPTIONS has no 'socket_timeout' for the Redis broker: a "
            "worker's connection, and any publish not made by tool_calling, would wait forever "
            "on a Redis that stopped answering.",
            hint="Add 'socket_timeout': 5 and 'socket_connect_timeout': 5 (seconds, more than "
            "kombu's 1 s BRPOP timeout) to CELERY_BROKER_TRANSPORT_OPTIONS, and set "
            "CELERY_REDIS_SOCKET_TIMEOUT and CELERY_REDIS_SOCKET_CONNECT_TIMEOUT for a Redis "
            "result backend.",
            id="tool_calling.W001",
        )
    ]


def model_patience(chat_model: Mapping[str, Any]) -> float | None:
    """Seconds the model client may spend on one model call: its timeout, once per attempt.

    ``None`` when the configured values are not numbers (other checks report those).
    """
    timeout, retries = chat_model.get("TIMEOUT"), chat_model.get("MAX_RETRIES")
    if not isinstance(timeout, int | float) or not _is_positive_number(timeout):
        return None
    if isinstance(retries, bool) or not isinstance(retries, int):
        return None
    return float(timeout) * (max(retries, 0) + 1)


def _check_step_time_limit(chat_model: Mapping[str, Any]) -> list[CheckMessage]:
    """R13: a model stall must end by the model client's own timeout, not a Celery limit."""
    if not _celery_installed():
        return []
    patience = model_patience(chat_model)
    if patience is None:
        return []
    messages: list[CheckMessage] = []
    for name in ("CELERY_TASK_SOFT_TIME_LIMIT", "CELERY_TASK_TIME_LIMIT"):
        limit = getattr(django_settings, name, None)
        if not isinstance(limit, int | float) or not _is_positive_number(limit):
            continue
        if limit > patience:
            continue
        messages.append(
            Warning(
                f"{name} ({limit:g} s) is not longer than the model client waits for one model "
                f"call (TOOL_CALLING['CHAT_MODEL']['TIMEOUT'] x (MAX_RETRIES + 1) = "
                f"{patience:g} s): a run step on a prefork worker would be stopped by Celery "
                "while the model stalls, before the client's own timeout and retries acted.",
                hint=f"Set {name} above {patience:g} (tool calls keep their own limits, from "
                "each tool's timeout), or lower CHAT_MODEL's TIMEOUT or MAX_RETRIES. On a "
                "thread pool Celery enforces no task time limits at all.",
                id="tool_calling.W004",
            )
        )
    return messages


_REDIS_CACHES = frozenset(
    {"django.core.cache.backends.redis.RedisCache", "django_redis.cache.RedisCache"}
)
_SAFE_CACHE_SERIALIZERS = frozenset(
    {"tool_calling.cache.JSONSerializer", "django_redis.serializers.json.JSONSerializer"}
)


def _redis_database(url: str) -> tuple[str, int, int] | None:
    """``(host, port, database)`` of a Redis URL (``None`` for another kind of URL)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss"):
        return None
    path = parts.path.strip("/")
    database = path if path.isdigit() else (parse_qs(parts.query).get("db") or ["0"])[0]
    try:
        return (parts.hostname or "localhost").lower(), parts.port or 6379, int(database)
    except ValueError:
        return None


def _check_cache_serializer() -> list[CheckMessage]:
    """S21: no cache that unpickles may share the broker's Redis database."""
    broker = getattr(django_settings, "CELERY_BROKER_URL", None)
    shared = _redis_database(broker) if isinstance(broker, str) else None
    if shared is None:
        return []
    warnings: list[CheckMessage] = []
    for alias, cache in (getattr(django_settings, "CACHES", None) or {}).items():
        if not isinstance(cache, Mapping) or cache.get("BACKEND") not in _REDIS_CACHES:
            continue
        location = cache.get("LOCATION") or []
        locations = [location] if isinstance(location, str) else list(location)
        if shared not in {_redis_database(str(each)) for each in locations}:
            continue
        options = cache.get("OPTIONS") or {}
        # Django's option, or django-redis's.
        serializer = options.get("serializer") or options.get("SERIALIZER")
        if isinstance(serializer, type):
            serializer = f"{serializer.__module__}.{serializer.__qualname__}"
        if serializer in _SAFE_CACHE_SERIALIZERS:
            continue
        warnings.append(
            Warning(
                f"The cache {alias!r} shares the Redis database of CELERY_BROKER_URL and "
                "unpickles what it reads: whoever can write a key there (any client of the "
                "broker) could run code in every process that reads the cache.",
                hint="Give it OPTIONS = {'serializer': 'tool_calling.cache.JSONSerializer'} "
                "(JSON, never pickle), or a Redis database and credentials of its own.",
                id="tool_calling.W003",
            )
        )
    return warnings


_UNSAFE_CONTENT = {
    "pickle",
    "application/x-python-serialize",
    "yaml",
    "application/x-yaml",
    "application/yaml",
}


def _check_accept_content() -> list[CheckMessage]:
    """S20: workers must refuse anything but JSON (Celery's default accepts JSON only)."""
    accepted = getattr(django_settings, "CELERY_ACCEPT_CONTENT", None)
    if accepted is None:
        return []
    unsafe = sorted({str(c) for c in accepted if str(c).lower() in _UNSAFE_CONTENT})
    if not unsafe:
        return []
    return [
        Error(
            f"CELERY_ACCEPT_CONTENT must not accept {', '.join(map(repr, unsafe))} when "
            f"{_path('EXECUTION', 'MODE')} is 'celery': a message pushed into a tool queue "
            "would be deserialized, and could run code, on the workers.",
            hint="Set CELERY_ACCEPT_CONTENT = ['json'] (and CELERY_TASK_SERIALIZER = 'json').",
            id="tool_calling.E012",
        )
    ]


def _check_execution(execution: Mapping[str, Any]) -> list[CheckMessage]:
    queue = execution["QUEUE"]
    queue_errors: list[CheckMessage] = []
    if not isinstance(queue, str) or not queue.strip():
        queue_errors.append(
            Error(
                f"The value of '{_path('EXECUTION', 'QUEUE')}' must be a non-empty string.",
                hint="Name the Celery queue your tool workers consume, e.g. 'tool_calling'.",
                id="tool_calling.E011",
            )
        )
    return queue_errors + _check_execution_mode(execution)


def _check_execution_mode(execution: Mapping[str, Any]) -> list[CheckMessage]:
    mode = execution["MODE"]
    mode_path = _path("EXECUTION", "MODE")
    if mode not in EXECUTION_MODES:
        return [
            Error(
                f"The value of '{mode_path}' must be 'inline' or 'celery'.",
                hint=_did_you_mean(mode, EXECUTION_MODES),
                id="tool_calling.E004",
            )
        ]
    errors: list[CheckMessage] = []
    if mode == "celery":
        errors += _check_accept_content()
        if not _celery_installed():
            errors.append(
                Error(
                    f"Celery must be installed when {mode_path} is 'celery'.",
                    hint="Install it with: pip install 'celery[redis]'",
                    id="tool_calling.E007",
                )
            )
        if not getattr(django_settings, "CELERY_BROKER_URL", None):
            errors.append(
                Error(
                    f"The CELERY_BROKER_URL setting must be set when {mode_path} is 'celery'.",
                    hint="Point it at the broker, e.g. CELERY_BROKER_URL = "
                    "'redis://127.0.0.1:6379/0', and load it in the Celery app with "
                    "config_from_object('django.conf:settings', namespace='CELERY'); "
                    "or use the MODE 'inline'.",
                    id="tool_calling.E005",
                )
            )
    return errors


POSTGRES_INDEX = "tool_calling.search.PostgresToolIndex"
"""The dotted path of the index that needs PostgreSQL."""


def _imported(value: Any) -> Any:
    """The object a dotted path names (``None`` if it does not import: E009 says so)."""
    if not isinstance(value, str):
        return value
    try:
        return import_string(value)
    except Exception:
        return None


def _check_tool_search(search: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    max_results = search["MAX_RESULTS"]
    if not _is_positive_int(max_results) or max_results > MAX_SEARCH_RESULTS:
        errors.append(
            Error(
                f"The value of '{_path('TOOL_SEARCH', 'MAX_RESULTS')}' must be an integer "
                f"from 1 to {MAX_SEARCH_RESULTS}.",
                id="tool_calling.E013",
            )
        )
    threshold = search["THRESHOLD"]
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        errors.append(
            Error(
                f"The value of '{_path('TOOL_SEARCH', 'THRESHOLD')}' must be an integer >= 0 "
                "(the number of tools up to which every tool is offered without search).",
                id="tool_calling.E013",
            )
        )
    index = search["INDEX"]
    if isinstance(index, ToolIndex):
        return errors
    dotted = _check_dotted(("TOOL_SEARCH", "INDEX"), index, allow_none=False)
    if dotted:
        return errors + dotted
    found = _imported(index)
    if isinstance(found, type) and not issubclass(found, ToolIndex):
        errors.append(
            Error(
                f"The value of '{_path('TOOL_SEARCH', 'INDEX')}' must name a ToolIndex class "
                f"or a function returning a ToolIndex; {found.__qualname__} is not a ToolIndex.",
                hint="Use 'tool_calling.core.search.lexical.LexicalToolIndex' (the default), "
                "'tool_calling.core.search.regex.RegexToolIndex' or "
                f"{POSTGRES_INDEX!r}.",
                id="tool_calling.E013",
            )
        )
        return errors
    postgres = _imported(POSTGRES_INDEX)
    if isinstance(found, type) and postgres is not None and issubclass(found, postgres):
        vendor = connections[DEFAULT_DB_ALIAS].vendor
        if vendor != "postgresql":
            errors.append(
                Error(
                    f"The value of '{_path('TOOL_SEARCH', 'INDEX')}' is a PostgresToolIndex, "
                    f"which needs PostgreSQL, but the default database is {vendor}.",
                    hint="Use PostgreSQL, or the default index "
                    "'tool_calling.core.search.lexical.LexicalToolIndex', which works on any "
                    "database.",
                    id="tool_calling.E014",
                )
            )
    return errors


def _check_augmentation(augmentation: Mapping[str, Any]) -> list[CheckMessage]:
    kind = augmentation["TYPE"]
    dotted = _check_dotted(("ARGUMENT_AUGMENTATION", "TYPE"), kind, allow_none=False)
    if dotted:
        return dotted
    try:
        AugmentedToolCallbackProvider([], _imported(kind), lambda event: None)
    except ToolDefinitionError as exc:
        return [
            Error(
                f"The value of '{_path('ARGUMENT_AUGMENTATION', 'TYPE')}' cannot be an "
                f"augmentation: {exc}",
                hint="Name a pydantic model, a dataclass or a TypedDict, e.g. "
                "'tool_calling.augmentation.CallReason' (the default).",
                id="tool_calling.E015",
            )
        ]
    return []


def _is_http_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not parts.fragment


def _check_mcp_oauth(mcp: Mapping[str, Any]) -> list[CheckMessage]:

    errors: list[CheckMessage] = []

    def error(key: str, message: str, hint: str) -> None:
        errors.append(
            Error(
                f"The value of '{_path('MCP', key)}' must be {message}.",
                hint=hint,
                id="tool_calling.E020",
            )
        )

    resource = mcp["RESOURCE"]
    if resource is not None and not _is_http_url(resource):
        error(
            "RESOURCE",
            "None or an http(s) URL",
            "The URL clients reach /mcp/ at, e.g. "
            "'https://example.com/mcp/'; None turns OAuth off (DRF tokens only).",
        )
    servers = mcp["AUTHORIZATION_SERVERS"]
    if (
        isinstance(servers, str)
        or not isinstance(servers, Sequence)
        or not all(_is_http_url(server) for server in servers)
        or (resource is not None and not servers)
    ):
        error(
            "AUTHORIZATION_SERVERS",
            "a list of http(s) URLs, not empty while 'RESOURCE' is set",
            "The issuers clients get tokens from, e.g. ['https://example.com'].",
        )
    if not isinstance(mcp["SCOPE"], str):
        error(
            "SCOPE",
            "a string",
            "The scope every OAuth access token needs for /mcp/, e.g. 'mcp'; '' for none.",
        )
    tool_scopes = mcp["TOOL_SCOPES"]
    if not isinstance(tool_scopes, Mapping) or not all(
        isinstance(name, str) and isinstance(scope, str) and scope
        for name, scope in tool_scopes.items()
    ):
        error(
            "TOOL_SCOPES",
            "a dict of tool names to scopes",
            "E.g. {'refund_order': "
            "'mcp:payments'}: an OAuth access token needs that scope to list and call it.",
        )
    if resource is not None and not apps.is_installed("oauth2_provider"):
        errors.append(
            Error(
                f"'{_path('MCP', 'RESOURCE')}' is set but django-oauth-toolkit is not installed.",
                hint="pip install 'django-tool-calling[oauth]' and add 'oauth2_provider' to "
                "INSTALLED_APPS (and migrate): /mcp/ accepts its access tokens.",
                id="tool_calling.E020",
            )
        )
    return errors


def _check_mcp(mcp: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    hosts = mcp["ALLOWED_HOSTS"]
    if (
        isinstance(hosts, str)
        or not isinstance(hosts, Sequence)
        or not all(isinstance(host, str) and host.strip() for host in hosts)
    ):
        errors.append(
            Error(
                f"The value of '{_path('MCP', 'ALLOWED_HOSTS')}' must be a list of host names.",
                hint="E.g. ['127.0.0.1', 'localhost', 'mcp.example.com'] ('name' allows any "
                "port, 'name:port' one port, '*' any host: only behind a proxy that checks it).",
                id="tool_calling.E016",
            )
        )
    origins = mcp["ALLOWED_ORIGINS"]
    if origins is not None and (
        isinstance(origins, str)
        or not isinstance(origins, Sequence)
        or not all(isinstance(o, str) and "://" in o for o in origins)
    ):
        errors.append(
            Error(
                f"The value of '{_path('MCP', 'ALLOWED_ORIGINS')}' must be None or a list of "
                "origins.",
                hint="E.g. ['https://ide.example.com', 'http://localhost:*'], or None to accept "
                "the http(s) origins of ALLOWED_HOSTS.",
                id="tool_calling.E016",
            )
        )
    errors += _check_mcp_oauth(mcp)
    ttl = mcp["LIST_TTL_MS"]
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
        errors.append(
            Error(
                f"The value of '{_path('MCP', 'LIST_TTL_MS')}' must be a non-negative integer.",
                hint="Milliseconds an MCP client may reuse a tools/list answer, e.g. 60000; "
                "0 asks again each time.",
                id="tool_calling.E016",
            )
        )
    return errors
