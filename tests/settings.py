"""Settings of the test suite: the example project's, made hermetic.

Nothing here depends on the developer's environment: an in-memory database, eager Celery with
an in-memory broker, a local cache, a chat model configuration that never reaches a real server,
and no OpenTelemetry export. Tests that need the real services (the integration tier) set their
own URLs.
"""

import os

# The developer's OpenTelemetry variables do not make the suite export anywhere (the example
# project's settings read them): only a process a test starts with TC_TESTS_OTLP=1 and its own
# endpoint (tests/celery/test_otlp_on_workers.py) exports.
if os.environ.get("TC_TESTS_OTLP") != "1":
    for _name in [name for name in os.environ if name.startswith("OTEL_")]:
        del os.environ[_name]

from project.settings import *  # noqa: E402, F403

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

DATABASES = {
    "default": {
        # The example project's backend: calls of one batch run on threads, and their writes
        # pass its write gate one at a time (two at once met a table lock of the shared in-memory
        # database: "database table is locked").
        "ENGINE": "tool_calling.db.backends.sqlite3",
        "NAME": ":memory:",
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
    },
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Nothing is collected for these tiers: with DEBUG off, WhiteNoise would warn at every new
# client that the project's STATIC_ROOT does not exist (tests/integration/test_production.py
# collects and serves the static files).
STATIC_ROOT = None  # type: ignore[assignment]  # Django takes None: nothing to collect

CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_URL = "memory://"
CELERY_RESULT_BACKEND = "cache+memory://"

# Whatever OPENAI_* says in the environment, tests never talk to a real model: the port is
# closed, so a client that escapes its mock fails fast instead of spending tokens.
# CLASS: the model a test installed (tests/django/_tools.py chat_model), else the OpenAI
# adapter configured here.
TOOL_CALLING = {
    "CHAT_MODEL": {
        "CLASS": "tests.django._tools.current_chat_model",
        "MODEL": "test-model",
        "BASE_URL": "http://127.0.0.1:9/v1",
        "API_KEY": "test-key",
    },
}
