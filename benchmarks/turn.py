"""Benchmark: the framework cost of one tool-calling turn, ours against Pydantic AI and Agents SDK.

One turn = the model asks for one tool call, the framework runs the tool and calls the model
again, the model answers with text. The model is an instant scripted stub in every framework, so
what is left is the framework. Each turn's time is compared with "direct": calling the same stub
twice and the same tool once by hand, with already-parsed arguments (the irreducible work).

A benchmark, not a test: it prints a Markdown table and PASS/FAIL lines for the targets of the
issue, and exits 0 unless it crashes (``--strict`` also exits 1 when a target is missed).

Timing is benchmarks/dispatch.py's (imported from it): warm-up, calibrated loops, repeats
interleaved round-robin across paths, median with min, gc off while timing; async paths are
awaited N times inside one ``run_until_complete`` of one persistent loop.

Run it through ``bash benchmarks/run.sh turn [--json PATH] [--profile] [--strict]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# dispatch sets the peers' tracing switches off before they are imported, puts the repository on
# sys.path and creates the persistent event loop (set as this thread's loop).
from dispatch import LOOP, ROOT, Path_, _profile, _version, measure  # noqa: E402

from tool_calling import (  # noqa: E402
    AssistantMessage,
    ChatClient,
    ChatModel,
    ChatResponse,
    Generation,
    Prompt,
    ToolCall,
    tool,
)
from tool_calling.testing import ScriptedChatModel, text, tool_call  # noqa: E402

TARGET_OVERHEAD_US = 500.0
QUESTION = "Weather in Oslo?"
CITY = "Oslo"
ARGS_JSON = json.dumps({"city": CITY}, separators=(",", ":"))
ANSWER = "It is sunny and 21 °C in Oslo."
TOOL_CALLS = [0]  # every get_weather call, all frameworks: each turn must run the tool once


# -- the tool (one function, offered to every framework) ------------------------------------


@tool
def get_weather(city: str) -> str:
    """Return the current weather in a city."""
    TOOL_CALLS[0] += 1
    return f"Sunny, 21 °C in {city}"


async def get_weather_async(city: str) -> str:
    """Return the current weather in a city."""
    TOOL_CALLS[0] += 1
    return f"Sunny, 21 °C in {city}"


# -- the instant models ---------------------------------------------------------------------


TOOL_RESPONSE = ChatResponse(
    [
        Generation(
            AssistantMessage(None, [ToolCall("call_1", "get_weather", ARGS_JSON)]),
            finish_reason="tool_calls",
        )
    ]
)
TEXT_RESPONSE = ChatResponse([Generation(AssistantMessage(ANSWER), finish_reason="stop")])
SCRIPT = [tool_call("get_weather", city=CITY), text(ANSWER)]


class InstantChatModel(ChatModel):
    """Ours: returns prebuilt responses (immutable), a tool call and the answer in turn."""

    def __init__(self) -> None:
        self._next = itertools.cycle((TOOL_RESPONSE, TEXT_RESPONSE)).__next__

    def call(self, prompt: Prompt) -> ChatResponse:
        return self._next()


def pydantic_ai_function() -> Any:
    """Pydantic AI: a FunctionModel function, a tool call and the answer in turn.

    ``async def`` so FunctionModel awaits it inline (a ``def`` would go to a worker thread);
    fresh parts per call because FunctionModel writes the model name and usage into the response.
    """
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    asks = itertools.cycle((True, False)).__next__

    async def weather_model(messages: Any, info: Any) -> ModelResponse:
        if asks():
            return ModelResponse(
                parts=[ToolCallPart("get_weather", ARGS_JSON, tool_call_id="call_1")]
            )
        return ModelResponse(parts=[TextPart(ANSWER)])

    return weather_model


def agents_model() -> Any:
    """OpenAI Agents SDK: a Model whose get_response gives a tool call and the answer in turn.

    The output items are prebuilt (pydantic models the runner only reads); the ModelResponse and
    its Usage are fresh per call because the runner adds usages up.
    """
    from agents import Model, ModelResponse, Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    call = ResponseFunctionToolCall(
        arguments=ARGS_JSON,
        call_id="call_1",
        name="get_weather",
        type="function_call",
        id="fc_1",
        status="completed",
    )
    message = ResponseOutputMessage(
        id="msg_1",
        content=[ResponseOutputText(annotations=[], text=ANSWER, type="output_text")],
        role="assistant",
        status="completed",
        type="message",
    )

    class ScriptedModel(Model):
        def __init__(self) -> None:
            outputs: list[list[Any]] = [[call], [message]]
            self._next = itertools.cycle(outputs).__next__

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            return ModelResponse(output=self._next(), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return ScriptedModel()


# -- paths ----------------------------------------------------------------------------------


@dataclass
class Turn(Path_):
    """One measured path; ``case`` is "baseline", "sync" or "async"."""

    base: str = ""  # key of the direct path subtracted from this one
    expect: Any = None  # what one evaluation must return (None: not checked)
    tool_calls: int = 1  # get_weather calls one evaluation must make
    family: str = ""  # which comparison this row belongs to, e.g. "reused"


def _evaluate(path: Turn) -> Any:
    """Evaluate the path's expression once (awaited on the persistent loop when async)."""
    if not path.is_async:
        return eval(path.stmt, path.ns)  # noqa: S307 - fixed expressions of this file
    ns = dict(path.ns)
    exec(f"async def _once():\n    return ({path.stmt})\n", ns)  # noqa: S102
    return LOOP.run_until_complete(ns["_once"]())


