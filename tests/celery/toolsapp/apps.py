"""The test tools' app: tells the test process when a worker is ready; traces the workers."""

import os

from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tests.celery.toolsapp"
    label = "celery_toolsapp"

    def ready(self) -> None:
        from celery.signals import worker_process_init, worker_ready

        worker_ready.connect(_write_ready_file, dispatch_uid="tc_celery_worker_ready")
        worker_process_init.connect(_trace_to_a_file, dispatch_uid="tc_celery_worker_traces")


def _write_ready_file(sender=None, **kwargs) -> None:
    from django.conf import settings

    (settings.STATE_DIR / f"ready-{sender.hostname}").write_text(str(os.getpid()))


def _trace_to_a_file(**kwargs) -> None:
    """Each pool process exports its spans to STATE_DIR/spans-<pid>.jsonl.

    A worker started with ``OTEL_EXPORTER_OTLP_ENDPOINT`` exports over OTLP instead, as the
    example project does (project/telemetry.py, configured before the fork): left as it is.
    """
    from django.conf import settings
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from project import telemetry
    from tests._otel import JsonLinesSpanExporter

    if telemetry.configured() is not None:
        return

    provider = TracerProvider()
    exporter = JsonLinesSpanExporter(settings.STATE_DIR / f"spans-{os.getpid()}.jsonl", os.getpid())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
