"""Stopping the processes tests start (servers, uvicorn, workers) without waiting for ever."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(process: subprocess.Popen[Any], patience: float = 15) -> None:
    """Terminate ``process``; SIGKILL it when it has not ended after ``patience`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(patience)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
