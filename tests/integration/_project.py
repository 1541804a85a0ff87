"""The example project in processes of its own: ``manage.py`` commands and uvicorn.

What a deployment runs, started the same way (``python manage.py ...``,
``python -m uvicorn project.asgi:application``), with an environment the test writes: nothing
of the developer's ``DJANGO_*``, ``DATABASE_URL`` or ``TOOL_CALLING_*`` leaks in.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests._processes import stop

ROOT = Path(__file__).resolve().parents[2]
SECRET_KEY = "tests-only-" + "k" * 50
_OWN_PREFIXES = ("DJANGO_", "TOOL_CALLING_", "DATABASE_URL", "REDIS_URL")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def project_env(database: Path, **variables: str) -> dict[str, str]:
    """The environment of the project's processes: a SQLite file, a secret key, ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_SECRET_KEY=SECRET_KEY,
        DATABASE_URL=f"sqlite:///{database}",
        PYTHONPATH=str(ROOT),
    )
    env.update(variables)
    return env


def run(env: Mapping[str, str], *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python *argv`` in the repository's root; fail the test if it fails."""
    result = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
    return result


@contextmanager
def uvicorn(env: Mapping[str, str], log: Path) -> Iterator[str]:
    """Serve ``project.asgi:application`` with uvicorn on a free port; yield its base URL."""
    port = free_port()
    with log.open("ab") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "project.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env=dict(env),
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"uvicorn did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def migrate(env: Mapping[str, str]) -> None:
    """Create the tables of the project's database (what ``scripts/run.sh`` does first)."""
    run(env, "manage.py", "migrate", "--noinput", timeout=300)
