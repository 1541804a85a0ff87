"""DefaultToolCallingManager: resolution, lookup, history, return-direct, concurrency, strict mode.

S1 (exact lookup, no fallback), S5 (server-side context), R8 (one
response per call, in order, failures included). Concurrency is proven with barriers and
counters, never with timing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tool_calling import (
    AssistantMessage,
    ChatOptions,
    ChatResponse,
    DefaultToolCallingManager,
    DefaultToolExecutionExceptionProcessor,
    DelegatingToolCallbackResolver,
    FunctionToolCallback,
    Generation,
    Prompt,
    StaticToolCallbackResolver,
    SystemMessage,
    ToolCall,
    ToolCallback,
    ToolCallbackResolver,
    ToolCallingChatOptions,
    ToolCallingManager,
    ToolCallLimitBehavior,
    ToolCallLimits,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionEligibilityPredicate,
    ToolExecutionException,
    ToolExecutionResult,
    ToolResolutionError,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
    tool,
)
from tool_calling.core import _settings
from tool_calling.core.execution.eligibility import DefaultToolExecutionEligibilityPredicate
from tool_calling.exceptions import ToolArgumentsError

from ._builders import call, prompt_with, response_with, responses, run, texts

WAIT = 10  # seconds a barrier waits before declaring the calls did not overlap


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def echo(text: str = "default") -> str:
    """Echo the text."""
    return text


@tool(return_direct=True)
def final_answer(text: str) -> str:
    """Answer the user directly."""
    return text


@tool(return_direct=True)
def final_note() -> str:
    """Another direct answer."""
    return "note"


@tool
def fails() -> str:
    """Always fails."""
    raise RuntimeError("database is down")


ADD = FunctionToolCallback(add)
ECHO = FunctionToolCallback(echo)
FINAL = FunctionToolCallback(final_answer)
NOTE = FunctionToolCallback(final_note)
FAILS = FunctionToolCallback(fails)


def use_settings(**values: Any) -> None:
    settings = _settings.CoreSettings(**values)
    _settings.set_core_settings_provider(lambda: settings)


# -- resolving definitions -----------------------------------------------------------------------


def test_resolve_definitions_callbacks_first_then_tool_names() -> None:
    resolver = StaticToolCallbackResolver([ECHO, FINAL, ADD])
    manager = DefaultToolCallingManager(resolver=resolver)
    options = ToolCallingChatOptions(
        tool_callbacks=[ADD, FAILS], tool_names=["final_answer", "add", "echo"]
    )
    assert manager.resolve_tool_definitions(options) == [
        ADD.definition,
        FAILS.definition,
        FINAL.definition,
        ECHO.definition,
    ]


def test_resolve_definitions_of_options_without_tools() -> None:
    manager = DefaultToolCallingManager()
    assert manager.resolve_tool_definitions(None) == []
    assert manager.resolve_tool_definitions(ChatOptions("gpt")) == []
    assert manager.resolve_tool_definitions(ToolCallingChatOptions()) == []


def test_unknown_tool_name_raises_tool_resolution_error() -> None:
    manager = DefaultToolCallingManager(resolver=StaticToolCallbackResolver([ECHO]))
    options = ToolCallingChatOptions(tool_names=["echo", "nope"])
    with pytest.raises(
        ToolResolutionError, match=re.escape("No tool named 'nope' could be resolved")
    ):
        manager.resolve_tool_definitions(options)
    with pytest.raises(
        LookupError,
        match=re.escape("No tool named 'echo' could be resolved (the manager has no resolver)"),
    ):
        DefaultToolCallingManager().resolve_tool_definitions(
            ToolCallingChatOptions(tool_names=["echo"])
        )


def test_two_different_callbacks_with_one_name_are_rejected() -> None:
    other = FunctionToolCallback(lambda: "x", name="add")
    options = ToolCallingChatOptions(tool_callbacks=[ADD, other])
    with pytest.raises(ToolDefinitionError, match=re.escape("Duplicate tool name 'add'")):
        DefaultToolCallingManager().resolve_tool_definitions(options)


def test_the_same_callback_twice_is_one_tool() -> None:
    options = ToolCallingChatOptions(tool_callbacks=[ADD, ADD])
    assert DefaultToolCallingManager().resolve_tool_definitions(options) == [ADD.definition]


def test_manager_is_an_abstract_extension_point() -> None:
    with pytest.raises(TypeError):
        ToolCallingManager()  # type: ignore[abstract]


# -- executing: history, order, pairing -------------------------------------------------------


def test_history_is_prompt_then_assistant_then_one_tool_response_message() -> None:
    messages = [SystemMessage("Be brief."), UserMessage("2+3 and echo hi")]
    calls = [call("add", '{"a": 2, "b": 3}', id="c1"), call("echo", '{"text": "hi"}', id="c2")]
    prompt = prompt_with([ADD, ECHO], messages)
    chat_response = response_with(*calls)
    result = DefaultToolCallingManager().execute_tool_calls(prompt, chat_response)
    assert result.conversation_history == [
        *messages,
        chat_response.generations[0].output,
        ToolResponseMessage([ToolResponse("c1", "add", "5"), ToolResponse("c2", "echo", "hi")]),
    ]
    assert result.return_direct is False
    assert result.tool_responses == result.conversation_history[-1]
    assert prompt.messages == messages  # the prompt itself is not changed


def test_no_tool_calls_is_a_value_error() -> None:
    manager = DefaultToolCallingManager()
    prompt = prompt_with([ADD])
    message = "No tool call requested by the chat model"
    with pytest.raises(ValueError, match=re.escape(message)):
        manager.execute_tool_calls(prompt, ChatResponse([Generation(AssistantMessage("hi"))]))
    with pytest.raises(ValueError, match=re.escape(message)):
        manager.execute_tool_calls(prompt, ChatResponse([]))


def test_the_first_generation_with_tool_calls_is_used() -> None:
    first = Generation(AssistantMessage("thinking"))
    second = Generation(AssistantMessage(tool_calls=[call("echo", '{"text": "2nd"}')]))
    third = Generation(AssistantMessage(tool_calls=[call("echo", '{"text": "3rd"}')]))
    result = DefaultToolCallingManager().execute_tool_calls(
        prompt_with([ECHO]), ChatResponse([first, second, third])
    )
    assert result.conversation_history[-2] is second.output
    assert texts(result) == ["2nd"]


@pytest.mark.parametrize("arguments", [None, "", "   ", "\n"])
def test_blank_arguments_mean_an_empty_object(arguments: str | None) -> None:
    result = run(DefaultToolCallingManager(), [ECHO], call("echo", arguments))
    assert texts(result) == ["default"]


def test_aexecute_tool_calls() -> None:
    manager = DefaultToolCallingManager()
    result = asyncio.run(
        manager.aexecute_tool_calls(prompt_with([ADD]), response_with(call("add", '{"a":1,"b":1}')))
    )
    assert texts(result) == ["2"]


# -- lookup (S1) -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["Add", "add ", " add", "\u0430dd", "ADD", "add\u200b", "delete_all", "server__add", "add.x"],
    ids=[
        "capital",
        "trailing-space",
        "leading-space",
        "cyrillic-a",
        "upper",
        "zero-width",
        "delete_all",
        "other-server",
        "suffix",
    ],
)
def test_lookup_is_exact_and_case_sensitive(name: str) -> None:
    """S1: only the request's tools, by exact name; near-misses never run anything."""
    ran: list[str] = []
    spy = FunctionToolCallback(lambda: ran.append("add") or "ran", name="add")
    result = run(DefaultToolCallingManager(), [spy], call(name, id="x"))
    assert ran == []
    assert responses(result) == [
        ToolResponse(
            "x",
            name,
            f"Unknown or disabled tool {name!r}. Available tools: add. "
            "Call one of these by its exact name.",
            is_error=True,
        )
    ]


