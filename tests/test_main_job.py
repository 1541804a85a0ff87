"""The main job: `bash scripts/run.sh` brings up the example system, and Ctrl-C takes it down.

Started as a person would (run.sh, or scripts/devserver.py when the tests do not run on the
repository's .venv), with its own web port, Redis port and var/ directory (which holds its SQLite
file), and no model configured, so the scripted replay server answers. The main test starts it
with SIGINT ignored, as a background job of a non-interactive shell starts it (`bash
scripts/test.sh &`): its Ctrl-C must stop everything all the same. It also pastes the docs'
API walk-through and the approvals page's, as one block, against the running system.
"""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from project.demo.tools import get_weather

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[1]
BANNER = "ANSWERS ARE SCRIPTED — no model configured; set OPENAI_API_KEY/OPENAI_BASE_URL"
# Variables of the developer's shell (and pytest-django's DJANGO_SETTINGS_MODULE=tests.settings)
# that would change what the system does.
SCRUBBED = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "REDIS_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "PORT",
    "DJANGO_SUPERUSER_USERNAME",
    "DJANGO_SUPERUSER_PASSWORD",
    "TOOL_CALLING_EXECUTION_MODE",
)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port):
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


def launcher():
    """run.sh when the tests run on the repository's .venv (what run.sh uses), else the script."""
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        return ["bash", "scripts/run.sh"]
    return [sys.executable, "scripts/devserver.py"]


def process_table():
    """{pid: (ppid, state, cmdline)} of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    return table


def descendants(pid):
    table = process_table()
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _, cmdline) in table.items():
            if ppid == parent and child not in found:
                found[child] = cmdline
                todo.append(child)
    return found


def alive(pid):
    """Whether pid runs (a zombie has exited: only its parent's wait is missing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def ignore_sigint():
    """What a non-interactive shell does for a job it starts in the background."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def restore_sigint():
    """A terminal's foreground job: SIGINT as the system defines it, whatever pytest inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class System:
    """The orchestrator as a subprocess, its output collected line by line."""

    def __init__(self, tmp_path, *, sigint_ignored=False, **env):
        self.port = free_port()
        self.redis_port = free_port()
        self.var = tmp_path / "var"
        self.env = clean_env(PORT=str(self.port), **env)
        argv = [*launcher(), "--redis-port", str(self.redis_port), "--var", str(self.var)]
        self.lines = []
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # our SIGINT stands for the terminal's Ctrl-C
            preexec_fn=ignore_sigint if sigint_ignored else restore_sigint,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self):
        return "\n".join(self.lines)

    def wait_for_line(self, text, timeout):
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None:
                self._reader.join(5)
                if any(text in line for line in self.lines):
                    return
                pytest.fail(f"exited with {self.proc.returncode} before {text!r}:\n{self.output}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {text!r} after {timeout} s:\n{self.output}")
            time.sleep(0.1)

    def value(self, label):
        """The text after 'Label:' in the summary."""
        for line in self.lines:
            match = re.match(rf"\s+{label}:\s+(\S+)", line)
            if match:
                return match.group(1)
        pytest.fail(f"no {label!r} line in:\n{self.output}")

    def try_env(self):
        """The variables of the printed 'try it' command (REDIS_URL, OPENAI_BASE_URL, ...)."""
        line = next(line for line in self.lines if "manage.py chat" in line)
        words = shlex.split(line)
        return dict(w.split("=", 1) for w in words[: words.index("manage.py") - 1])

    def interrupt(self, timeout=60):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {timeout} s after SIGINT:\n{self.output}")
        self._reader.join(5)

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def system(tmp_path, request):
    started = System(tmp_path, **getattr(request, "param", {}))
    try:
        yield started
    finally:
        started.kill()


def bash_blocks(page):
    return re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / page).read_text(), re.DOTALL)


def api_walk_through(port):
    """The API page's walk-through and its event-stream commands (docs/api.md), then the
    approval walk-through of docs/approvals.md, which goes on from them, as one pasted block."""

    walk = next(b for b in bash_blocks("api.md") if "drf_create_token admin" in b)
    stream = next(b for b in bash_blocks("api.md") if "Last-Event-ID: 5" in b)
    approvals = next(b for b in bash_blocks("approvals.md") if "approve_toolexecution" in b)
    script = (walk + stream + approvals).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    return script.replace(".venv/bin/python", shlex.quote(sys.executable))


