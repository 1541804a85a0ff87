"""Benchmark (S3): how long rejecting bad tool arguments takes, 10 MB strings included.

A benchmark, not a test: it prints a Markdown table and a PASS/FAIL line for the checklist's
target (every rejection under 50 ms), and exits 0 unless it crashes (``--strict`` also exits 1
when the target is missed).

Each case sends the same ``ship`` tool (a string, an int, a nested pydantic model, an optional
list) one kind of bad arguments through ``FunctionToolCallback.call`` (parse, validate, reject
with an error text; the function never runs). The baseline, measured in the same run on the
same text, is ``json.loads`` alone: the least any validator must do (for text that is not JSON,
``json.loads`` failing). Cases are interleaved round-robin and the median of the repeats is
reported (min in brackets), gc off while timing.

    python benchmarks/bad_arguments.py [--repeats N] [--json PATH] [--strict]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pydantic  # noqa: E402

from tool_calling import FunctionToolCallback, tool  # noqa: E402
from tool_calling.exceptions import ToolArgumentsError  # noqa: E402

TARGET_MS = 50.0
TEN_MB = 10 * 1024 * 1024
DEPTH = 10_000


class Address(pydantic.BaseModel):
    """Where an order goes."""

    street: str
    zip: int


RAN: list[str] = []


@tool
def ship(name: str, qty: int, address: Address, tags: list[str] | None = None) -> str:
    """Ship an order."""
    RAN.append(name)
    return "shipped"


VALID = '{"name": "a", "qty": 1, "address": {"street": "s", "zip": 1}}'
HUGE = "x" * TEN_MB

CASES: dict[str, str] = {
    "valid call (runs the tool)": VALID,
    "extra key": '{"name": "a", "qty": 1, "address": {"street": "s", "zip": 1}, "user_id": 7}',
    "wrong type": '{"name": "a", "qty": "2", "address": {"street": "s", "zip": 1}}',
    "missing required key": '{"name": "a"}',
    "NaN": '{"name": "a", "qty": NaN, "address": {"street": "s", "zip": 1}}',
    "Infinity": '{"name": "a", "qty": Infinity, "address": {"street": "s", "zip": 1}}',
    "duplicate key": '{"name": "a", "name": "b", "qty": 1, "address": {"street": "s", "zip": 1}}',
    "not JSON": "ship it please",
    "10 MB string, wrong type": '{"name": "a", "qty": "' + HUGE + '", "address": '
    '{"street": "s", "zip": 1}}',
    "10 MB key": '{"' + HUGE + '": 1, "name": "a", "qty": 1, "address": {"street": "s", "zip": 1}}',
    "10 MB unterminated string": '{"name": "' + HUGE,
    "10,000-deep list": '{"tags": ' + "[" * DEPTH + "]" * DEPTH + "}",
    "10,000-deep object": '{"tags": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + "}",
}


def _ours(callback: FunctionToolCallback, text: str) -> Callable[[], None]:
    def run() -> None:
        try:
            callback.call(text)
        except ToolArgumentsError:
            pass

    return run


def _baseline(text: str) -> Callable[[], None]:
    def run() -> None:
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            pass

    return run


def _time(function: Callable[[], None], loops: int) -> float:
    started = time.perf_counter()
    for _ in range(loops):
        function()
    return (time.perf_counter() - started) / loops * 1000


def measure(repeats: int) -> list[dict[str, Any]]:
    """Median and min ms per case (ours and json.loads), interleaved round-robin."""
    callback = FunctionToolCallback(ship)
    paths = {name: (_ours(callback, text), _baseline(text)) for name, text in CASES.items()}
    loops = {name: 1 if len(text) > 1_000_000 else 200 for name, text in CASES.items()}
    samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in CASES}
    for ours, baseline in paths.values():  # warm up
        ours()
        baseline()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, (ours, baseline) in paths.items():
                samples[name][0].append(_time(ours, loops[name]))
                samples[name][1].append(_time(baseline, loops[name]))
    finally:
        gc.enable()
    rows = []
    for name, (ours_ms, base_ms) in samples.items():
        median, base = statistics.median(ours_ms), statistics.median(base_ms)
        rows.append(
            {
                "case": name,
                "ours_ms": median,
                "ours_min_ms": min(ours_ms),
                "json_loads_ms": base,
                "ratio": median / base if base > 0 else float("inf"),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    rows = measure(args.repeats)
    print(f"Python {platform.python_version()} on {platform.machine()}, {args.repeats} repeats\n")
    print("| bad arguments | ms to reject (min) | json.loads alone, ms | ratio |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['case']} | {row['ours_ms']:.3f} ({row['ours_min_ms']:.3f}) "
            f"| {row['json_loads_ms']:.3f} | {row['ratio']:.1f}x |"
        )
    rejected = [r for r in rows if not r["case"].startswith("valid")]
    slowest = max(rejected, key=lambda r: r["ours_ms"])
    passed = slowest["ours_ms"] < TARGET_MS
    print(
        f"\n{'PASS' if passed else 'FAIL'}: every rejection under {TARGET_MS:g} ms "
        f"(slowest: {slowest['case']}, {slowest['ours_ms']:.1f} ms); the tool ran "
        f"{len(RAN)} times, only for the valid call"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "passed": passed}, indent=2))
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
