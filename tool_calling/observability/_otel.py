"""The only module that imports OpenTelemetry, an optional dependency.

Without ``opentelemetry-api`` (``pip install 'django-tool-calling[otel]'``) every function here
is a no-op: ``AVAILABLE`` is false and nothing of OpenTelemetry is imported. With the API but no
SDK (no tracer or meter provider configured), :func:`tracer` and :func:`meter` return ``None``
cheaply, so tool_calling's observations cost a type check.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from tool_calling.core._version import VERSION
from tool_calling.observability.semconv import SCHEMA_URL

try:
    from opentelemetry import context as _context
    from opentelemetry import metrics as _metrics
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised in a subprocess without the package
    _trace = None  # type: ignore[assignment]

__all__ = [
    "AVAILABLE",
    "attach",
    "current_ids",
    "detach",
    "extract",
    "has_current_span",
    "inject",
    "meter",
    "reserve_span",
    "set_error",
    "span_context_text",
    "start_reserved_span",
    "start_span",
    "stored_parent",
    "tracer",
]

AVAILABLE = _trace is not None
"""Whether ``opentelemetry-api`` is installed."""

NAME = "tool_calling"
"""The instrumentation scope of tool_calling's tracer and meter."""

# The API has no cheap public "is a provider configured?": get_tracer_provider() and
# get_meter_provider() look an environment variable up on every call while none is set, which
# costs a raised and caught KeyError (about a microsecond) each time. Providers are set once
# per process, so the module globals the API keeps them in are read instead, and the
# environment variable that names a provider is looked up once, here.
_TRACE_GLOBALS: Any = _trace
_METRICS_GLOBALS: Any = None
_PROVIDER_FROM_ENVIRONMENT = False

if _trace is not None:
    import os as _os

    from opentelemetry import environment_variables as _variables

    _METRICS_GLOBALS = _metrics._internal
    _PROVIDER_FROM_ENVIRONMENT = (
        _variables.OTEL_PYTHON_TRACER_PROVIDER in _os.environ
        or _variables.OTEL_PYTHON_METER_PROVIDER in _os.environ
        or not hasattr(_trace, "_TRACER_PROVIDER")
        or not hasattr(_METRICS_GLOBALS, "_METER_PROVIDER")
    )
    _DISABLED_TRACING: tuple[type, ...] = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
    # The API has no public name for the provider it returns before one is set (the tracing
    # side has ProxyTracerProvider); its class is the only way to tell "not configured".
    _DISABLED_METRICS: tuple[type, ...] = (
        type(_metrics._internal._PROXY_METER_PROVIDER),
        _metrics.NoOpMeterProvider,
    )
    _KINDS = {"internal": _trace.SpanKind.INTERNAL, "client": _trace.SpanKind.CLIENT}
    _INVALID = _trace.INVALID_SPAN_CONTEXT
    _SAMPLED = int(_trace.TraceFlags.SAMPLED)
    # W3C Trace Context level 2's "random trace id" flag, where the API knows it.
    _RANDOM = int(getattr(_trace.TraceFlags, "RANDOM_TRACE_ID", 0))

_NO_PARENT = "0" * 16

_tracer_cache: list[Any] = [None, None]
_meter_cache: list[Any] = [None, None]


def tracer() -> Any:
    """tool_calling's tracer from the global provider; ``None`` when none is configured."""
    if _trace is None:
        return None
    if _PROVIDER_FROM_ENVIRONMENT:
        provider = _trace.get_tracer_provider()
    else:
        provider = _TRACE_GLOBALS._TRACER_PROVIDER
        if provider is None:
            return None
    if isinstance(provider, _DISABLED_TRACING):
        return None
    cached = _tracer_cache
    if cached[0] is not provider:
        # A provider set later (or replaced in tests) gets its own tracer.
        cached[1] = provider.get_tracer(NAME, VERSION, schema_url=SCHEMA_URL)
        cached[0] = provider
    return cached[1]


def meter() -> tuple[Any, Any]:
    """``(provider, tool_calling's meter)``; ``(None, None)`` when no provider is configured."""
    if _trace is None:
        return None, None
    if _PROVIDER_FROM_ENVIRONMENT:
        provider = _metrics.get_meter_provider()
    else:
        provider = _METRICS_GLOBALS._METER_PROVIDER
        if provider is None:
            return None, None
    if isinstance(provider, _DISABLED_METRICS):
        return None, None
    cached = _meter_cache
    if cached[0] is not provider:
        cached[1] = provider.get_meter(NAME, VERSION, schema_url=SCHEMA_URL)
        cached[0] = provider
    return provider, cached[1]