def test_unknown_tool_text_with_no_tools_and_a_long_name() -> None:
    long_name = "x" * 200
    result = run(DefaultToolCallingManager(), [], call(long_name))
    assert texts(result) == [
        f"Unknown or disabled tool {'x' * 80 + '...'!r}. Available tools: none. "
        "Call one of these by its exact name."
    ]


def test_the_batch_goes_on_after_an_unknown_tool() -> None:
    result = run(
        DefaultToolCallingManager(),
        [ADD],
        call("nope", id="1"),
        call("add", '{"a": 1, "b": 2}', id="2"),
    )
    assert [(r.id, r.is_error) for r in responses(result)] == [("1", True), ("2", False)]
    assert texts(result)[1] == "3"


def test_tool_names_are_looked_up_through_the_resolver() -> None:
    manager = DefaultToolCallingManager(resolver=StaticToolCallbackResolver([ADD]))
    prompt = Prompt("go", ToolCallingChatOptions(tool_names=["add"]))
    result = manager.execute_tool_calls(prompt, response_with(call("add", '{"a": 4, "b": 4}')))
    assert texts(result) == ["8"]


def test_resolution_fallback_is_off_by_default() -> None:
    """S1: a tool the resolver knows but the request did not offer never runs."""
    ran: list[str] = []
    hidden = FunctionToolCallback(lambda: ran.append("x") or "ran", name="delete_all")
    manager = DefaultToolCallingManager(resolver=StaticToolCallbackResolver([hidden]))
    result = run(manager, [ECHO], call("delete_all"))
    assert ran == []
    assert responses(result)[0].is_error is True
    assert texts(result)[0].startswith("Unknown or disabled tool 'delete_all'.")


