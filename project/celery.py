"""The Celery app of the example project (run a worker with `celery -A project worker`)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
# Every CELERY_* Django setting configures Celery (CELERY_BROKER_URL -> broker_url, ...).
app.config_from_object("django.conf:settings", namespace="CELERY")
# Finds the tasks.py module of every installed app, tool_calling's included.
app.autodiscover_tasks()
