"""The tool of benchmarks/concurrency.py's call case, found by tool_calling's autodiscovery."""

import time
from typing import Annotated

from tool_calling import ToolParam, tool


@tool
def bench_sleep(seconds: Annotated[float, ToolParam("Seconds to sleep")] = 1.0) -> str:
    """Sleep, then say so: a tool call that waits, as one waiting on the network does."""
    time.sleep(seconds)
    return "slept"
