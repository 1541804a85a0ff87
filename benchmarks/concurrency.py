"""Benchmark: many users at once through the main job, against the model's own latency.

A benchmark, not a test: it prints Markdown (and ``--json``) with the targets met or missed,
and exits 0 unless the system could not be started or measured (then 1, saying why;
``--strict`` also exits 1 when a target is missed).

For each database (SQLite, the default of the main job; PostgreSQL, a fresh database per run on
``--postgres``, by default scripts/setup_postgres.sh's server) a child process:

1. starts ``python -m tool_calling.testing.server --mode demo --delay D`` (the asyncio replay
   server: every answer comes after ``D`` seconds, ``--delay``, default 1.0) and then the main
   job with ``scripts/devserver.py`` itself (``--var`` a temporary directory, a free ``--port``
   and ``--redis-port``), with ``OPENAI_BASE_URL`` pointing at the replay server (so devserver
   starts no model of its own) and ``DJANGO_SETTINGS_MODULE=benchmarks.concurrency_tools.settings``
   (project/settings.py plus a tool that sleeps, which devserver's children read like the rest
   of the environment). Whatever devserver starts (pools, processes, the web server) is what is
   measured: a change there needs no change here.
2. creates users with DRF tokens in the job's database, runs one warm-up turn, and takes the
   two model requests of that turn from the replay server (``GET /_requests``).
3. for each N of ``--sizes``:

   - the simulator's floor: N copies of the warm-up's first model request sent straight to the
     replay server at the same moment, then N of its second (two waves of N, streamed as the
     job streams them), from this process over plain asyncio sockets;
   - N turns: each of N clients (one ``httpx.AsyncClient`` each, all on one asyncio event loop
     in this process, no thread per client) has a conversation of its own and, at the same
     moment, posts "What's the weather in Oslo?" (the demo model calls ``get_weather`` once,
     then answers: two model answers, so a turn cannot end before 2 x D), then follows its run
     as the chat page does (tool_calling/contrib/chat/static/tool_calling_chat/chat.js):
     ``GET /api/runs/{id}/events/`` with ``Accept: text/event-stream``, reconnecting with
     ``Last-Event-ID`` when the stream drops, reading ``GET /api/conversations/{id}/?after=N``
     after a model message with tool calls and after ``tool_results``, until the terminal
     event. A turn's time runs from its POST to that event with those reads done; a message's
     accept time is its POST's.
4. ``--sleep-calls`` calls of the sleeping tool (1 s), no model: this process records them with
   ``calls.lifecycle.record_for_worker`` in one transaction, as a run step records a batch, then
   sends each with ``calls.dispatch.dispatch``, as the step's on-commit hooks do; from the first
   send until every row is terminal (its ``finished_at``, written by the worker).

Meanwhile every process of the main job (devserver's process tree: Redis, the worker with its
pool and beat, the web server; not the replay server) is sampled in /proc every 100 ms for its
resident memory (the peak of the sum) and CPU time, and the job's logs (``var/log``) are read
after each case for ``database is locked``, ``OperationalError``, tracebacks and HTTP 5xx
answers.

    bash benchmarks/run.sh concurrency [--sizes 10,100,500] [--databases sqlite,postgres]
        [--delay 1.0] [--sleep-calls 1000] [--timeout 300] [--postgres URL|auto]
        [--json PATH] [--keep] [--strict]

Targets: 100 turns on SQLite all succeed, wall <= 2x the ideal (2 x D), message
accepted p99 <= 250 ms, peak RSS of the main job <= 1 GB; 500 turns on PostgreSQL all succeed
within 1.5x the simulator's floor of the same run; the sleeping calls all end within 3 s of the
first send, the workers' peak RSS <= 1 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, benchmarks/ comes first on sys.path, where a module may shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _database  # noqa: E402

SETTINGS = "benchmarks.concurrency_tools.settings"
MESSAGE = "What's the weather in Oslo?"
"""Names the demo tool get_weather: the demo model calls it once, then answers."""
SLEEP_TOOL = "bench_sleep"
SLEEP_SECONDS = 1.0
SLEEP_WITHIN = 3.0
"""Seconds from the first send within which every sleeping call must end."""
GB = 1024**3
TARGET_WALL_IDEAL = 2.0
TARGET_ACCEPT_P99 = 0.250
TARGET_RSS = 1 * GB
TARGET_WALL_FLOOR = 1.5
STARTUP_SECONDS = 240
SAMPLE_SECONDS = 0.1
TERMINAL = ("succeeded", "failed", "cancelled")
READ_ATTEMPTS = 3
"""Tries of a conversation read, as chat.js's READ_ATTEMPTS."""
LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
LOG_PATTERNS = {
    "database is locked": re.compile(r"database is locked"),
    "OperationalError": re.compile(r"OperationalError"),
    "tracebacks": re.compile(r"Traceback \(most recent call last\)"),
    "NotSupportedError": re.compile(r"NotSupportedError"),
}
_HTTP_5XX = re.compile(r'HTTP/1\.[01]" 5\d\d ')
_ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Error:|Exception:")
# One TLS context for every client: httpx builds one per client otherwise (tens of ms each),
# which for 500 clients would be most of a minute of setup. Nothing here uses TLS.
_TLS = ssl.create_default_context()


class BenchmarkError(Exception):
    """The system could not be started or measured; the message says what and where to look."""


