"""Settings of benchmarks/celery_calls.py and of the workers it starts.

tests/settings_celery.py (a Redis port and a state directory shared through environment
variables, a SQLite file in WAL mode in that directory), with this app instead of the test
tools, Redis as result backend (only the raw-Celery baseline reads results: tool-call tasks
ignore theirs), workers that keep their database connections (``CELERY_DB_REUSE_MAX``, as the
example project), the default EXECUTION settings except MODE "celery", and quiet logs. With
``TC_BENCH_DATABASE_URL`` set (the benchmark's PostgreSQL run sets it; the workers inherit it)
the database is that one, configured as project/settings.py configures a ``DATABASE_URL``.
"""

import os

import dj_database_url

from tests.settings_celery import *  # noqa: F403
from tests.settings_celery import INSTALLED_APPS, LOGGING, REDIS_URL

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "tests.celery.toolsapp"] + [
    "benchmarks.celery_tools.apps.CeleryToolsConfig"
]

_DATABASE_URL = os.environ.get("TC_BENCH_DATABASE_URL", "")
if _DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(_DATABASE_URL, conn_max_age=600, conn_health_checks=True)
    }

CELERY_RESULT_BACKEND = REDIS_URL

# As project/settings.py, the configuration docs/operations.md advises: a worker process keeps its
# database connection between tasks (Celery's Django fixup would close it around every task).
CELERY_DB_REUSE_MAX = 1000

# tool_calling's defaults (LEASE_SECONDS 15, TIMEOUT 30, ...), not the test tier's short ones.
TOOL_CALLING = {**TOOL_CALLING, "EXECUTION": {"MODE": "celery"}}  # noqa: F405

LOGGING = {
    **LOGGING,
    "loggers": {"tool_calling": {"handlers": ["console"], "level": "WARNING", "propagate": False}},
}
