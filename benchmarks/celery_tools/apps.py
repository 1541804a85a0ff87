"""Tells the benchmark process when a worker is ready (a file per worker in STATE_DIR)."""

import os

from django.apps import AppConfig


class CeleryToolsConfig(AppConfig):
    name = "benchmarks.celery_tools"
    label = "bench_celery_tools"

    def ready(self) -> None:
        from celery.signals import worker_ready

        worker_ready.connect(_write_ready_file, dispatch_uid="bench_celery_worker_ready")


def _write_ready_file(sender=None, **kwargs) -> None:
    from django.conf import settings

    (settings.STATE_DIR / f"ready-{sender.hostname}").write_text(str(os.getpid()))
