"""The few settings the pure-Python core reads, supplied by the Django layer when it is installed.

The core never imports Django. ``tool_calling.apps`` installs a provider that builds
:class:`CoreSettings` from ``settings.TOOL_CALLING``; without Django the defaults apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tool_calling.core.execution.limits import ToolCallLimits

DEFAULT_MAX_RESULT_CHARS = 65_536
DEFAULT_MAX_CONCURRENT_CALLS = 8
DEFAULT_MAX_TOOL_ROUNDS = 100


@dataclass(frozen=True, kw_only=True)
class CoreSettings:
    """Settings of the core, resolved once per change of the Django settings."""

    strict_tool_calls: bool = False
    """Raise on bad arguments or unknown tools instead of telling the model."""
    throw_exception_on_error: bool = False
    """Re-raise tool exceptions instead of sending their message to the model."""
    max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS
    """Longest tool result sent to the model; longer ones are cut with a note. None = no cap."""
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    """How many calls of one batch run at the same time in-process."""
    limits: ToolCallLimits = field(default_factory=ToolCallLimits)
    """Default tool call limits for managers built without explicit limits."""
    tool_calling_advisor_auto_register: bool = True
    """Whether ChatClient adds a ToolCallingAdvisor when the request has none."""
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    """Model calls one turn may make (``ToolCallingAdvisor``'s default round guard)."""
    chat_model: Mapping[str, Any] = field(default_factory=dict)
    """TOOL_CALLING["CHAT_MODEL"]: MODEL, BASE_URL, API_KEY, TIMEOUT, MAX_RETRIES, OPTIONS."""


_DEFAULTS = CoreSettings()
_provider: Callable[[], CoreSettings] | None = None


def core_settings() -> CoreSettings:
    """Return the current core settings (the Django layer's when installed)."""
    provider = _provider
    return _DEFAULTS if provider is None else provider()


def set_core_settings_provider(provider: Callable[[], CoreSettings] | None) -> None:
    """Install (or remove, with ``None``) the function that supplies the core settings."""
    global _provider
    _provider = provider
