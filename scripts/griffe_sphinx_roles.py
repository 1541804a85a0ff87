"""A Griffe extension for the API reference (mkdocs.yml): Sphinx roles in docstrings as code.

The docstrings name other objects the Sphinx way (``:class:`ToolResult```,
``:meth:`~ToolContext.input_responses```), which Markdown would show as typed. This writes each
role as inline code of its target (the last part only when the target starts with ``~``, as
Sphinx shows it) before mkdocstrings renders the docstring; the code is not changed.

Our own because no package does it: mkdocstrings' official griffe-sphinx reads ``#:`` comments
above attributes, not roles, and mkdocstrings-python's Sphinx docstring style parses field lists
(``:param:``), leaving roles in the text as typed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj):`(~?)([^`]+)`")


def _as_code(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def without_roles(text: str) -> str:
    """Return ``text`` with every Sphinx cross-reference role written as inline code."""
    return ROLE.sub(_as_code, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the docstring of ``obj`` (each object, as Griffe loads it)."""
        if obj.docstring is not None:
            obj.docstring.value = without_roles(obj.docstring.value)
