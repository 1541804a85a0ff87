"""Benchmark: per-call cost of tool dispatch, ours against LangChain, OpenAI Agents and Pydantic AI.

A benchmark, not a test: it prints a Markdown table and PASS/FAIL lines for the targets of the
issue, and exits 0 unless it crashes (``--strict`` also exits 1 when a target is missed).

Every path does the same work: JSON text in (as a model sends it), parse, validate against the
tool's schema, call the same Python function, text out. All paths are measured in one process,
interleaved round-robin (repeat 1 of every path, then repeat 2 of every path, ...), and the
median repeat is reported, so a slow phase of the machine hits every path alike.

Run it through ``bash benchmarks/run.sh`` (creates ``.venv-bench`` with the peers), or directly
with ``python benchmarks/dispatch.py [--json PATH] [--profile] [--strict]`` in an environment
that has ``requirements.txt`` and ``benchmarks/requirements.txt`` installed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# Peers must not phone home or trace while being timed; set before they are imported.
for _var in ("LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING", "LANGSMITH_TRACING"):
    os.environ.pop(_var, None)
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pydantic  # noqa: E402

from tool_calling import (  # noqa: E402
    AssistantMessage,
    ChatResponse,
    DefaultToolCallingManager,
    Generation,
    Prompt,
    ToolCall,
    ToolCallingChatOptions,
    tool,
    tool_callbacks,
)

# The targets ("Core hot path: a tool call cheaper than the fastest peer's fastest
# path, and flat in the number of tools"), all judged against rows measured in the same run.
TARGET_OVERHEAD_US = 3.0  # one validated add() through execute_tool_calls, minus the direct call
TARGET_MANY_TOOLS_RATIO = 1.2  # the same call with 502 tools offered / with one tool offered
TARGET_BATCH_RATIO = 2.0  # per call of a 20-call batch / one call alone
TARGET_BLOCKING_RATIO = 0.5  # a batch of blocking calls / the same calls one after another
TARGET_DECORATE_MS = 50.0  # @tool on 500 functions
BATCH = 20
BLOCKING_CALLS = 8  # as many as the default bound (max_concurrent_calls), so they can all overlap
BLOCKING_S = 0.002
N_DEFINITIONS = 500
DECORATE_ROUNDS = 5


# -- the tools (one function, wrapped by every framework) ------------------------------------


class Order(pydantic.BaseModel):
    """An order with ten fields."""

    id: int
    sku: str
    quantity: int
    price: float
    currency: str
    customer: str
    email: str
    express: bool
    note: str
    priority: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def wait(ms: int) -> str:
    """Block the calling thread for ``ms`` milliseconds (I/O, a remote API)."""
    time.sleep(ms / 1000)
    return "done"


def place_order(order: Order) -> str:
    """Place an order."""
    return f"order {order.id}: {order.quantity} x {order.sku} for {order.customer}"


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def place_order_async(order: Order) -> str:
    """Place an order."""
    return f"order {order.id}: {order.quantity} x {order.sku} for {order.customer}"


ADD_ARGS = {"a": 17, "b": 25}
ORDER_FIELDS = {
    "id": 1042,
    "sku": "SKU-7781",
    "quantity": 3,
    "price": 19.99,
    "currency": "EUR",
    "customer": "Ada Lovelace",
    "email": "ada@example.com",
    "express": True,
    "note": "leave at the door",
    "priority": 2,
}
ADD_JSON = json.dumps(ADD_ARGS)
# Each framework gets the arguments in the shape of the schema it advertises for place_order:
# ours, LangChain and the Agents SDK wrap the model in its parameter name; Pydantic AI
# flattens a single model parameter into the tool's top-level object.
ORDER_JSON_NESTED = json.dumps({"order": ORDER_FIELDS})
ORDER_JSON_FLAT = json.dumps(ORDER_FIELDS)
BATCH_JSON = [json.dumps({"a": i, "b": 2 * i}) for i in range(BATCH)]
WAIT_JSON = json.dumps({"ms": round(BLOCKING_S * 1000)})


# -- timing -------------------------------------------------------------------------------


@dataclass
class Path_:
    """One measured path."""

    key: str
    label: str
    group: str
    case: str  # "add", "model" or "batch"
    calls: int  # tool calls per timed statement
    stmt: str  # statement timed; awaited inside a running loop when is_async
    ns: dict[str, Any]
    is_async: bool = False
    number: int = 0
    repeats: list[float] = field(default_factory=list)  # seconds per statement

    @property
    def us_per_call(self) -> float:
        return statistics.median(self.repeats) / self.calls * 1e6

    @property
    def us_min(self) -> float:
        return min(self.repeats) / self.calls * 1e6


LOOP = asyncio.new_event_loop()
asyncio.set_event_loop(LOOP)


def _compile_async(path: Path_) -> Callable[[int], float]:
    """Build ``run(n)``: one run_until_complete, awaiting the statement n times inside it."""
    src = (
        "async def _body(_n):\n"
        "    _t = _pc()\n"
        "    for _ in range(_n):\n"
        f"        {path.stmt}\n"
        "    return _pc() - _t\n"
    )
    ns = dict(path.ns, _pc=time.perf_counter)
    exec(src, ns)  # noqa: S102 - fixed template
    body = ns["_body"]

    def run(n: int) -> float:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return LOOP.run_until_complete(body(n))  # type: ignore[no-any-return]
        finally:
            if enabled:
                gc.enable()

    return run


def _runner(path: Path_) -> Callable[[int], float]:
    if path.is_async:
        return _compile_async(path)
    timer = timeit.Timer(path.stmt, globals=path.ns)  # gc off while timing, as timeit does
    return timer.timeit


def measure(paths: list[Path_], *, repeats: int, min_time: float) -> None:
    """Warm up and calibrate every path, then time them round-robin."""
    runners = {}
    for path in paths:
        run = _runner(path)
        warm_until = time.perf_counter() + min_time / 2  # caches, thread pools, validators
        while time.perf_counter() < warm_until:
            run(1)
        number = 1
        while (elapsed := run(number)) < min_time / 10:  # calibrate, as timeit.autorange does
            number *= 10 if elapsed < min_time / 100 else 2
        path.number = max(1, round(number * min_time / elapsed))
        runners[path.key] = run
    for _ in range(repeats):
        for path in paths:
            path.repeats.append(runners[path.key](path.number) / path.number)


# -- paths ----------------------------------------------------------------------------------


class InlineExecutor(Executor):
    """Runs each submitted call at once in the caller's thread (no thread pool)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the future
            future.set_exception(exc)
        return future