def _say(message: str) -> None:
    print(f"concurrency: {message}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} is missing)"


def _pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# -- the processes of the main job ---------------------------------------------------------------


_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, int, float]]:
    """Every process now: pid -> (parent pid, resident bytes, CPU seconds user + system)."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        # Fields after the name: state ppid ... utime(12) stime(13) ... rss(22), in pages.
        table[int(entry.name)] = (
            int(fields[1]),
            int(fields[21]) * _PAGE,
            (int(fields[11]) + int(fields[12])) / _TICK,
        )
    return table


def _started(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot): with the pid, names one process for good.

    ``None`` when it is gone, or a zombie (ended, waiting to be reaped: nothing to stop).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return None if fields[0] == b"Z" else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _group(cmdline: str) -> str:
    """What a child of devserver is, from its command line."""
    if "redis-server" in cmdline:
        return "redis"
    if "celery" in cmdline:
        return "worker"
    if "uvicorn" in cmdline or "gunicorn" in cmdline or "daphne" in cmdline:
        return "web"
    return "other"


def _tree(root: int, table: dict[int, tuple[int, int, float]]) -> dict[int, str]:
    """The processes under ``root`` (itself included): pid -> group of devserver's child."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    groups = {root: "devserver"} if root in table else {}
    for child in children.get(root, []):
        group = _group(_cmdline(child))
        stack = [child]
        while stack:
            pid = stack.pop()
            groups[pid] = group
            stack.extend(children.get(pid, []))
    return groups


@dataclass
class Usage:
    """Resident memory and CPU of the main job over one window of samples."""

    peak_total: int = 0
    """The largest sum of every process's RSS in one sample, bytes."""
    peak_by_group: dict[str, int] = field(default_factory=dict)
    """The largest sum per group (web, worker, redis, devserver), bytes, each at its own peak."""
    cpu_by_group: dict[str, float] = field(default_factory=dict)
    """CPU seconds each group used in the window (a process that ended: up to its last sample)."""
    samples: int = 0
    processes: dict[str, int] = field(default_factory=dict)
    """Processes per group at the peak."""


class Sampler(threading.Thread):
    """Samples devserver's process tree every 100 ms; ``begin()``/``end()`` bracket a case."""

    def __init__(self, root: int) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.root = root
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._usage = Usage()
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, tuple[str, float]] = {}

    def run(self) -> None:
        while not self._stop_event.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        table = _proc_table()
        groups = _tree(self.root, table)
        by_group: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for pid, group in groups.items():
            by_group[group] += table[pid][1]
            count[group] += 1
        with self._lock:
            usage = self._usage
            usage.samples += 1
            total = sum(by_group.values())
            if total > usage.peak_total:
                usage.peak_total = total
                usage.processes = dict(count)
            for group, rss in by_group.items():
                usage.peak_by_group[group] = max(usage.peak_by_group.get(group, 0), rss)
            for pid, group in groups.items():
                self._cpu_start.setdefault(pid, table[pid][2])
                self._cpu_last[pid] = (group, table[pid][2])

    def begin(self) -> None:
        """Start a new window (the next :meth:`end` reports from here)."""
        self.sample()
        with self._lock:
            self._usage = Usage()
            self._cpu_start = {pid: cpu for pid, (_, cpu) in self._cpu_last.items()}
        self.sample()

    def end(self) -> Usage:
        """The window's usage."""
        self.sample()
        with self._lock:
            usage = self._usage
            cpu: Counter[str] = Counter()
            for pid, (group, last) in self._cpu_last.items():
                cpu[group] += last - self._cpu_start.get(pid, last)
            usage.cpu_by_group = {g: round(s, 2) for g, s in cpu.items()}
            return usage

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