def check(path: Turn) -> None:
    before = TOOL_CALLS[0]
    got = _evaluate(path)
    ran = TOOL_CALLS[0] - before
    if ran != path.tool_calls:
        raise AssertionError(f"{path.label}: {ran} tool call(s), expected {path.tool_calls}")
    if path.expect is not None and got != path.expect:
        raise AssertionError(f"{path.label}: expected {path.expect!r}, got {got!r}")


def our_paths() -> list[Turn]:
    # The two prompts the model receives in a turn, recorded once, for the stubs' direct rows.
    prompts: list[Prompt] = []

    class Recording(InstantChatModel):
        def call(self, prompt: Prompt) -> ChatResponse:
            prompts.append(prompt)
            return super().call(prompt)

    ChatClient.create(Recording()).prompt(QUESTION).tools(get_weather).call()
    first, second = prompts
    reused = ChatClient.builder(InstantChatModel()).default_tools(get_weather).build()
    ns_direct = {"m": InstantChatModel(), "get_weather": get_weather, "CITY": CITY}
    ns_direct.update(P1=first, P2=second)
    ns_scripted = {
        "ScriptedChatModel": ScriptedChatModel,
        "SCRIPT": SCRIPT,
        "get_weather": get_weather,
        "CITY": CITY,
        "P1": first,
        "P2": second,
    }

    def ns(**more: Any) -> dict[str, Any]:
        return {"ChatClient": ChatClient, "get_weather": get_weather, "Q": QUESTION, **more}

    return [
        Turn("tool", "tool alone: get_weather(city)", "baseline", "baseline", 1,
             "get_weather(CITY)", ns_direct, expect="Sunny, 21 °C in Oslo"),
        Turn("stub.ours", "ours: instant ChatModel stub, 2 calls", "baseline", "baseline", 1,
             "(m.call(P1), m.call(P2))", ns_direct, tool_calls=0,
             expect=(TOOL_RESPONSE, TEXT_RESPONSE)),
        Turn("direct.ours", "direct: instant stub, get_weather, instant stub", "baseline",
             "baseline", 1, "(m.call(P1), get_weather(CITY), m.call(P2))[-1].result.output.text",
             ns_direct, expect=ANSWER),
        Turn("stub.scripted", "ours: ScriptedChatModel(script) + 2 calls", "baseline",
             "baseline", 1, "(_m := ScriptedChatModel(SCRIPT), _m.call(P1), _m.call(P2))[-1]"
             ".result.output.text", ns_scripted, tool_calls=0, expect=ANSWER),
        Turn("direct.scripted", "direct: ScriptedChatModel(script), call, get_weather, call",
             "baseline", "baseline", 1,
             "(_m := ScriptedChatModel(SCRIPT), _m.call(P1), get_weather(CITY), _m.call(P2))[-1]"
             ".result.output.text", ns_scripted, expect=ANSWER),
        Turn("ours.reused", "ours: client built once (builder, default_tools), "
             "client.prompt(q).call().content()", "ours", "sync", 1,
             "client.prompt(Q).call().content()", ns(client=reused),
             base="direct.ours", expect=ANSWER, family="reused"),
        Turn("ours.create", "ours: ChatClient.create(model).prompt(q).tools(get_weather)"
             ".call().content()", "ours", "sync", 1,
             "ChatClient.create(model).prompt(Q).tools(get_weather).call().content()",
             ns(model=InstantChatModel()), base="direct.ours", expect=ANSWER, family="per turn"),
        Turn("ours.builder", "ours: builder().default_tools(get_weather).build() per turn, "
             "then .prompt(q).call().content()", "ours", "sync", 1,
             "ChatClient.builder(model).default_tools(get_weather).build().prompt(Q).call()"
             ".content()", ns(model=InstantChatModel()), base="direct.ours", expect=ANSWER,
             family="per turn"),
        Turn("ours.scripted", "ours: ChatClient.create(ScriptedChatModel(script)) per turn, "
             ".tools(get_weather).call().content()", "ours", "sync", 1,
             "ChatClient.create(ScriptedChatModel(SCRIPT)).prompt(Q).tools(get_weather).call()"
             ".content()", ns(ScriptedChatModel=ScriptedChatModel, SCRIPT=SCRIPT),
             base="direct.scripted", expect=ANSWER),
        Turn("ours.async.reused", "ours: client built once, "
             "(await client.prompt(q).acall()).content()", "ours", "async", 1,
             "(await client.prompt(Q).acall()).content()",
             ns(client=ChatClient.builder(InstantChatModel()).default_tools(get_weather).build()),
             is_async=True, base="direct.ours", expect=ANSWER, family="reused"),
    ]  # fmt: skip


