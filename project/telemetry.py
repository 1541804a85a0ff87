"""OpenTelemetry of the example project: spans, and metrics when asked, exported over OTLP/HTTP.

``project/settings.py`` calls :func:`configure` once per process (the web server, each Celery
worker and beat, management commands), so every process that runs part of a turn exports what
``tool_calling.observability`` records. The OpenTelemetry SDK's own environment variables decide:

    OTEL_EXPORTER_OTLP_ENDPOINT          base URL of an OTLP/HTTP receiver: a collector
                                         (http://collector:4318), Jaeger, Tempo, or Arize Phoenix
                                         (http://phoenix:6006); spans go to <URL>/v1/traces.
                                         Unset, with no traces endpoint either: nothing is set up.
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   the spans' own URL (instead of <base URL>/v1/traces)
    OTEL_TRACES_EXPORTER                 "none": no spans, although an endpoint is set
    OTEL_METRICS_EXPORTER                "otlp": export metrics too (<base URL>/v1/metrics). Off
                                         otherwise, unlike the SDK's default: a traces-only
                                         backend (Phoenix) answers metrics with 405, which the
                                         exporter would log at every interval.
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT  the metrics' own URL; turns metrics on as well
    OTEL_SERVICE_NAME                    the service's name, e.g. tool-calling-web and
                                         tool-calling-worker

The exporters read the rest themselves (``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT``,
``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_METRIC_EXPORT_INTERVAL``, ...). Spans are batched; a
prefork Celery worker's pool processes, forked after this ran, restart the batching thread
themselves (the SDK re-initialises its processors after a fork). ``project/asgi.py`` adds the
ASGI instrumentation's span of each request, which a turn's spans continue.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Telemetry", "configure", "configured"]


@dataclass(frozen=True)
class Telemetry:
    """What :func:`configure` set up in this process."""

    tracer_provider: Any
    """The SDK's ``TracerProvider``, exporting spans over OTLP/HTTP (``None``: no spans)."""
    meter_provider: Any
    """The SDK's ``MeterProvider``, exporting metrics over OTLP/HTTP (``None``: no metrics)."""


_configured: Telemetry | None = None


def configured() -> Telemetry | None:
    """What :func:`configure` set up in this process (``None``: nothing)."""
    return _configured


def _wants_traces(environ: Mapping[str, str]) -> bool:
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return bool(endpoint) and "none" not in exporters


def _wants_metrics(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        return True
    exporters = {e.strip().lower() for e in environ.get("OTEL_METRICS_EXPORTER", "").split(",")}
    return "otlp" in exporters and bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """Set this process's tracer (and meter) provider from ``environ``; once per process.

    Args:
        environ: The environment to read (default ``os.environ``; the exporters themselves
            always read ``os.environ``).

    Returns:
        What was set up, or ``None`` when the environment asks for nothing.
    """
    global _configured
    if _configured is not None:
        return _configured
    environ = os.environ if environ is None else environ
    traces, metrics = _wants_traces(environ), _wants_metrics(environ)
    if not traces and not metrics:
        return None
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()  # service.name from OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    tracer_provider = meter_provider = None
    if traces:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(tracer_provider)
    if metrics:
        from opentelemetry import metrics as metrics_api
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        metrics_api.set_meter_provider(meter_provider)
    _configured = Telemetry(tracer_provider, meter_provider)
    return _configured
