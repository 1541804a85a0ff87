"""The cost of tool_calling.observability, for benchmarks/turn.py and dispatch.py.

Four setups, each measured in a process of its own (a process has one global OpenTelemetry
setup), each against its own baseline timed in the same process, round-robin:

- ``absent``: OpenTelemetry not installed (an import hook hides ``opentelemetry``),
- ``api``: the API without an SDK (no provider configured: what every project gets, since the
  mcp requirement brings the API),
- ``sdk-traces``: the SDK's tracer provider (BatchSpanProcessor) with an exporter that does
  nothing, and no meter provider: what recording the spans costs,
- ``sdk``: the same plus a meter provider whose exporter does nothing: spans and metrics.

``python benchmarks/_observability.py turn|dispatch`` runs every setup and prints the table
(``--mode MODE`` runs one setup and prints its JSON: what the table run does in subprocesses);
``--instructions`` counts instructions under valgrind's callgrind instead, which this shared,
noisy machine cannot disturb.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("absent", "api", "sdk-traces", "sdk")
SPANS_PER_TURN = 4  # invoke_agent, chat, execute_tool, chat
TARGET_PERCENT = 2.0


class _HideOpenTelemetry:
    """An import hook: ``opentelemetry`` is not installed, as far as this process can tell."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is hidden (benchmark setup 'absent')")
        return None


def setup(mode: str) -> None:
    """Prepare this process for ``mode`` (before tool_calling is imported)."""
    if mode == "absent":
        sys.meta_path.insert(0, _HideOpenTelemetry())
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(TOOL_CALLING={}, USE_TZ=True)
        django.setup()
    if mode in ("sdk", "sdk-traces"):
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            MetricExporter,
            MetricExportResult,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class NoSpans(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        class NoMetrics(MetricExporter):
            def export(self, metrics_data: Any, timeout_millis: float = 0, **kw: Any) -> Any:
                return MetricExportResult.SUCCESS

            def force_flush(self, timeout_millis: float = 0) -> bool:
                return True

            def shutdown(self, timeout_millis: float = 0, **kw: Any) -> None:
                return None

        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(NoSpans()))
        trace.set_tracer_provider(tracer_provider)
        if mode == "sdk":
            reader = PeriodicExportingMetricReader(NoMetrics(), export_interval_millis=3_600_000)
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))


def tool_call_block() -> Any:
    """``observed(callback, call, context)``: a call as the governed manager wraps it."""
    from tool_calling import observability
    from tool_calling.core.execution.plan import ToolOutcome

    class Ended:
        __slots__ = ("outcome", "status")

        def __init__(self, text: str) -> None:
            self.status = "succeeded"
            self.outcome = ToolOutcome.ok(text)

    def observed(callback: Any, call: Any, context: Any) -> str:
        with observability.tool_call(
            call, execution_mode=observability.INLINE, description=callback.definition.description
        ) as span:
            return span.ended(Ended(callback.call(call.arguments, context))).outcome.text

    return observed


def _manager(wrapper: Any) -> Any:
    from tool_calling import DefaultToolCallingManager

    class WrappingManager(DefaultToolCallingManager):
        """Wraps each call as the governed manager does (its own frames, not observability's)."""

        def call_tool(self, callback: Any, tool_call: Any, tool_context: Any) -> str:
            return wrapper(callback, tool_call, tool_context)

    return WrappingManager()


def plain_manager() -> Any:
    """The baseline: a manager wrapping each call, with the same frames and no span."""
    from tool_calling.core.execution.plan import ToolOutcome

    class Ended:
        __slots__ = ("outcome", "status")

        def __init__(self, text: str) -> None:
            self.status = "succeeded"
            self.outcome = ToolOutcome.ok(text)

    def plain(callback: Any, call: Any, context: Any) -> str:
        return Ended(callback.call(call.arguments, context)).outcome.text

    return _manager(plain)


def observed_manager() -> Any:
    """The same manager, each call inside ``observability.tool_call`` (an ``execute_tool`` span)."""
    return _manager(tool_call_block())


