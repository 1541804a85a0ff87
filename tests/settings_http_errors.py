"""Settings of the web server tests/integration/test_http_errors_on_the_wire.py starts.

The example project's settings as uvicorn loads them (``DJANGO_DEBUG``, ``DATABASE_URL`` and
the secret key come from the environment the test sets), with two changes:

- the URLconf of tests/django/urls_api_errors.py: the project's, plus plain Django views under
  ``/api/_test/`` that fail the ways Django answers itself (405, 500, CSRF 403, ...);
- a local-memory cache, so that the turn throttle needs no Redis.
"""

from project.settings import *  # noqa: F403

ROOT_URLCONF = "tests.django.urls_api_errors"

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
