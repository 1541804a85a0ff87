"""OpenTelemetry in tests: the SDK's in-memory exporters installed as the global providers.

The API lets a process set its global providers once; tests need a fresh pair each, so
:func:`recording` resets the API's globals before and after (as the OpenTelemetry project's own
test utilities do, ``opentelemetry.test.globals_test``), and every other test runs with no
provider at all: the "API but no SDK" case.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def _reset_globals() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    # A library's module-level tracer (the MCP SDK's ``get_tracer("mcp-python-sdk")``) is a proxy
    # that keeps the first real tracer it resolved: without this, a provider set for one test
    # would go on recording (and injecting ``traceparent`` into MCP ``_meta``) in later tests.
    for found in gc.get_objects():
        if isinstance(found, trace.ProxyTracer):
            found._real_tracer = None


@dataclass
class Recorded:
    """What the process exported while :func:`recording` was active."""

    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        """The ended spans, in the order they ended."""
        return list(self.spans_exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span

    def metrics(self) -> dict[str, list[Any]]:
        """``{metric name: [data points]}`` collected now."""
        data = self.reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def metric_units(self) -> dict[str, str]:
        data = self.reader.get_metrics_data()
        return {
            metric.name: metric.unit
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


@contextmanager
def recording() -> Iterator[Recorded]:
    """Global tracer and meter providers with in-memory exporters, for the block only."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    _reset_globals()
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    try:
        yield Recorded(exporter, reader)
    finally:
        _reset_globals()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def dump(spans: list[ReadableSpan], metric_points: dict[str, list[Any]]) -> str:
    """Everything exported, as one text to search (names, attributes, events, statuses)."""
    return json.dumps(
        {
            "spans": [json.loads(span.to_json()) for span in spans],
            "metrics": {
                name: [
                    {"attributes": dict(point.attributes or {}), "point": repr(point)}
                    for point in points
                ]
                for name, points in metric_points.items()
            },
        },
        default=str,
    )


class JsonLinesSpanExporter(SpanExporter):
    """Appends each ended span as one JSON line (with the exporting process's pid) to a file."""

    def __init__(self, path: Path, pid: int) -> None:
        self.path = path
        self.pid = pid

    def export(self, spans: Any) -> SpanExportResult:
        with self.path.open("a", encoding="utf-8") as out:
            for span in spans:
                record = json.loads(span.to_json())
                record["pid"] = self.pid
                out.write(json.dumps(record) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def read_json_lines(directory: Path) -> list[dict[str, Any]]:
    """Every span the processes exported into ``directory`` (``spans-*.jsonl``)."""
    found = []
    for path in sorted(directory.glob("spans-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                found.append(json.loads(line))
    return found