def run(argv, env, timeout=60):
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize("system", [{"sigint_ignored": True}], indirect=True)
def test_run_sh_runs_the_example_system_and_ctrl_c_stops_all_of_it(system):
    system.wait_for_line("devserver: ready", timeout=90)
    out = system.output

    # The model is the scripted replay server, and it says so; so is the development setup.
    assert BANNER in out
    assert "development setup" in out and "docker/compose.yml" in out
    env = clean_env(**system.try_env())  # the printed command's variables, and only those
    # --var holds the database too: a second system with another --var shares nothing.
    assert env["DATABASE_URL"] == f"sqlite:///{system.var / 'db.sqlite3'}"
    assert (system.var / "db.sqlite3").is_file()
    assert env["REDIS_URL"] == f"redis://127.0.0.1:{system.redis_port}/0"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", env["OPENAI_BASE_URL"])

    # The printed credentials log in to the admin, where the demo tools are listed.
    base = f"http://127.0.0.1:{system.port}"
    assert system.value("Admin") == f"{base}/admin/"
    username, password = system.value("Username"), system.value("Password")
    assert username == "admin" and len(password) >= 12
    # And an approver's, for the other half of four eyes (not staff: the chat page's queue).
    approver_line = next(line for line in system.lines if line.strip().startswith("Approver:"))
    approver, approver_password = re.match(r"\s+Approver:\s+(\S+) / (\S+)", approver_line).groups()
    assert approver == "approver" and len(approver_password) >= 12
    with httpx.Client(base_url=base, timeout=10, trust_env=False) as web:
        login = web.get("/admin/login/")
        assert login.status_code == 200
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        wrong = web.post(
            "/admin/login/",
            data={"username": username, "password": "wrong", "csrfmiddlewaretoken": token},
        )
        assert wrong.status_code == 200 and "correct username and password" in wrong.text
        logged_in = web.post(
            "/admin/login/?next=/admin/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{base}/admin/login/"},
        )
        assert logged_in.status_code == 302 and logged_in.headers["location"] == "/admin/"
        tools = web.get("/admin/tool_calling/tool/")
        assert tools.status_code == 200
        demo_tools = {
            "get_weather",
            "get_current_time",
            "add_numbers",
            "cancel_booking",
            "refund_order",
        }
        assert demo_tools <= set(re.findall("|".join(demo_tools), tools.text))
        # The front door is the chat page; the admin's session logs into it too.
        assert system.value("Chat") == f"{base}/"
        front = web.get("/")
        assert front.status_code == 200 and "New conversation" in front.text
    # The approver logs in to the chat page, where the approval queue is theirs.
    with httpx.Client(base_url=base, timeout=10, trust_env=False) as web:
        form = web.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        logged_in = web.post(
            "/login/",
            data={
                "username": approver,
                "password": approver_password,
                "csrfmiddlewaretoken": token,
            },
            headers={"Referer": f"{base}/login/"},
        )
        assert logged_in.status_code == 302, logged_in.text
        assert 'id="approvals"' in web.get("/").text

    # A chat turn against the replay server calls the demo tool, and the demo model answers
    # with a sentence built from its result: the getting-started page's command, pasted with
    # the addresses this system printed, prints the sentence the page says it prints.
    printed = system.try_env()
    page = (ROOT / "docs" / "getting-started.md").read_text()
    command = next(
        b for b in bash_blocks("getting-started.md") if "TOOL_CALLING_EXECUTION_MODE=celery" in b
    )
    assert set(re.findall(r"\b([A-Z_]+)=", command)) <= set(printed)
    for documented, name in [
        ("redis://127.0.0.1:6379/0", "REDIS_URL"),
        ("http://127.0.0.1:41234/v1", "OPENAI_BASE_URL"),
    ]:
        command = command.replace(documented, printed[name])
    command = command.replace(".venv/bin/python", shlex.quote(sys.executable))
    chat = run(["bash", "-c", command], clean_env(DATABASE_URL=printed["DATABASE_URL"]))
    assert chat.returncode == 0, chat.stderr
    weather = get_weather("Oslo")
    sentence = f"In Oslo it is {weather['conditions']} and {weather['temperature']} °C."
    assert chat.stdout.strip() == sentence, chat.stdout
    assert f"which prints `{sentence}`" in page

    # The API page's walk-through and the approvals page's, pasted as one block, work as
    # written: every request succeeds (curl fails on any 4xx or 5xx, a 409 from a turn still
    # running included).
    shell_env = clean_env(**system.try_env())
    shell_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{shell_env.get('PATH', '')}"
    walk = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; curl() { command curl --fail-with-body "$@"; }; ' +
         api_walk_through(system.port)],
        cwd=ROOT, env=shell_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert walk.returncode == 0, f"{walk.stdout}\n{walk.stderr}"
    assert '"status":"succeeded"' in walk.stdout and "event: succeeded" in walk.stdout
    # The approvals page's part: another person approved the waiting call, and the run went on.
    assert '"decided_by":"rita"' in walk.stdout and '"decision":"approved"' in walk.stdout

    # A Celery worker answers on that broker.
    for _ in range(5):
        ping = run([sys.executable, "-m", "celery", "-A", "project", "inspect", "ping"], env)
        if ping.returncode == 0 and "pong" in ping.stdout:
            break
    else:
        pytest.fail(f"no worker answered: {ping.stdout}\n{ping.stderr}")

    # Everything it started, by command line.
    children = descendants(system.proc.pid)
    commands = "\n".join(children.values())
    assert f"redis-server 127.0.0.1:{system.redis_port}" in commands
    assert "tool_calling.testing.server --mode demo" in commands
    # Turns and tool calls wait on the network in a thread pool; CPU-heavy or untrusted tools
    # routed to tool_calling_processes run in processes of their own.
    assert "celery -A project worker -B -n io@%h -Q tool_calling,celery -P threads" in commands
    assert "celery -A project worker -n processes@%h -Q tool_calling_processes -P prefork" in (
        commands
    )
    assert f"uvicorn project.asgi:application --host 127.0.0.1 --port {system.port}" in commands

    # Ctrl-C: everything stops, web first and Redis last, and the exit code is 0.
    system.interrupt()
    assert system.proc.returncode == 0, system.output
    stopping = re.findall(r"devserver: stopping (.+?) \(pid", system.output)
    assert stopping == [
        "web server",
        "celery worker (processes)",
        "celery worker (threads)",
        "replay server",
        "redis",
    ]
    assert "devserver: stopped" in system.output
    deadline = time.monotonic() + 10
    while (left := {p: c for p, c in children.items() if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left running: {left}"
    assert not listening(system.port) and not listening(system.redis_port)


def test_a_redis_url_that_does_not_answer_is_a_clear_error(tmp_path):
    closed = free_port()
    result = run(
        [sys.executable, "scripts/devserver.py", "--var", str(tmp_path / "var")],
        clean_env(REDIS_URL=f"redis://:hunter2@127.0.0.1:{closed}/0", PORT=str(free_port())),
    )
    assert result.returncode == 1
    assert f"REDIS_URL=redis://:***@127.0.0.1:{closed}/0 does not answer PING" in result.stdout
    assert "hunter2" not in result.stdout + result.stderr
    assert not (tmp_path / "var" / "log" / "redis.log").exists()


def test_when_a_child_dies_the_rest_stop_and_the_exit_code_says_so(system):
    system.wait_for_line("devserver: ready", timeout=90)
    children = descendants(system.proc.pid)
    redis = next(pid for pid, cmd in children.items() if "redis-server" in cmd)

    os.kill(redis, signal.SIGKILL)
    try:
        system.proc.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 60 s after its Redis died:\n{system.output}")
    system._reader.join(5)

    assert system.proc.returncode == 1, system.output
    assert "devserver: redis exited with code -9; the last lines of" in system.output
    assert "Ready to accept connections" in system.output  # the tail of redis.log
    stopping = re.findall(r"devserver: stopping (.+?) \(pid", system.output)
    assert stopping == [
        "web server",
        "celery worker (processes)",
        "celery worker (threads)",
        "replay server",
    ]
    deadline = time.monotonic() + 10
    while (left := {p: c for p, c in children.items() if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left running: {left}"