class Logs:
    """The job's logs (var/log/*.log): what was written since a mark, counted."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[str, int] = {}

    def mark(self) -> None:
        self._offsets = {p.name: p.stat().st_size for p in self.directory.glob("*.log")}

    def since_mark(self) -> dict[str, Any]:
        counts: dict[str, dict[str, int]] = {}
        samples: list[str] = []
        for path in sorted(self.directory.glob("*.log")):
            with path.open("rb") as handle:
                handle.seek(self._offsets.get(path.name, 0))
                text = handle.read().decode(errors="replace")
            found = {name: len(p.findall(text)) for name, p in LOG_PATTERNS.items()}
            found["HTTP 5xx"] = len(_HTTP_5XX.findall(text))
            counts[path.stem] = {k: v for k, v in found.items() if v}
            for line in text.splitlines():
                if _ERROR_LINE.search(line) and ' - "' not in line:
                    short = f"{path.stem}: {line.strip()[:220]}"
                    if short not in samples and len(samples) < 8:
                        samples.append(short)
        totals: Counter[str] = Counter()
        for found in counts.values():
            totals.update(found)
        return {
            "by_log": {k: v for k, v in counts.items() if v},
            "total": dict(totals),
            "samples": samples,
        }


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _get_json(url: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as response:
        return json.loads(response.read())


class MainJob:
    """The replay server and scripts/devserver.py with everything it starts; stops exactly those."""

    def __init__(self, var: Path, delay: float, database_url: str | None) -> None:
        self.var = var
        self.delay = delay
        self.database_url = database_url or f"sqlite:///{var.resolve() / 'db.sqlite3'}"
        self.web_port = _free_port()
        self.redis_port = _free_port()
        self.replay_port = _free_port()
        self.replay: subprocess.Popen[bytes] | None = None
        self.devserver: subprocess.Popen[bytes] | None = None
        self.output = var / "devserver.out"
        self.summary: list[str] = []

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def replay_url(self) -> str:
        return f"http://127.0.0.1:{self.replay_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def start(self) -> None:
        logs = self.var / "log"
        logs.mkdir(parents=True, exist_ok=True)
        replay_argv = [
            sys.executable, "-m", "tool_calling.testing.server", "--mode", "demo",
            "--port", str(self.replay_port), "--delay", str(self.delay), "--quiet",
        ]  # fmt: skip
        self.replay = subprocess.Popen(
            replay_argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=(logs / "replay.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not _http_ok(f"{self.replay_url}/v1/models"):
            if self.replay.poll() is not None or time.monotonic() > deadline:
                raise BenchmarkError(
                    f"the replay server did not start ({' '.join(replay_argv)}):\n"
                    + _tail(logs / "replay.log")
                )
            time.sleep(0.1)

        env = {
            k: v
            for k, v in os.environ.items()
            # devserver decides these itself (its own Redis, its own execution mode, a port).
            if k not in {"REDIS_URL", "OPENAI_API_KEY", "TOOL_CALLING_EXECUTION_MODE", "PORT"}
        }
        env.update(
            OPENAI_BASE_URL=f"{self.replay_url}/v1",
            DJANGO_SETTINGS_MODULE=SETTINGS,
            DATABASE_URL=self.database_url,
            PYTHONUNBUFFERED="1",
        )
        argv = [
            sys.executable, str(ROOT / "scripts" / "devserver.py"), "--var", str(self.var),
            "--port", str(self.web_port), "--redis-port", str(self.redis_port),
        ]  # fmt: skip
        self.devserver = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.output.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches this process, which stops devserver
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            text = self.output.read_text(errors="replace")
            if "devserver: ready" in text:
                break
            if self.devserver.poll() is not None or time.monotonic() > deadline:
                state = (
                    f"exited with code {self.devserver.returncode}"
                    if self.devserver.poll() is not None
                    else f"was not ready after {STARTUP_SECONDS} s"
                )
                raise BenchmarkError(
                    f"scripts/devserver.py {state}; from its output ({self.output}):\n"
                    + self._why()
                )
            time.sleep(0.2)
        self.summary = [
            line.strip()
            for line in text.splitlines()
            if re.match(r"\s+(Web|Redis|Worker|Model|Tools|Database):", line)
        ]

    def tree(self) -> dict[int, str]:
        """The job's processes now: pid -> group."""
        assert self.devserver is not None
        return _tree(self.devserver.pid, _proc_table())

    def check_alive(self) -> None:
        if self.devserver is not None and self.devserver.poll() is not None:
            raise BenchmarkError(
                f"scripts/devserver.py exited with code {self.devserver.returncode} during the "
                f"run; from its output ({self.output}):\n" + self._why()
            )

    def _why(self) -> str:
        """devserver's own account of a child that ended (with that child's last log lines).

        The end of its output is the other children's shutdown; the account comes before it.
        """
        lines = self.output.read_text(errors="replace").splitlines()
        for index in range(len(lines) - 1, -1, -1):
            if lines[index].startswith("devserver: ") and " exited with code " in lines[index]:
                return "\n".join(lines[index : index + 25])
        return _tail(self.output)

    def stop(self) -> None:
        """SIGINT to devserver (it stops its children, web first); then to the replay server."""
        if self.devserver is not None:
            # What devserver started, each named by pid and start time: a pid that ended and
            # was given to another process since is not killed below.
            started = {pid: _started(pid) for pid in self.tree() if pid != self.devserver.pid}
            if self.devserver.poll() is None:
                self.devserver.send_signal(signal.SIGINT)
                try:
                    self.devserver.wait(90)
                except subprocess.TimeoutExpired:
                    _say("devserver did not stop in 90 s: killing what it started")
                    self.devserver.kill()
            self.devserver.wait(10)
            for pid, when in started.items():
                if when is not None and _started(pid) == when:
                    _say(f"killing pid {pid}, left running by devserver: {_cmdline(pid)[:100]}")
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            self.devserver = None
        if self.replay is not None:
            if self.replay.poll() is None:
                self.replay.send_signal(signal.SIGINT)
                try:
                    self.replay.wait(10)
                except subprocess.TimeoutExpired:
                    self.replay.kill()
                    self.replay.wait(5)
            self.replay = None


# -- Django side: users, conversations, sleeping calls --------------------------------------------


def _setup_django(job: MainJob) -> None:
    """This process on the job's settings and database (as a script beside the job would be)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ["DATABASE_URL"] = job.database_url
    os.environ["REDIS_URL"] = job.redis_url
    os.environ["OPENAI_BASE_URL"] = f"{job.replay_url}/v1"
    os.environ["TOOL_CALLING_EXECUTION_MODE"] = "celery"  # as devserver sets it
    import logging

    import django

    django.setup()
    # This process's own log lines (the dispatches') would interleave with the report.
    logging.getLogger("tool_calling").setLevel(logging.WARNING)
    from tool_calling import models

    if not models.Tool.objects.filter(name=SLEEP_TOOL).exists():
        raise BenchmarkError(
            f"the tool {SLEEP_TOOL!r} is not in the job's Tool table: devserver's children did "
            f"not run with DJANGO_SETTINGS_MODULE={SETTINGS}"
        )


def _make_users(count: int, prefix: str) -> list[tuple[int, str]]:
    """``count`` users with DRF tokens: (user id, token)."""
    from django.contrib.auth.hashers import make_password
    from django.contrib.auth.models import User
    from django.db import connections
    from rest_framework.authtoken.models import Token

    unusable = make_password(None)
    users = User.objects.bulk_create(
        [User(username=f"{prefix}{n}", password=unusable) for n in range(count)]
    )
    tokens = Token.objects.bulk_create([Token(key=Token.generate_key(), user=u) for u in users])
    connections.close_all()
    return [(int(t.user_id), str(t.key)) for t in tokens]


def _make_conversations(users: list[tuple[int, str]], title: str) -> list[str]:
    from django.db import connections

    from tool_calling import models

    made = models.Conversation.objects.bulk_create(
        [models.Conversation(owner_id=user_id, title=title) for user_id, _ in users]
    )
    connections.close_all()
    return [str(c.pk) for c in made]


def _active_runs() -> int:
    from django.db import connections

    from tool_calling import models

    try:
        return models.Run.objects.exclude(status__in=models.RUN_TERMINAL_STATUSES).count()
    finally:
        connections.close_all()


def sleeping_calls(count: int, timeout: float) -> dict[str, Any]:
    """Record ``count`` calls of the sleeping tool as a step does, send them, wait for the ends."""
    from django.db import connections, transaction
    from django.utils import timezone

    from tool_calling import ToolCall, models
    from tool_calling.calls import lifecycle
    from tool_calling.calls.dispatch import Dispatch, dispatch

    tool = models.Tool.objects.get(name=SLEEP_TOOL)
    arguments = json.dumps({"seconds": SLEEP_SECONDS})
    recorded = time.perf_counter()
    with transaction.atomic():
        rows = [
            lifecycle.record_for_worker(ToolCall(f"call_{n}", SLEEP_TOOL, arguments), {}, tool=tool)
            for n in range(count)
        ]
    record_seconds = time.perf_counter() - recorded
    first, last = rows[0].pk, rows[-1].pk
    calls = models.ToolExecution.objects.filter(pk__gte=first, pk__lte=last, tool_name=SLEEP_TOOL)
    began_at = timezone.now()
    began = time.perf_counter()
    failed_sends = sum(not dispatch(Dispatch.of(row)) for row in rows)
    sent = time.perf_counter() - began
    pending = count
    while pending and time.perf_counter() - began < timeout:
        time.sleep(0.1)
        pending = calls.exclude(status__in=models.TERMINAL_STATUSES).count()
    waited = time.perf_counter() - began
    ends = [
        (status, (finished - began_at).total_seconds() if finished else None)
        for status, finished in calls.values_list("status", "finished_at")
    ]
    connections.close_all()
    done = [seconds for _, seconds in ends if seconds is not None]
    return {
        "calls": count,
        "record_seconds": round(record_seconds, 3),
        "send_seconds": round(sent, 3),
        "failed_sends": failed_sends,
        "ended": len(done),
        "ended_within": sum(s <= SLEEP_WITHIN for s in done),
        "all_ended_after": round(max(done), 3) if len(done) == count else None,
        "waited": round(waited, 1),
        "statuses": dict(Counter(str(status) for status, _ in ends)),
        "end_p50": round(_pct(done, 0.5), 3) if done else None,
    }


# -- clients: the turns, the simulator's floor ---------------------------------------------------


@dataclass
class Turn:
    """What one client saw."""

    outcome: str = "not started"
    """``succeeded``, ``failed``, ``cancelled``, ``HTTP <status>``, ``timeout`` or an error."""
    accept: float | None = None
    """Seconds from sending the message to its answer (202 and the run)."""
    seconds: float | None = None
    """Seconds from sending the message to the terminal event, with the page's reads done."""
    ended_at: float | None = None
    """Seconds from the common start to the end of this turn."""
    events: int = 0
    reconnects: int = 0
    reads: int = 0
    read_retries: int = 0
    error: str = ""