def pydantic_ai_paths() -> list[Turn]:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.function import FunctionModel

    def agent(tool_: Any = get_weather) -> Any:
        return Agent(FunctionModel(pydantic_ai_function()), tools=[tool_])

    ns = {"Q": QUESTION, "CITY": CITY, "get_weather": get_weather}
    per_turn = dict(
        ns, Agent=Agent, FunctionModel=FunctionModel, pydantic_ai_function=pydantic_ai_function
    )
    async_tool = Tool(get_weather_async, name="get_weather")
    g = "Pydantic AI"
    return [
        Turn("stub.pydantic_ai", "Pydantic AI: FunctionModel function, 2 awaited calls",
             "baseline", "baseline", 1, "(await f(None, None), await f(None, None))[-1].parts[0]"
             ".content", dict(ns, f=pydantic_ai_function()), is_async=True, tool_calls=0,
             expect=ANSWER),
        Turn("direct.pydantic_ai", "direct: FunctionModel function, get_weather, function "
             "(awaited)", "baseline", "baseline", 1,
             "(await f(None, None), get_weather(CITY), await f(None, None))[-1].parts[0].content",
             dict(ns, f=pydantic_ai_function()), is_async=True, expect=ANSWER),
        Turn("pydantic_ai.reused", "Pydantic AI: agent built once, agent.run_sync(q).output", g,
             "sync", 1, "agent.run_sync(Q).output", dict(ns, agent=agent()),
             base="direct.pydantic_ai", expect=ANSWER, family="reused"),
        Turn("pydantic_ai.per_turn", "Pydantic AI: Agent(FunctionModel(fn), tools=[get_weather]) "
             "per turn, .run_sync(q).output", g, "sync", 1,
             "Agent(FunctionModel(fn), tools=[get_weather]).run_sync(Q).output",
             dict(per_turn, fn=pydantic_ai_function()), base="direct.pydantic_ai",
             expect=ANSWER, family="per turn"),
        Turn("pydantic_ai.async.reused", "Pydantic AI: agent built once, "
             "(await agent.run(q)).output", g, "async", 1, "(await agent.run(Q)).output",
             dict(ns, agent=agent()), is_async=True, base="direct.pydantic_ai", expect=ANSWER,
             family="reused"),
        Turn("pydantic_ai.async.async_tool", "Pydantic AI: agent built once, "
             "(await agent.run(q)).output, `async def` tool", g, "async", 1,
             "(await agent.run(Q)).output", dict(ns, agent=agent(async_tool)), is_async=True,
             base="direct.pydantic_ai", expect=ANSWER, family="async tool"),
    ]  # fmt: skip


