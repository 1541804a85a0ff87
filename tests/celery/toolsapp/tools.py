"""Tools for the real Celery tier. Each run appends "<pid> <key>" to STATE_DIR/runs-<tool>.log."""

import asyncio
import fcntl
import os
import threading
import time

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from tests.fixtures.run_scenarios import (  # noqa: F401 - registered for the workers too
    scenario_add,
    scenario_explode,
    scenario_refuse,
)
from tool_calling import tool
from tool_calling.calls.retries import TransientToolError


def record(tool_name: str, key: str) -> int:
    """Append this run to the tool's log; return how many runs of ``key`` there were before."""
    log = settings.STATE_DIR / f"runs-{tool_name}.log"
    before = log.read_text().split("\n") if log.exists() else []
    with log.open("a") as stream:
        stream.write(f"{os.getpid()} {key}\n")
    return sum(1 for line in before if line.endswith(f" {key}"))


@tool
def sleepy(key: str, seconds: float) -> str:
    """Sleep, then say who did."""
    record("sleepy", key)
    time.sleep(seconds)
    return f"{key} slept {seconds:g} s in pid {os.getpid()}"


@tool
def sleepy_here(key: str, seconds: float) -> str:
    """Like sleepy; its Tool row runs it inline, in the process of the turn."""
    record("sleepy_here", key)
    time.sleep(seconds)
    return f"{key} slept {seconds:g} s in pid {os.getpid()}"


@tool
def crash_prone(key: str) -> str:
    """Hang on its first run of a key (the test kills the worker then); answer on the next."""
    if record("crash_prone", key) == 0:
        time.sleep(60)
    return f"done {key}"


@tool
def crash_prone_unsafe(key: str) -> str:
    """The same, for a tool that is not idempotent (its Tool row says so)."""
    if record("crash_prone_unsafe", key) == 0:
        time.sleep(60)
    return f"done {key}"


@tool
def overrunning(seconds: float) -> str:
    """Sleep past the soft time limit (which interrupts it)."""
    record("overrunning", "run")
    time.sleep(seconds)
    return "finished"


@tool
def stubborn(seconds: float) -> str:
    """Ignore the soft time limit: only the hard limit stops it."""
    record("stubborn", "run")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except SoftTimeLimitExceeded:
            record("stubborn", "ignored the soft limit")
    return "finished"


@tool
def patient(seconds: float) -> str:
    """Wait in Python (slices of 50 ms); clean up and stop at the soft time limit."""
    record("patient", "run")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
    except SoftTimeLimitExceeded:
        record("patient", "cleaned up")
        raise
    return "finished"


@tool
async def waiting_async(key: str, seconds: float) -> str:
    """An ``async def`` tool waiting on the network (here: a sleep); cancelled, it says so."""
    record("waiting_async", key)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        record("waiting_async", f"{key} cancelled")
        raise
    return f"{key} waited {seconds:g} s"


@tool
def where(key: str, seconds: float = 0.0) -> str:
    """Sleep, then say which process and thread ran the call."""
    record("where", key)
    time.sleep(seconds)
    return f"{key} in pid {os.getpid()} thread {threading.current_thread().name}"


@tool
def whose_pid() -> str:
    """Return the worker process's pid."""
    return str(os.getpid())


@tool
def slow_first(key: str) -> str:
    """Take 4 s on the first run of a key (the test stops the process meanwhile), none after."""
    first = record("slow_first", key) == 0
    if first:
        time.sleep(4)
    return f"{key} from the {'first' if first else 'second'} run"


@tool(requires_approval=True)
def guarded_transfer(account: str, amount: int) -> str:
    """Move money; a person approves every transfer first."""
    record("guarded_transfer", f"{account}:{amount}")
    return f"moved {amount} to {account}"


class PaymentDeclined(Exception):
    """A project's exception that ends a turn wherever the tool ran (EXCEPTION_PROCESSOR)."""


@tool
def declining_charge(amount: int) -> str:
    """Charge a card; the card is always declined."""
    record("declining_charge", str(amount))
    raise PaymentDeclined(f"card declined for {amount}")


def rethrowing_processor():
    """``TOOL_CALLING["EXCEPTION_PROCESSOR"]`` of this tier: the governed default, re-raising
    ``PaymentDeclined`` (other unexpected errors reach the model as a generic text, S13)."""
    from tool_calling.calls.failures import GovernedToolExecutionExceptionProcessor

    return GovernedToolExecutionExceptionProcessor(rethrown=[PaymentDeclined])


@tool
def flaky_on_workers(key: str, failures: int) -> str:
    """Fail transiently on the first ``failures`` runs of a key, then answer (R6)."""
    before = record("flaky_on_workers", key)
    if before < failures:
        raise TransientToolError(f"upstream busy ({before + 1} of {failures})")
    return f"{key} answered on run {before + 1}"


def _locked_append(name: str, key: str, *, once: bool) -> bool:
    """Append ``key`` to STATE_DIR/<name>.log under a lock; False if ``once`` and it is there."""
    path = settings.STATE_DIR / f"{name}.log"
    with path.open("a+") as stream:
        fcntl.flock(stream, fcntl.LOCK_EX)
        try:
            stream.seek(0)
            seen = key in stream.read().split("\n")
            if once and seen:
                return False
            stream.write(f"{key}\n")
            stream.flush()
            return True
        finally:
            fcntl.flock(stream, fcntl.LOCK_UN)


@tool
def count_side_effect(key: str, seconds: float = 0.0) -> str:
    """A side effect that is not idempotent (soak): one line per run, however many there are."""
    _locked_append("side-effects", key, once=False)
    time.sleep(seconds)
    return f"counted {key}"


@tool
def charge_once(order: str, seconds: float = 0.0) -> str:
    """An idempotent side effect keyed by the order (soak): a second run of an order is a no-op."""
    time.sleep(seconds)
    if _locked_append("charges", order, once=True):
        return f"charged {order}"
    return f"{order} was charged already"
