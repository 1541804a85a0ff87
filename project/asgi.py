"""ASGI entry point of the example project: ``uvicorn project.asgi:application``.

Served by an ASGI server, the SSE stream of a run (``GET /api/runs/{id}/events/``) waits without
holding a thread (``tool_calling.asgi``), and ``/mcp/`` serves the governed tools to MCP clients
(streamable HTTP, ``Authorization: Bearer <DRF token>``; README "MCP server"). With
``DJANGO_DEBUG`` on, static files (the admin's) are served here too, as ``runserver`` would; in
production serve them from the web server or a CDN (``collectstatic``).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from tool_calling.asgi import get_asgi_application, with_mcp  # noqa: E402

# Django's handler, except that SSE requests get no thread of their own (tool_calling.asgi).
application: object = get_asgi_application()
if settings.DEBUG:
    application = ASGIStaticFilesHandler(application)
# /mcp/: the governed tools over MCP; this outer app owns the lifespan the MCP SDK needs.
application = with_mcp(application)
