"""A shared background event loop that lets sync code run coroutines (async tools) cheaply."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_WAIT_SLICE = 0.25
"""Seconds a caller waits on its coroutine at a time (see ``run_sync``)."""

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
    works even when the caller's own thread already runs a loop. An exception raised in the
    caller's thread while it waits (a time limit) cancels the coroutine.
    """
    if threading.current_thread() is _thread:
        coroutine.close()
        raise RuntimeError("run_sync() cannot be called from the tool_calling async loop itself")
    future = asyncio.run_coroutine_threadsafe(coroutine, _get_loop())
    try:
        while True:
            # Waited in slices: between two, Python can raise an exception sent to this thread
            # (a time limit of the caller); the coroutine is then
            # cancelled instead of running on unattended.
            with contextlib.suppress(concurrent.futures.TimeoutError):
                return future.result(timeout=_WAIT_SLICE)
    except BaseException:
        future.cancel()
        raise
