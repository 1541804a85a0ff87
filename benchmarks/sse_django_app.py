"""Django's own ASGI application for benchmarks/sse.py, to compare with tool_calling.asgi."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