def test_resolution_fallback_on_consults_the_resolver() -> None:
    manager = DefaultToolCallingManager(
        resolver=StaticToolCallbackResolver([ADD]), resolution_fallback_enabled=True
    )
    result = run(manager, [ECHO], call("add", '{"a": 1, "b": 1}'), call("missing"))
    assert texts(result)[0] == "2"
    assert texts(result)[1] == (
        "Unknown or disabled tool 'missing'. Available tools: echo. "
        "Call one of these by its exact name."
    )


# -- return direct ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("callbacks", "calls", "expected"),
    [
        ([FINAL], [call("final_answer", '{"text": "42"}')], True),
        ([FINAL, NOTE], [call("final_answer", '{"text": "a"}'), call("final_note")], True),
        ([FINAL, ECHO], [call("final_answer", '{"text": "a"}'), call("echo")], False),
        ([ECHO], [call("echo")], False),
        ([FINAL], [call("final_answer", '{"text": "a"}'), call("ghost")], False),
        ([FINAL], [call("final_answer", '{"text": "a"}'), call("final_answer", "{}")], False),
    ],
    ids=["one", "all", "mixed", "none", "with-unknown-tool", "with-bad-arguments"],
)
def test_return_direct_only_when_every_call_ran_a_return_direct_tool(
    callbacks: list[ToolCallback], calls: list[ToolCall], expected: bool
) -> None:
    assert run(DefaultToolCallingManager(), callbacks, *calls).return_direct is expected


def test_return_direct_limit_breach_is_not_an_answer() -> None:
    limits = ToolCallLimits(
        max_calls_per_tool=1, on_limit_exceeded=ToolCallLimitBehavior.RETURN_ERROR_RESPONSE
    )
    result = run(
        DefaultToolCallingManager(limits=limits), [NOTE], call("final_note"), call("final_note")
    )
    assert result.return_direct is False


def test_build_generations() -> None:
    result = run(
        DefaultToolCallingManager(),
        [FINAL, NOTE],
        call("final_answer", '{"text": "42"}', id="a"),
        call("final_note", id="b"),
    )
    generations = ToolExecutionResult.build_generations(result)
    assert generations == [
        Generation(
            AssistantMessage("42"),
            finish_reason="returnDirect",
            metadata={"toolId": "a", "toolName": "final_answer"},
        ),
        Generation(
            AssistantMessage("note"),
            finish_reason="returnDirect",
            metadata={"toolId": "b", "toolName": "final_note"},
        ),
    ]


