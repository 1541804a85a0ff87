"""The REST API of tool_calling (Django REST framework).

A project mounts it in its URLconf::

    path("api/", include("tool_calling.api.urls")),

Endpoints (docs/api.md walks through them with curl):

    GET    tools/                          the tools the requesting user may use
    GET    conversations/                  the user's conversations (paginated)
    POST   conversations/                  a new conversation ({"title": ...} optional)
    GET    conversations/{id}/             one conversation with its messages (?after=N: newer)
    DELETE conversations/{id}/             delete it (409 while a turn runs)
    POST   conversations/{id}/messages/    start a turn: 202 with the run; ?wait=N waits
    GET    runs/                           the user's runs (paginated, ?status=...)
    GET    runs/{id}/                      one run: status, events, answer, tool calls
    GET    runs/{id}/events/               its events: SSE (Last-Event-ID) or JSON (?after=N)
    POST   runs/{id}/cancel/               ask a run to stop
    POST   runs/{id}/retry/                queue a failed run again
    GET    tool-executions/                tool calls (?status=awaiting_approval: the queue)
    GET    tool-executions/{id}/           one call and its approval state
    POST   tool-executions/{id}/approve/   approve a waiting call (edited "arguments" optional)
    POST   tool-executions/{id}/deny/      deny it with a "reason" the model reads

Every view requires an authenticated user (whatever the project's DRF defaults) and scopes
its queryset to the user's own objects, so another user's conversation or run answers 404; staff
read every conversation and run. Approving and denying take the permission
``tool_calling.approve_toolexecution`` (superusers have it; staff alone do not); approvers also read
the calls that needed a decision, of every user, and nobody approves a call of their own turn unless
``APPROVALS["ALLOW_SELF_APPROVAL"]`` is on. Authentication classes come from the project's
``REST_FRAMEWORK`` settings; session-authenticated unsafe requests need the CSRF token. The event
stream is an async view: serve the project with ASGI and
``tool_calling.asgi.get_asgi_application()`` so open streams hold no thread. Turn creation is
throttled with the ``ScopedRateThrottle`` scope ``tool_calling_turns`` (its rate in
``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``).

Every error answers JSON with a ``detail`` (``tool_calling.api.errors``; a 400 also lists the
``errors`` by field). Add ``tool_calling.api.middleware.JSONErrorMiddleware`` first in
``MIDDLEWARE`` so that the errors Django answers itself under the API's prefix (unknown paths,
bodies over ``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413, server errors) are JSON too. The turn throttle
counts in the default cache: use one the web processes share (Redis), not the local-memory one.

This package imports Django REST framework: it is not part of the pure-Python core.
"""
