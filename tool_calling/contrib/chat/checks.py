"""System checks of the chat page: what it needs from the project's URLs and settings.

``tool_calling_chat.E001``  the API is not mounted under the URL namespace ``tool_calling``
``tool_calling_chat.E002``  the API does not accept session authentication
``tool_calling_chat.W001``  ``LOGIN_URL`` is not a page of the project
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, Resolver404, resolve, reverse

__all__ = ["check_setup"]


def check_setup(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The chat page's requirements: the API's URLs, session authentication, a login page."""
    return [*_api_urls(), *_session_authentication(), *_login_url()]


def _api_urls() -> list[checks.CheckMessage]:
    try:
        reverse("tool_calling:conversation-list")
    except NoReverseMatch:
        return [
            checks.Error(
                "The chat page needs tool_calling's HTTP API under the URL namespace "
                "'tool_calling', and 'tool_calling:conversation-list' does not resolve.",
                hint='Add path("api/", include("tool_calling.api.urls")) to the project\'s '
                "URLconf.",
                id="tool_calling_chat.E001",
            )
        ]
    return []


def _session_authentication() -> list[checks.CheckMessage]:
    from rest_framework.authentication import SessionAuthentication
    from rest_framework.settings import api_settings

    classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
    if any(issubclass(cls, SessionAuthentication) for cls in classes):
        return []
    return [
        checks.Error(
            "The chat page calls the API with the user's session, but "
            "REST_FRAMEWORK['DEFAULT_AUTHENTICATION_CLASSES'] has no SessionAuthentication.",
            hint="Add 'rest_framework.authentication.SessionAuthentication' to "
            "REST_FRAMEWORK['DEFAULT_AUTHENTICATION_CLASSES'].",
            id="tool_calling_chat.E002",
        )
    ]


def _login_url() -> list[checks.CheckMessage]:
    configured = str(settings.LOGIN_URL)
    warning = checks.Warning(
        f"LOGIN_URL ({configured!r}) is not a page of this project; the chat page sends "
        "users who are not logged in there.",
        hint="Set LOGIN_URL = 'tool_calling_chat:login' (the chat page's login form) or to "
        "your project's login page.",
        id="tool_calling_chat.W001",
    )
    try:
        path = resolve_url(configured)
    except NoReverseMatch:
        return [warning]
    if "://" in path or path.startswith("//"):
        return []  # a login page on another site (single sign-on): nothing to check here
    try:
        resolve(path.split("?", 1)[0])
    except Resolver404:
        return [warning]
    return []
