"""Soak under faults: conversations through the HTTP API while workers, Redis and the web die.

A benchmark, not a test: it prints what it did and found, as Markdown, and PASS/FAIL per
invariant; it exits 1 when an invariant failed (0 otherwise).

The system is the Celery tier's (``tests.settings_celery``, in a fresh state directory): a
``redis-server``, two ``celery -A project worker`` processes (prefork, 2 children each),
``uvicorn project.asgi:application``, a SQLite file in WAL mode, and the replay server as the
model. Every turn asks the model, which calls two tools at once (each sleeps, so that faults
land mid-call): ``count_side_effect``, not idempotent (one line per run in ``side-effects.log``),
and ``charge_once``, idempotent and keyed by the order (a second run of an order is a no-op),
then answers. N clients run M turns each, every one through the API: ``POST .../messages/``,
polling the run until it ends, ``POST .../retry/`` when it failed (e.g. the broker was down).
The sweeper runs every 2 s, as beat would run it.

Meanwhile, at random: a worker's pool child is SIGKILLed (every 3-6 s), a whole worker (main
process and children) is SIGKILLed and replaced (every 15-25 s); once each, Redis is restarted
(losing every queued message: it keeps no data) and the web server is SIGKILLed and replaced.

Afterwards, the invariants: every run ended; no message lost or stored twice (each sent text is
one user message, each succeeded run has its answer); the idempotent tool's side effect happened
at most once per order; the non-idempotent one ran at most once per call, and every call of it
that was interrupted (it ran, but did not succeed) was reported "outcome unknown" to the model.

    python benchmarks/soak.py [--conversations N] [--turns M] [--seed S] [--keep] [--json PATH]

The default (6 conversations x 8 turns) takes about 2 minutes on 2 cores (under 5 with the
machine shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, benchmarks/ comes first on sys.path, where a module may shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOOL_SECONDS = 0.7
"""How long each tool call sleeps: long enough for a kill to land mid-call."""
SWEEP_SECONDS = 2.0
RUN_WAIT_SECONDS = 120.0
"""Longest a client waits for one run to end before it gives up on it (reported)."""
RETRIES_PER_TURN = 8
RUN_ID = re.compile(r"run ([0-9a-f-]{36})")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _prepare_environment(keep: bool) -> Path:
    """The state directory and ports the settings, the workers and the web server share."""
    state = Path(tempfile.mkdtemp(prefix="tool_calling-soak-"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings_celery"
    os.environ["TC_CELERY_STATE_DIR"] = str(state)
    os.environ["TC_CELERY_REDIS_PORT"] = str(_free_port())
    os.environ["TC_CELERY_MODEL_PORT"] = str(_free_port())
    if keep:
        os.environ["TC_CELERY_KEEP_STATE"] = "1"
    return state


@dataclass
class Figures:
    """What happened during the soak."""

    turns: int = 0
    turn_seconds: list[float] = field(default_factory=list)
    run_retries: int = 0
    posts_503: int = 0
    posts_409: int = 0
    transport_errors: int = 0
    gave_up: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


class Web:
    """The web server, replaced once mid-soak; clients read ``url`` on every request."""

    def __init__(self, start: Any) -> None:
        self._start = start
        self.server = start("web")
        self.url = self.server.url

    def restart(self) -> None:
        self.server.process.kill()
        self.server.process.wait(10)
        self.server = self._start("web-2")
        self.url = self.server.url


def _model_step(body: dict[str, Any]) -> dict[str, Any]:
    """The model: call both tools for the turn's text, then answer once their results are in."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        key = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        return {"text": f"Done with {key}."}
    key = last["content"]
    return {
        "tool_calls": [
            {"name": "count_side_effect", "arguments": {"key": key, "seconds": TOOL_SECONDS}},
            {"name": "charge_once", "arguments": {"order": key, "seconds": TOOL_SECONDS}},
        ]
    }