def _client(base_url: str, token: str | None = None) -> Any:
    import httpx

    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Token {token}"} if token else {},
        verify=_TLS,
        # A stream's keep-alives come every 15 s (API["SSE_KEEPALIVE_SECONDS"]).
        timeout=httpx.Timeout(60.0, connect=30.0),
        trust_env=False,
    )


async def _follow(client: Any, run: dict[str, Any], conversation: str, turn: Turn) -> str:
    """Follow a run's events as chat.js's RunView does; return the terminal kind."""
    import httpx

    read_through: int | None = None
    reading: asyncio.Task[None] | None = None

    async def read_messages(previous: asyncio.Task[None] | None) -> None:
        # chat.js chains its reads (this.reading): one after the other, never two at once.
        nonlocal read_through
        if previous is not None:
            await previous
        if read_through is None:
            return
        url = f"/api/conversations/{conversation}/?after={read_through}"
        for attempt in range(1, READ_ATTEMPTS + 1):
            # chat.js's readWithRetries: again after 1 s and 2 s on a network error or a 5xx.
            try:
                response = await client.get(url)
            except httpx.TransportError:
                if attempt == READ_ATTEMPTS:
                    raise
            else:
                if response.status_code < 500 or attempt == READ_ATTEMPTS:
                    break
            turn.read_retries += 1
            await asyncio.sleep(attempt)
        response.raise_for_status()
        turn.reads += 1
        for message in response.json()["messages"]:
            read_through = max(read_through, int(message["sequence"]))

    try:
        last_id = ""
        retry = 2.0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last_id:
                headers["Last-Event-ID"] = last_id
            try:
                async with client.stream("GET", run["urls"]["events"], headers=headers) as response:
                    if response.status_code == 204:
                        # Asked after the run's last event, which never arrived here.
                        return "ended unseen (204)"
                    if response.status_code != 200:
                        # EventSource gives up on any other answer (chat.js: "stream lost").
                        return f"events HTTP {response.status_code}"
                    kind, data, event_id = "message", "", ""
                    async for line in response.aiter_lines():
                        if line == "":
                            if data:
                                turn.events += 1
                                if event_id:
                                    last_id = event_id
                                payload = json.loads(data).get("data") or {}
                                if kind == "queued" and read_through is None:
                                    read_through = payload.get("message")
                                elif (kind == "model_message" and payload.get("tool_calls")) or (
                                    kind == "tool_results"
                                ):
                                    reading = asyncio.create_task(read_messages(reading))
                                elif kind in TERMINAL:
                                    if kind == "failed":
                                        turn.error = str(payload.get("error") or "")[:300]
                                    if reading is not None:
                                        await reading
                                    return kind
                            kind, data, event_id = "message", "", ""
                            continue
                        if line.startswith(":"):
                            continue
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "event":
                            kind = value
                        elif name == "data":
                            data = f"{data}\n{value}" if data else value
                        elif name == "id":
                            event_id = value
                        elif name == "retry" and value.isdigit():
                            retry = int(value) / 1000
            except httpx.TransportError:
                pass
            # The stream closed before the run ended: EventSource reconnects after `retry`.
            turn.reconnects += 1
            await asyncio.sleep(retry)
    finally:
        # A turn that ends early (a timeout, a refused stream) leaves no read behind it.
        if reading is not None and not reading.done():
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading


async def _one_turn(
    client: Any, conversation: str, start: asyncio.Event, origin: list[float], turn: Turn
) -> None:
    await start.wait()
    began = time.perf_counter()
    turn.outcome = "sending"
    response = await client.post(
        f"/api/conversations/{conversation}/messages/", json={"text": MESSAGE}
    )
    turn.accept = time.perf_counter() - began
    if response.status_code != 202:
        turn.outcome = f"HTTP {response.status_code}"
        turn.error = response.text[:300]
        return
    turn.outcome = "following"
    turn.outcome = await _follow(client, response.json(), conversation, turn)
    ended = time.perf_counter()
    turn.seconds = ended - began
    turn.ended_at = ended - origin[0]


