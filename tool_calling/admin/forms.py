"""The forms of the approval queue: a denial's reason, one call's decision."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from tool_calling.calls import approvals


def editable_arguments(text: str) -> str:
    """The audit's arguments as the decision page's textarea shows them: JSON indented, whole."""
    if not text or text.isspace():
        return "{}"  # what the call runs with (calls.lifecycle.record_for_worker)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


def same_arguments(first: str, second: str) -> bool:
    """Whether two argument texts say the same (JSON compared by value, else by words)."""
    try:
        return json.dumps(json.loads(first), sort_keys=True) == json.dumps(
            json.loads(second), sort_keys=True
        )
    except (ValueError, RecursionError):
        return first.split() == second.split()


class ReasonField(forms.CharField):
    """A reason or note: optional, as long as a denial's reason may be, a small textarea."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", approvals.MAX_REASON_CHARS)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, "class": "vLargeTextField"}))
        super().__init__(**kwargs)


class DenyForm(forms.Form):
    """The reason of a denial: the model reads it in the call's error response."""

    reason = ReasonField(
        label=_("Reason"),
        help_text=_("The model is told the calls were denied, with this reason."),
    )


class DecisionForm(forms.Form):
    """One call's decision: its arguments (editable) and a reason or note."""

    arguments = forms.CharField(
        label=_("Arguments"),
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={"rows": 12, "class": "vLargeTextField", "spellcheck": "false"}
        ),
        help_text=_(
            "A JSON object, checked against the tool's input schema. Left as it is, the call "
            "runs with the model's arguments; edited, it runs with yours, and the model's are "
            "kept in the audit."
        ),
    )
    reason = ReasonField(
        label=_("Reason or note"),
        help_text=_(
            "Denying: the model is told the call was denied, with this reason. Approving: a "
            "note kept with the decision."
        ),
    )