def test_build_generations_of_a_history_without_tool_responses() -> None:
    assert ToolExecutionResult.build_generations(ToolExecutionResult([UserMessage("hi")])) == []
    assert ToolExecutionResult([]).tool_responses is None


# -- tool context (S5) ---------------------------------------------------------------------------


def test_tool_context_reaches_every_call_and_never_the_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    def tenant_report(period: str, ctx: ToolContext) -> str:
        seen.append(ctx)
        return f"{ctx['tenant_id']}:{period}"

    callback = FunctionToolCallback(tenant_report)
    manager = DefaultToolCallingManager()
    options_context = {"tenant_id": "acme", "user_id": 5}
    (definition,) = manager.resolve_tool_definitions(
        ToolCallingChatOptions(tool_callbacks=[callback], tool_context=options_context)
    )
    assert list(definition.input_schema["properties"]) == ["period"]
    assert "tenant_id" not in str(definition)
    result = run(
        manager,
        [callback],
        call("tenant_report", '{"period": "q1"}'),
        call("tenant_report", '{"period": "q2"}'),
        tool_context=options_context,
    )
    assert texts(result) == ["acme:q1", "acme:q2"]
    assert all(isinstance(ctx, ToolContext) for ctx in seen)
    with pytest.raises(TypeError):
        seen[0]["tenant_id"] = "evil"  # type: ignore[index]


def test_model_arguments_cannot_override_the_context() -> None:
    """S5: a prompt-injected ``tenant_id`` argument is rejected, the tool never sees it."""
    ran: list[Any] = []

    @tool
    def tenant_report(ctx: ToolContext) -> str:
        ran.append(ctx["tenant_id"])
        return "report"

    result = run(
        DefaultToolCallingManager(),
        [FunctionToolCallback(tenant_report)],
        call("tenant_report", '{"tenant_id": "victim"}'),
        call("tenant_report", '{"ctx": {"tenant_id": "victim"}}'),
        call("tenant_report", "{}"),
        tool_context={"tenant_id": "acme"},
    )
    assert texts(result) == [
        "Invalid arguments for tool 'tenant_report':\n- tenant_id: Unknown parameter; remove it",
        "Invalid arguments for tool 'tenant_report':\n- ctx: Unknown parameter; remove it",
        "report",
    ]
    assert ran == ["acme"]


# -- concurrency -------------------------------------------------------------------------------


def test_a_single_call_runs_inline_in_the_callers_thread() -> None:
    threads: list[int] = []
    callback = FunctionToolCallback(lambda: threads.append(threading.get_ident()) or "ok", name="t")
    run(DefaultToolCallingManager(), [callback], call("t"))
    assert threads == [threading.get_ident()]


def test_the_calls_of_one_batch_overlap() -> None:
    """Four calls meet at a barrier of four: only possible if all four run at the same time.

    The caller's thread is one of the four: it takes calls too, while helpers join it.
    """
    barrier = threading.Barrier(4, timeout=WAIT)
    threads: set[int] = set()

    def meet() -> str:
        threads.add(threading.get_ident())
        return str(barrier.wait())

    callback = FunctionToolCallback(meet, name="meet")
    result = run(
        DefaultToolCallingManager(max_concurrent_calls=4),
        [callback],
        *[call("meet") for _ in range(4)],
    )
    assert sorted(texts(result)) == ["0", "1", "2", "3"]
    assert len(threads) == 4
    assert threading.get_ident() in threads