def _chat_response(calls: list[tuple[str, str]]) -> ChatResponse:
    tool_calls = [ToolCall(f"call_{i}", name, args) for i, (name, args) in enumerate(calls)]
    return ChatResponse([Generation(AssistantMessage(tool_calls=tool_calls))])


def _check(label: str, got: Any, expected: str) -> None:
    if got != expected:
        raise AssertionError(f"{label}: expected {expected!r}, got {got!r}")


def our_paths(many: list[Any]) -> list[Path_]:
    t_add = tool(add)
    t_order = tool(place_order)
    callbacks = tool_callbacks(t_add, t_order)
    cb_add, cb_order = callbacks
    (cb_wait,) = tool_callbacks(tool(wait))
    wait_prompt = Prompt("Wait, please.", ToolCallingChatOptions(tool_callbacks=[cb_wait]))
    blocking = _chat_response([("wait", WAIT_JSON)] * BLOCKING_CALLS)
    prompt = Prompt("What is 17 + 25?", ToolCallingChatOptions(tool_callbacks=callbacks))
    big_prompt = Prompt(
        "What is 17 + 25?", ToolCallingChatOptions(tool_callbacks=[*many, *callbacks])
    )
    manager = DefaultToolCallingManager()
    inline_manager = DefaultToolCallingManager(executor=InlineExecutor())
    one_add = _chat_response([("add", ADD_JSON)])
    one_order = _chat_response([("place_order", ORDER_JSON_NESTED)])
    batch = _chat_response([("add", text) for text in BATCH_JSON])
    ns = {
        "manager": manager,
        "inline_manager": inline_manager,
        "prompt": prompt,
        "big_prompt": big_prompt,
        "one_add": one_add,
        "one_order": one_order,
        "batch": batch,
        "cb_add": cb_add,
        "cb_order": cb_order,
        "ADD_JSON": ADD_JSON,
        "ORDER_JSON": ORDER_JSON_NESTED,
        "wait_prompt": wait_prompt,
        "blocking": blocking,
    }
    # Correctness first: every path must produce the text the model would see.
    last = manager.execute_tool_calls(prompt, one_add).conversation_history[-1]
    _check("ours add", last.responses[0].response_data, "42")
    _check("ours add is_error", last.responses[0].is_error, False)
    last = manager.execute_tool_calls(prompt, one_order).conversation_history[-1]
    _check("ours order", last.responses[0].response_data, place_order(Order(**ORDER_FIELDS)))
    _check("ours order is_error", last.responses[0].is_error, False)
    last = manager.execute_tool_calls(prompt, batch).conversation_history[-1]
    expected = [str(3 * i) for i in range(BATCH)]
    _check("ours batch", [r.response_data for r in last.responses], expected)
    last = inline_manager.execute_tool_calls(prompt, batch).conversation_history[-1]
    _check("ours inline batch", len(last.responses), BATCH)
    _check("ours callback", cb_add.call(ADD_JSON), "42")
    last = manager.execute_tool_calls(big_prompt, one_add).conversation_history[-1]
    _check("ours add, 502 tools offered", last.responses[0].response_data, "42")
    last = manager.execute_tool_calls(wait_prompt, blocking).conversation_history[-1]
    _check("ours blocking batch", [r.response_data for r in last.responses], ["done"] * 8)
    g = "ours"
    return [
        Path_(
            "ours.add",
            "ours: execute_tool_calls, 1 call add(a, b)",
            g,
            "add",
            1,
            "manager.execute_tool_calls(prompt, one_add)",
            ns,
        ),
        Path_(
            "ours.add_many_tools",
            f"ours: execute_tool_calls, 1 call add, request offers {len(many) + 2} tools",
            g,
            "add",
            1,
            "manager.execute_tool_calls(big_prompt, one_add)",
            ns,
        ),
        Path_(
            "ours.model",
            "ours: execute_tool_calls, 1 call place_order(Order)",
            g,
            "model",
            1,
            "manager.execute_tool_calls(prompt, one_order)",
            ns,
        ),
        Path_(
            "ours.batch",
            f"ours: execute_tool_calls, {BATCH}-call batch of add (thread pool)",
            g,
            "batch",
            BATCH,
            "manager.execute_tool_calls(prompt, batch)",
            ns,
        ),
        Path_(
            "ours.batch_inline",
            f"ours: execute_tool_calls, {BATCH}-call batch, inline executor (no threads)",
            g,
            "batch",
            BATCH,
            "inline_manager.execute_tool_calls(prompt, batch)",
            ns,
        ),
        Path_(
            "ours.blocking",
            f"ours: execute_tool_calls, {BLOCKING_CALLS}-call batch of "
            f"wait({BLOCKING_S * 1000:g} ms) (thread pool)",
            g,
            "blocking",
            BLOCKING_CALLS,
            "manager.execute_tool_calls(wait_prompt, blocking)",
            ns,
        ),
        Path_(
            "ours.callback_add",
            "ours: FunctionToolCallback.call, add",
            g,
            "add",
            1,
            "cb_add.call(ADD_JSON)",
            ns,
        ),
        Path_(
            "ours.callback_model",
            "ours: FunctionToolCallback.call, place_order",
            g,
            "model",
            1,
            "cb_order.call(ORDER_JSON)",
            ns,
        ),
    ]