def agents_paths() -> list[Turn]:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    config = RunConfig(tracing_disabled=True)
    weather = function_tool(get_weather)
    weather_async = function_tool(get_weather_async, name_override="get_weather")

    def agent(tool_: Any = weather) -> Any:
        return Agent(name="weather", tools=[tool_], model=agents_model())

    ns = {"Q": QUESTION, "CITY": CITY, "get_weather": get_weather, "Runner": Runner, "cfg": config}
    m = agents_model()
    direct_ns = dict(ns, m=m, args=(None, QUESTION, None, [], None, [], None))
    direct_ns["kw"] = {"previous_response_id": None, "conversation_id": None, "prompt": None}
    g = "OpenAI Agents"
    return [
        Turn("stub.agents", "Agents SDK: scripted Model.get_response, 2 awaited calls",
             "baseline", "baseline", 1,
             "(await m.get_response(*args, **kw), await m.get_response(*args, **kw))[-1]"
             ".output[0].content[0].text", direct_ns, is_async=True, tool_calls=0, expect=ANSWER),
        Turn("direct.agents", "direct: scripted get_response, get_weather, get_response "
             "(awaited)", "baseline", "baseline", 1,
             "(await m.get_response(*args, **kw), get_weather(CITY), "
             "await m.get_response(*args, **kw))[-1].output[0].content[0].text",
             dict(direct_ns, m=agents_model()), is_async=True, expect=ANSWER),
        Turn("agents.reused", "Agents SDK: agent built once, "
             "Runner.run_sync(agent, q, run_config=tracing off).final_output", g, "sync", 1,
             "Runner.run_sync(agent, Q, run_config=cfg).final_output", dict(ns, agent=agent()),
             base="direct.agents", expect=ANSWER, family="reused"),
        Turn("agents.per_turn", "Agents SDK: Agent(name, tools=[function_tool(get_weather)], "
             "model) per turn, Runner.run_sync", g, "sync", 1,
             "Runner.run_sync(Agent(name='weather', tools=[weather], model=new_model()), Q, "
             "run_config=cfg).final_output",
             dict(ns, Agent=Agent, weather=weather, new_model=agents_model),
             base="direct.agents", expect=ANSWER, family="per turn"),
        Turn("agents.async.reused", "Agents SDK: agent built once, "
             "(await Runner.run(agent, q, ...)).final_output", g, "async", 1,
             "(await Runner.run(agent, Q, run_config=cfg)).final_output",
             dict(ns, agent=agent()), is_async=True, base="direct.agents", expect=ANSWER,
             family="reused"),
        Turn("agents.async.async_tool", "Agents SDK: agent built once, "
             "(await Runner.run(...)).final_output, `async def` tool", g, "async", 1,
             "(await Runner.run(agent, Q, run_config=cfg)).final_output",
             dict(ns, agent=agent(weather_async)), is_async=True, base="direct.agents",
             expect=ANSWER, family="async tool"),
    ]  # fmt: skip


