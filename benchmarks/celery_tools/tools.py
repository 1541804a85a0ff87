"""The benchmark's tools: registered by tool_calling's autodiscovery, in the workers too."""

import time

from tool_calling import tool


@tool
def bench_noop() -> str:
    """Do nothing and say so."""
    return "ok"


@tool
def bench_sleep(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "slept"
