"""Benchmark: tool search over a catalogue of 570 real-looking tools and labelled requests.

The catalogue (benchmarks/tool_search_data/) holds the tool lists of 17 MCP servers that npm
packages ship (asked with ``tools/list``), operations of two OpenAPI specs that npm packages ship
(Notion's and a part of GitHub's REST API), and tools written for this benchmark; the requests
are natural-language requests written for it, each labelled with the tool(s) it needs.
``requests.json`` is the set the index was tuned on; ``requests_fresh.json`` and
``requests_fresh2.json`` are held out (see ``SETS``).

Per index: top-1 and top-5 hit rate (every expected tool within the first 1 or 5 results; a
request that needs two tools counts top-1 when both are in the first two), index build time,
search p50/p99. The request text itself is the query (a model would usually send fewer, better
words, so this is the harder case). For the advisor: the tool-definition tokens of each model
request with and without search (o200k, counted with quicktok on the tools as OpenAIChatModel
sends them), and the model round trips search adds, over a scripted model that searches with the
request, calls the expected tools when they were found and searches once more by their name
words when not.

A benchmark, not a test: it prints Markdown tables and PASS/FAIL lines for the targets of the
issue, and exits 0 unless it crashes (``--strict`` also exits 1 when a target is missed).

Run it through ``bash benchmarks/run.sh tool_search [--json PATH] [--strict]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedding model is loaded from its package

from _tool_catalogue import Request, catalogue, check_labels, requests  # noqa: E402

from tool_calling import (  # noqa: E402
    AssistantMessage,
    ChatClient,
    LexicalToolIndex,
    Prompt,
    RegexToolIndex,
    ToolCall,
    ToolCallback,
    ToolCallingAdvisor,
    ToolContext,
    ToolDefinition,
    ToolIndex,
    ToolSearchToolCallingAdvisor,
)
from tool_calling.core.chat.advisors.tool_search import SEARCH_TOOL_NAME  # noqa: E402
from tool_calling.core.providers.openai import _tool_param  # noqa: E402
from tool_calling.core.search import _text  # noqa: E402
from tool_calling.core.search.base import Tags  # noqa: E402
from tool_calling.testing import ScriptedChatModel, text  # noqa: E402

TARGET_TOKEN_RATIO = 20.0
TARGET_TOP5 = 0.95
TARGET_P50_MS = 1.0
QUERY_REPEATS = 5
# The labelled sets: "tuned" chose the index's weights, stems and synonyms; "held-out-A" was
# written once the index was first frozen, and its misses informed a second, last round of
# general changes (abbreviations, noun suffixes, a few synonym groups); "held-out-B" was written
# after that round and never tuned on.
SETS = {
    "tuned": "requests.json",
    "held-out-A": "requests_fresh.json",
    "held-out-B": "requests_fresh2.json",
}
BUILD_REPEATS = 3


# -- index variants -----------------------------------------------------------------------------


class StemsOnlyIndex(LexicalToolIndex):
    """The default index without the words as written: stems only (an ablation)."""

    def _field_terms(self, field: str, text_: str) -> list[str]:
        return [t for t in super()._field_terms(field, text_) if t.startswith(_text.STEM_MARK)]

    def _query_terms(self, query: str) -> list[str]:
        return [t for t in super()._query_terms(query) if t.startswith(_text.STEM_MARK)]


def lexical(
    *,
    stem: bool = True,
    synonyms: bool = True,
    fields: bool = True,
    words_as_written: bool = True,
    **kwargs: Any,
) -> Callable[[], ToolIndex]:
    """A LexicalToolIndex factory with parts of the default ranking turned off (ablations)."""

    def make() -> ToolIndex:
        weights = None if fields else {"name": 1, "description": 1, "parameters": 1, "tags": 1}
        kind = LexicalToolIndex if words_as_written else StemsOnlyIndex
        index = kind(field_weights=weights, **kwargs)
        if not stem:
            index._stem = None
            index._synonyms = _text.synonym_table(None)
        if not synonyms:
            index._synonym_weight = 0.0
        return index

    return make


class Bm25sIndex(ToolIndex):
    """bm25s (Lucene BM25 on sparse matrices) over one text per tool.

    ``ours=True`` feeds it the default index's terms (name split, stems, stop words), so only
    the ranking differs; otherwise bm25s tokenizes with its own English stop words.
    """

    def __init__(self, ours: bool) -> None:
        import bm25s

        self._bm25s = bm25s
        self._ours = ours
        self._names: list[str] = []

    def _terms(self, text_: str) -> list[str]:
        return _text.terms(_text.words(text_))

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        from tool_calling.core.search._fields import parameter_text

        texts = [
            " ".join([*_text.name_words(d.name), d.description, parameter_text(d)])
            for d in definitions
        ]
        self._names = [d.name for d in definitions]
        self._retriever = self._bm25s.BM25()
        if self._ours:
            self._retriever.index([self._terms(t) for t in texts], show_progress=False)
        else:
            tokens = self._bm25s.tokenize(texts, stopwords="en", show_progress=False)
            self._retriever.index(tokens, show_progress=False)

    def search(self, query: str, max_results: int = 5) -> list[str]:
        if self._ours:
            vocabulary = self._retriever.vocab_dict
            query_tokens = [[t for t in self._terms(query) if t in vocabulary]]
            if not query_tokens[0]:
                return []
        else:
            query_tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
            if not len(query_tokens.ids[0]):
                return []
        k = min(max_results, len(self._names))
        documents, scores = self._retriever.retrieve(
            query_tokens, k=k, show_progress=False, n_threads=1
        )
        pairs = zip(documents[0], scores[0], strict=True)
        return [self._names[int(d)] for d, s in pairs if s > 0]

    def clear(self) -> None:
        self._names = []


def regex_query(request: str) -> str:
    """The request as a pattern: its words (stop words out) as alternatives."""
    kept = [w for w in _text.words(request) if w not in _text.STOP_WORDS and len(w) > 2]
    return "|".join(kept) or request


# -- hit rates and timings ----------------------------------------------------------------------


def hits(found: list[str], request: Request) -> tuple[bool, bool]:
    """(top-1, top-5) for one request."""
    need = len(request.expected)
    top5 = all(any(n in found[:5] for n in group) for group in request.expected)
    top1 = all(any(n in found[:need] for n in group) for group in request.expected)
    return top1, top5


def evaluate(
    name: str,
    make: Callable[[], ToolIndex],
    tools: list[ToolDefinition],
    sets: dict[str, list[Request]],
    query: Callable[[str], str] = lambda q: q,
) -> dict[str, Any]:
    builds = []
    index = make()
    for _ in range(BUILD_REPEATS):
        index = make()
        started = time.perf_counter()
        index.index(tools)
        builds.append(time.perf_counter() - started)
    row: dict[str, Any] = {"index": name, "build_ms": statistics.median(builds) * 1e3}
    times: list[float] = []
    misses: dict[str, list[dict[str, Any]]] = {}
    for label, labelled in sets.items():
        top1 = top5 = 0
        misses[label] = []
        for request in labelled:
            q = query(request.text)
            runs = []
            for _ in range(QUERY_REPEATS):
                started = time.perf_counter()
                found = index.search(q, 5)
                runs.append(time.perf_counter() - started)
            # The median of a few runs of each query: a shared 2-core machine preempts single
            # runs for milliseconds at a time, which says nothing about the index.
            times.append(statistics.median(runs))
            one, five = hits(found, request)
            top1 += one
            top5 += five
            if not five:
                misses[label].append({"request": request.text, "found": found})
        row[f"{label}_top1"] = top1 / len(labelled)
        row[f"{label}_top5"] = top5 / len(labelled)
    times.sort()
    row["p50_ms"] = times[len(times) // 2] * 1e3
    row["p99_ms"] = times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3
    row["misses"] = misses
    return row


# -- the advisor: tokens and round trips ---------------------------------------------------------


class CatalogueTool(ToolCallback):
    """A catalogue tool that answers every call with a short text."""

    def __init__(self, definition: ToolDefinition) -> None:
        self._definition = definition

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    def call(self, tool_input: str, tool_context: ToolContext | None = None) -> str:
        return "ok"


def tool_tokens(encoding: Any, prompt: Prompt, cache: dict[str, int]) -> int:
    """o200k tokens of the tools of one model request, as OpenAIChatModel sends them."""
    options = prompt.options
    total = 0
    for callback in getattr(options, "tool_callbacks", []):
        definition = callback.definition
        count = cache.get(definition.name)
        if count is None:
            body = json.dumps(_tool_param(definition), separators=(",", ":"))
            count = cache[definition.name] = len(encoding.encode(body))
        total += count
    return total


def offered(prompt: Prompt) -> list[str]:
    return [c.definition.name for c in getattr(prompt.options, "tool_callbacks", [])]


def scripted_turn(request: Request) -> ScriptedChatModel:
    """A model that searches, retries once by tool name words if needed, calls, answers."""

    def calls(prompt: Prompt, tool_names: list[str]) -> AssistantMessage:
        return AssistantMessage(
            None, [ToolCall(f"c{i}", name, "{}") for i, name in enumerate(tool_names)]
        )

    def first(prompt: Prompt) -> AssistantMessage:
        arguments = json.dumps({"query": request.text})
        return AssistantMessage(None, [ToolCall("s1", SEARCH_TOOL_NAME, arguments)])

    def after_search(prompt: Prompt) -> AssistantMessage:
        visible = offered(prompt)
        chosen = [next((n for n in g if n in visible), None) for g in request.expected]
        if all(chosen):
            return calls(prompt, [c for c in chosen if c])
        missing = [g[0] for g, c in zip(request.expected, chosen, strict=True) if c is None]
        query = " ".join(_text.name_words(missing[0]))
        arguments = json.dumps({"query": query})
        return AssistantMessage(None, [ToolCall("s2", SEARCH_TOOL_NAME, arguments)])

    def then(prompt: Prompt) -> AssistantMessage | Any:
        last = prompt.messages[-1]
        responses = getattr(last, "responses", [])
        if responses and responses[0].name == SEARCH_TOOL_NAME:
            visible = offered(prompt)
            chosen = [next((n for n in g if n in visible), g[0]) for g in request.expected]
            return calls(prompt, chosen)
        return text("Done.")

    return ScriptedChatModel([first, after_search, then, lambda p: text("Done.")])


def advisor_costs(
    tools: list[ToolDefinition], labelled: list[Request], encoding: Any
) -> dict[str, Any]:
    callbacks = [CatalogueTool(d) for d in tools]
    cache: dict[str, int] = {}
    plain_tokens: list[int] = []
    search_tokens: list[int] = []
    plain_calls = search_calls = 0
    found_by_first_search = 0
    for request in labelled:
        plain = ScriptedChatModel(
            [
                AssistantMessage(
                    None, [ToolCall(f"c{i}", g[0], "{}") for i, g in enumerate(request.expected)]
                ),
                text("Done."),
            ]
        )
        ChatClient.create(plain).prompt(request.text).tools(callbacks).advisors(
            ToolCallingAdvisor()
        ).call()
        plain_tokens += [tool_tokens(encoding, p, cache) for p in plain.requests]
        plain_calls += len(plain.requests)

        model = scripted_turn(request)
        ChatClient.create(model).prompt(request.text).tools(callbacks).advisors(
            ToolSearchToolCallingAdvisor()
        ).call()
        search_tokens += [tool_tokens(encoding, p, cache) for p in model.requests]
        search_calls += len(model.requests)
        found_by_first_search += len(model.requests) == 3
    return {
        "tools": len(tools),
        "requests": len(labelled),
        "tokens_per_request_without": statistics.mean(plain_tokens),
        "tokens_per_request_with": statistics.mean(search_tokens),
        "tokens_per_turn_without": sum(plain_tokens) / len(labelled),
        "tokens_per_turn_with": sum(search_tokens) / len(labelled),
        "model_calls_per_turn_without": plain_calls / len(labelled),
        "model_calls_per_turn_with": search_calls / len(labelled),
        "found_by_first_search": found_by_first_search / len(labelled),
    }


def full_tools_serialisation_ms(tools: list[ToolDefinition]) -> float:
    """Baseline: serialising every tool for one request, as OpenAIChatModel does."""
    runs = []
    for _ in range(9):
        started = time.perf_counter()
        json.dumps([_tool_param(d) for d in tools])
        runs.append(time.perf_counter() - started)
    return statistics.median(runs) * 1e3


# -- report --------------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--misses", action="store_true", help="list the top-5 misses")
    parser.add_argument(
        "--no-embeddings", action="store_true", help="skip the embedding and hybrid rows"
    )
    args = parser.parse_args(argv)

    tools, sources = catalogue()
    sets = {label: requests(file) for label, file in SETS.items()}
    labelled = [r for group in sets.values() for r in group]
    check_labels(tools, labelled)
    by_source: dict[str, int] = {}
    for source in sources.values():
        kind = source.split(" ")[0]
        by_source[kind] = by_source.get(kind, 0) + 1
    counts = " + ".join(f"{len(group)} {label}" for label, group in sets.items())
    print(f"# Tool search: {len(tools)} tools, {counts} labelled requests")
    print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    print("Tools by source: " + ", ".join(f"{k} {v}" for k, v in sorted(by_source.items())))
    print()

    variants: list[tuple[str, Callable[[], ToolIndex], Callable[[str], str]]] = [
        ("LexicalToolIndex (default)", LexicalToolIndex, lambda q: q),
        ("lexical, without synonyms", lexical(synonyms=False), lambda q: q),
        ("lexical, without stems", lexical(stem=False), lambda q: q),
        ("lexical, stems only (no words as written)", lexical(words_as_written=False), lambda q: q),
        ("lexical, one field weight", lexical(fields=False), lambda q: q),
        (
            "plain BM25: one weight, no stems, no synonyms",
            lexical(stem=False, synonyms=False, fields=False),
            lambda q: q,
        ),
        ("bm25s, our terms", lambda: Bm25sIndex(ours=True), lambda q: q),
        ("bm25s, its tokenizer", lambda: Bm25sIndex(ours=False), lambda q: q),
        ("RegexToolIndex (request words as a|b|c)", RegexToolIndex, regex_query),
    ]
    if not args.no_embeddings:
        try:
            import torch

            from tool_calling.core.search.embedding import (
                EmbeddingToolIndex,
                HybridToolIndex,
                load_default_model,
            )

            # One thread per query: with the default (every core) a busy 2-core machine is
            # ten times slower.
            torch.set_num_threads(1)
            load_default_model()
            variants += [
                ("EmbeddingToolIndex (all-MiniLM-L6-v2)", EmbeddingToolIndex, lambda q: q),
                ("HybridToolIndex (embedding + lexical, RRF)", HybridToolIndex, lambda q: q),
            ]
        except ImportError as exc:
            print(f"(embedding rows skipped: {exc})\n")

    rows = []
    for name, make, query in variants:
        rows.append(evaluate(name, make, tools, sets, query))
        print(f"... {name}", file=sys.stderr)
    print("## Indexes")
    print()
    header = " | ".join(f"top-1 / top-5 {label}" for label in sets)
    print(f"| index | {header} | build ms | search p50 ms | p99 ms |")
    print("|---|" + "---|" * len(sets) + "---|---|---|")
    for row in rows:
        hit_rates = " | ".join(
            f"{_pct(row[f'{label}_top1'])} / {_pct(row[f'{label}_top5'])}" for label in sets
        )
        print(
            f"| {row['index']} | {hit_rates} | {row['build_ms']:.1f} "
            f"| {row['p50_ms']:.3f} | {row['p99_ms']:.3f} |"
        )
    baseline_ms = full_tools_serialisation_ms(tools)
    default = rows[0]
    print()
    print(
        f"Baseline, same run: serialising all {len(tools)} tools for one request takes "
        f"{baseline_ms:.2f} ms; a default search p50 is {default['p50_ms'] / baseline_ms:.2f}x "
        "of that."
    )
    if args.misses:
        for label in sets:
            print(f"\nTop-5 misses of the default index ({label}):")
            for miss in default["misses"][label]:
                print(f"- {miss['request']!r} -> {miss['found']}")

    import quicktok

    encoding = quicktok.get_encoding("o200k_base")
    costs = advisor_costs(tools, labelled, encoding)
    ratio = costs["tokens_per_request_without"] / costs["tokens_per_request_with"]
    turn_ratio = costs["tokens_per_turn_without"] / costs["tokens_per_turn_with"]
    extra = costs["model_calls_per_turn_with"] - costs["model_calls_per_turn_without"]
    print()
    print("## ToolSearchToolCallingAdvisor (default index)")
    print()
    print("| | without search | with search | ratio |")
    print("|---|---|---|---|")
    print(
        f"| tool-definition tokens per model request | "
        f"{costs['tokens_per_request_without']:,.0f} | {costs['tokens_per_request_with']:,.0f} "
        f"| {ratio:.1f}x fewer |"
    )
    print(
        f"| tool-definition tokens per turn | {costs['tokens_per_turn_without']:,.0f} "
        f"| {costs['tokens_per_turn_with']:,.0f} | {turn_ratio:.1f}x fewer |"
    )
    print(
        f"| model requests per turn | {costs['model_calls_per_turn_without']:.2f} "
        f"| {costs['model_calls_per_turn_with']:.2f} | +{extra:.2f} round trips |"
    )
    print()
    print(
        f"{_pct(costs['found_by_first_search'])} of the turns found their tools with the first "
        "search (one extra round trip); the others searched once more by the tool's name words."
    )

    targets = [
        (
            f"tool-definition tokens per request >= {TARGET_TOKEN_RATIO:.0f}x fewer",
            ratio >= TARGET_TOKEN_RATIO,
            f"{ratio:.1f}x",
        ),
        *(
            (
                f"top-5 hit rate >= {TARGET_TOP5:.0%} (default index, {label} set)",
                default[f"{label}_top5"] >= TARGET_TOP5,
                _pct(default[f"{label}_top5"]),
            )
            for label in sets
        ),
        (
            f"search p50 < {TARGET_P50_MS:.0f} ms (default index)",
            default["p50_ms"] < TARGET_P50_MS,
            f"{default['p50_ms']:.3f} ms",
        ),
    ]
    print()
    for label, ok, value in targets:
        print(f"{'PASS' if ok else 'FAIL'} {label}: {value}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"indexes": rows, "advisor": costs, "baseline_serialise_ms": baseline_ms},
                indent=1,
            )
        )
    return 1 if args.strict and not all(ok for _, ok, _ in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