# -- observability: begin ------------------------------------------------------------------


def observability_paths() -> list[Turn]:
    """Ours, client built once, without and with what governed turns add for observability.

    The observed client has the two advisors of ``governed_chat_client`` and runs its tool
    call inside the ``execute_tool`` span the governed manager opens. benchmarks/_observability.py
    times both in one process per OpenTelemetry setup (none installed, API only, SDK).
    """
    from _observability import observed_advisors, observed_manager, plain_manager

    plain = (
        ChatClient.builder(InstantChatModel())
        .default_tools(get_weather)
        .tool_calling_manager(plain_manager())
        .build()
    )
    model = InstantChatModel()
    observed = (
        ChatClient.builder(model)
        .default_tools(get_weather)
        .tool_calling_manager(observed_manager())
        .default_advisors(*observed_advisors(model))
        .build()
    )
    stmt = "client.prompt(Q).call().content()"
    return [
        Turn("baseline", "ours: client built once (a wrapping manager), .call().content()", "ours",
             "sync", 1, stmt, {"client": plain, "Q": QUESTION}, expect=ANSWER),
        Turn("observed", "the same with the turn and chat advisors and an execute_tool span",
             "ours", "sync", 1, stmt, {"client": observed, "Q": QUESTION}, expect=ANSWER),
    ]  # fmt: skip


# -- observability: end --------------------------------------------------------------------


# -- report ---------------------------------------------------------------------------------

VERSIONS = ("pydantic", "openai-agents", "pydantic-ai-slim", "openai")


