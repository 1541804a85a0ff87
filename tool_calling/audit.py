"""What the audit stores of a call: texts redacted by the project's hook, then cut to size."""

from __future__ import annotations

from collections.abc import Callable

from tool_calling.conf import settings as app_settings

__all__ = ["audit_text"]


def audit_text(text: str | None, *, tool_name: str, field: str) -> str:
    """Return ``text`` as stored in the audit: redacted by the hook, then cut to the setting.

    Args:
        text: The arguments, result or error of a call.
        tool_name: The tool the call was for (handed to the redactor).
        field: ``"arguments"``, ``"result"`` or ``"error"`` (handed to the redactor).
    """
    if not text:
        return ""
    # conf imports the dotted path on first access (IMPORT_STRINGS) and caches the callable.
    redactor: Callable[..., str] | None = app_settings.AUDIT_REDACTOR
    if redactor is not None:
        text = redactor(text, tool_name=tool_name, field=field)
    limit = app_settings.AUDIT_MAX_CHARS
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n[Truncated: {len(text)} characters; first {limit} kept.]"
    return text
