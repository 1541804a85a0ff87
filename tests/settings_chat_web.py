"""Settings of the web server that the chat page's browser tests start (tests/celery).

The Celery tier's settings (its SQLite file, Redis and workers), with two changes:

- ``DEBUG`` on, so that uvicorn serves the page's static files, as ``scripts/run.sh`` does;
- event streams that end after 3 s, so that the browser's ``EventSource`` reconnects with
  ``Last-Event-ID`` during every run it follows (what a proxy's idle timeout or
  ``API["SSE_MAX_SECONDS"]`` does to long answers);
- self-approval allowed (``APPROVALS["ALLOW_SELF_APPROVAL"]``), so that one person at the
  keyboard approves the call of their own turn, as in a one-person development setup (the
  default is four eyes).
"""

from tests.settings_celery import *  # noqa: F403
from tests.settings_celery import TOOL_CALLING

DEBUG = True

TOOL_CALLING = {
    **TOOL_CALLING,
    "API": {"SSE_MAX_SECONDS": 3},
    "APPROVALS": {"ALLOW_SELF_APPROVAL": True},
}
