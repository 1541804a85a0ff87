"""ASGI entry point of the example project: ``uvicorn project.asgi:application``.

Served by an ASGI server, the SSE stream of a run (``GET /api/runs/{id}/events/``) waits without
holding a thread. With ``DJANGO_DEBUG`` on, static files (the admin's) are served here too, as
``runserver`` would; in production put them behind the web server or a CDN (``collectstatic``).
"""

import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

application = get_asgi_application()
if settings.DEBUG:
    application = ASGIStaticFilesHandler(application)