# -- observability: begin ------------------------------------------------------------------


def observability_paths() -> list[Path_]:
    """One call through execute_tool_calls, without and with its ``execute_tool`` span.

    The observed manager wraps each call as the governed manager does
    (``observability.tool_call``); benchmarks/_observability.py times both in one process per
    OpenTelemetry setup (none installed, API only, SDK).
    """
    from _observability import observed_manager, plain_manager

    callbacks = tool_callbacks(tool(add))
    prompt = Prompt("What is 17 + 25?", ToolCallingChatOptions(tool_callbacks=callbacks))
    one_add = _chat_response([("add", ADD_JSON)])
    plain, observed = plain_manager(), observed_manager()
    for manager in (plain, observed):
        last = manager.execute_tool_calls(prompt, one_add).conversation_history[-1]
        _check("observability add", last.responses[0].response_data, "42")
    ns = {"prompt": prompt, "one_add": one_add, "plain": plain, "observed": observed}
    return [
        Path_("baseline", "ours: execute_tool_calls, 1 call add(a, b), a wrapping manager",
              "ours", "add", 1,
              "plain.execute_tool_calls(prompt, one_add)", ns),
        Path_("observed", "the same inside an execute_tool span (observability.tool_call)",
              "ours", "add", 1, "observed.execute_tool_calls(prompt, one_add)", ns),
    ]  # fmt: skip


# -- observability: end --------------------------------------------------------------------


def baseline_paths() -> list[Path_]:
    order = Order(**ORDER_FIELDS)
    ns = {
        "add": add,
        "place_order": place_order,
        "Order": Order,
        "loads": json.loads,
        "a": ADD_ARGS["a"],
        "b": ADD_ARGS["b"],
        "order": order,
        "ADD_JSON": ADD_JSON,
        "ORDER_JSON": ORDER_JSON_NESTED,
        "BATCH_JSON": BATCH_JSON,
        "wait": wait,
        "WAIT_MS": round(BLOCKING_S * 1000),
        "BLOCKING_CALLS": BLOCKING_CALLS,
    }
    g = "baseline"
    return [
        Path_(
            "direct.blocking",
            f"direct: {BLOCKING_CALLS} x wait({BLOCKING_S * 1000:g} ms), one after another",
            g,
            "blocking",
            BLOCKING_CALLS,
            "[wait(WAIT_MS) for _ in range(BLOCKING_CALLS)]",
            ns,
        ),
        Path_("direct.add", "direct call add(a, b) (parsed args)", g, "add", 1, "add(a, b)", ns),
        Path_(
            "direct.model",
            "direct call place_order(order) (parsed model)",
            g,
            "model",
            1,
            "place_order(order)",
            ns,
        ),
        Path_(
            "glue.add",
            "hand glue: str(add(**json.loads(text)))",
            g,
            "add",
            1,
            "str(add(**loads(ADD_JSON)))",
            ns,
        ),
        Path_(
            "glue.model",
            "hand glue: str(place_order(Order.model_validate(json.loads(text)['order'])))",
            g,
            "model",
            1,
            "str(place_order(Order.model_validate(loads(ORDER_JSON)['order'])))",
            ns,
        ),
        Path_(
            "glue.batch",
            f"hand glue: {BATCH} x str(add(**json.loads(text)))",
            g,
            "batch",
            BATCH,
            "[str(add(**loads(t))) for t in BATCH_JSON]",
            ns,
        ),
    ]


def langchain_paths() -> list[Path_]:
    from langchain_core.tools import StructuredTool

    lc_add = StructuredTool.from_function(func=add)
    lc_order = StructuredTool.from_function(func=place_order)
    _check("langchain add", str(lc_add.invoke(json.loads(ADD_JSON))), "42")
    _check(
        "langchain order",
        str(lc_order.invoke(json.loads(ORDER_JSON_NESTED))),
        place_order(Order(**ORDER_FIELDS)),
    )
    ns = {
        "lc_add": lc_add,
        "lc_order": lc_order,
        "loads": json.loads,
        "ADD_JSON": ADD_JSON,
        "ORDER_JSON": ORDER_JSON_NESTED,
        "BATCH_JSON": BATCH_JSON,
    }
    g = "LangChain"
    return [
        Path_(
            "langchain.add",
            "LangChain: str(StructuredTool.invoke(json.loads(text))), add",
            g,
            "add",
            1,
            "str(lc_add.invoke(loads(ADD_JSON)))",
            ns,
        ),
        Path_(
            "langchain.model",
            "LangChain: StructuredTool.invoke, place_order",
            g,
            "model",
            1,
            "str(lc_order.invoke(loads(ORDER_JSON)))",
            ns,
        ),
        Path_(
            "langchain.batch",
            f"LangChain: {BATCH} x StructuredTool.invoke, sequential",
            g,
            "batch",
            BATCH,
            "[str(lc_add.invoke(loads(t))) for t in BATCH_JSON]",
            ns,
        ),
    ]


