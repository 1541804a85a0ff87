"""An ASGI application for projects that serve run events as Server-Sent Events, and MCP.

Use it in the project's ``asgi.py`` instead of Django's::

    from tool_calling.asgi import get_asgi_application, with_mcp

    application = get_asgi_application()
    application = with_mcp(application)  # optional: the governed tools over MCP at /mcp/

Why: Django's ASGI handler gives every request its own thread for the synchronous parts of the
middleware (sessions, authentication, CSRF), and keeps that thread until the response ends. For
an SSE stream that is open for minutes, that is one idle thread per connected client. This
handler serves requests that ask for ``text/event-stream`` without that per-request thread: their
synchronous middleware shares one thread (short work: a session read, an authentication), and the
stream itself (``tool_calling.api.events``) waits on the event loop. Every other request is served
exactly as Django serves it.
"""

from __future__ import annotations

from typing import Any

import django
from django.core.handlers.asgi import ASGIHandler

__all__ = ["EventStreamFriendlyASGIHandler", "get_asgi_application", "with_mcp"]


def _accepts_event_stream(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"accept" and b"text/event-stream" in value:
            return True
    return False


class EventStreamFriendlyASGIHandler(ASGIHandler):
    """Django's ``ASGIHandler``; event-stream requests skip the per-request thread context."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve the request; SSE requests without a thread of their own."""
        if scope.get("type") == "http" and _accepts_event_stream(scope):
            # Outside a ThreadSensitiveContext, sync_to_async(thread_sensitive=True) runs on
            # asgiref's one shared thread instead of a new one that lives as long as the stream.
            await self.handle(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def get_asgi_application() -> EventStreamFriendlyASGIHandler:
    """Set Django up and return the handler (``django.core.asgi.get_asgi_application``'s twin)."""
    django.setup(set_prefix=False)
    return EventStreamFriendlyASGIHandler()


def with_mcp(application: Any, *, path: str = "/mcp/") -> Any:
    """Serve the governed tools over MCP (streamable HTTP) at ``path``; the rest by ``application``.

    Call it after :func:`get_asgi_application` (Django is set up then). The returned app owns
    the ASGI lifespan, which the MCP SDK's session manager needs and Django's handler refuses:
    it starts the manager on ``lifespan.startup`` and never forwards lifespan events to
    ``application``. Run it under an ASGI server that sends them (uvicorn's default ``auto``
    does). Every request to ``path`` is authenticated (``Authorization: Bearer <DRF token>``)
    and its ``Host`` and ``Origin`` are checked against ``TOOL_CALLING["MCP"]``; see
    ``tool_calling.mcp.serving``.
    """
    # Imported here, after django.setup(): the endpoint reads models (and the mcp SDK is
    # only needed by projects that serve MCP).
    from tool_calling.mcp.serving import http_app

    return http_app(fallback=application, path=path)