def observed_advisors(model: Any) -> list[Any]:
    """The advisors ``governed_chat_client`` adds to a governed turn (for this setup)."""
    from tool_calling import observability

    return [observability.TurnObservationAdvisor(model), *observability.chat_advisors(model)]


def run_mode(bench: str, mode: str, repeats: int, min_time: float) -> dict[str, Any]:
    """Measure the baseline and the observed path of ``bench`` in this process."""
    setup(mode)
    sys.path.insert(0, str(HERE))
    if bench == "turn":
        import turn

        paths = turn.observability_paths()
        for path in paths:
            turn.check(path)
        measure = turn.measure
    else:
        import dispatch

        paths = dispatch.observability_paths()
        measure = dispatch.measure
    measure(paths, repeats=repeats, min_time=min_time)
    imported = sorted({m.split(".")[1] for m in sys.modules if m.startswith("opentelemetry.")})
    return {
        "mode": mode,
        "opentelemetry_modules": imported,
        "paths": {
            p.key: {"label": p.label, "us": p.us_per_call, "us_min": p.us_min} for p in paths
        },
    }


def count_instructions(bench: str, mode: str, key: str, n: int) -> None:
    """Run path ``key`` ``n`` times inside ``map`` (what callgrind counts; see ``instructions``)."""
    import collections

    setup(mode)
    sys.path.insert(0, str(HERE))
    module = __import__(bench)
    (path,) = [p for p in module.observability_paths() if p.key == key]
    code = compile(path.stmt, "<benchmark>", "eval")
    namespace = path.ns

    def once(_: int) -> Any:
        return eval(code, namespace)  # noqa: S307 - the fixed statements of turn.py/dispatch.py

    for _ in range(500):  # warm caches, pools and validators before counting
        once(0)
    collections.deque(map(once, range(n)), maxlen=0)


def count_governed(n: int) -> None:
    """Run ``n`` governed, stored turns (SQLite in memory): what the overhead compares with."""
    import collections
    import itertools

    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    # benchmarks/celery.py would shadow Celery for the example project the settings import.
    sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]
    import django

    django.setup()
    from django.core.management import call_command

    from tool_calling import (
        AssistantMessage,
        ChatModel,
        ChatResponse,
        Generation,
        ToolCall,
        models,
        tool,
    )
    from tool_calling.governance import governed_chat_client
    from tool_calling.registry import registry
    from tool_calling.sync import sync_tools

    call_command("migrate", verbosity=0)

    @tool
    def bench_weather(city: str) -> str:
        """Return the weather in a city."""
        return f"Sunny in {city}"

    registry.register(bench_weather, source="benchmarks")
    sync_tools()
    asked = ToolCall("call_1", "bench_weather", '{"city":"Oslo"}')
    answers = (
        ChatResponse([Generation(AssistantMessage(None, [asked]), finish_reason="tool_calls")]),
        ChatResponse([Generation(AssistantMessage("Sunny"), finish_reason="stop")]),
    )

    class Instant(ChatModel):
        def __init__(self) -> None:
            self._next = itertools.cycle(answers).__next__

        def call(self, prompt: Any) -> ChatResponse:
            return self._next()

    model = Instant()
    conversation = models.Conversation.objects.create(title="benchmark")

    def once(_: int) -> Any:
        client = governed_chat_client(conversation=conversation, model=model)
        return client.prompt("Weather in Oslo?").call().content()

    for _ in range(50):
        once(0)
    collections.deque(map(once, range(n)), maxlen=0)


def _callgrind(arguments: list[str], n: int) -> float | None:
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=map_next",
         "--callgrind-out-file=/dev/null", sys.executable, __file__, *arguments, "-n", str(n)],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )  # fmt: skip
    found = [line for line in result.stderr.splitlines() if "Collected" in line]
    if result.returncode != 0 or not found:
        print(result.stdout + result.stderr, file=sys.stderr)
        return None
    return int(found[-1].split()[-1]) / n


