"""The documentation site (mkdocs.yml): builds strictly (a broken link or anchor fails), every
page in docs/ is in its navigation, the home page carries the sections it includes from
README.md (a renamed section would otherwise leave it empty: pymdownx.snippets only fails on a
missing file), and the API reference carries the docstrings."""

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

    home = (tmp_path / "index.html").read_text()
    assert "Pythonic form" in home and "the weather in Oslo?" in home
    assert "Runs in the admin" in page("operations") and "purge_expired" in page("operations")
    assert "twine check" in page("release")
    assert "drf_create_token admin" in page("api") and "S21" in page("checklist")
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


# -- The settings reference against tool_calling.conf.DEFAULTS ------------------------------------

HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")
KEY_CELL = re.compile(r'^`([A-Z][A-Z0-9_]*)(?:\["([A-Z][A-Z0-9_]*)"\])?`$')


def sections(title):
    """(path, lines) of every section headed ``title`` in README.md and docs/**/*.md.

    A section runs to the next heading of its level or above; lines in fenced code are never
    headings. Searching every page keeps the check where the text is, wherever it moves.
    """
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        level, body, fenced = None, [], False
        for line in path.read_text().splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            heading = None if fenced else HEADING.match(line)
            if heading and level is not None and len(heading[1]) <= level:
                found.append((path, body))
                level = None
            if heading and level is None and heading[2].strip().lower() == title.lower():
                level, body = len(heading[1]), []
            elif level is not None:
                body.append(line)
        if level is not None:
            found.append((path, body))
    return found


def settings_table():
    """{key: (path, default cell)} of the rows of the "Key" tables of the settings reference.

    A key is ``("LIMITS", "MAX_TOTAL_TOOL_CALLS")`` for the row
    `` `LIMITS["MAX_TOTAL_TOOL_CALLS"]` ``, ``("MAX_RESULT_CHARS",)`` for `` `MAX_RESULT_CHARS` ``.
    """
    found = sections("Settings reference")
    assert found, 'no section headed "Settings reference" in README.md or docs/*.md'
    rows = {}
    for path, lines in found:
        in_table = False
        for line in lines:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                in_table = False
            elif cells[0] == "Key":
                in_table = True
            elif in_table and not set(cells[0]) <= set("-: "):
                match = KEY_CELL.match(cells[0])
                assert match, f"{path.name}: a settings row names no key: {line}"
                key = tuple(part for part in match.groups() if part)
                assert key not in rows, f"{path.name}: {cells[0]} is documented twice"
                rows[key] = (path, cells[1])
    assert rows, 'the "Settings reference" section has no table whose first column is "Key"'
    return rows


def code_keys():
    """The keys of ``DEFAULTS``: a dict-valued key's own keys, one level deep, as it merges."""
    from tool_calling.conf import DEFAULTS

    keys = {}
    for name, value in DEFAULTS.items():
        if isinstance(value, dict):
            keys.update({(name, sub): subvalue for sub, subvalue in value.items()})
        else:
            keys[(name,)] = value
    return keys


def test_the_settings_reference_documents_every_key_of_the_code_and_no_other():
    def spelled(key):
        return key[0] + "".join(f'["{part}"]' for part in key[1:])

    documented, code = set(settings_table()), set(code_keys())
    undocumented, unknown = sorted(code - documented), sorted(documented - code)
    assert not undocumented, "undocumented: " + ", ".join(map(spelled, undocumented))
    assert not unknown, "not in tool_calling.conf.DEFAULTS: " + ", ".join(map(spelled, unknown))


def test_the_settings_reference_gives_the_defaults_of_the_code():
    import ast

    code = code_keys()
    for key, (path, cell) in settings_table().items():
        if key not in code:
            continue  # the test above names it
        assert cell.startswith("`") and cell.endswith("`"), f"{path.name}: {key}: {cell}"
        assert ast.literal_eval(cell.strip("`")) == code[key], f"{path.name}: {key}: {cell}"


def test_the_reference_documents_every_name_the_package_root_exports():
    """docs/reference/core.md has a ``:::`` directive for each name of ``tool_calling.__all__``."""
    directives = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs/reference/core.md").read_text(), re.M)
    documented = [target.rsplit(".", 1)[-1] for target in directives]
    assert sorted(documented) == sorted(tool_calling.__all__)


def test_the_readmes_links_point_at_files_of_the_repository():
    """The README is read on its own (the repository's front page, the package's description),
    outside the site's link check: each of its relative links names a file that exists."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    relative = [target for target in targets if "://" not in target]
    assert len(relative) >= 10  # the pages of the documentation, the picture, the license
    missing = [target for target in relative if not (ROOT / target).is_file()]
    assert not missing, missing


def test_every_system_check_the_code_reports_is_documented_and_none_other():
    """The settings page's table of system checks against the ids the code can report (the
    chat app's own on its page): a new check, or one removed, changes the table too."""
    pattern = r"tool_calling(?:_chat)?\.[EW]\d{3}"
    in_code = set()
    for path in (ROOT / "tool_calling").rglob("*.py"):
        in_code |= set(re.findall(pattern, path.read_text()))
    settings_page = (ROOT / "docs" / "settings.md").read_text()
    table = set(re.findall(rf"^\| `({pattern})`", settings_page, flags=re.M))
    chat_page = (ROOT / "docs" / "chat-page.md").read_text()
    chat = {check for check in in_code if check.startswith("tool_calling_chat.")}
    assert len(table) >= 20 and len(chat) >= 3
    assert table == in_code - chat
    # The chat page names its checks by id, or by number after the first one.
    missing = [c for c in chat if c not in chat_page and f"`{c.split('.')[1]}`" not in chat_page]
    assert not missing, missing