def _client(
    web: Web, token: str, conversation: str, turns: int, tag: str, figures: Figures
) -> None:
    """One conversation's turns, through the API, riding out the faults."""
    import httpx

    headers = {"Authorization": f"Token {token}"}

    def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
        for _ in range(600):
            try:
                return httpx.request(method, web.url + path, headers=headers, timeout=30, **kwargs)
            except httpx.TransportError:
                figures.add(transport_errors=1)
                time.sleep(0.5)
        raise RuntimeError(f"{method} {path}: no answer for 5 minutes")

    def stored_run(text: str) -> str | None:
        """The run of ``text`` if the server stored it (its answer was lost on the way)."""
        detail = call("GET", f"/api/conversations/{conversation}/").json()
        if not any(m["role"] == "user" and m["text"] == text for m in detail["messages"]):
            return None
        return str(call("GET", "/api/runs/").json()["results"][0]["id"])

    def post(text: str) -> str:
        for _ in range(200):
            try:
                response = httpx.post(
                    f"{web.url}/api/conversations/{conversation}/messages/",
                    json={"text": text},
                    headers=headers,
                    timeout=30,
                )
            except httpx.TransportError:
                figures.add(transport_errors=1)
                time.sleep(0.5)
                found = stored_run(text)
                if found is not None:
                    return found
                continue
            if response.status_code == 202:
                return str(response.json()["id"])
            if response.status_code == 503:  # saved, failed, retryable
                figures.add(posts_503=1)
                return RUN_ID.search(response.json()["detail"]).group(1)  # type: ignore[union-attr]
            if response.status_code in (409, 429):
                figures.add(posts_409=1)
                time.sleep(1)
                continue
            raise RuntimeError(f"POST {text!r}: {response.status_code} {response.text}")
        raise RuntimeError(f"POST {text!r}: never accepted")

    def finished(run: str) -> str:
        deadline = time.monotonic() + RUN_WAIT_SECONDS
        while time.monotonic() < deadline:
            status = str(call("GET", f"/api/runs/{run}/").json()["status"])
            if status in ("succeeded", "failed", "cancelled"):
                return status
            time.sleep(0.3)
        return "unfinished"

    for number in range(turns):
        text = f"{tag}-t{number}"
        started = time.monotonic()
        run = post(text)
        status = finished(run)
        tries = 0
        while status == "failed" and tries < RETRIES_PER_TURN:
            tries += 1
            figures.add(run_retries=1)
            time.sleep(1)
            response = call("POST", f"/api/runs/{run}/retry/")
            if response.status_code == 503:
                continue  # still failed: try again
            status = finished(run)
        if status != "succeeded":
            with figures.lock:
                figures.gave_up.append(f"{text}: {status}")
        with figures.lock:
            figures.turns += 1
            figures.turn_seconds.append(time.monotonic() - started)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _running_call_pids() -> list[int]:
    """The pids of the pool children running a tool call now (from the audit's ``worker``)."""
    from django.db import connections

    from tool_calling import models

    try:
        workers = models.ToolExecution.objects.filter(status="running").values_list(
            "worker", flat=True
        )
        return [int(w.rsplit("(pid ", 1)[1].rstrip(")")) for w in workers if "(pid " in w]
    finally:
        connections.close_all()


def _faults(
    stop: threading.Event,
    workers: list[Any],
    redis_server: Any,
    web: Web,
    figures: Figures,
    rng: random.Random,
    expected_seconds: float,
) -> None:
    """Kill children and workers at random; restart Redis and the web server once each."""
    from tests.celery.conftest import start_worker, stop_worker, wait_ready

    began = time.monotonic()
    next_child = began + rng.uniform(3, 6)
    next_worker = began + rng.uniform(15, 25)
    redis_at = began + 0.35 * expected_seconds
    web_at = began + 0.6 * expected_seconds
    index = len(workers) + 1
    while not stop.wait(0.2):
        now = time.monotonic()
        if now >= next_child:
            next_child = now + rng.uniform(3, 6)
            live = [w for w in workers if w.process.poll() is None]
            children = [c for w in live for c in _children(w.process.pid)]
            busy = [pid for pid in _running_call_pids() if pid in children]
            # Mostly a child in the middle of a tool call; else any (it may be running a step).
            targets = busy if busy and rng.random() < 0.75 else children
            if targets:
                os.kill(rng.choice(targets), signal.SIGKILL)
                figures.faults["worker child SIGKILLed"] += 1
                if targets is busy:
                    figures.faults["... of them mid tool call"] += 1
        if now >= next_worker:
            next_worker = now + rng.uniform(15, 25)
            victim = rng.choice([w for w in workers if w.process.poll() is None])
            os.killpg(victim.process.pid, signal.SIGKILL)
            victim.process.wait(10)
            workers.remove(victim)
            replacement = start_worker(index)
            index += 1
            workers.append(replacement)
            wait_ready(replacement)
            figures.faults["whole worker SIGKILLed and replaced"] += 1
            stop_worker(victim)
        if redis_at and now >= redis_at:
            redis_at = 0
            redis_server.stop()
            time.sleep(2)
            redis_server.start()
            figures.faults["Redis restarted (queued messages lost)"] += 1
        if web_at and now >= web_at:
            web_at = 0
            web.restart()
            figures.faults["web server SIGKILLed and replaced"] += 1