async def _turns(web_url: str, clients: list[tuple[str, str]], timeout: float) -> dict[str, Any]:
    """Each (token, conversation) sends its message at the same moment and follows its run."""
    start = asyncio.Event()
    origin = [0.0]
    results = [Turn() for _ in clients]
    http_clients = [_client(web_url, token) for token, _ in clients]

    async def bounded(index: int) -> None:
        turn = results[index]
        try:
            async with asyncio.timeout(timeout):
                await _one_turn(http_clients[index], clients[index][1], start, origin, turn)
        except TimeoutError:
            turn.error = f"still {turn.outcome} after {timeout:.0f} s"
            turn.outcome = "timeout"
        except Exception as exc:  # noqa: BLE001 - a client's failure is a result, not a crash
            turn.outcome = type(exc).__name__
            turn.error = str(exc)[:300]

    tasks = [asyncio.create_task(bounded(i)) for i in range(len(clients))]
    await asyncio.sleep(0.2)  # every task waits on `start` now
    cpu = time.process_time()
    origin[0] = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - origin[0]
    cpu = time.process_time() - cpu
    await asyncio.gather(*(c.aclose() for c in http_clients))
    return {"wall": wall, "client_cpu": cpu, "turns": results}


async def _post_raw(port: int, body: bytes) -> tuple[int, bytes]:
    """POST ``body`` to the replay server on a connection of its own; (status, whole answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer not-needed\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        answer = await reader.read()  # Connection: close: the answer ends with the connection
    finally:
        writer.close()
    status_line = answer.split(b"\r\n", 1)[0].split()
    return (int(status_line[1]) if len(status_line) > 1 else 0), answer


async def _floor(port: int, bodies: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Two waves of ``n`` model requests straight to the replay server, each all at once.

    Sent over plain asyncio sockets rather than httpx, whose own cost per request (about 1.5 ms
    of CPU here, more than the server's) would otherwise be counted as the simulator's.
    """
    failures: Counter[str] = Counter()
    waves = []

    async def one(body: bytes, streamed: bool) -> None:
        try:
            status, answer = await _post_raw(port, body)
        except Exception as exc:  # noqa: BLE001 - counted, reported
            failures[type(exc).__name__] += 1
            return
        if status != 200 or (streamed and b"data: [DONE]" not in answer):
            failures[f"HTTP {status}"] += 1

    began = time.perf_counter()
    for body in bodies:
        data = json.dumps(body).encode()
        wave = time.perf_counter()
        await asyncio.gather(*(one(data, bool(body.get("stream"))) for _ in range(n)))
        waves.append(time.perf_counter() - wave)
    return {"seconds": time.perf_counter() - began, "waves": waves, "failures": dict(failures)}


# -- one database ---------------------------------------------------------------------------------


def _summarise_turns(run: dict[str, Any], delay: float) -> dict[str, Any]:
    turns: list[Turn] = run["turns"]
    ok = [t for t in turns if t.outcome == "succeeded"]
    accepts = [t.accept for t in turns if t.accept is not None]
    seconds = [t.seconds for t in ok if t.seconds is not None]
    outcomes = Counter(t.outcome for t in turns)
    errors = Counter(f"{t.outcome}: {t.error}" for t in turns if t.error)
    wall = run["wall"]
    return {
        "n": len(turns),
        "succeeded": len(ok),
        "outcomes": dict(outcomes),
        "errors": [f"{count} x {text}" for text, count in errors.most_common(5)],
        "wall": round(wall, 3),
        "ideal": 2 * delay,
        "wall_over_ideal": round(wall / (2 * delay), 2),
        "turn_p50": round(_pct(seconds, 0.5), 3) if seconds else None,
        "turn_p99": round(_pct(seconds, 0.99), 3) if seconds else None,
        "turn_max": round(max(seconds), 3) if seconds else None,
        "accept_p50": round(_pct(accepts, 0.5), 4) if accepts else None,
        "accept_p99": round(_pct(accepts, 0.99), 4) if accepts else None,
        "accept_max": round(max(accepts), 4) if accepts else None,
        "reconnects": sum(t.reconnects for t in turns),
        "conversation_reads": sum(t.reads for t in turns),
        "read_retries": sum(t.read_retries for t in turns),
        "client_cpu": round(run["client_cpu"], 2),
        # Every client's own figures, for --json: which turns were slow, and when each ended.
        "per_turn": [asdict(t) for t in turns],
    }


def _usage_json(usage: Usage) -> dict[str, Any]:
    return asdict(usage)


@contextmanager
def _case(sampler: Sampler, logs: Logs, job: MainJob) -> Iterator[dict[str, Any]]:
    """Brackets one case: its resource window, its log lines, the load average at its start."""
    record: dict[str, Any] = {"load_at_start": round(os.getloadavg()[0], 2)}
    logs.mark()
    sampler.begin()
    yield record
    record["usage"] = _usage_json(sampler.end())
    time.sleep(0.5)  # the last lines reach the logs
    record["logs"] = logs.since_mark()
    job.check_alive()


