"""Settings of the real Celery tier (tests/celery): a real Redis, real worker processes.

Run with ``pytest --ds=tests.settings_celery tests/celery`` (scripts/test.sh does). The test
process and the ``celery -A project worker`` processes it starts read this same module, so they
share everything that matters through environment variables set on first import (the workers
inherit them): the Redis port, and a directory holding the SQLite database (WAL mode, like the
example project's default) and the files in which the test tools record their side effects.
"""

import os
import socket
import tempfile
from pathlib import Path

from tests.settings import *  # noqa: F403
from tests.settings import (
    CELERY_BROKER_TRANSPORT_OPTIONS,
    INSTALLED_APPS,
    LOGGING,
    TOOL_CALLING,
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


STATE_DIR = Path(
    os.environ.setdefault(
        "TC_CELERY_STATE_DIR", tempfile.mkdtemp(prefix="tool_calling-celery-tier-")
    )
)
STATE_DIR.mkdir(parents=True, exist_ok=True)
REDIS_PORT = int(os.environ.setdefault("TC_CELERY_REDIS_PORT", str(_free_port())))
# The chat model of durable runs, which call it from the workers: a ReplayServer the tests
# start on this port (tests/celery/test_runs_on_workers.py).
MODEL_PORT = int(os.environ.setdefault("TC_CELERY_MODEL_PORT", str(_free_port())))

# One SQLite file shared by the test process and the workers. pytest-django creates and
# migrates it as the test database (TEST.NAME); the workers open it by NAME.
_DB = str(STATE_DIR / "db.sqlite3")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _DB,
        "TEST": {"NAME": _DB},
        # As project/settings.py: a worker keeps its connection between tasks.
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            # Several processes write (claims, leases, results): wait for the lock, never fail.
            "timeout": 30,
        },
    },
}

INSTALLED_APPS = [*INSTALLED_APPS, "tests.celery.toolsapp"]

REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/0"
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_TRANSPORT = "tool_calling.calls.transport:RedisTransport"  # as project/settings.py
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_EAGER_PROPAGATES = False
# The tool-call tasks ignore results: the database is the record.
CELERY_RESULT_BACKEND = None
# Quick reconnection after the R3 test stops and restarts Redis.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# The workers' own connection gives up on a stalled Redis (tests/celery/test_broker_faults.py
# SIGSTOPs it), as the check tool_calling.W001 asks.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,
    "socket_timeout": 5,
    "socket_connect_timeout": 5,
}
# A worker started with TC_CELERY_VISIBILITY_TIMEOUT (the R2 test) has Redis hand it back every
# message left unacknowledged that long, checked every second: a forced redelivery.
if os.environ.get("TC_CELERY_VISIBILITY_TIMEOUT"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,
        "visibility_timeout": int(os.environ["TC_CELERY_VISIBILITY_TIMEOUT"]),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }

TOOL_CALLING = {
    **TOOL_CALLING,
    "CHAT_MODEL": {
        **TOOL_CALLING.get("CHAT_MODEL", {}),
        "BASE_URL": f"http://127.0.0.1:{MODEL_PORT}/v1",
        "API_KEY": "test",
        "MAX_RETRIES": 0,
    },
    "EXECUTION": {
        "MODE": "celery",
        "TIMEOUT": 20,
        # Short, so that the time-limit and crash tests finish in seconds.
        "TIMEOUT_GRACE": 1,
        "LEASE_SECONDS": 3,
        "WAIT_MARGIN": 20,
    },
    # Re-raises tests.celery.toolsapp.tools.PaymentDeclined (only declining_charge raises it).
    "EXCEPTION_PROCESSOR": "tests.celery.toolsapp.tools.rethrowing_processor",
}

LOGGING = {
    **LOGGING,
    "loggers": {"tool_calling": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}

# A worker started with TC_CELERY_QUEUE (tests/celery/test_thread_pool.py: a thread pool) sends
# its runs' steps and calls to that queue, which only it consumes.
if os.environ.get("TC_CELERY_QUEUE"):
    TOOL_CALLING = {
        **TOOL_CALLING,
        "EXECUTION": {**TOOL_CALLING["EXECUTION"], "QUEUE": os.environ["TC_CELERY_QUEUE"]},
    }

# The worker that tests/celery/test_tool_search_on_workers.py starts runs durable turns with tool
# search on, from a queue of its own (no other worker consumes it, so every step of those runs
# is its); the test process sets the same keys with override_settings.
SEARCH_QUEUE = os.environ.get("TC_CELERY_SEARCH_QUEUE")
if SEARCH_QUEUE:
    TOOL_CALLING = {
        **TOOL_CALLING,
        "EXECUTION": {**TOOL_CALLING["EXECUTION"], "QUEUE": SEARCH_QUEUE},
        "TOOL_SEARCH": {"ENABLED": True, "THRESHOLD": 0},
    }

# The worker and the web server of tests/celery/test_otlp_on_workers.py export over OTLP
# (TC_TESTS_OTLP=1 and OTEL_EXPORTER_OTLP_ENDPOINT in their environment) and run their turns
# from a queue of their own, which no other worker consumes: every span of those turns goes to
# the test's OTLP receiver.
OTLP_QUEUE = os.environ.get("TC_CELERY_OTLP_QUEUE")
if OTLP_QUEUE:
    TOOL_CALLING = {
        **TOOL_CALLING,
        "EXECUTION": {**TOOL_CALLING["EXECUTION"], "QUEUE": OTLP_QUEUE},
    }
