"""ASGI entry point of the example project: ``uvicorn project.asgi:application``.

Served by an ASGI server, the SSE stream of a run (``GET /api/runs/{id}/events/``) waits without
holding a thread (``tool_calling.asgi``), and ``/mcp/`` serves the governed tools to MCP clients
(streamable HTTP, ``Authorization: Bearer <DRF token>``; docs/mcp.md). Static files (the
admin's, the chat page's) are served by WhiteNoise in ``MIDDLEWARE``: from ``STATIC_ROOT``
(``manage.py collectstatic``) with ``DJANGO_DEBUG`` off, from the apps with it on.
With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (``project/telemetry.py``), each request is a span.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from project import telemetry  # noqa: E402
from tool_calling.asgi import get_asgi_application, with_mcp  # noqa: E402

# Django's handler, except that SSE requests get no thread of their own (tool_calling.asgi).
application: object = get_asgi_application()
# /mcp/: the governed tools over MCP; this outer app owns the lifespan the MCP SDK needs.
application = with_mcp(application)
_telemetry = telemetry.configured()  # project/settings.py configured it
if _telemetry is not None and _telemetry.tracer_provider is not None:
    # A span per request (OpenTelemetry's ASGI instrumentation): the turns a request starts,
    # on workers too, continue its trace.
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    application = OpenTelemetryMiddleware(application)
