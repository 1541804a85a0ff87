"""A chat page for the users of a project: ``tool_calling.contrib.chat``.

The user's conversations, a new one, and a message box; the answer streams in as the model
writes it, each tool call shows when it starts and ends, and approvers decide waiting calls on
the page. The page talks to the project only through tool_calling's public HTTP API (session
authentication and the CSRF token), with Django templates and one small plain-JavaScript file:
no build step, no framework, nothing from a CDN.

Set up::

    INSTALLED_APPS = [..., "rest_framework", "tool_calling", "tool_calling.contrib.chat"]
    LOGIN_URL = "tool_calling_chat:login"  # or your project's own login page

    urlpatterns = [
        path("api/", include("tool_calling.api.urls")),  # namespace "tool_calling"
        path("", include("tool_calling.contrib.chat.urls")),  # namespace "tool_calling_chat"
    ]

The API's ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]`` must include
``SessionAuthentication``. ``manage.py check`` reports a missing piece (``tool_calling_chat.E001``,
``W001``).
"""
