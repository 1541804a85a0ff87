"""A shared background event loop that lets sync code run coroutines (async tools) cheaply."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _get_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    loop = _loop
    if loop is not None and loop.is_running():
        return loop
    with _lock:
        if _loop is None or not _loop.is_running():
            _loop = asyncio.new_event_loop()
            ready = threading.Event()
            loop_ = _loop

            def run() -> None:
                asyncio.set_event_loop(loop_)
                loop_.call_soon(ready.set)
                loop_.run_forever()

            _thread = threading.Thread(target=run, name="tool-calling-async", daemon=True)
            _thread.start()
            ready.wait()
        return _loop


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the shared loop and return its result, from any sync thread.

    One loop thread serves every caller, so an async tool costs no new event loop per call and
    works even when the caller's own thread already runs a loop.
    """
    if threading.current_thread() is _thread:
        coroutine.close()
        raise RuntimeError("run_sync() cannot be called from the tool_calling async loop itself")
    future = asyncio.run_coroutine_threadsafe(coroutine, _get_loop())
    return future.result()
