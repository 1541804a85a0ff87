"""The turn throttle counts across processes: the example project keeps it in Redis.

DRF's throttles count in Django's default cache. With the local-memory cache (Django's default,
and the example project's until issue #15) every web and worker process counts on its own, so
two uvicorn workers allowed twice the rate. The example project's ``CACHES`` point at Redis
(``REDIS_URL``): two processes here share one count.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tool_calling.testing.services import find_redis_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path):
    port = free_port()
    binary, _ = find_redis_server()
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("redis-server did not start")
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(10)


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


def project_env(tmp_path, redis_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        REDIS_URL=redis_url,
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PYTHONPATH=str(ROOT),
    )
    return env


def test_two_processes_share_one_turn_count(tmp_path, redis_url):
    env = project_env(tmp_path, redis_url[0])
    # The project's rate is 30 a minute: the second process gets what the first left.
    assert ask(20, env) == 20
    assert ask(20, env) == 10


def test_a_stalled_redis_makes_the_throttle_answer_503_not_hang(tmp_path, redis_url):
    """SIGSTOP: connections are accepted, nothing answers; the cache's socket timeout ends it."""
    url, process = redis_url
    env = project_env(tmp_path, url)
    process.send_signal(signal.SIGSTOP)
    # The 503 of RateLimiterUnavailable, not a 500; a hang fails ask()'s 60 s subprocess timeout
    # (the project's cache gives up after its 2 s socket timeout).
    assert ask(1, env) == 503