def profiles() -> str:
    reused = ChatClient.builder(InstantChatModel()).default_tools(get_weather).build()
    model = InstantChatModel()
    return "\n".join(
        [
            _profile(
                "ours, client built once: client.prompt(q).call().content()",
                lambda: reused.prompt(QUESTION).call().content(),
                5000,
                top=40,
            ),
            _profile(
                "ours, ChatClient.create(model).prompt(q).tools(get_weather).call().content()",
                lambda: (
                    ChatClient.create(model).prompt(QUESTION).tools(get_weather).call().content()
                ),
                5000,
                top=40,
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats per path (median)")
    parser.add_argument(
        "--min-time", type=float, default=0.05, help="seconds per timed repeat of each path"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile our turn and print the top functions"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    # -- observability: begin --------------------------------------------------------------
    parser.add_argument(
        "--observability",
        action="store_true",
        help="only the cost of tool_calling.observability, per OpenTelemetry setup",
    )
    args = parser.parse_args(argv)
    if args.observability:
        from _observability import table

        return table("turn", repeats=max(args.repeats, 15), min_time=args.min_time)
    # -- observability: end ----------------------------------------------------------------

    started = time.perf_counter()
    paths = our_paths() + pydantic_ai_paths() + agents_paths()
    for path in paths:  # correctness first: the answer, and exactly one tool call per turn
        check(path)
    measure(paths, repeats=args.repeats, min_time=args.min_time)  # type: ignore[arg-type]
    for path in paths:  # and still so after thousands of turns (the stubs alternate)
        check(path)
    by_key = {p.key: p for p in paths}

    def overhead(p: Turn) -> float:
        return p.us_per_call - by_key[p.base].us_per_call

    print("# Turn benchmark: one tool round plus the answer\n")
    print(
        f"- Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{platform.platform()}"
    )
    print("- Versions: " + ", ".join(f"{name} {_version(name)}" for name in VERSIONS))
    print(
        f"- Each path: warm-up, calibrated loop of ~{args.min_time * 1e3:.0f} ms, "
        f"{args.repeats} repeats interleaved round-robin across paths; median shown "
        "(min in brackets); gc off while timing, as timeit does."
    )
    print(
        "- Every turn: the stub asks for get_weather(city='Oslo') (arguments as JSON text), the "
        "framework runs the tool (a `def`) and calls the stub again, the stub answers with text; "
        "every row is checked to return the answer with exactly one tool call, before and after "
        "timing. Overhead = the turn minus its own framework's direct row (the same stub called "
        "twice and the tool once by hand), so each stub's own cost is subtracted alike."
    )
    print(
        "- Async rows: awaited N times inside one `run_until_complete` of one persistent loop. "
        "The peers' `run_sync` reuse the thread's default loop (the same one) in these versions; "
        "they do not create a loop per call."
    )
    print()
    print("| path | µs/turn | overhead vs direct (µs) | × direct |")
    print("|---|---:|---:|---:|")
    sections = (
        ("baseline", "Baselines (direct work, no framework)"),
        ("sync", "Sync: one blocking call per turn"),
        ("async", "Async: awaited on one persistent event loop"),
    )
    for case, title in sections:
        print(f"| **{title}** | | | |")
        for p in paths:
            if p.case != case:
                continue
            us = f"{p.us_per_call:.2f} ({p.us_min:.2f})"
            if case == "baseline":
                print(f"| {p.label} | {us} | | |")
            else:
                base = by_key[p.base].us_per_call
                print(f"| {p.label} | {us} | {overhead(p):+.1f} | {p.us_per_call / base:.1f}× |")
    print()

    results: list[tuple[str, bool]] = []
    for key in ("ours.reused", "ours.create", "ours.builder", "ours.async.reused"):
        p = by_key[key]
        results.append(
            (
                f"ours overhead {overhead(p):.1f} µs < {TARGET_OVERHEAD_US:g} µs ({p.label})",
                overhead(p) < TARGET_OVERHEAD_US,
            )
        )
    for case, family, ours_key in (
        ("sync", "reused", "ours.reused"),
        ("sync", "per turn", "ours.create"),
        ("async", "reused", "ours.async.reused"),
        ("async", "async tool", "ours.async.reused"),
    ):
        ours = by_key[ours_key]
        peers = [p for p in paths if p.case == case and p.family == family and p.group != "ours"]
        fastest = min(peers, key=overhead)
        what = {
            "reused": "client/agent built once",
            "per turn": "client/agent built per turn",
            "async tool": "vs the peers' `async def` tool rows (no worker thread for the tool)",
        }[family]
        results.append(
            (
                f"ours below both peers, {case}, {what}: ours {overhead(ours):.1f} µs overhead "
                f"vs fastest peer {fastest.label} {overhead(fastest):.1f} µs",
                overhead(ours) < overhead(fastest),
            )
        )
    print("## Targets\n")
    for text_, ok in results:
        print(f"- {'PASS' if ok else 'FAIL'}: {text_}")
    print()

    profile = profiles() if args.profile else None
    if profile:
        print("## Profile\n")
        print(profile)
    elapsed = time.perf_counter() - started
    print(f"Total benchmark time: {elapsed:.1f} s")

    if args.json:
        payload = {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "versions": {name: _version(name) for name in VERSIONS},
            "settings": {"repeats": args.repeats, "min_time_s": args.min_time},
            "paths": [
                {
                    **{
                        f.name: getattr(p, f.name)
                        for f in fields(p)
                        if f.name not in ("ns", "repeats", "expect", "calls")
                    },
                    "us_per_turn_median": p.us_per_call,
                    "us_per_turn_min": p.us_min,
                    "overhead_vs_direct_us": overhead(p) if p.base else None,
                    "ratio_to_direct": p.us_per_call / by_key[p.base].us_per_call
                    if p.base
                    else None,
                    "repeats_us_per_turn": [r * 1e6 for r in p.repeats],
                }
                for p in paths
            ],
            "targets": [{"target": t, "pass": ok} for t, ok in results],
            "profile": profile,
            "elapsed_s": elapsed,
            "root": str(ROOT),
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"Results written to {args.json}")
    return 1 if args.strict and not all(ok for _, ok in results) else 0


if __name__ == "__main__":
    sys.exit(main())
