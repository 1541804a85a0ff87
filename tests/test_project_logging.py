"""The example project logs each refused request once (every 4xx used to be logged twice).

Django configures its own ``django`` logger first (``DEFAULT_LOGGING``: a console handler that
writes while ``DEBUG`` is on); a project ``LOGGING`` that sends the root logger to the console as
well printed every ``django.request`` warning twice, once per handler. Run in a subprocess with
the example project's own settings, as ``scripts/run.sh`` runs them (``DJANGO_DEBUG`` on).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

REQUESTS = """
import django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="localhost")
client.get("/api/no-such-thing/")
client.get("/api/tools/")
client.post("/api/conversations/", "5", content_type="application/json")
"""


@pytest.mark.parametrize("debug", ["true", "false"])
def test_each_refused_request_is_logged_once(tmp_path, debug):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG=debug,
        DJANGO_SECRET_KEY="tests-only-not-a-secret",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PYTHONPATH=str(ROOT),
    )
    result = subprocess.run(
        [sys.executable, "-c", REQUESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    log = result.stdout + result.stderr
    for line in (
        "Not Found: /api/no-such-thing/",
        "Unauthorized: /api/tools/",
        "Unauthorized: /api/conversations/",
    ):
        assert log.count(line) == 1, log
    assert "WARNING django.request: Not Found: /api/no-such-thing/" in log  # the project's format
