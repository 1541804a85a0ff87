"""Heartbeats that keep leases alive while work runs (tool calls, run steps).

A lease is a timestamp in a row: the holder renews it while it works, so a holder that died
is noticed once the lease passes, and its work is taken over. Every heartbeat of a process is
served by one daemon thread (started on first use, again after a fork), which renews each lease
every third of its length: a call or a step costs no thread of its own. The thread closes its
database connection whenever it has nothing left to renew.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections.abc import Callable

from django.db import connection

logger = logging.getLogger("tool_calling.execution")


class Heartbeat:
    """Call ``renew`` every third of ``lease`` from ``start()`` until ``stop()``.

    ``renew`` returns False when the lease was lost (another holder took over); the heartbeat
    then calls ``on_lost`` once and ends. A renewal that raises (a busy database) is logged and
    tried again at the next beat.
    """

    def __init__(
        self,
        name: str,
        lease: datetime.timedelta,
        renew: Callable[[], bool],
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.interval = max(lease.total_seconds() / 3, 0.1)
        self.renew = renew
        self.on_lost = on_lost
        self.due = 0.0
        self.ended = threading.Event()

    def start(self) -> None:
        """Begin renewing (the first renewal is a third of the lease from now)."""
        self.due = time.monotonic() + self.interval
        _keeper().add(self)

    def stop(self) -> None:
        """Stop renewing."""
        _keeper().remove(self)
        self.ended.set()

    def is_alive(self) -> bool:
        """Whether it still renews (False once stopped, or once the lease was lost)."""
        return not self.ended.is_set()

    def join(self, timeout: float | None = None) -> None:
        """Wait until it ends (stopped, or the lease lost), at most ``timeout`` seconds."""
        self.ended.wait(timeout)

    def _beat(self) -> bool:
        """Renew once; False when the heartbeat ends (the lease was lost)."""
        try:
            held = self.renew()
        except Exception:
            logger.exception("Could not renew the lease of %s", self.name)
            return True
        if held:
            return True
        if self.on_lost is not None:
            self.on_lost()
        return False


class _Keeper:
    """The thread that renews every heartbeat of this process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.beats: set[Heartbeat] = set()
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="tool-calling-leases", daemon=True)
        self.thread.start()

    def add(self, beat: Heartbeat) -> None:
        with self.changed:
            self.beats.add(beat)
            self.changed.notify()

    def remove(self, beat: Heartbeat) -> None:
        with self.changed:
            self.beats.discard(beat)

    def _run(self) -> None:
        while True:
            with self.changed:
                while not self.beats:
                    connection.close()  # nothing to renew: give the connection back
                    self.changed.wait()
                now = time.monotonic()
                due = [beat for beat in self.beats if beat.due <= now]
                if not due:
                    self.changed.wait(min(beat.due for beat in self.beats) - now)
                    continue
            for beat in due:
                beat.due = time.monotonic() + beat.interval
                if not beat._beat():
                    self.remove(beat)
                    beat.ended.set()


_current: _Keeper | None = None
_lock = threading.Lock()


def _keeper() -> _Keeper:
    global _current
    keeper = _current
    if keeper is None or keeper.pid != os.getpid():
        with _lock:
            if _current is None or _current.pid != os.getpid():
                # A forked child (a Celery pool process) has no thread of its parent's.
                _current = _Keeper()
            keeper = _current
    return keeper