def instructions(bench: str, n: int) -> int:
    """Instructions per turn (or call), counted by valgrind's callgrind: noise-free.

    Only what runs inside ``map`` is counted (``--toggle-collect=map_next``), i.e. the ``n``
    evaluations, not the interpreter's start or the imports.
    """
    spans = SPANS_PER_TURN if bench == "turn" else 1
    what = "turn" if bench == "turn" else "call"
    print(f"## tool_calling.observability: instructions per {what} (callgrind, n={n})\n")
    print("| setup | baseline | observed | overhead | overhead % | per span |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in MODES:
        counts = {}
        for key in ("baseline", "observed"):
            count = _callgrind([bench, "--count", key, "--mode", mode], n)
            if count is None:
                return 1
            counts[key] = count
        base, observed = counts["baseline"], counts["observed"]
        over = observed - base
        per_span = f"{over / spans:,.0f}" if mode.startswith("sdk") else ""
        print(f"| {mode} | {base:,.0f} | {observed:,.0f} | {over:+,.0f} | "
              f"{over / base * 100:+.1f}% | {per_span} |")  # fmt: skip
        if mode == "api":
            unrecorded = over
    governed = _callgrind([bench, "--governed"], max(20, n // 10))
    if governed is None:
        return 1
    print(f"\nA governed, stored turn (SQLite in memory, `governed_chat_client`, one tool round): "
          f"{governed:,.0f} instructions; the overhead without an SDK above is "
          f"{unrecorded / governed * 100:.2f}% of it.")  # fmt: skip
    return 0


def table(bench: str, repeats: int, min_time: float) -> int:
    rows = []
    for mode in MODES:
        result = subprocess.run(
            [sys.executable, __file__, bench, "--mode", mode, "--repeats", str(repeats),
             "--min-time", str(min_time)],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        )  # fmt: skip
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            return result.returncode
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    spans = SPANS_PER_TURN if bench == "turn" else 1
    what = "turn" if bench == "turn" else "call"
    print(f"## tool_calling.observability: cost per {what} ({spans} span(s) per {what})\n")
    print(f"| setup | baseline µs/{what} | observed µs/{what} | overhead µs | overhead % | "
          "µs per span |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    names = {
        "absent": "OpenTelemetry not installed",
        "api": "opentelemetry-api, no SDK",
        "sdk-traces": "SDK tracer provider, no-op exporter (traces only)",
        "sdk": "SDK, no-op exporters (traces + metrics)",
    }
    verdicts = []
    for row in rows:
        base, observed = row["paths"]["baseline"]["us"], row["paths"]["observed"]["us"]
        over = observed - base
        percent = over / base * 100
        per_span = f"{over / spans:.2f}" if row["mode"].startswith("sdk") else ""
        print(f"| {names[row['mode']]} | {base:.2f} | {observed:.2f} | {over:+.2f} | "
              f"{percent:+.1f}% | {per_span} |")  # fmt: skip
        if not row["mode"].startswith("sdk"):
            verdicts.append((row["mode"], percent))
    print()
    for mode, percent in verdicts:
        ok = percent <= TARGET_PERCENT
        print(f"- {'PASS' if ok else 'FAIL'}: without an SDK ({mode}) the overhead is "
              f"{percent:+.1f}% (target <= {TARGET_PERCENT:g}%)")  # fmt: skip
    print("- Modules of opentelemetry imported: " + "; ".join(
        f"{row['mode']}: {', '.join(row['opentelemetry_modules']) or 'none'}" for row in rows
    ))  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=("turn", "dispatch"))
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions with valgrind's callgrind instead of timing (noise-free)",
    )
    parser.add_argument("--count", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--governed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-n", type=int, default=1000, help="evaluations counted per path")
    args = parser.parse_args(argv)
    if args.governed:
        count_governed(args.n)
        return 0
    if args.count:
        count_instructions(args.bench, args.mode, args.count, args.n)
        return 0
    if args.instructions:
        return instructions(args.bench, args.n)
    if args.mode:
        print(json.dumps(run_mode(args.bench, args.mode, args.repeats, args.min_time)))
        return 0
    return table(args.bench, args.repeats, args.min_time)


if __name__ == "__main__":
    sys.exit(main())
