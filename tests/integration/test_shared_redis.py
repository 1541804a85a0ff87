"""S21: nothing the example project reads from its shared Redis is unpickled.

The web process, the workers and the broker share one Redis (``REDIS_URL``). A pickled object
planted there, under a key the project reads (the turn throttle's, the cache's, a task result's),
must never run: the cache stores JSON (``tool_calling.cache.JSONSerializer``), the throttle
counts in the database, and the project keeps no task results (no result backend, so nothing
reads one back). Each planted object would make a directory if it were unpickled.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from ._project import ROOT, migrate, project_env

pytestmark = pytest.mark.integration

PREFIX = "tool_calling_example:1:"  # the example project's KEY_PREFIX, version 1

# A process of the example project reading what the test planted: a new turn's throttle, the
# cache, a task's result; then writing one value to the cache.
READ = """
import json, sys, types
import django
django.setup()
from celery.result import AsyncResult
from django.core.cache import cache
from project.celery import app
from tool_calling.api.views import TurnRateThrottle
request = types.SimpleNamespace(user=types.SimpleNamespace(is_authenticated=True, pk=1), META={})
view = types.SimpleNamespace(throttle_scope="tool_calling_turns")
seen = {"throttle": TurnRateThrottle().allow_request(request, view)}
for key in sys.argv[1:]:
    try:
        seen[key] = repr(cache.get(key))
    except Exception as exc:
        seen[key] = f"{type(exc).__name__}: {exc}"
try:
    seen["result"] = repr(AsyncResult("planted", app=app).get(timeout=5))
except Exception as exc:
    seen["result"] = type(exc).__name__  # the project keeps no task results at all
cache.set("written", {"turns": [1, 2], "by": "the project"})
print(json.dumps(seen))
"""


class Planted:
    """Unpickled, it makes the directory ``path`` (what any code could do instead)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.path),))


def test_s21_a_pickle_planted_under_every_key_the_project_reads_never_runs(tmp_path, redis_url):
    url, _ = redis_url
    env = project_env(tmp_path / "db.sqlite3", REDIS_URL=url)
    migrate(env)
    store = redis.Redis.from_url(url)
    made = {name: tmp_path / f"ran-{name}" for name in ("throttle", "cache", "tokens", "result")}
    store.set(f"{PREFIX}throttle_tool_calling_turns_1", pickle.dumps(Planted(made["throttle"])))
    store.set(f"{PREFIX}planted", pickle.dumps(Planted(made["cache"])))
    tokens = "tool_calling:admin:tokens:v1:UTC:2026-01-01"  # the admin's figures of a day
    store.set(f"{PREFIX}{tokens}", pickle.dumps(Planted(made["tokens"])))
    store.set("celery-task-meta-planted", pickle.dumps(Planted(made["result"])))

    result = subprocess.run(
        [sys.executable, "-c", READ, "planted", tokens],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert [name for name, path in made.items() if path.exists()] == []
    assert seen["throttle"] is True  # counted in the database; the planted key was never read
    refused = "ValueError: The cache holds a value that is not JSON; it was not read."
    assert seen["planted"] == seen[tokens] == refused  # not unpickled
    # No result backend: a task's result is never read back, so a planted one never is.
    assert seen["result"] == "NotImplementedError"
    # What the project writes to the cache is JSON.
    assert json.loads(store.get(f"{PREFIX}written")) == {"turns": [1, 2], "by": "the project"}
