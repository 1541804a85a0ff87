"""docker/compose.yml and docker/Dockerfile as data: what they set and what they run.

tests/test_docker.py checks the files; tests/integration/test_production.py runs their commands
with their environment on this machine (Docker itself is not needed).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


class MissingVariable(Exception):
    pass


def load() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


def environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment", {})
    if isinstance(env, list):  # ["KEY=value", ...] form
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env  # type: ignore[no-any-return]


def command(service: dict[str, Any]) -> str:
    cmd = service.get("command", "")
    return shlex.join(cmd) if isinstance(cmd, list) else str(cmd)


def interpolate(value: str, env: dict[str, str]) -> str:
    """What compose makes of a value: ${X}, ${X:-default}, ${X-default}, ${X:?error}, $$."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match.groups()
        present = name in env
        empty = present and env[name] == ""
        if operator in (":?", "?") and (not present or (operator == ":?" and empty)):
            raise MissingVariable(f"{name}: {argument}")
        if operator in (":-", "-") and (not present or (operator == ":-" and empty)):
            return str(argument)
        return env.get(name, "")

    return _VARIABLE.sub(substitute, value)


def service_environment(name: str, shell: dict[str, str]) -> dict[str, str]:
    """The environment compose gives service ``name`` when run from a shell with ``shell``."""
    return {
        key: interpolate(str(value), shell)
        for key, value in environment(load()["services"][name]).items()
    }


def dockerfile_env() -> dict[str, str]:
    """The image's ``ENV`` variables."""
    found: dict[str, str] = {}
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith("ENV "):
            for item in shlex.split(line[4:]):
                key, _, value = item.partition("=")
                found[key] = value
    return found


def dockerfile_runs() -> list[str]:
    """The shell commands of the image's ``RUN`` lines, in order."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]
