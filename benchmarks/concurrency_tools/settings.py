"""Settings of benchmarks/concurrency.py: the example project's, plus the benchmark's tool.

Everything else (database, Redis, model, pools) is what project/settings.py reads from the
environment, so the benchmark measures the main job as scripts/devserver.py starts it.
"""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks.concurrency_tools.apps.ConcurrencyToolsConfig"]
