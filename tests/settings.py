"""Settings of the test suite: the example project's, made hermetic.

Nothing here depends on the developer's environment: an in-memory database, eager Celery with
an in-memory broker, a local cache, and a chat model configuration that never reaches a real
server. Tests that need the real services (the integration tier) set their own URLs.
"""

from project.settings import *  # noqa: F403

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
    },
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

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
