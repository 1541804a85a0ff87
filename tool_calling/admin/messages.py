"""What the admin's bulk actions say, to operators (translated) and in each object's history."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import ngettext_lazy


@dataclass(frozen=True)
class ActionText:
    """What a bulk action says: to the operator (translated) and in each tool's history."""

    done: Any
    """``ngettext_lazy`` message for the tools it changed (``%(count)d``)."""
    unchanged: Any
    """``ngettext_lazy`` message for the selected tools that were already in that state."""
    log: str
    """The ``LogEntry`` change message (stored untranslated, as Django stores its own)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Values of the messages' other placeholders (``%(limit)d``)."""


ENABLED = ActionText(
    ngettext_lazy("Enabled %(count)d tool.", "Enabled %(count)d tools.", "count"),
    ngettext_lazy(
        "%(count)d tool was already enabled.", "%(count)d tools were already enabled.", "count"
    ),
    "Enabled (bulk action).",
)
DISABLED = ActionText(
    ngettext_lazy("Disabled %(count)d tool.", "Disabled %(count)d tools.", "count"),
    ngettext_lazy(
        "%(count)d tool was already disabled.", "%(count)d tools were already disabled.", "count"
    ),
    "Disabled (bulk action).",
)
APPROVAL_REQUIRED = ActionText(
    ngettext_lazy(
        "%(count)d tool now requires approval.", "%(count)d tools now require approval.", "count"
    ),
    ngettext_lazy(
        "%(count)d tool already required approval.",
        "%(count)d tools already required approval.",
        "count",
    ),
    "Approval required (bulk action).",
)
APPROVAL_SKIPPED = ActionText(
    ngettext_lazy(
        "%(count)d tool no longer requires approval.",
        "%(count)d tools no longer require approval.",
        "count",
    ),
    ngettext_lazy(
        "%(count)d tool did not require approval.",
        "%(count)d tools did not require approval.",
        "count",
    ),
    "Approval no longer required (bulk action).",
)
EXCLUDED = ActionText(
    ngettext_lazy(
        "Excluded %(count)d tool from per-tool limits.",
        "Excluded %(count)d tools from per-tool limits.",
        "count",
    ),
    ngettext_lazy(
        "%(count)d tool was already excluded.", "%(count)d tools were already excluded.", "count"
    ),
    "Excluded from per-tool limits (bulk action).",
)
INCLUDED = ActionText(
    ngettext_lazy(
        "Included %(count)d tool in per-tool limits.",
        "Included %(count)d tools in per-tool limits.",
        "count",
    ),
    ngettext_lazy(
        "%(count)d tool was not excluded.", "%(count)d tools were not excluded.", "count"
    ),
    "Included in per-tool limits (bulk action).",
)


APPROVED_CALLS = ActionText(
    ngettext_lazy(
        "Approved %(count)d call; it runs now.", "Approved %(count)d calls; they run now.", "count"
    ),
    ngettext_lazy(
        "Skipped %(count)d call that was no longer awaiting approval.",
        "Skipped %(count)d calls that were no longer awaiting approval.",
        "count",
    ),
    "Approved (bulk action).",
)
DENIED_CALLS = ActionText(
    ngettext_lazy(
        "Denied %(count)d call; the model is told so.",
        "Denied %(count)d calls; the model is told so.",
        "count",
    ),
    APPROVED_CALLS.unchanged,
    "Denied (bulk action).",
)


def limit_text(limit: int | None) -> ActionText:
    """What "Set the calls per turn" says for ``limit`` (None: back to the default)."""
    if limit is None:
        return ActionText(
            ngettext_lazy(
                "%(count)d tool is back to the default limit.",
                "%(count)d tools are back to the default limit.",
                "count",
            ),
            ngettext_lazy(
                "%(count)d tool already had the default limit.",
                "%(count)d tools already had the default limit.",
                "count",
            ),
            "Limit: the default (bulk action).",
        )
    return ActionText(
        ngettext_lazy(
            "%(count)d tool now allows %(limit)d calls per turn.",
            "%(count)d tools now allow %(limit)d calls per turn.",
            "count",
        ),
        ngettext_lazy(
            "%(count)d tool already allowed %(limit)d calls per turn.",
            "%(count)d tools already allowed %(limit)d calls per turn.",
            "count",
        ),
        f"Limit: {limit} calls per turn (bulk action).",
        {"limit": limit},
    )
