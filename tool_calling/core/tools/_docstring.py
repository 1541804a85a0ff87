"""Reads a function's docstring: its summary and the descriptions of its parameters."""

from __future__ import annotations

import inspect
import re

_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns|Return|Yields|"
    r"Raises|Examples?|Notes?|Attributes|See Also|Warnings?|Todo)\s*:\s*$",
    re.IGNORECASE,
)
_ARG_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
_GOOGLE_ARG_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _collapse(lines: list[str]) -> str:
    return " ".join(" ".join(line.split()) for line in lines if line.strip()).strip()


def function_docstring(function: object) -> tuple[str, dict[str, str]]:
    """``parse_docstring(inspect.getdoc(function))``, without cleaning a one-line docstring."""
    doc = getattr(function, "__doc__", None)
    if isinstance(doc, str) and "\n" not in doc and ":" not in doc:
        return " ".join(doc.split()), {}
    return parse_docstring(inspect.getdoc(function))


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return ``(summary, {parameter: description})`` from a Google- or Sphinx-style docstring.

    The summary is the docstring's first paragraph, on one line.
    """
    if not doc:
        return "", {}
    if "\n" not in doc and ":" not in doc:  # one line, no section, no :param: the summary
        return " ".join(doc.split()), {}
    lines = inspect.cleandoc(doc).splitlines()

    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_RE.match(line.strip()) or line.lstrip().startswith(":"):
            break
        summary_lines.append(line)

    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    base_indent = 0
    for line in lines:
        stripped = line.strip()
        header = _SECTION_RE.match(stripped)
        if header and not line.startswith((" ", "\t")):
            section = header.group(1).lower()
            current = None
            continue
        sphinx = _SPHINX_PARAM_RE.match(stripped)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            section = "sphinx"
            continue
        if section in _ARG_SECTIONS:
            if not stripped:
                continue
            indent = len(line) - len(line.lstrip())
            match = _GOOGLE_ARG_RE.match(stripped)
            if match and (current is None or indent <= base_indent):
                current = match.group(1)
                base_indent = indent
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
            elif not line.startswith((" ", "\t")):
                section = None
        elif section == "sphinx" and current is not None:
            if stripped and not stripped.startswith(":"):
                params[current] = f"{params[current]} {stripped}".strip()
            else:
                current = None
    return _collapse(summary_lines), params