def agents_paths() -> list[Path_]:
    from agents import function_tool, set_tracing_disabled
    from agents.tool_context import ToolContext as AgentsToolContext

    set_tracing_disabled(True)
    tools = {
        "sync": (function_tool(add), function_tool(place_order)),
        "async": (
            function_tool(add_async, name_override="add"),
            function_tool(place_order_async, name_override="place_order"),
        ),
    }
    paths = []
    g = "OpenAI Agents"
    for kind, (t_add, t_order) in tools.items():
        # Built once, outside the timed loop (a run builds one per call): this favours the peer.
        ctx_add = AgentsToolContext(
            context=None, tool_name="add", tool_call_id="call_0", tool_arguments=ADD_JSON
        )
        ctx_order = AgentsToolContext(
            context=None,
            tool_name="place_order",
            tool_call_id="call_0",
            tool_arguments=ORDER_JSON_NESTED,
        )
        got = LOOP.run_until_complete(t_add.on_invoke_tool(ctx_add, ADD_JSON))
        _check(f"agents {kind} add", str(got), "42")
        got = LOOP.run_until_complete(t_order.on_invoke_tool(ctx_order, ORDER_JSON_NESTED))
        _check(f"agents {kind} order", str(got), place_order(Order(**ORDER_FIELDS)))
        ns = {
            "t_add": t_add,
            "t_order": t_order,
            "ctx_add": ctx_add,
            "ctx_order": ctx_order,
            "ADD_JSON": ADD_JSON,
            "ORDER_JSON": ORDER_JSON_NESTED,
            "BATCH_JSON": BATCH_JSON,
        }
        how = "def tool, run via asyncio.to_thread" if kind == "sync" else "async def tool"
        paths += [
            Path_(
                f"agents.{kind}.add",
                f"Agents SDK: on_invoke_tool, add ({how})",
                g,
                "add",
                1,
                "str(await t_add.on_invoke_tool(ctx_add, ADD_JSON))",
                ns,
                is_async=True,
            ),
            Path_(
                f"agents.{kind}.model",
                f"Agents SDK: on_invoke_tool, place_order ({how})",
                g,
                "model",
                1,
                "str(await t_order.on_invoke_tool(ctx_order, ORDER_JSON))",
                ns,
                is_async=True,
            ),
            Path_(
                f"agents.{kind}.batch",
                f"Agents SDK: {BATCH} x on_invoke_tool, sequential ({how})",
                g,
                "batch",
                BATCH,
                "[str(await t_add.on_invoke_tool(ctx_add, t)) for t in BATCH_JSON]",
                ns,
                is_async=True,
            ),
        ]
    return paths


def pydantic_ai_paths() -> list[Path_]:
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import RunUsage

    # Built once, outside the timed loop (a run builds per-call copies): this favours the peer.
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    toolsets = {
        "sync": FunctionToolset([add, place_order]),
        "async": FunctionToolset([add_async, place_order_async]),
    }
    paths = []
    g = "Pydantic AI"
    for kind, toolset in toolsets.items():
        tools = LOOP.run_until_complete(toolset.get_tools(ctx))  # once, as a run step does
        suffix = "" if kind == "sync" else "_async"
        t_add, t_order = tools["add" + suffix], tools["place_order" + suffix]

        async def call(t: Any, text: str, toolset: Any = toolset) -> str:
            args = t.args_validator.validate_json(text)
            return str(await toolset.call_tool(t.tool_def.name, args, ctx, t))

        _check(f"pydantic-ai {kind} add", LOOP.run_until_complete(call(t_add, ADD_JSON)), "42")
        _check(
            f"pydantic-ai {kind} order",
            LOOP.run_until_complete(call(t_order, ORDER_JSON_FLAT)),
            place_order(Order(**ORDER_FIELDS)),
        )
        ns = {
            "ts": toolset,
            "ctx": ctx,
            "t_add": t_add,
            "t_order": t_order,
            "ADD_JSON": ADD_JSON,
            "ORDER_JSON": ORDER_JSON_FLAT,
            "BATCH_JSON": BATCH_JSON,
        }
        how = "def tool, run in executor" if kind == "sync" else "async def tool"
        one = (
            "str(await ts.call_tool({n}.tool_def.name, "
            "{n}.args_validator.validate_json({j}), ctx, {n}))"
        )
        paths += [
            Path_(
                f"pydantic_ai.{kind}.add",
                f"Pydantic AI: validate_json + toolset.call_tool, add ({how})",
                g,
                "add",
                1,
                one.format(n="t_add", j="ADD_JSON"),
                ns,
                is_async=True,
            ),
            Path_(
                f"pydantic_ai.{kind}.model",
                f"Pydantic AI: validate_json + toolset.call_tool, place_order ({how})",
                g,
                "model",
                1,
                one.format(n="t_order", j="ORDER_JSON"),
                ns,
                is_async=True,
            ),
            Path_(
                f"pydantic_ai.{kind}.batch",
                f"Pydantic AI: {BATCH} x validate_json + call_tool, sequential ({how})",
                g,
                "batch",
                BATCH,
                "[" + one.format(n="t_add", j="t") + " for t in BATCH_JSON]",
                ns,
                is_async=True,
            ),
        ]
    return paths