def run_database(args: argparse.Namespace, database: str, database_url: str | None) -> dict:
    """Everything for one database, in this process (Django's settings are read once)."""
    var = Path(tempfile.mkdtemp(prefix=f"tc-concurrency-{database}-"))
    job = MainJob(var, args.delay, database_url)
    result: dict[str, Any] = {"database": database, "var": str(var), "sizes": {}}
    sampler: Sampler | None = None
    try:
        _say(f"{LABELS[database]}: starting the replay server and scripts/devserver.py in {var}")
        job.start()
        result["job"] = job.summary
        sampler = Sampler(job.devserver.pid)  # type: ignore[union-attr]
        sampler.start()
        logs = Logs(var / "log")
        tree = job.tree()
        result["processes"] = {
            group: sorted(_cmdline(pid)[:160] for pid, g in tree.items() if g == group)
            for group in sorted(set(tree.values()))
        }
        _setup_django(job)
        from django.db import connection

        result["database_version"] = _database.server_version()
        connection.close()

        sizes = args.sizes
        users = _make_users(max(sizes), "bench")
        warm_user = _make_users(1, "warmup")

        # Warm-up: one turn, so that imports, connections and caches are in place; its model
        # requests are the floor's.
        _say(f"{LABELS[database]}: warm-up turn")
        warm = asyncio.run(
            _turns(
                job.web_url,
                [(warm_user[0][1], _make_conversations(warm_user, "warm-up")[0])],
                args.timeout,
            )
        )
        first = warm["turns"][0]
        if first.outcome != "succeeded":
            raise BenchmarkError(
                f"the warm-up turn did not succeed ({first.outcome}: {first.error}); see the "
                f"logs in {var / 'log'} (run with --keep to keep them):\n"
                + _tail(var / "log" / "worker.log", 30)
            )
        result["warmup_seconds"] = round(first.seconds or 0.0, 3)
        bodies = _get_json(f"{job.replay_url}/_requests")["requests"]
        if len(bodies) != 2 or bodies[-1]["messages"][-1].get("role") != "tool":
            raise BenchmarkError(
                f"the warm-up turn made {len(bodies)} model request(s), not the expected two "
                "(a tool call, then an answer after the tool's result)"
            )

        for n in sizes:
            pending = _active_runs()
            _say(f"{LABELS[database]}: N = {n}: the simulator's floor (2 waves of {n})")
            floor = asyncio.run(_floor(job.replay_port, bodies, n))
            time.sleep(1.0)
            clients = list(
                zip(
                    [token for _, token in users[:n]],
                    _make_conversations(users[:n], f"bench N={n}"),
                    strict=True,
                )
            )
            _say(f"{LABELS[database]}: N = {n}: {n} turns at once")
            with _case(sampler, logs, job) as record:
                run = asyncio.run(_turns(job.web_url, clients, args.timeout))
            record.update(_summarise_turns(run, args.delay))
            record["runs_active_before"] = pending
            record["floor"] = round(floor["seconds"], 3)
            record["floor_waves"] = [round(w, 3) for w in floor["waves"]]
            record["floor_failures"] = floor["failures"]
            record["floor_over_ideal"] = round(floor["seconds"] / (2 * args.delay), 2)
            record["wall_over_floor"] = round(record["wall"] / floor["seconds"], 2)
            result["sizes"][str(n)] = record
            _say(
                f"{LABELS[database]}: N = {n}: {record['succeeded']}/{n} succeeded, "
                f"wall {record['wall']:.1f} s, floor {record['floor']:.1f} s"
            )
            # The next size starts on an idle system (runs that outlived their clients end).
            deadline = time.monotonic() + args.timeout
            while _active_runs() and time.monotonic() < deadline:
                time.sleep(1.0)

        if args.sleep_calls:
            _say(f"{LABELS[database]}: {args.sleep_calls} sleeping calls at once")
            time.sleep(1.0)
            pending = _active_runs()
            with _case(sampler, logs, job) as record:
                record.update(sleeping_calls(args.sleep_calls, args.timeout))
            record["runs_active_before"] = pending
            result["sleep"] = record
            _say(
                f"{LABELS[database]}: sleeping calls: {record['ended_within']}/"
                f"{record['calls']} ended within {SLEEP_WITHIN:.0f} s"
            )
    except BenchmarkError as exc:
        if not result["sizes"]:
            raise  # nothing measured: the system could not start or complete a turn
        # The cases measured before stay valid: reported, with this error, and the exit code 1.
        result["error"] = str(exc)
        _say(f"{LABELS[database]}: error: {exc}")
    finally:
        if sampler is not None:
            sampler.stop()
        _say(f"{LABELS[database]}: stopping the main job")
        job.stop()
        if args.keep:
            _say(f"{LABELS[database]}: kept {var} (logs in {var / 'log'})")
        else:
            shutil.rmtree(var, ignore_errors=True)
    return result


# -- the report -----------------------------------------------------------------------------------


def _mb(value: int | None) -> str:
    return "-" if not value else f"{value / 1024**2:,.0f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}"


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _logs_cell(found: dict[str, Any]) -> str:
    total = found.get("total", {})
    return " / ".join(
        str(total.get(k, 0)) for k in ("database is locked", "OperationalError", "tracebacks")
    ) + (f"; {total['HTTP 5xx']} HTTP 5xx" if total.get("HTTP 5xx") else "")


