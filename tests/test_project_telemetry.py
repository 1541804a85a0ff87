"""The example project's OpenTelemetry: OTLP export when the environment asks.

Each case runs the project's own settings in a subprocess (as every web, worker and command
process loads them) with one environment, against a real OTLP/HTTP receiver (tests/_otlp.py).
The process records a span and a metric, flushes, and says what it set up. Metrics are exported
only when asked for: a traces-only backend answers them 405, logged by the exporter at every
interval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._otlp import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json
import django
django.setup()
from opentelemetry import metrics, trace
from project import telemetry
from tool_calling import observability
configured = telemetry.configured()
print(json.dumps({
    "configured": configured is not None,
    "traces": observability.tracing_enabled(),
    "metrics": observability.metrics_enabled(),
}))
with trace.get_tracer("probe").start_as_current_span("probe span"):
    pass
metrics.get_meter("probe").create_counter("probe.count").add(1)
if configured is not None:
    for provider in (configured.tracer_provider, configured.meter_provider):
        if provider is not None:
            provider.force_flush()
            provider.shutdown()
"""


def probe(tmp_path: Path, **variables: str) -> tuple[dict[str, bool], str]:
    """Run the probe with the project's settings and ``variables``; (what it set up, its log)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "OTEL_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_SECRET_KEY="tests-only-not-a-secret",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PYTHONPATH=str(ROOT),
        **variables,
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_nothing_is_set_up_without_an_endpoint(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        setup, _ = probe(tmp_path, OTEL_SERVICE_NAME="tool-calling-web")
    assert setup == {"configured": False, "traces": False, "metrics": False}
    assert receiver.requests == []


def test_an_endpoint_exports_spans_and_no_metrics_to_a_traces_only_backend(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        setup, log = probe(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_SERVICE_NAME="tool-calling-web",
            OTEL_METRIC_EXPORT_INTERVAL="100",
        )
    assert setup == {"configured": True, "traces": True, "metrics": False}
    assert [(s.name, s.service) for s in receiver.spans] == [("probe span", "tool-calling-web")]
    assert receiver.requests == [("/v1/traces", 200)]
    assert "405" not in log and "Failed to export" not in log


def test_metrics_are_exported_when_asked_for(tmp_path: Path) -> None:
    with OtlpReceiver(metrics=True) as receiver:
        setup, _ = probe(
            tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_METRICS_EXPORTER="otlp"
        )
    assert setup == {"configured": True, "traces": True, "metrics": True}
    assert "probe.count" in receiver.metric_names
    assert ("/v1/metrics", 200) in receiver.requests


def test_metrics_asked_of_a_traces_only_backend_are_the_noise_the_default_avoids(
    tmp_path: Path,
) -> None:
    with OtlpReceiver() as receiver:
        setup, log = probe(
            tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_METRICS_EXPORTER="otlp"
        )
    assert setup["metrics"] is True
    assert ("/v1/metrics", 405) in receiver.requests
    assert "405" in log  # the exporter's complaint, which it repeats at every interval


def test_a_metrics_endpoint_alone_exports_metrics_only(tmp_path: Path) -> None:
    with OtlpReceiver(metrics=True) as receiver:
        setup, _ = probe(tmp_path, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=receiver.url + "/v1/metrics")
    assert setup == {"configured": True, "traces": False, "metrics": True}
    assert receiver.spans == [] and "probe.count" in receiver.metric_names


@pytest.mark.parametrize(
    ("variables", "traces"),
    [
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ],
    ids=["traces-none", "traces-otlp"],
)
def test_the_traces_exporter_variable_can_turn_spans_off(
    tmp_path: Path, variables: dict[str, str], traces: bool
) -> None:
    with OtlpReceiver() as receiver:
        setup, _ = probe(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, **variables)
    assert setup["traces"] is traces
    assert bool(receiver.spans) is traces


def test_a_traces_endpoint_is_used_as_it_is(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        setup, _ = probe(tmp_path, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.url + "/v1/traces")
    assert setup == {"configured": True, "traces": True, "metrics": False}
    assert [s.name for s in receiver.spans] == ["probe span"]