class ConcurrencyProbe:
    """Counts the calls running at once and checks that they never exceed ``limit``.

    The first calls wait (up to ``HOLD`` seconds) for a call number ``limit + 1`` to join them
    while they run, which a pool bounded at ``limit`` never allows. So ``max_running`` shows that
    ``limit`` calls ran together (they were all waiting at once), and ``too_many`` stays false
    unless the bound was broken; a broken bound is seen at once, without waiting.
    """

    HOLD = 0.3

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.condition = threading.Condition()
        self.running = 0
        self.max_running = 0
        self.too_many = False
        self.checked = False

    def sync_tool(self) -> str:
        with self.condition:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.condition.notify_all()
            if not self.checked:
                if self.condition.wait_for(lambda: self.running > self.limit, self.HOLD):
                    self.too_many = True
                self.checked = True
            self.running -= 1
        return "ok"

    async def async_tool(self) -> str:
        return await asyncio.to_thread(self.sync_tool)


@pytest.mark.parametrize("bound", [1, 3])
def test_the_bound_is_respected_exactly(bound: int) -> None:
    """``bound`` calls run at once, never more (a counter, not timing, decides)."""
    probe = ConcurrencyProbe(bound)
    callback = FunctionToolCallback(probe.sync_tool, name="probe")
    manager = DefaultToolCallingManager(max_concurrent_calls=bound)
    result = run(manager, [callback], *[call("probe") for _ in range(bound * 2 + 1)])
    assert texts(result) == ["ok"] * (bound * 2 + 1)
    assert probe.too_many is False
    assert probe.max_running == bound


def test_the_bound_comes_from_the_settings() -> None:
    use_settings(max_concurrent_calls=2)
    probe = ConcurrencyProbe(2)
    callback = FunctionToolCallback(probe.sync_tool, name="probe")
    result = run(DefaultToolCallingManager(), [callback], *[call("probe") for _ in range(5)])
    assert texts(result) == ["ok"] * 5
    assert (probe.too_many, probe.max_running) == (False, 2)


def test_the_bound_covers_sync_and_async_calls_together() -> None:
    probe = ConcurrencyProbe(2)
    sync_cb = FunctionToolCallback(probe.sync_tool, name="sync_probe")
    async_cb = FunctionToolCallback(probe.async_tool, name="async_probe")
    calls = [call("sync_probe"), call("async_probe")] * 3
    result = run(DefaultToolCallingManager(max_concurrent_calls=2), [sync_cb, async_cb], *calls)
    assert texts(result) == ["ok"] * 6
    assert (probe.too_many, probe.max_running) == (False, 2)


def test_async_tools_respect_the_bound() -> None:
    probe = ConcurrencyProbe(2)
    callback = FunctionToolCallback(probe.async_tool, name="probe")
    result = run(
        DefaultToolCallingManager(max_concurrent_calls=2),
        [callback],
        *[call("probe") for _ in range(5)],
    )
    assert texts(result) == ["ok"] * 5
    assert (probe.too_many, probe.max_running) == (False, 2)


def test_async_tools_run_together_on_an_event_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    threads: set[int] = set()
    arrived = 0
    all_arrived: asyncio.Event | None = None

    async def gather_point() -> str:
        nonlocal arrived, all_arrived
        loops.append(asyncio.get_running_loop())
        threads.add(threading.get_ident())
        if all_arrived is None:
            all_arrived = asyncio.Event()
        arrived += 1
        if arrived == 4:
            all_arrived.set()
        await asyncio.wait_for(all_arrived.wait(), WAIT)  # only if all four are in flight
        return "met"

    callback = FunctionToolCallback(gather_point, name="gather_point")
    result = run(
        DefaultToolCallingManager(max_concurrent_calls=4),
        [callback],
        *[call("gather_point") for _ in range(4)],
    )
    assert texts(result) == ["met"] * 4
    assert len(set(map(id, loops))) == 1  # one loop
    assert len(threads) == 1  # its thread
    assert threading.get_ident() not in threads


def test_a_single_async_call_runs_on_the_loop_not_in_the_caller() -> None:
    where: list[int] = []

    async def one() -> str:
        where.append(threading.get_ident())
        asyncio.get_running_loop()
        return "ok"

    result = run(DefaultToolCallingManager(), [FunctionToolCallback(one, name="one")], call("one"))
    assert texts(result) == ["ok"]
    assert where != [threading.get_ident()]


