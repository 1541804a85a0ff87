"""A chat page for the users of a project: ``tool_calling.contrib.chat``.

The user's conversations, a new one, and a message box; the answer streams in as the model
writes it, each tool call shows when it starts and ends, and approvers decide waiting calls on
the page. The page talks to the project only through tool_calling's public HTTP API (session
authentication and the CSRF token), with Django templates and one small plain-JavaScript file:
no build step, no framework, nothing from a CDN.

Set up::

    INSTALLED_APPS = [..., "rest_framework", "tool_calling", "tool_calling.contrib.chat"]
    LOGIN_URL = "tool_calling_chat:login"  # or your project's own login page
    REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
        "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": "30/min"},  # new turns per user
    }
    CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"  # the turns run as Celery tasks

    urlpatterns = [
        path("api/", include("tool_calling.api.urls")),  # namespace "tool_calling"
        path("", include("tool_calling.contrib.chat.urls")),  # namespace "tool_calling_chat"
    ]

plus the project's Celery app (Celery's Django guide: ``<project>/celery.py`` loading the Django
settings) and a worker (``celery -A <project> worker -Q tool_calling,celery``), or
``CELERY_TASK_ALWAYS_EAGER = True`` in development. ``manage.py check`` reports a missing piece
(``tool_calling_chat.E001``, ``E002``, ``W001``; ``tool_calling.E017``, ``E018``).
"""
