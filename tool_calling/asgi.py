"""An ASGI application for projects that serve run events as Server-Sent Events.

Use it in the project's ``asgi.py`` instead of Django's::

    from tool_calling.asgi import get_asgi_application

    application = get_asgi_application()

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

__all__ = ["EventStreamFriendlyASGIHandler", "get_asgi_application"]


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
