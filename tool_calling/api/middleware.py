"""``JSONErrorMiddleware``: under the API's URL prefix, Django's own error pages become JSON.

DRF answers the errors of its views as JSON, but some errors never reach DRF, or leave it as
exceptions Django turns into HTML pages: a path no view matches (404), a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django's 400; 413 here), a host not in ``ALLOWED_HOSTS``
(400), a CSRF failure of a plain view (403), a method a plain view does not take (405), and an
unexpected exception (500). Add the middleware at the top of ``MIDDLEWARE``, so that it also
sees what the other middleware answer::

    MIDDLEWARE = [
        "tool_calling.api.middleware.JSONErrorMiddleware",
        "django.middleware.security.SecurityMiddleware",
        ...
    ]

It changes only error responses (status 400 and up) that are not JSON already, to requests
under the prefix where the project includes ``tool_calling.api.urls`` (the router's root,
``tool_calling:api-root``); DRF's own responses are left to DRF's content negotiation (its
browsable API stays HTML for browsers). The body becomes ``{"detail": "..."}``; the status,
the headers (``Allow``, ``WWW-Authenticate``) and the cookies stay, and ``Content-Length`` is
the new body's. Nothing of an exception's
message reaches the client: a 500 says only that the server logged what happened (Django logs
the traceback on ``django.request`` as usual). Works under WSGI and ASGI without a thread hop.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import NoReverseMatch, reverse
from rest_framework.response import Response

__all__ = ["JSONErrorMiddleware"]

_DETAILS = {
    400: "Bad request.",
    403: "Forbidden.",
    500: "Server error: the request failed; the server logged what happened.",
}
_CSRF_MIDDLEWARE = "django.middleware.csrf.CsrfViewMiddleware"
_CSRF_FAILED = (
    "CSRF verification failed: send the CSRF token (the X-CSRFToken header, from the "
    "csrftoken cookie) with session-authenticated requests."
)


def _api_prefix() -> str | None:
    """Where the project mounted the API (``/api/``), or ``None`` when it did not."""
    try:
        return reverse("tool_calling:api-root")
    except NoReverseMatch:
        return None


def _under_api(request: HttpRequest) -> bool:
    prefix = _api_prefix()
    return prefix is not None and request.path.startswith(prefix)


def _is_json(response: HttpResponseBase) -> bool:
    content_type = response.get("Content-Type", "").split(";", 1)[0].strip().lower()
    return content_type == "application/json" or content_type.endswith("+json")


def _detail(request: HttpRequest, response: HttpResponseBase) -> str:
    status = response.status_code
    if (
        status == 403
        and getattr(request, "_tool_calling_csrf_checked", False)
        and not getattr(request, "csrf_processing_done", False)
    ):
        return _CSRF_FAILED  # the CSRF middleware refused the view before it ran
    if status == 404:
        return f"Not found: {request.path!r}."
    if status == 405:
        return f"Method {request.method!r} not allowed."
    if status in _DETAILS:
        return _DETAILS[status]
    if status >= 500:
        return _DETAILS[500]
    return str(getattr(response, "reason_phrase", "") or "Error") + "."


class JSONErrorMiddleware:
    """Answers the API's errors as ``{"detail": ...}`` JSON, whoever produced them."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        """Pass the request on; rewrite the response if it is a non-JSON API error."""
        if self.async_mode:
            return self._acall(request)
        return self._rewrite(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        return self._rewrite(request, await get_response(request))

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> None:
        """Note views the CSRF middleware checks, to name the cause if it refuses them."""
        if not getattr(view, "csrf_exempt", False) and _CSRF_MIDDLEWARE in settings.MIDDLEWARE:
            request._tool_calling_csrf_checked = True  # type: ignore[attr-defined]

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413 (Django answers 400)."""
        if isinstance(exception, RequestDataTooBig) and _under_api(request):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            return JsonResponse(
                {"detail": f"The request body is larger than the {limit} bytes this server "
                 "accepts."},
                status=413,
            )  # fmt: skip
        return None

    def _rewrite(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if (
            response.status_code < 400
            or isinstance(response, Response)  # DRF's: JSON, or its browsable API for browsers
            or response.streaming
            or _is_json(response)
            or not isinstance(response, HttpResponse)
            or not _under_api(request)
        ):
            return response
        response.content = json.dumps({"detail": _detail(request, response)}).encode()
        response["Content-Type"] = "application/json"
        # CommonMiddleware (inside this one) declared the length of the page replaced here;
        # left as it was, the server would send fewer or more bytes than it announced.
        response["Content-Length"] = str(len(response.content))
        return response