# -- definitions ----------------------------------------------------------------------------


def _lookup_functions(tag: str) -> list[Any]:
    """500 fresh functions (never decorated) of the shapes tools usually have."""
    ns: dict[str, Any] = {}
    kinds = [("int", "10"), ("float", "1.5"), ("bool", "True"), ("str", "'x'")]
    src = "\n".join(
        f"def lookup_{tag}{i:03d}(query: str, limit: {kinds[i % 4][0]} = {kinds[i % 4][1]})"
        " -> str:\n"
        f"    '''Look something up in source {i}.'''\n"
        f"    return query\n"
        for i in range(N_DEFINITIONS)
    )
    exec(src, ns)  # noqa: S102 - fixed template
    return [ns[f"lookup_{tag}{i:03d}"] for i in range(N_DEFINITIONS)]


def definitions_benchmark(repeats: int) -> tuple[dict[str, Any], list[Any]]:
    """Time 500 @tool decorations, the definition builds, and the work deferred to first use.

    Decoration is timed on ``DECORATE_ROUNDS`` sets of 500 fresh functions (the median is the
    figure, the first round is shown too). Returns the timings (ms) and the callbacks of the
    first set (for the "request offers 502 tools" row).
    """
    rounds = []
    cpu_rounds = []
    sets = [_lookup_functions(f"r{n}_") for n in range(DECORATE_ROUNDS)]
    for functions in sets:
        t0, c0 = time.perf_counter(), time.process_time()
        for function in functions:
            tool(function)
        rounds.append(time.perf_counter() - t0)
        cpu_rounds.append(time.process_time() - c0)
    functions = sets[0]
    manager = DefaultToolCallingManager()

    def build() -> list[Any]:
        cbs = tool_callbacks(*functions)
        return manager.resolve_tool_definitions(ToolCallingChatOptions(tool_callbacks=cbs))

    t0 = time.perf_counter()
    definitions = build()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    build()
    second = time.perf_counter() - t0
    later = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        build()
        later.append(time.perf_counter() - t0)
    callbacks = tool_callbacks(*functions)
    # What @tool no longer does at import: each schema is built when first read (a request
    # offering the tool, the registry's sync), each validator at the tool's first call.
    t0 = time.perf_counter()
    schemas = [definition.input_schema for definition in definitions]
    first_schemas = time.perf_counter() - t0
    t0 = time.perf_counter()
    for callback in callbacks:
        callback.validate_arguments('{"query": "x"}')
    first_validations = time.perf_counter() - t0
    assert len(definitions) == N_DEFINITIONS
    assert schemas[7]["required"] == ["query"], schemas[7]
    return {
        "decorate_500_ms": statistics.median(rounds) * 1e3,
        "decorate_500_cpu_ms": statistics.median(cpu_rounds) * 1e3,
        "decorate_500_first_ms": rounds[0] * 1e3,
        "decorate_500_rounds_ms": [r * 1e3 for r in rounds],
        "decorate_500_cpu_rounds_ms": [r * 1e3 for r in cpu_rounds],
        "first_build_ms": first * 1e3,
        "first_total_ms": (rounds[0] + first) * 1e3,
        "second_build_ms": second * 1e3,
        "later_build_median_ms": statistics.median(later) * 1e3,
        "later_build_min_ms": min(later) * 1e3,
        "first_schemas_ms": first_schemas * 1e3,
        "first_validations_ms": first_validations * 1e3,
    }, callbacks


# -- instruction counts (callgrind) ---------------------------------------------------------

INSTRUCTION_PATHS = (
    "direct.add",
    "glue.add",
    "ours.add",
    "ours.add_many_tools",
    "ours.callback_add",
    "ours.batch",
    "pydantic_ai.async.add",
    "agents.async.add",
)
INSTRUCTION_CALLS = 2000