def test_responses_keep_call_order_with_random_delays() -> None:
    """R8: calls finishing in any order still answer in request order, paired by id."""
    rng = random.Random(1234)
    delays = [rng.uniform(0, 0.02) for _ in range(12)]

    def slow(i: int) -> str:
        time.sleep(delays[i])
        return f"r{i}"

    callback = FunctionToolCallback(slow, name="slow")
    calls = [call("slow", f'{{"i": {i}}}', id=f"id{i}") for i in range(12)]
    result = run(DefaultToolCallingManager(max_concurrent_calls=6), [callback], *calls)
    assert [(r.id, r.response_data) for r in responses(result)] == [
        (f"id{i}", f"r{i}") for i in range(12)
    ]


def test_one_failing_call_among_parallel_calls() -> None:
    """R8: five parallel calls, one raising: five responses in order, the failure an error."""
    barrier = threading.Barrier(5, timeout=WAIT)

    def work(i: int) -> str:
        barrier.wait()
        if i == 2:
            raise ValueError(f"item {i} is broken")
        return f"done {i}"

    callback = FunctionToolCallback(work, name="work")
    calls = [call("work", f'{{"i": {i}}}', id=f"c{i}") for i in range(5)]
    result = run(DefaultToolCallingManager(max_concurrent_calls=5), [callback], *calls)
    assert responses(result) == [
        ToolResponse("c0", "work", "done 0"),
        ToolResponse("c1", "work", "done 1"),
        ToolResponse("c2", "work", "item 2 is broken", is_error=True),
        ToolResponse("c3", "work", "done 3"),
        ToolResponse("c4", "work", "done 4"),
    ]


def test_context_variables_reach_worker_threads() -> None:
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")
    callback = FunctionToolCallback(lambda: request_id.get(), name="rid")
    token = request_id.set("req-7")
    try:
        result = run(DefaultToolCallingManager(), [callback], call("rid"), call("rid"))
    finally:
        request_id.reset(token)
    assert texts(result) == ["req-7", "req-7"]


def test_batches_of_concurrent_turns_do_not_share_one_bound() -> None:
    """Two turns at once each run their own batch fully in parallel (no shared, global pool)."""
    barrier = threading.Barrier(4, timeout=WAIT)  # two calls from each of two turns
    callback = FunctionToolCallback(lambda: str(barrier.wait() >= 0), name="meet")
    manager = DefaultToolCallingManager(max_concurrent_calls=2)

    def turn() -> list[str]:
        return texts(run(manager, [callback], call("meet"), call("meet")))

    with concurrent.futures.ThreadPoolExecutor(2) as outer:
        results = [f.result(timeout=WAIT * 2) for f in [outer.submit(turn), outer.submit(turn)]]
    assert results == [["True", "True"], ["True", "True"]]


def test_a_tool_that_runs_tools_does_not_deadlock() -> None:
    """An agent used as a tool: outer calls fill the bound, each runs an inner batch."""
    manager = DefaultToolCallingManager(max_concurrent_calls=2)

    def agent(topic: str) -> str:
        inner = run(
            manager,
            [ECHO],
            call("echo", f'{{"text": "{topic}-1"}}'),
            call("echo", f'{{"text": "{topic}-2"}}'),
        )
        return ",".join(texts(inner))

    callback = FunctionToolCallback(agent, name="agent")
    result = run(manager, [callback], *[call("agent", f'{{"topic": "t{i}"}}') for i in range(2)])
    assert texts(result) == ["t0-1,t0-2", "t1-1,t1-2"]


# -- executors -----------------------------------------------------------------------------------


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=4, thread_name_prefix="custom-exec")
        self.submitted = 0

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def custom_executor() -> Iterator[CountingExecutor]:
    executor = CountingExecutor()
    yield executor
    executor.shutdown(wait=True)


