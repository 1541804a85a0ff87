"""Run tests against a real PostgreSQL server and a SQLite file in WAL mode, in the same pytest run.

The rest of the suite uses the in-memory SQLite database of ``tests.settings``. Concurrency tests
need more: several threads with their own connections on one database that really locks. So the
``backend`` fixture swaps Django's ``default`` database for the duration of a module:

- ``sqlite-wal``: a SQLite file configured like ``project/settings.py`` (WAL, synchronous=NORMAL,
  ``transaction_mode="IMMEDIATE"``);
- ``postgresql`` (marked ``postgres``): ``DATABASE_URL`` when it is a ``postgres://`` URL, else the
  throwaway server ``scripts/setup_postgres.sh`` starts (installing PostgreSQL with apt-get on a
  fresh Debian machine run as root). When no server can be had the tests fail with the script's
  output; they are never skipped. Deselect them explicitly with ``-m "not postgres"``.

A test database (``test_tool_calling_<pid>``) is created and migrated on that server and dropped
afterwards; the in-memory SQLite database of the rest of the suite is left untouched and restored
when the module ends. Tests use ``@pytest.mark.django_db(transaction=True)`` so that other threads
see their data; the tables are flushed after each test.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dj_database_url
import pytest
from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = ROOT / "scripts" / "setup_postgres.sh"
# Installing PostgreSQL with apt-get on a fresh machine takes a minute or two.
SETUP_TIMEOUT = 600


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SETUP_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a PostgreSQL server: ``DATABASE_URL``, or a throwaway local one.

    The local server is started through ``scripts/setup_postgres.sh`` (reused when it already
    runs) and stopped at the end of the session only if this session started it.
    """
    env_url = os.environ.get("DATABASE_URL", "")
    if env_url.startswith(("postgres://", "postgresql://", "pgsql://")):
        yield env_url
        return
    was_running = _script("status").returncode == 0
    started = _script("start")
    lines = started.stdout.strip().splitlines()
    if started.returncode != 0 or not lines:
        pytest.fail(
            "The PostgreSQL tests need a server and none could be started.\n"
            f"`bash scripts/setup_postgres.sh` exited with {started.returncode}:\n"
            f"{started.stderr}{started.stdout}\n"
            "Fix the error above, set DATABASE_URL=postgres://... to use an existing server, or "
            'deselect these tests explicitly with -m "not postgres".',
            pytrace=False,
        )
    try:
        yield lines[-1]
    finally:
        if not was_running:
            _script("stop")


def _sqlite_wal_settings(directory: Path) -> dict[str, Any]:
    """A SQLite file database configured like project/settings.py configures its default."""
    from project import settings as project_settings

    options: dict[str, Any] = {
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    project_db = project_settings.DATABASES["default"]
    if project_db["ENGINE"] == "django.db.backends.sqlite3":
        options = dict(project_db.get("OPTIONS", {}))  # whatever the project ships
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(directory / "unused.sqlite3"),
        "OPTIONS": options,
        "TEST": {"NAME": str(directory / "test.sqlite3")},
    }


def _postgres_settings(url: str) -> dict[str, Any]:
    config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    config["TEST"] = {"NAME": f"test_tool_calling_{os.getpid()}"}
    return config


@contextmanager
def use_default_database(config: dict[str, Any]) -> Iterator[None]:
    """Make ``config`` Django's ``default`` database (every thread's) and create its test DB.

    ``connections.settings`` and ``settings.DATABASES`` share the alias' dict, which
    ``create_test_db`` mutates (NAME), so both are swapped; the current thread's connection is
    replaced and the old one (the in-memory SQLite database, which dies when closed) kept aside.
    Threads started later connect through ``connections.settings``, hence to ``config``.
    """
    alias = "default"
    new = connections.configure_settings({alias: dict(config)})[alias]
    old_settings = connections.settings[alias]
    old_django_settings = settings.DATABASES[alias]
    old_connection = connections[alias]
    connections.settings[alias] = new
    settings.DATABASES[alias] = new
    connections[alias] = connections.create_connection(alias)
    original_name = new["NAME"]
    created = False
    try:
        connections[alias].creation.create_test_db(
            verbosity=0, autoclobber=True, serialize=False, keepdb=False
        )
        created = True
        yield
    finally:
        try:
            if created:
                connections[alias].creation.destroy_test_db(original_name, verbosity=0)
            else:
                connections[alias].close()
        finally:
            connections.settings[alias] = old_settings
            settings.DATABASES[alias] = old_django_settings
            connections[alias] = old_connection


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite-wal"),
        # The first PostgreSQL test may install and start the server (apt-get on a fresh
        # machine): beyond the suite's 120 s per-test timeout. The tests bound their own waits.
        pytest.param(
            "postgresql",
            id="postgresql",
            marks=[pytest.mark.postgres, pytest.mark.timeout(SETUP_TIMEOUT + 120)],
        ),
    ],
)
def backend(
    request: pytest.FixtureRequest,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """Django's default database for this module: a SQLite file (WAL) or PostgreSQL.

    Returns the vendor (``"sqlite"`` or ``"postgresql"``).
    """
    if request.param == "postgresql":
        config = _postgres_settings(request.getfixturevalue("postgres_url"))
    else:
        config = _sqlite_wal_settings(tmp_path_factory.mktemp("sqlite-wal"))
    swap = use_default_database(config)
    with django_db_blocker.unblock():
        swap.__enter__()
    try:
        vendor = connections["default"].vendor
        assert vendor == request.param, f"expected a {request.param} database, got {vendor}"
        yield vendor
    finally:
        with django_db_blocker.unblock():
            swap.__exit__(None, None, None)