def _table(result: dict[str, Any]) -> list[str]:
    sizes = result["sizes"]
    if not sizes:
        return []
    columns = list(sizes)
    head = "| | " + " | ".join(f"N = {n}" for n in columns) + " |"
    rows = [head, "|---|" + "---:|" * len(columns)]

    def row(label: str, cell: Any) -> None:
        rows.append(f"| {label} | " + " | ".join(cell(sizes[n]) for n in columns) + " |")

    row("turns succeeded", lambda r: f"{r['succeeded']} / {r['n']}")
    row("wall time, s", lambda r: _s(r["wall"]))
    row("ideal (2 x model delay), s", lambda r: _s(r["ideal"]))
    row("wall / ideal", lambda r: f"{r['wall_over_ideal']:.2f}x")
    row("simulator floor (2 waves of N at once), s", lambda r: _s(r["floor"]))
    row("floor / ideal", lambda r: f"{r['floor_over_ideal']:.2f}x")
    row("wall / floor", lambda r: f"{r['wall_over_floor']:.2f}x")
    row(
        "turn p50 / p99 (max), s",
        lambda r: f"{_s(r['turn_p50'])} / {_s(r['turn_p99'])} ({_s(r['turn_max'])})",
    )
    row(
        "message accepted p50 / p99 (max), ms",
        lambda r: f"{_ms(r['accept_p50'])} / {_ms(r['accept_p99'])} ({_ms(r['accept_max'])})",
    )
    row("peak RSS of the main job, MB", lambda r: _mb(r["usage"]["peak_total"]))
    row(
        "... of it web / worker / redis, MB (each at its own peak)",
        lambda r: " / ".join(
            _mb(r["usage"]["peak_by_group"].get(g)) for g in ("web", "worker", "redis")
        ),
    )
    row(
        "CPU s of web / worker / redis",
        lambda r: " / ".join(
            _s(r["usage"]["cpu_by_group"].get(g, 0.0), 1) for g in ("web", "worker", "redis")
        ),
    )
    # The sampler thread's share of it: about 2 ms per 100 ms sample.
    row("CPU s of the clients (this process)", lambda r: _s(r["client_cpu"], 1))
    row(
        "log: database is locked / OperationalError / tracebacks",
        lambda r: _logs_cell(r["logs"]),
    )
    row(
        "SSE reconnects; conversation reads (retried)",
        lambda r: f"{r['reconnects']}; {r['conversation_reads']} ({r['read_retries']})",
    )
    row("load average (1 min) at the start", lambda r: f"{r['load_at_start']:.1f}")
    lines = rows
    for n in columns:
        record = sizes[n]
        if record["succeeded"] != record["n"]:
            lines.append("")
            lines.append(f"N = {n}, outcomes: {record['outcomes']}")
            lines += [f"- {e}" for e in record["errors"]]
        if record["floor_failures"]:
            lines.append(f"N = {n}, floor requests that failed: {record['floor_failures']}")
        if record["runs_active_before"]:
            lines.append(
                f"N = {n} started with {record['runs_active_before']} runs of the previous size "
                "still active."
            )
        if record["logs"]["samples"]:
            lines.append("")
            lines.append(f"N = {n}, first distinct error lines of the logs:")
            lines += [f"    {s}" for s in record["logs"]["samples"]]
    return lines


def _sleep_table(record: dict[str, Any]) -> list[str]:
    all_after = record["all_ended_after"]
    lines = [
        "| | |",
        "|---|---:|",
        f"| calls (each sleeps {SLEEP_SECONDS:g} s) | {record['calls']} |",
        f"| recorded in one transaction, s | {_s(record['record_seconds'])} |",
        f"| sent (first to last publish), s | {_s(record['send_seconds'])} |",
        f"| ended within {SLEEP_WITHIN:g} s of the first send | {record['ended_within']} / "
        f"{record['calls']} |",
        "| all ended after, s | "
        + (
            _s(all_after)
            if all_after is not None
            else f"not all: {record['ended']} by {record['waited']:.0f} s"
        )
        + " |",
        f"| median end, s | {_s(record['end_p50'])} |",
        f"| statuses | {', '.join(f'{k} {v}' for k, v in sorted(record['statuses'].items()))} |",
        f"| peak RSS of the workers, MB | {_mb(record['usage']['peak_by_group'].get('worker'))} |",
        f"| peak RSS of the main job, MB | {_mb(record['usage']['peak_total'])} |",
        f"| CPU s of the workers | {_s(record['usage']['cpu_by_group'].get('worker', 0.0), 1)} |",
        f"| log: database is locked / OperationalError / tracebacks | "
        f"{_logs_cell(record['logs'])} |",
        f"| load average (1 min) at the start | {record['load_at_start']:.1f} |",
    ]
    if record["runs_active_before"]:
        lines.append(
            f"\nThis case started with {record['runs_active_before']} runs of the last size still "
            "active (they share the workers)."
        )
    if record["failed_sends"]:
        lines.append(
            f"\n{record['failed_sends']} sends failed (the sweeper would send them again)."
        )
    if record["logs"]["samples"]:
        lines += ["", "First distinct error lines of the logs:"]
        lines += [f"    {s}" for s in record["logs"]["samples"]]
    return lines


def _targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []

    def add(text: str, met: bool | None) -> None:
        targets.append({"text": text, "met": met})

    sqlite = results.get("sqlite", {}).get("sizes", {}).get("100")
    if sqlite is None:
        add(
            "100 turns on SQLite: not run (needs --sizes with 100 and --databases with sqlite)",
            None,
        )
    else:
        ideal = sqlite["ideal"]
        add(
            f"100 turns on SQLite all succeed: {sqlite['succeeded']} / 100",
            sqlite["succeeded"] == 100,
        )
        add(
            f"100 turns on SQLite: wall {sqlite['wall']:.2f} s <= {TARGET_WALL_IDEAL:g}x the "
            f"ideal {ideal:g} s ({sqlite['wall_over_ideal']:.2f}x)",
            sqlite["wall"] <= TARGET_WALL_IDEAL * ideal,
        )
        p99 = sqlite["accept_p99"]
        add(
            f"100 turns on SQLite: message accepted p99 {_ms(p99)} ms <= "
            f"{TARGET_ACCEPT_P99 * 1000:.0f} ms",
            p99 is not None and p99 <= TARGET_ACCEPT_P99,
        )
        peak = sqlite["usage"]["peak_total"]
        add(
            f"100 turns on SQLite: peak RSS of the main job {_mb(peak)} MB <= 1 GB "
            f"({TARGET_RSS / 1024**2:,.0f} MB)",
            peak <= TARGET_RSS,
        )
    pg = results.get("postgres", {}).get("sizes", {}).get("500")
    if pg is None:
        add(
            "500 turns on PostgreSQL: not run (needs --sizes with 500 and --databases with "
            "postgres)",
            None,
        )
    else:
        add(f"500 turns on PostgreSQL all succeed: {pg['succeeded']} / 500", pg["succeeded"] == 500)
        add(
            f"500 turns on PostgreSQL: wall {pg['wall']:.2f} s <= {TARGET_WALL_FLOOR:g}x the "
            f"simulator's floor {pg['floor']:.2f} s ({pg['wall_over_floor']:.2f}x)",
            pg["wall"] <= TARGET_WALL_FLOOR * pg["floor"],
        )
    ran = [(db, r["sleep"]) for db, r in results.items() if "sleep" in r]
    if not ran:
        add("sleeping calls: not run (--sleep-calls 0)", None)
    for db, record in ran:
        calls = record["calls"]
        add(
            f"{calls:,} sleeping calls on {LABELS[db]}: {record['ended_within']} / {calls} "
            f"ended within {SLEEP_WITHIN:g} s of the first send",
            record["ended_within"] == calls,
        )
        worker = record["usage"]["peak_by_group"].get("worker", 0)
        add(
            f"{calls:,} sleeping calls on {LABELS[db]}: peak RSS of the workers {_mb(worker)} MB "
            "<= 1 GB",
            worker <= TARGET_RSS,
        )
    return targets