def _sweep_once() -> None:
    """What beat sends every 30 s, with calls sent again after 5 s instead of 300."""
    from django.conf import settings
    from django.db import connections
    from django.test import override_settings

    from tool_calling import tasks

    fast = {**settings.TOOL_CALLING, "EXECUTION": {**settings.TOOL_CALLING["EXECUTION"]}}
    fast["EXECUTION"]["REDISPATCH_AFTER"] = 5
    try:
        with override_settings(TOOL_CALLING=fast):
            tasks.sweep_tool_executions()
    except Exception as exc:  # noqa: BLE001 - Redis may be down: the next sweep retries
        print(f"  sweep failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        connections.close_all()


def _sweeper(stop: threading.Event) -> None:
    """The sweeper every 2 s until ``stop``."""
    while not stop.wait(SWEEP_SECONDS):
        _sweep_once()


def _check(conversations: list[tuple[Any, str]], state: Path) -> tuple[dict[str, Any], list]:
    """The invariants, read from the database and the tools' logs."""
    from tool_calling import models
    from tool_calling.calls.lifecycle import UNKNOWN_OUTCOME_TEXT

    results: list[tuple[str, bool, str]] = []
    runs = models.Run.objects.all()
    statuses = Counter(runs.values_list("status", flat=True))
    open_runs = runs.exclude(status__in=models.RUN_TERMINAL_STATUSES).count()
    results.append(("every run ended", open_runs == 0, f"{open_runs} still active"))

    problems = []
    for conversation, tag in conversations:
        messages = list(conversation.messages.order_by("sequence"))
        texts = [m.text for m in messages if m.role == "user"]
        for text in sorted(set(texts)):
            if texts.count(text) != 1:
                problems.append(f"{text} stored {texts.count(text)} times")
        for run in conversation.runs.filter(status="succeeded"):
            if not conversation.messages.filter(role="assistant", text=run.answer).exists():
                problems.append(f"run {run.pk}: answer not stored")
        expected = {f"{tag}-t{n}" for n in range(len(set(texts)))}
        if set(texts) != expected:
            problems.append(f"{tag}: sent {sorted(expected)}, stored {sorted(set(texts))}")
    results.append(
        ("no message lost or stored twice", not problems, "; ".join(problems[:5]) or "none")
    )

    def lines(name: str) -> list[str]:
        path = state / f"{name}.log"
        return [line for line in path.read_text().splitlines() if line] if path.exists() else []

    charges = Counter(lines("charges"))
    twice = [order for order, count in charges.items() if count > 1]
    results.append(
        (
            "idempotent tool: no side effect twice",
            not twice,
            f"{len(charges)} orders charged, {len(twice)} twice",
        )
    )

    effects = Counter(lines("side-effects"))
    calls = models.ToolExecution.objects.filter(tool_name="count_side_effect")
    rerun = [key for key, count in effects.items() if count > 1]
    results.append(
        (
            "non-idempotent tool: never run twice",
            not rerun,
            f"{sum(effects.values())} runs of {len(effects)} keys; {len(rerun)} twice",
        )
    )
    wrong = []
    interrupted_calls = 0
    for call in calls:
        key = json.loads(call.arguments or "{}").get("key")
        interrupted = effects.get(key, 0) > 0 and call.status != models.ExecutionStatus.SUCCEEDED
        interrupted_calls += interrupted
        if interrupted and call.status != models.ExecutionStatus.OUTCOME_UNKNOWN:
            wrong.append(f"{key}: {call.status}")
        if call.status == models.ExecutionStatus.OUTCOME_UNKNOWN:
            told = models.Message.objects.filter(
                conversation_id=call.conversation_id, role="tool"
            ).values_list("tool_responses", flat=True)
            if not any(
                r["id"] == call.tool_call_id and r["response_data"] == UNKNOWN_OUTCOME_TEXT
                for responses in told
                for r in responses
            ):
                wrong.append(f"{key}: unknown, but the model was not told so")
    results.append(
        (
            'every interrupted non-idempotent call reported "outcome unknown"',
            not wrong,
            f"{interrupted_calls} interrupted; " + ("; ".join(wrong[:5]) or "all reported"),
        )
    )
    by_status: dict[str, dict[str, int]] = {}
    for name in ("count_side_effect", "charge_once"):
        rows = models.ToolExecution.objects.filter(tool_name=name)
        by_status[name] = dict(Counter(rows.values_list("status", flat=True)))
    attempts = Counter(
        models.ToolExecution.objects.filter(tool_name="charge_once", attempt__gt=1).values_list(
            "attempt", flat=True
        )
    )
    summary = {
        "runs": dict(statuses),
        "calls": by_status,
        "idempotent calls run again": sum(attempts.values()),
    }
    return summary, results


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the state directory and logs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    state = _prepare_environment(args.keep)

    import django

    django.setup()
    import logging

    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from tests.celery.conftest import RedisServer, start_web_server, start_worker, wait_ready
    from tool_calling import models
    from tool_calling.testing import ReplayServer
    from tool_calling.testing.services import stop_worker as stop_process

    # This process's own logs (the sweeper, the clients' Django calls) go to a file of the state
    # directory, beside the workers' and the web server's.
    to_file = logging.FileHandler(state / "soak.log")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("", "tool_calling", "django"):
        logger = logging.getLogger(name)
        logger.handlers = [to_file]
    call_command("migrate", verbosity=0)
    models.Tool.objects.filter(name="charge_once").update(idempotent=True)
    models.Tool.objects.filter(name="count_side_effect").update(idempotent=False)

    figures = Figures()
    redis_server = RedisServer(port=settings.REDIS_PORT, directory=state)
    workers: list[Any] = []
    stop = threading.Event()
    web: Web | None = None
    steps = [_model_step] * (args.conversations * args.turns * 2 * 6)
    started = time.monotonic()
    try:
        redis_server.start()
        workers.extend(start_worker(index) for index in (1, 2))
        wait_ready(*workers)
        web = Web(start_web_server)
        conversations = []
        tokens = []
        for number in range(args.conversations):
            user = User.objects.create_user(f"soak{number}")
            conversations.append(
                (models.Conversation.objects.create(owner=user, title=f"c{number}"), f"c{number}")
            )
            tokens.append(Token.objects.create(user=user).key)
        expected = args.turns * 4.0 + 20
        print(
            f"Soak: {args.conversations} conversations x {args.turns} turns, seed {args.seed}, "
            f"state {state}",
            file=sys.stderr,
        )
        with ReplayServer(steps, port=settings.MODEL_PORT):
            helpers = [
                threading.Thread(target=_sweeper, args=(stop,), daemon=True),
                threading.Thread(
                    target=_faults,
                    args=(stop, workers, redis_server, web, figures, rng, expected),
                    daemon=True,
                ),
            ]
            for helper in helpers:
                helper.start()
            clients = [
                threading.Thread(
                    target=_client,
                    args=(web, token, str(conversation.pk), args.turns, tag, figures),
                )
                for (conversation, tag), token in zip(conversations, tokens, strict=True)
            ]
            for client in clients:
                client.start()
            for client in clients:
                client.join()
            load_seconds = time.monotonic() - started
            stop.set()
            for helper in helpers:
                helper.join(60)
            # The last sweeps: what a crash left behind ends now.
            from django.db.models import Q

            deadline = time.monotonic() + 60
            while (
                time.monotonic() < deadline
                and models.Run.objects.filter(~Q(status__in=models.RUN_TERMINAL_STATUSES)).exists()
            ):
                _sweep_once()
                time.sleep(SWEEP_SECONDS)
        summary, results = _check(conversations, state)
    finally:
        stop.set()
        if web is not None:
            web.server.stop()
        for worker in workers:
            stop_process(worker.process)
        redis_server.stop()
    total = time.monotonic() - started
    latencies = sorted(figures.turn_seconds)
    report = {
        "conversations": args.conversations,
        "turns per conversation": args.turns,
        "seed": args.seed,
        "wall seconds": round(total, 1),
        "load seconds": round(load_seconds, 1),
        "turns": figures.turns,
        "turn seconds p50": round(statistics.median(latencies), 2) if latencies else None,
        "turn seconds p95": round(latencies[int(0.95 * (len(latencies) - 1))], 2)
        if latencies
        else None,
        "faults": dict(figures.faults),
        "503 answers (message saved)": figures.posts_503,
        "409/429 answers": figures.posts_409,
        "transport errors (web down)": figures.transport_errors,
        "runs retried by clients": figures.run_retries,
        "turns given up": figures.gave_up,
        **summary,
        "invariants": {name: ok for name, ok, _ in results},
    }
    print(f"\n## Soak: {args.conversations} x {args.turns} turns, {total:.0f} s\n")
    for key, value in report.items():
        if key != "invariants":
            print(f"- {key}: {value}")
    print()
    for name, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'}: {name} ({detail})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