def _instruction_child(out: str) -> None:
    """Run under callgrind: each path's loop inside one ``functools.reduce``, one dump each.

    callgrind collects only inside ``functools_reduce`` and dumps when it returns, so every
    loop is measured on its own, setup and warm-up excluded; an empty loop of each kind (sync,
    async) is measured first and subtracted.
    """
    import functools

    many = tool_callbacks(*[tool(f) for f in _lookup_functions("i_")])
    chosen = [
        p
        for p in baseline_paths() + our_paths(many) + pydantic_ai_paths() + agents_paths()
        if p.key in INSTRUCTION_PATHS
    ]
    chosen.sort(key=lambda p: INSTRUCTION_PATHS.index(p.key))
    fresh = iter([f for n in range(5) for f in _lookup_functions(f"d{n}_")])
    chosen.append(
        Path_(
            "ours.decorate",
            "ours: @tool on a fresh function (per tool)",
            "ours",
            "definitions",
            1,
            "tool(next(fresh))",
            {"tool": tool, "fresh": fresh},
        )
    )
    empty = [
        Path_("empty.sync", "", "", "", 1, "pass", {}),
        Path_("empty.async", "", "", "", 1, "pass", {}, is_async=True),
    ]
    order = []
    for path in empty + chosen:
        run = _runner(path)
        number = max(1, INSTRUCTION_CALLS // path.calls)
        run(max(1, number // 10))  # warm: caches, specialised bytecode, thread pool
        gc.collect()
        functools.reduce(lambda _acc, _i, run=run, number=number: run(number), range(1), None)
        order.append(
            {
                "key": path.key,
                "label": path.label,
                "loops": number,
                "calls": path.calls,
                "is_async": path.is_async,
            }
        )
    Path(out).write_text(json.dumps(order))


def instruction_counts() -> tuple[list[dict[str, Any]], str] | None:
    """Instructions per call of the main paths, counted by callgrind (None without valgrind)."""
    import shutil
    import subprocess
    import tempfile

    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        dumps, order_file = f"{tmp}/callgrind.out", f"{tmp}/order.json"
        subprocess.run(
            [
                valgrind,
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=functools_reduce",
                "--dump-after=functools_reduce",
                f"--callgrind-out-file={dumps}",
                sys.executable,
                __file__,
                "--instructions-child",
                order_file,
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        order = json.loads(Path(order_file).read_text())
        totals = []
        for n in range(1, len(order) + 1):
            text = Path(f"{dumps}.{n}").read_text()
            totals.append(int(text.split("\ntotals: ", 1)[1].split()[0]))
        version = subprocess.run(
            [valgrind, "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    base = {
        "empty.sync": totals[0] / order[0]["loops"],
        "empty.async": totals[1] / order[1]["loops"],
    }
    rows = []
    for entry, total in list(zip(order, totals, strict=True))[2:]:
        per_loop = (
            total / entry["loops"] - base["empty.async" if entry["is_async"] else "empty.sync"]
        )
        rows.append({**entry, "instructions_per_call": per_loop / entry["calls"]})
    return rows, version


# -- report ---------------------------------------------------------------------------------


def _load() -> str:
    try:
        return " / ".join(f"{n:.2f}" for n in os.getloadavg())
    except OSError:
        return "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _profile(
    label: str, fn: Callable[[], Any], number: int, top: int = 25, warm: bool = True
) -> str:
    """cProfile ``fn`` called ``number`` times; return the top functions per call (Markdown)."""
    import cProfile
    import pstats

    for _ in range(max(1, number // 10) if warm else 0):
        fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(number):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.items():
        where = filename.replace(str(ROOT) + "/", "")
        if "site-packages/" in where:
            where = where.split("site-packages/", 1)[1]
        elif "/lib/python3" in where:
            where = "stdlib/" + where.split("/lib/python3", 1)[1].split("/", 1)[1]
        rows.append((cumtime, tottime, ncalls, f"{where}:{line}({name})"))
    rows.sort(reverse=True)
    lines = [
        f"### {label}: cProfile, {number} runs (the profiler inflates absolute numbers; "
        "read the shares)\n",
        "| cumulative µs/run | own µs/run | calls/run | function |",
        "|---:|---:|---:|---|",
    ]
    for cumtime, tottime, ncalls, where in rows[:top]:
        lines.append(
            f"| {cumtime / number * 1e6:.2f} | {tottime / number * 1e6:.2f} | "
            f"{ncalls / number:g} | `{where}` |"
        )
    return "\n".join(lines) + "\n"


def profiles(many: list[Any]) -> str:
    """Profile each of our paths: one call (1 and 502 tools offered), a batch, decoration."""
    callbacks = tool_callbacks(tool(add), tool(place_order))
    prompt = Prompt("What is 17 + 25?", ToolCallingChatOptions(tool_callbacks=callbacks))
    big_prompt = Prompt(
        "What is 17 + 25?", ToolCallingChatOptions(tool_callbacks=[*many, *callbacks])
    )
    manager = DefaultToolCallingManager()
    one_add = _chat_response([("add", ADD_JSON)])
    one_order = _chat_response([("place_order", ORDER_JSON_NESTED)])
    batch = _chat_response([("add", text) for text in BATCH_JSON])
    fresh = [_lookup_functions(f"p{n}_") for n in range(4)]

    def decorate() -> None:
        for function in fresh.pop():
            tool(function)

    return "\n".join(
        [
            _profile(
                "ours, execute_tool_calls, 1 call add",
                lambda: manager.execute_tool_calls(prompt, one_add),
                20000,
            ),
            _profile(
                f"ours, execute_tool_calls, 1 call add, request offers {len(many) + 2} tools",
                lambda: manager.execute_tool_calls(big_prompt, one_add),
                20000,
            ),
            _profile(
                "ours, execute_tool_calls, 1 call place_order",
                lambda: manager.execute_tool_calls(prompt, one_order),
                20000,
            ),
            _profile(
                f"ours, execute_tool_calls, {BATCH}-call batch of add (the caller's thread only: "
                "cProfile does not see the helpers)",
                lambda: manager.execute_tool_calls(prompt, batch),
                2000,
            ),
            _profile(
                f"ours, @tool on {N_DEFINITIONS} fresh functions",
                decorate,
                3,
                warm=False,
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    # Many short repeats rather than a few long ones: on a shared machine a busy spell then
    # falls on every path's repeats alike, and the medians compare.
    parser.add_argument("--repeats", type=int, default=21, help="timed repeats per path (median)")
    parser.add_argument(
        "--min-time", type=float, default=0.02, help="seconds per timed repeat of each path"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile each of our paths and print the top functions",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count the instructions per call of the main paths with callgrind (valgrind; "
        "a few minutes): the same on a busy machine as on an idle one",
    )
    parser.add_argument("--instructions-child", metavar="PATH", help=argparse.SUPPRESS)
    # -- observability: begin --------------------------------------------------------------
    parser.add_argument(
        "--observability",
        action="store_true",
        help="only the cost of tool_calling.observability, per OpenTelemetry setup",
    )
    args = parser.parse_args(argv)
    if args.instructions_child:
        _instruction_child(args.instructions_child)
        return 0
    if args.observability:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _observability import table

        return table("dispatch", repeats=max(args.repeats, 15), min_time=args.min_time)
    # -- observability: end ----------------------------------------------------------------

    started = time.perf_counter()
    # Definitions first, so "first time" is the first time this process decorates these tools.
    definitions, many = definitions_benchmark(repeats=20)
    paths = (
        baseline_paths()
        + our_paths(many)
        + langchain_paths()
        + agents_paths()
        + pydantic_ai_paths()
    )
    measure(paths, repeats=args.repeats, min_time=args.min_time)
    by_key = {p.key: p for p in paths}
    direct = {
        "add": by_key["direct.add"].us_per_call,
        "model": by_key["direct.model"].us_per_call,
        "blocking": by_key["direct.blocking"].us_per_call,
    }
    direct["batch"] = direct["add"]

    print("# Tool dispatch benchmark\n")
    print(
        f"- Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{platform.platform()}; load average at the start {_load()}"
    )
    print(
        "- Versions: "
        + ", ".join(
            f"{name} {_version(name)}"
            for name in (
                "pydantic",
                "langchain-core",
                "openai-agents",
                "pydantic-ai-slim",
                "openai",
            )
        )
    )
    print(
        f"- Each path: warm-up, calibrated loop of ~{args.min_time * 1e3:.0f} ms, "
        f"{args.repeats} repeats interleaved round-robin across paths; median shown "
        "(min in brackets); gc off while timing, as timeit does."
    )
    print(
        "- Async peers run on one persistent event loop: each repeat is a single "
        "`loop.run_until_complete` that awaits the call N times, so neither loop creation "
        "nor run_until_complete is timed. Their `def` tools go to a thread "
        "(asyncio.to_thread / run_in_executor) as the frameworks do; the `async def` rows show "
        "the same work without that hop. Peer contexts (ToolContext, RunContext) are built "
        "once outside the loop, which favours the peers."
    )
    print(
        f"- Batch rows: µs per call of a {BATCH}-call batch (total in the last column). Ours "
        "runs the batch in-process (the caller's thread plus pool helpers, 8 at most by "
        f"default); peers await the {BATCH} calls one after another. Blocking rows: "
        f"{BLOCKING_CALLS} calls of a tool that sleeps {BLOCKING_S * 1000:g} ms, against the "
        "same sleeps one after another."
    )
    print()
    print("| path | µs/call | overhead vs direct (µs) | × direct | batch total (µs) |")
    print("|---|---:|---:|---:|---:|")
    for case, title in (
        ("add", "1 call: add(a: int, b: int) -> int"),
        ("model", "1 call: place_order(order: Order) with a 10-field model"),
        ("batch", f"{BATCH}-call batch of add, per call"),
        ("blocking", f"{BLOCKING_CALLS}-call batch of a blocking tool, per call"),
    ):
        print(f"| **{title}** | | | | |")
        for path in paths:
            if path.case != case:
                continue
            us = path.us_per_call
            base = direct[case]
            total = f"{us * path.calls:.1f}" if path.calls > 1 else ""
            print(
                f"| {path.label} | {us:.2f} ({path.us_min:.2f}) | {us - base:+.2f} | "
                f"{us / base:.2f}× | {total} |"
            )
    print()
    print(
        f"Direct-call baseline for the batch rows: direct add(a, b), {direct['add']:.3f} µs; "
        f"for the blocking rows: one wait() in the sequence, {direct['blocking']:.0f} µs."
    )
    print()
    print(f"## Tool definitions for {N_DEFINITIONS} tools\n")
    print("| step | ms |\n|---|---:|")
    rounds = ", ".join(f"{r:.1f}" for r in definitions["decorate_500_rounds_ms"])
    cpu_rounds = ", ".join(f"{r:.1f}" for r in definitions["decorate_500_cpu_rounds_ms"])
    print(
        f"| @tool on {N_DEFINITIONS} functions (signature and type checks; schema and validator "
        f"deferred), median of {DECORATE_ROUNDS} fresh sets, CPU time ({cpu_rounds}) | "
        f"{definitions['decorate_500_cpu_ms']:.2f} |"
    )
    print(f"| the same, wall time ({rounds}) | {definitions['decorate_500_ms']:.2f} |")
    print(
        f"| first build: tool_callbacks(*fns) + resolve_tool_definitions | "
        f"{definitions['first_build_ms']:.3f} |"
    )
    print(f"| first time in all (decoration + first build) | {definitions['first_total_ms']:.2f} |")
    print(f"| second build | {definitions['second_build_ms']:.3f} |")
    print(
        f"| later builds, median of 20 (min) | {definitions['later_build_median_ms']:.3f} "
        f"({definitions['later_build_min_ms']:.3f}) |"
    )
    print(
        f"| deferred: first read of the {N_DEFINITIONS} input schemas (a request offering them) | "
        f"{definitions['first_schemas_ms']:.2f} |"
    )
    print(
        f"| deferred: first call's validation of each of the {N_DEFINITIONS} tools | "
        f"{definitions['first_validations_ms']:.2f} |"
    )
    print()

    # -- targets (every figure from this run)
    results: list[tuple[str, bool]] = []
    ours = by_key["ours.add"].us_per_call
    overhead = ours - direct["add"]
    results.append(
        (
            f"1. one call of add through execute_tool_calls: {overhead:.2f} µs over the direct "
            f"call <= {TARGET_OVERHEAD_US:g} µs",
            overhead <= TARGET_OVERHEAD_US,
        )
    )
    peer = by_key["pydantic_ai.async.add"]
    results.append(
        (
            f"1. one call of add through execute_tool_calls: {ours:.2f} µs <= {peer.label}, "
            f"{peer.us_per_call:.2f} µs (fastest repeats: {by_key['ours.add'].us_min:.2f} against "
            f"{peer.us_min:.2f} µs)",
            ours <= peer.us_per_call,
        )
    )
    many_tools = by_key["ours.add_many_tools"].us_per_call
    results.append(
        (
            f"2. the same call with {len(many) + 2} tools offered: {many_tools:.2f} µs = "
            f"{many_tools / ours:.2f}× the one-tool request <= {TARGET_MANY_TOOLS_RATIO:g}×",
            many_tools <= TARGET_MANY_TOOLS_RATIO * ours,
        )
    )
    batch = by_key["ours.batch"].us_per_call
    results.append(
        (
            f"3. a {BATCH}-call batch of add: {batch:.2f} µs per call = {batch / ours:.2f}× one "
            f"call <= {TARGET_BATCH_RATIO:g}×",
            batch <= TARGET_BATCH_RATIO * ours,
        )
    )
    blocking = by_key["ours.blocking"].us_per_call
    results.append(
        (
            f"3. concurrency kept: {BLOCKING_CALLS} blocking calls in one batch take "
            f"{blocking / direct['blocking']:.2f}× their time one after another "
            f"<= {TARGET_BLOCKING_RATIO:g}×",
            blocking <= TARGET_BLOCKING_RATIO * direct["blocking"],
        )
    )
    # CPU time: what decorating costs this process, whatever else the machine runs meanwhile
    # (the wall time is printed above; on an idle machine the two agree).
    decorate = definitions["decorate_500_cpu_ms"]
    results.append(
        (
            f"4. @tool on {N_DEFINITIONS} functions: {decorate:.1f} ms of CPU (median of "
            f"{DECORATE_ROUNDS} sets; wall {definitions['decorate_500_ms']:.1f} ms) "
            f"<= {TARGET_DECORATE_MS:g} ms",
            decorate <= TARGET_DECORATE_MS,
        )
    )
    print("## Targets\n")
    for text, ok in results:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    print()

    counted = instruction_counts() if args.instructions else None
    if args.instructions:
        print("## Instructions per call (callgrind)\n")
        if counted is None:
            print("valgrind is not installed: no instruction counts.\n")
        else:
            rows, version = counted
            print(
                f"Counted by {version} (`--tool=callgrind`), {INSTRUCTION_CALLS} calls per path "
                "after a warm-up, an empty loop subtracted; unlike times, these do not move with "
                "the machine's load.\n"
            )
            print("| path | instructions per call | × Pydantic AI (`async def`) |")
            print("|---|---:|---:|")
            peer = next(r for r in rows if r["key"] == "pydantic_ai.async.add")
            for row in rows:
                ratio = row["instructions_per_call"] / peer["instructions_per_call"]
                shown = "" if row["key"] == "ours.decorate" else f"{ratio:.2f}×"
                print(f"| {row['label']} | {row['instructions_per_call']:,.0f} | {shown} |")
            print()

    profile = profiles(many) if args.profile else None
    if profile:
        print("## Profile\n")
        print(profile)
    elapsed = time.perf_counter() - started
    print(f"Total benchmark time: {elapsed:.1f} s")

    if args.json:
        payload = {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "versions": {
                name: _version(name)
                for name in (
                    "pydantic",
                    "langchain-core",
                    "openai-agents",
                    "pydantic-ai-slim",
                    "openai",
                )
            },
            "settings": {"repeats": args.repeats, "min_time_s": args.min_time},
            "paths": [
                {
                    **{k: v for k, v in asdict(p).items() if k not in ("ns", "repeats")},
                    "us_per_call_median": p.us_per_call,
                    "us_per_call_min": p.us_min,
                    "overhead_vs_direct_us": p.us_per_call - direct[p.case],
                    "ratio_to_direct": p.us_per_call / direct[p.case],
                    "repeats_us_per_call": [r / p.calls * 1e6 for r in p.repeats],
                }
                for p in paths
            ],
            "definitions": definitions,
            "instructions": counted[0] if counted else None,
            "targets": [{"target": text, "pass": ok} for text, ok in results],
            "profile": profile,
            "elapsed_s": elapsed,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"Results written to {args.json}")
    return 1 if args.strict and not all(ok for _, ok in results) else 0


if __name__ == "__main__":
    sys.exit(main())