def _git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]], seconds: float) -> str:
    lines = [
        "# Concurrency benchmark",
        "",
        f"- Commit {_git_head()}; Python {platform.python_version()} ({sys.executable}), "
        f"{os.cpu_count()} CPUs; Django {_version('django')}, celery {_version('celery')}, "
        f"uvicorn {_version('uvicorn')}, httpx {_version('httpx')}; {seconds:.0f} s in all",
        f"- Model: the replay server in demo mode, {args.delay:g} s per answer; a turn is two "
        f"answers (a get_weather call, then the answer), so the ideal is {2 * args.delay:g} s",
        f"- Clients: one asyncio process (this one), one httpx.AsyncClient per user; turns time "
        f"out after {args.timeout:g} s",
        f"- Load average when the report was printed: "
        f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}",
    ]
    for database, result in results.items():
        lines += ["", f"## {LABELS[database]}", ""]
        if "error" in result:
            lines += ["**This run stopped early**; the cases it measured before are below.", ""]
            lines += ["```", result["error"], "```", ""]
        lines.append(f"- Database: {result.get('database_version', '-')}")
        lines.append(f"- Warm-up turn: {result.get('warmup_seconds', '-')} s")
        lines += [f"- devserver: {line}" for line in result.get("job", [])]
        for group, commands in result.get("processes", {}).items():
            lines.append(
                f"- {group}: {len(commands)} process(es): "
                + "; ".join(f"`{c}`" for c in sorted(set(commands)))
            )
        lines.append("")
        lines += _table(result)
        if "sleep" in result:
            lines += ["", f"### {result['sleep']['calls']:,} sleeping calls, no model", ""]
            lines += _sleep_table(result["sleep"])
    lines += ["", "## Targets", ""]
    for target in _targets(results):
        mark = {True: "MET", False: "MISSED", None: "NOT RUN"}[target["met"]]
        lines.append(f"- {mark}: {target['text']}")
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------


def _child(args: argparse.Namespace) -> int:
    try:
        result = run_database(args, args.child, args.database_url)
    except BenchmarkError as exc:
        _say(f"error: {exc}")
        return 1
    Path(args.child_json).write_text(json.dumps(result, default=str))
    return 1 if "error" in result else 0


def _run_child(args: argparse.Namespace, database: str, url: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable, str(Path(__file__).resolve()), "--child", database,
            "--child-json", str(out), "--sizes", ",".join(map(str, args.sizes)),
            "--delay", str(args.delay), "--sleep-calls", str(args.sleep_calls),
            "--timeout", str(args.timeout),
        ]  # fmt: skip
        if url:
            command += ["--database-url", url]
        if args.keep:
            command.append("--keep")
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        if not out.exists():
            raise BenchmarkError(f"the {LABELS[database]} run failed (exit code {code}; above)")
        result: dict[str, Any] = json.loads(out.read_text())
        if code != 0 and "error" not in result:
            result["error"] = f"the child process exited with code {code} (above)"
    return result


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of numbers, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be 1 or more, got {text!r}")
    return sizes


def _databases(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(LABELS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"sqlite and/or postgres, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=[10, 100, 500],
        help="concurrent turns per case (10,100,500)",
    )
    parser.add_argument(
        "--databases",
        type=_databases,
        default=["sqlite", "postgres"],
        help="sqlite,postgres (both)",
    )
    parser.add_argument(
        "--delay", type=float, default=1.0, help="seconds the model takes per answer (1.0)"
    )
    parser.add_argument(
        "--sleep-calls",
        type=int,
        default=1000,
        help="sleeping tool calls at once, no model (1000; 0 skips)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds a case may take before its clients give up (300)",
    )
    parser.add_argument(
        "--postgres",
        default="auto",
        metavar="URL",
        help="server for the PostgreSQL run (auto: scripts/setup_postgres.sh's, "
        "TC_PG_PORT); a fresh database is created on it and dropped after",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure here")
    parser.add_argument("--keep", action="store_true", help="keep each run's var dir and logs")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child", choices=sorted(LABELS), help=argparse.SUPPRESS)
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.delay <= 0:
        parser.error("--delay must be more than 0 (the ideal is two answers' delay)")
    if args.child:
        return _child(args)

    # Open sockets: N clients with two connections each, plus the floor's.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 8 * max(args.sizes) + 1024))
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))

    began = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    try:
        for database in args.databases:
            if database == "sqlite":
                results[database] = _run_child(args, database, None)
            else:
                with _database.postgres_database(args.postgres, "tc_bench_concurrency") as url:
                    results[database] = _run_child(args, database, url)
            if "error" in results[database]:
                break  # reported below, with what was measured before it
    except BenchmarkError as exc:
        _say(f"error: {exc}")
        return 1
    except subprocess.CalledProcessError as exc:
        _say(f"error: {exc} (PostgreSQL: is scripts/setup_postgres.sh able to start a server?)")
        return 1
    text = report(args, results, time.perf_counter() - began)
    print(text)
    targets = _targets(results)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "results": results,
                    "targets": targets,
                    "delay": args.delay,
                    "sizes": args.sizes,
                    "commit": _git_head(),
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                },
                indent=1,
                default=str,
            )
        )
    failed = [db for db, result in results.items() if "error" in result]
    if failed:
        _say(f"error: the run on {', '.join(LABELS[db] for db in failed)} stopped early (above)")
        return 1
    return 1 if args.strict and any(t["met"] is False for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
