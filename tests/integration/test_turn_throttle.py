"""The turn throttle counts across processes, atomically: in the project's database (S24).

DRF's throttles count in Django's default cache, reading, deciding and writing back: with the
local-memory cache every process counted on its own, and with a shared cache (Redis) requests
that came together all passed. ``tool_calling.api.throttling.TurnRateThrottle`` counts in the
database, under a row lock: the processes here share one count, and however many requests come
at once, no more than the rate pass.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from ._project import ROOT, migrate, project_env

pytestmark = pytest.mark.integration

# One process of the example project asking the turn throttle N times for user 1, as
# POST .../messages/ does; prints how many were allowed.
ASK = """
import json, sys, types
import django
django.setup()
from tool_calling.api.views import RateLimiterUnavailable, TurnRateThrottle
request = types.SimpleNamespace(user=types.SimpleNamespace(is_authenticated=True, pk=1), META={})
view = types.SimpleNamespace(throttle_scope="tool_calling_turns")
try:
    allowed = sum(TurnRateThrottle().allow_request(request, view) for _ in range(int(sys.argv[1])))
except RateLimiterUnavailable as exc:
    allowed = exc.status_code
print(json.dumps(allowed))
"""


# One process of the example project asking the throttle N times at once, on N threads, when
# the file GO exists (after writing READY); prints how many were allowed and how many got 503.
ASK_AT_ONCE = """
import json, sys, threading, time, types
from pathlib import Path
import django
django.setup()
from django.db import connections
from tool_calling.api.views import RateLimiterUnavailable, TurnRateThrottle
count, ready, go = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
request = types.SimpleNamespace(user=types.SimpleNamespace(is_authenticated=True, pk=1), META={})
view = types.SimpleNamespace(throttle_scope="tool_calling_turns")
answers = []
def ask():
    while not go.exists():
        time.sleep(0.001)
    try:
        answers.append(bool(TurnRateThrottle().allow_request(request, view)))
    except RateLimiterUnavailable:
        answers.append(503)
    finally:
        connections.close_all()
threads = [threading.Thread(target=ask) for _ in range(count)]
for thread in threads:
    thread.start()
ready.touch()
for thread in threads:
    thread.join()
print(json.dumps([answers.count(True), answers.count(503)]))
"""


def ask(times: int, env: dict[str, str]) -> int:
    result = subprocess.run(
        [sys.executable, "-c", ASK, str(times)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return int(json.loads(result.stdout.strip().splitlines()[-1]))


def test_two_processes_share_one_turn_count(tmp_path, redis_url):
    env = project_env(tmp_path / "db.sqlite3", REDIS_URL=redis_url[0])
    migrate(env)
    # The project's rate is 30 a minute: the second process gets what the first left.
    assert ask(20, env) == 20
    assert ask(20, env) == 10


def test_a_stalled_redis_does_not_reach_the_throttle(tmp_path, redis_url):
    """SIGSTOP: Redis accepts connections and answers nothing; the throttle never asks it."""
    url, process = redis_url
    env = project_env(tmp_path / "db.sqlite3", REDIS_URL=url)
    migrate(env)
    process.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    assert ask(1, env) == 1
    assert time.monotonic() - started < 30  # no socket timeout waited for


def test_s24_sixty_messages_at_once_from_one_user_let_at_most_the_rate_through(tmp_path, redis_url):
    """Six processes of the project, ten requests each on ten threads, released at once: of
    the 60 new turns one user asks for, 30 (the rate: 30/min) pass, however they interleave."""
    env = project_env(tmp_path / "db.sqlite3", REDIS_URL=redis_url[0])
    migrate(env)
    go = tmp_path / "go"
    processes = []
    for number in range(6):
        ready = tmp_path / f"ready-{number}"
        processes.append(
            (
                ready,
                subprocess.Popen(
                    [sys.executable, "-c", ASK_AT_ONCE, "10", str(ready), str(go)],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                ),
            )
        )
    deadline = time.monotonic() + 120
    while not all(ready.exists() for ready, _ in processes):
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.05)
    go.touch()
    allowed = unavailable = 0
    for _, process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        passed, failed = json.loads(out.strip().splitlines()[-1])
        allowed += passed
        unavailable += failed
    assert (allowed, unavailable) == (30, 0)
