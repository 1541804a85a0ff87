"""Tools for the real Celery tier. Each run appends "<pid> <key>" to STATE_DIR/runs-<tool>.log."""

import os
import time

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from tool_calling import tool


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
    """``TOOL_CALLING["EXCEPTION_PROCESSOR"]`` of this tier: re-raise ``PaymentDeclined``."""
    from tool_calling import DefaultToolExecutionExceptionProcessor

    return DefaultToolExecutionExceptionProcessor(rethrown=[PaymentDeclined])
