"""The documentation site (mkdocs.yml): builds strictly, and its pages carry the sections they
include from README.md and CHANGELOG.md (a renamed section would otherwise leave a page empty:
pymdownx.snippets only fails on a missing file) and the docstrings of the API reference."""

import html
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import tool_calling

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_every_included_section(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr

    def page(name):
        return (tmp_path / name / "index.html").read_text()

    assert "Runs in the admin" in page("operations") and "purge_expired" in page("operations")
    assert "twine check" in page("release")
    assert "Keep a Changelog" in page("changelog")
    assert (tmp_path / "openapi.yaml").exists()

    # The API reference is rendered from the docstrings (mkdocstrings): a public name's summary,
    # and no Sphinx role left as typed (scripts/griffe_sphinx_roles.py).
    def text(name):
        return html.unescape(re.sub(r"<[^>]+>", "", page(name)))

    summary = inspect.getdoc(tool_calling.tool).splitlines()[0]
    assert summary and "`" not in summary
    assert summary in text("reference/core")
    assert "DatabaseToolCallbackResolver" in text("reference/django")
    for name in ("reference/core", "reference/django"):
        assert not re.search(r":(class|meth|func|attr|mod|data|exc|obj):\S", text(name)), name