def test_a_custom_executor_runs_every_call(custom_executor: CountingExecutor) -> None:
    names: list[str] = []
    callback = FunctionToolCallback(
        lambda: names.append(threading.current_thread().name) or "ok", name="where"
    )
    manager = DefaultToolCallingManager(executor=custom_executor)
    result = run(
        manager, [callback, ADD], call("where"), call("add", '{"a": 1, "b": 2}'), call("where")
    )
    assert texts(result) == ["ok", "3", "ok"]
    assert custom_executor.submitted == 3
    assert all(name.startswith("custom-exec") for name in names)
    single = run(manager, [callback], call("where"))
    assert texts(single) == ["ok"]
    assert custom_executor.submitted == 4  # even a single call goes to the executor


def test_custom_executor_failures_become_error_responses(custom_executor: CountingExecutor) -> None:
    result = run(
        DefaultToolCallingManager(executor=custom_executor),
        [FAILS, ECHO],
        call("fails"),
        call("echo"),
    )
    assert responses(result)[0].response_data == "database is down"
    assert responses(result)[0].is_error is True
    assert texts(result)[1] == "default"


def test_a_tool_call_executor_sees_the_call() -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    class RemoteExecutor:
        def submit_tool_call(
            self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
        ) -> concurrent.futures.Future[str]:
            seen.append((callback.definition.name, tool_call.arguments, dict(tool_context)))
            future: concurrent.futures.Future[str] = concurrent.futures.Future()
            if tool_call.name == "fails":
                future.set_exception(RuntimeError("worker lost"))
            else:
                future.set_result(f"remote {tool_call.id}")
            return future

    manager = DefaultToolCallingManager(executor=RemoteExecutor())  # type: ignore[arg-type]
    result = run(
        manager,
        [ECHO, FAILS],
        call("echo", '{"text": "x"}', id="e1"),
        call("fails", id="f1"),
        tool_context={"k": "v"},
    )
    assert seen == [("echo", '{"text": "x"}', {"k": "v"}), ("fails", "{}", {"k": "v"})]
    assert responses(result) == [
        ToolResponse("e1", "echo", "remote e1"),
        ToolResponse("f1", "fails", "worker lost", is_error=True),
    ]


# -- tool exceptions -----------------------------------------------------------------------------


