"""The test tools' app: tells the test process when a worker is ready."""

import os

from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tests.celery.toolsapp"
    label = "celery_toolsapp"

    def ready(self) -> None:
        from celery.signals import worker_ready

        worker_ready.connect(_write_ready_file, dispatch_uid="tc_celery_worker_ready")


def _write_ready_file(sender=None, **kwargs) -> None:
    from django.conf import settings

    (settings.STATE_DIR / f"ready-{sender.hostname}").write_text(str(os.getpid()))
