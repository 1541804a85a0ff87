"""A heartbeat that keeps a lease alive while work runs (tool calls, run steps).

A lease is a timestamp in a row: the holder renews it while it works, so a holder that died
is noticed once the lease passes, and its work is taken over. The heartbeat renews every third
of the lease in a daemon thread, with a database connection of its own that it closes at the
end.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable

from django.db import connection

logger = logging.getLogger("tool_calling.execution")


class Heartbeat(threading.Thread):
    """Call ``renew`` every third of ``lease`` until stopped, or until it returns False.

    ``renew`` returns False when the lease was lost (another holder took over); the heartbeat
    then calls ``on_lost`` once and stops.
    """

    def __init__(
        self,
        name: str,
        lease: datetime.timedelta,
        renew: Callable[[], bool],
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.interval = max(lease.total_seconds() / 3, 0.1)
        self.renew = renew
        self.on_lost = on_lost
        self.stopped = threading.Event()

    def run(self) -> None:
        """Renew until stopped; a failed renewal (a busy database) is tried at the next beat."""
        try:
            while not self.stopped.wait(self.interval):
                try:
                    held = self.renew()
                except Exception:
                    logger.exception("Could not renew the lease of %s", self.name)
                    continue
                if not held:
                    if self.on_lost is not None:
                        self.on_lost()
                    return
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop renewing (waits briefly for the thread)."""
        self.stopped.set()
        self.join(5)