def test_tool_exception_message_goes_to_the_model(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("ERROR", logger="tool_calling.execution"):
        result = run(DefaultToolCallingManager(), [FAILS], call("fails", id="f"))
    assert responses(result) == [ToolResponse("f", "fails", "database is down", is_error=True)]
    (record,) = [r for r in caplog.records if r.name == "tool_calling.execution"]
    assert record.getMessage() == "Tool 'fails' (call f) raised RuntimeError"
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError  # traceback logged


def test_exception_processor_always_throw() -> None:
    manager = DefaultToolCallingManager(
        exception_processor=DefaultToolExecutionExceptionProcessor(always_throw=True)
    )
    with pytest.raises(ToolExecutionException, match="database is down") as info:
        run(manager, [FAILS], call("fails"))
    assert info.value.tool_definition == FAILS.definition


def test_throw_exception_on_error_setting() -> None:
    use_settings(throw_exception_on_error=True)
    with pytest.raises(ToolExecutionException, match="database is down"):
        run(DefaultToolCallingManager(), [FAILS], call("fails"))


def test_exception_processor_rethrows_the_cause() -> None:
    manager = DefaultToolCallingManager(
        exception_processor=DefaultToolExecutionExceptionProcessor(rethrown=[RuntimeError])
    )
    with pytest.raises(RuntimeError, match="database is down"):
        run(manager, [FAILS], call("fails"))


# -- strict tool calls ---------------------------------------------------------------------------


def test_strict_manager_raises_on_bad_arguments() -> None:
    manager = DefaultToolCallingManager(strict_tool_calls=True)
    message = "Invalid arguments for tool 'add':\n- b: Field required"
    with pytest.raises(ToolArgumentsError, match=re.escape(message)) as info:
        run(manager, [ADD], call("add", '{"a": 1}'))
    assert info.value.tool_name == "add"


def test_strict_manager_raises_on_unknown_tools_before_running_anything() -> None:
    ran: list[str] = []
    spy = FunctionToolCallback(lambda: ran.append("x") or "ok", name="spy")
    manager = DefaultToolCallingManager(strict_tool_calls=True)
    message = (
        "Unknown or disabled tool 'Spy'. Available tools: spy. Call one of these by its exact name."
    )
    with pytest.raises(ToolResolutionError, match=re.escape(message)):
        run(manager, [spy], call("spy"), call("Spy"))
    assert ran == []


def test_strict_tool_calls_from_the_settings() -> None:
    use_settings(strict_tool_calls=True)
    with pytest.raises(ToolArgumentsError):
        run(DefaultToolCallingManager(), [ADD], call("add", "not json"))
    with pytest.raises(ToolResolutionError):
        run(DefaultToolCallingManager(), [ADD], call("sub"))
    lenient = DefaultToolCallingManager(strict_tool_calls=False)  # the argument wins
    assert responses(run(lenient, [ADD], call("sub")))[0].is_error is True


def test_without_strict_the_same_inputs_are_error_responses() -> None:
    result = run(DefaultToolCallingManager(), [ADD], call("add", "not json"), call("sub"))
    assert [r.is_error for r in responses(result)] == [True, True]


# -- eligibility --------------------------------------------------------------------------------


def test_default_eligibility_predicate() -> None:
    predicate: ToolExecutionEligibilityPredicate = DefaultToolExecutionEligibilityPredicate()
    with_calls = response_with(call("add"))
    without_calls = ChatResponse([Generation(AssistantMessage("hi"))])
    assert predicate(None, with_calls) is True
    assert predicate(ChatOptions(), with_calls) is True
    assert predicate(ToolCallingChatOptions(), with_calls) is True
    assert (
        predicate(ToolCallingChatOptions(internal_tool_execution_enabled=True), with_calls) is True
    )
    assert (
        predicate(ToolCallingChatOptions(internal_tool_execution_enabled=False), with_calls)
        is False
    )
    assert predicate(ToolCallingChatOptions(), without_calls) is False
    assert predicate(ToolCallingChatOptions(), None) is False
    assert predicate.test(None, with_calls) is True


def test_eligibility_predicate_is_abstract() -> None:
    with pytest.raises(TypeError):
        ToolExecutionEligibilityPredicate()  # type: ignore[abstract]


# -- resolvers ---------------------------------------------------------------------------------


def test_static_resolver_is_exact_and_case_sensitive() -> None:
    resolver = StaticToolCallbackResolver([ADD, ECHO])
    assert resolver.resolve("add") is ADD
    assert resolver.resolve("Add") is None
    assert resolver.resolve("add ") is None
    assert resolver.resolve("\u0430dd") is None
    assert resolver.tool_names == ["add", "echo"]


def test_static_resolver_rejects_duplicates() -> None:
    other = FunctionToolCallback(lambda: "", name="Echo")
    with pytest.raises(
        ToolDefinitionError, match=re.escape("Tool names 'echo' and 'Echo' differ only in case")
    ):
        StaticToolCallbackResolver([ECHO, other])


def test_delegating_resolver_asks_in_order() -> None:
    other_echo = FunctionToolCallback(lambda: "other", name="echo")

    class Nothing(ToolCallbackResolver):
        def resolve(self, tool_name: str) -> ToolCallback | None:
            return None

    resolver = DelegatingToolCallbackResolver(
        [
            Nothing(),
            StaticToolCallbackResolver([ECHO]),
            StaticToolCallbackResolver([other_echo, ADD]),
        ]
    )
    assert resolver.resolve("echo") is ECHO
    assert resolver.resolve("add") is ADD
    assert resolver.resolve("nope") is None
    assert DelegatingToolCallbackResolver([]).resolve("echo") is None


def test_resolver_is_abstract() -> None:
    with pytest.raises(TypeError):
        ToolCallbackResolver()  # type: ignore[abstract]