def start_span(
    tracer_: Any, name: str, kind: str, attributes: Mapping[str, Any], parent: Any = None
) -> Any:
    """Start (not activate) a span; ``parent`` is a context, ``None`` for the current one."""
    return tracer_.start_span(
        name,
        context=parent,
        kind=_KINDS[kind],
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


def reserve_span(tracer_: Any, name: str) -> str:
    """Ids for a span that :func:`start_reserved_span` starts later, maybe in another process.

    The span's children can be made meanwhile, anywhere: they take the first part as their
    parent. Returns ``"<traceparent>;<parent span id>"`` (the parent is the current span, or 16
    zeros for a root), or ``""`` when ``tracer_`` cannot start a span with given ids: only the
    OpenTelemetry SDK's tracer can, through the ``id_generator`` it is made with (a public
    attribute of ``opentelemetry.sdk.trace.Tracer``).
    """
    ids = getattr(tracer_, "id_generator", None)
    if ids is None:
        return ""
    current = _trace.get_current_span().get_span_context()
    if current.is_valid:
        trace_id, flags, parent = (
            current.trace_id,
            int(current.trace_flags),
            (f"{current.span_id:016x}"),
        )
    else:
        trace_id, parent = ids.generate_trace_id(), _NO_PARENT
        sampler = getattr(tracer_, "sampler", None)
        sampled = (
            sampler is None
            or sampler.should_sample(
                None, trace_id, name, _trace.SpanKind.INTERNAL
            ).decision.is_sampled()
        )
        flags = _SAMPLED if sampled else 0
        random = getattr(ids, "is_trace_id_random", None)
        if random is not None and random():
            flags |= _RANDOM
    span_id = ids.generate_span_id()
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x};{parent}"


def stored_parent(stored: str) -> Any:
    """The context a run's stored turn gives its spans' children (``None``: blank or invalid).

    ``stored`` is a reservation (:func:`reserve_span`) or a bare W3C traceparent.
    """
    traceparent = stored.partition(";")[0]
    return extract({"traceparent": traceparent}) if traceparent else None


class _ReservedIds:
    """Hands a tracer the ids :func:`reserve_span` chose (one span's worth)."""

    def __init__(self, trace_id: int, span_id: int) -> None:
        self.trace_id = trace_id
        self.span_id = span_id

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id

    def is_trace_id_random(self) -> bool:
        return False


def start_reserved_span(
    tracer_: Any, name: str, reserved: str, attributes: Mapping[str, Any], start_time: int
) -> Any:
    """Start the span :func:`reserve_span` reserved, as if it had started at ``start_time``.

    ``start_time`` is in nanoseconds since the epoch. Returns ``None`` when ``reserved`` is not
    such a reservation or ``tracer_`` cannot give a span its ids.
    """
    traceparent, separator, parent = reserved.partition(";")
    found = extract({"traceparent": traceparent}) if separator else None
    if found is None or getattr(tracer_, "id_generator", None) is None:
        return None
    span_context = _trace.get_current_span(found).get_span_context()
    if parent == _NO_PARENT:
        context = _context.Context()  # a root: the reserved trace id is generated for it
    else:
        try:
            parent_id = int(parent, 16)
        except ValueError:
            return None
        context = _trace.set_span_in_context(
            _trace.NonRecordingSpan(
                _trace.SpanContext(
                    span_context.trace_id,
                    parent_id,
                    is_remote=True,
                    trace_flags=span_context.trace_flags,
                )
            )
        )
    # The SDK's tracer takes its ids from its id_generator: a copy of it, given the reserved
    # ids, starts the span with them (the sampler, processors and resource are the tracer's).
    reserving = copy.copy(tracer_)
    reserving.id_generator = _ReservedIds(span_context.trace_id, span_context.span_id)
    return reserving.start_span(
        name,
        context=context,
        kind=_trace.SpanKind.INTERNAL,
        attributes=attributes,
        start_time=start_time,
        record_exception=False,
        set_status_on_exception=False,
    )


def set_error(span: Any, description: str) -> None:
    """Mark ``span`` as failed with a short ``description`` (never content)."""
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, description))


def attach(span: Any = None, parent: Any = None) -> Any:
    """Make ``span`` (or the context ``parent``) current; returns the token for :func:`detach`."""
    if span is not None:
        return _context.attach(_trace.set_span_in_context(span))
    return _context.attach(parent)


def detach(token: Any) -> None:
    """Undo :func:`attach`."""
    _context.detach(token)


def inject() -> dict[str, str] | None:
    """The current trace context as W3C headers (``traceparent``...); ``None`` without one."""
    if _trace is None or not _trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return carrier or None


def extract(carrier: Mapping[str, Any] | None) -> Any:
    """The context a carrier (task headers, a stored ``traceparent``) holds; ``None`` if invalid."""
    if _trace is None or not carrier:
        return None
    try:
        found = _propagate.extract(carrier)
    except (TypeError, ValueError):
        return None
    if not _trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found


def span_context_text(span: Any) -> str:
    """The W3C ``traceparent`` of ``span`` (blank when it has no valid context)."""
    span_context = span.get_span_context()
    if not span_context.is_valid:
        return ""
    flags = int(span_context.trace_flags)
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{flags:02x}"


def has_current_span() -> bool:
    """Whether a valid span (from any instrumentation) is current."""
    return _trace is not None and _trace.get_current_span().get_span_context().is_valid


def current_ids() -> tuple[str, str]:
    """``(trace id, span id)`` of the current span, as hex; blank when there is none."""
    if _trace is None:
        return "", ""
    span_context = _trace.get_current_span().get_span_context()
    if span_context is _INVALID or not span_context.is_valid:
        return "", ""
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"


def histogram(meter_: Any, name: str, unit: str, description: str, buckets: Sequence[float]) -> Any:
    """A histogram with the bucket boundaries the conventions advise."""
    return meter_.create_histogram(
        name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
    )


def observation(value: float, attributes: Mapping[str, Any] | None = None) -> Any:
    """One value an observable gauge reports."""
    return _metrics.Observation(value, attributes)
