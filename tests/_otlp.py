"""An OTLP/HTTP receiver for tests: what a collector (or Phoenix) receives, decoded.

It serves ``POST /v1/traces`` (and ``POST /v1/metrics`` only when made with ``metrics=True``;
otherwise it answers 405, as a traces-only backend such as Arize Phoenix does), decodes the
protobuf bodies the OpenTelemetry SDK's OTLP/HTTP exporters send (gzip or not) with the
``opentelemetry-proto`` package, and keeps what it received. Standard library HTTP server on a
thread; every wait is bounded.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids as lower-case hex)."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    start: int
    end: int
    attributes: dict[str, Any]
    status: str
    status_message: str
    service: str
    """The ``service.name`` of the resource that sent it."""


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as receiver:``; point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``url``."""

    metrics: bool = False
    spans: list[ReceivedSpan] = field(default_factory=list)
    metric_names: list[str] = field(default_factory=list)
    requests: list[tuple[str, int]] = field(default_factory=list)
    """``(path, status answered)`` of every request, in order."""
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                status, answer = receiver._receive(self.path, body)
                with receiver._lock:
                    receiver.requests.append((self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def _receive(self, path: str, body: bytes) -> tuple[int, bytes]:
        if path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            found = []
            for resource_spans in request.resource_spans:
                service = str(
                    _attributes(resource_spans.resource.attributes).get("service.name", "")
                )
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(
                            ReceivedSpan(
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_id=span.parent_span_id.hex(),
                                name=span.name,
                                kind=KINDS[span.kind],
                                start=span.start_time_unix_nano,
                                end=span.end_time_unix_nano,
                                attributes=_attributes(span.attributes),
                                status=STATUS[span.status.code],
                                status_message=span.status.message,
                                service=service,
                            )
                        )
            with self._lock:
                self.spans.extend(found)
            return 200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        if path == "/v1/metrics" and self.metrics:
            request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
            names = [
                metric.name
                for resource_metrics in request.resource_metrics
                for scope_metrics in resource_metrics.scope_metrics
                for metric in scope_metrics.metrics
            ]
            with self._lock:
                self.metric_names.extend(names)
            return 200, metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return 405, b""

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 30.0
    ) -> list[ReceivedSpan]:
        """The spans received, once ``found(spans)`` holds (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if found(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.05)
