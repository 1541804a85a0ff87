"""The fast paths of a tool call give exactly what the general ones give.

A single in-process call skips the per-job lists of the general path; a tool list keeps its index
by name until it changes; a batch runs on the caller's thread with pool helpers joining it; limits
are counted without per-call objects; ``@tool`` reads signatures from code objects and defers
pydantic to first use. Each test pins one of these against the slow path it replaces.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import functools
import inspect
import pickle
import random
import threading
import typing
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, Optional

import pydantic
import pytest

from tool_calling import (
    DefaultToolCallingManager,
    FunctionToolCallback,
    ToolCall,
    ToolCallingChatOptions,
    ToolCallLimitBehavior,
    ToolCallLimits,
    ToolContext,
    ToolDefinition,
    ToolMetadata,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
    tool,
)
from tool_calling.core.chat.messages import AssistantMessage
from tool_calling.core.chat.prompt import Prompt, ToolCallbackList
from tool_calling.core.execution import manager as manager_module
from tool_calling.core.execution.limits import find_breaches
from tool_calling.core.tools import schema as schema_module
from tool_calling.core.tools.decorator import get_spec
from tool_calling.exceptions import ToolArgumentsError, ToolDefinitionError, ToolFailure

from ._builders import call, prompt_with, response_with, responses, run, texts


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(return_direct=True)
def shout(text: str) -> str:
    """Say it loudly."""
    return text.upper()


@tool
def broken(reason: str = "") -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool
def refuses() -> str:
    """Fails on purpose, for the model."""
    raise ToolFailure("Not today.")


@tool
def nothing() -> None:
    """Returns nothing."""


def general_path(
    manager: DefaultToolCallingManager, prompt: Prompt, tool_call: ToolCall
) -> tuple[str, Any]:
    """The result of one call through plan, run and complete (the path of every batch)."""
    plan = manager.plan_tool_calls(prompt, response_with(tool_call))
    callbacks = {cb.name: cb for cb in prompt.options.tool_callbacks}  # type: ignore[union-attr]
    outcomes = []
    for job in plan.jobs:
        callback = callbacks[job.call.name]
        result = manager._invoke(callback, job.call, ToolContext())
        outcomes.append(
            result
            if not isinstance(result, str)
            else manager_module.ToolOutcome.ok(result)  # the OK outcome of a returned text
        )
    try:
        return "ok", manager.complete_tool_calls(prompt, plan, outcomes)
    except Exception as exc:  # noqa: BLE001 - compared as a value
        return "raised", (type(exc), str(exc))


def fast_path(
    manager: DefaultToolCallingManager, prompt: Prompt, tool_call: ToolCall
) -> tuple[str, Any]:
    try:
        return "ok", manager.execute_tool_calls(prompt, response_with(tool_call))
    except Exception as exc:  # noqa: BLE001 - compared as a value
        return "raised", (type(exc), str(exc))


CASES = [
    ("add", '{"a": 1, "b": 2}'),
    ("add", '{"a": "1", "b": 2}'),  # bad arguments
    ("add", '{"a": 1, "a": 2, "b": 3}'),  # a duplicate key
    ("add", "not json"),
    ("add", ""),
    ("shout", '{"text": "hi"}'),  # return-direct
    ("shout", '{"text": 5}'),  # return-direct, bad arguments
    ("broken", '{"reason": "db down"}'),
    ("broken", "{}"),  # a blank message
    ("refuses", "{}"),
    ("nothing", "{}"),
    ("missing", "{}"),  # not offered: the general path decides
]


@pytest.mark.parametrize(("name", "arguments"), CASES)
@pytest.mark.parametrize(
    "manager_options",
    [{}, {"strict_tool_calls": True}, {"max_result_chars": 2}, {"limits": ToolCallLimits()}],
    ids=["default", "strict", "truncating", "limits"],
)
def test_a_single_call_gives_what_the_general_path_gives(
    name: str, arguments: str, manager_options: dict[str, Any]
) -> None:
    manager = DefaultToolCallingManager(**manager_options)
    tools = [FunctionToolCallback(f) for f in (add, shout, broken, refuses, nothing)]
    prompt = prompt_with(tools)
    tool_call = call(name, arguments, id="c1")
    fast = fast_path(manager, prompt, tool_call)
    if name == "missing":  # the general path answers it; run it twice to compare like with like
        assert fast == fast_path(manager, prompt, tool_call)
        return
    assert fast == general_path(manager, prompt, tool_call)


def test_a_single_call_over_a_limit_is_decided_by_the_general_path() -> None:
    refused: list[str] = []

    class Recording(DefaultToolCallingManager):
        def on_limit_exceeded(self, tool_call: ToolCall, response_text: str) -> None:
            refused.append(response_text)

    limits = ToolCallLimits(max_calls_per_tool=1, on_limit_exceeded="RETURN_ERROR_RESPONSE")
    history = [
        UserMessage("go"),
        AssistantMessage(tool_calls=[ToolCall("h", "add", "{}")]),
        ToolResponseMessage([ToolResponse("h", "add", "3")]),
    ]
    result = run(
        Recording(limits=limits), [FunctionToolCallback(add)], call("add"), messages=history
    )
    assert texts(result) == [
        "Tool call limit (1) exceeded for tool 'add'. No further calls to this tool are "
        "allowed in this turn."
    ]
    assert len(refused) == 1


def test_a_subclass_sees_every_single_call_in_call_tool() -> None:
    seen: list[str] = []

    class Auditing(DefaultToolCallingManager):
        def call_tool(self, callback: Any, tool_call: ToolCall, tool_context: ToolContext) -> str:
            seen.append(tool_call.id)
            return super().call_tool(callback, tool_call, tool_context)

    manager = Auditing()
    run(manager, [FunctionToolCallback(add)], call("add", '{"a": 1, "b": 2}', id="one"))
    run(manager, [FunctionToolCallback(add)], *[call("add", "{}", id=f"b{i}") for i in range(3)])
    assert seen[0] == "one"
    assert sorted(seen[1:]) == ["b0", "b1", "b2"]


# -- the index of a tool list ------------------------------------------------------------------


def make(name: str) -> FunctionToolCallback:
    return FunctionToolCallback(lambda: name, name=name)


@pytest.mark.parametrize(
    "change",
    [
        lambda tools, new: tools.append(new),
        lambda tools, new: tools.extend([new]),
        lambda tools, new: tools.insert(0, new),
        lambda tools, new: tools.__setitem__(0, new),
        lambda tools, new: tools.__setitem__(slice(0, 1), [new]),
        lambda tools, new: tools.__iadd__([new]),
    ],
    ids=["append", "extend", "insert", "setitem", "setslice", "iadd"],
)
def test_a_changed_tool_list_offers_its_new_tools(change: Callable[..., Any]) -> None:
    """The index by name is dropped by every change, so a tool added later is found."""
    options = ToolCallingChatOptions(tool_callbacks=[make("old")])
    prompt = Prompt("go", options)
    manager = DefaultToolCallingManager()
    assert texts(manager.execute_tool_calls(prompt, response_with(call("old")))) == ["old"]
    change(options.tool_callbacks, make("new"))
    assert texts(manager.execute_tool_calls(prompt, response_with(call("new")))) == ["new"]


@pytest.mark.parametrize(
    "change",
    [
        lambda tools: tools.pop(),
        lambda tools: tools.remove(tools[-1]),
        lambda tools: tools.clear(),
        lambda tools: tools.__delitem__(-1),
        lambda tools: tools.__delitem__(slice(-1, None)),
        lambda tools: tools.__imul__(0),
        lambda tools: tools.__setitem__(-1, make("other")),
    ],
    ids=["pop", "remove", "clear", "delitem", "delslice", "imul", "replace"],
)
def test_a_tool_removed_from_the_list_can_no_longer_be_called(change: Callable[..., Any]) -> None:
    """S1: no stale index keeps a tool callable once the request stops offering it."""
    ran: list[str] = []
    options = ToolCallingChatOptions(
        tool_callbacks=[
            make("kept"),
            FunctionToolCallback(lambda: ran.append("x") or "ran", name="gone"),
        ]
    )
    prompt = Prompt("go", options)
    manager = DefaultToolCallingManager()
    assert texts(manager.execute_tool_calls(prompt, response_with(call("gone")))) == ["ran"]
    change(options.tool_callbacks)
    (response,) = responses(manager.execute_tool_calls(prompt, response_with(call("gone"))))
    assert response.is_error is True
    assert response.response_data.startswith("Unknown or disabled tool 'gone'.")
    assert ran == ["x"]


def test_sorting_or_reversing_keeps_the_tools_offered() -> None:
    options = ToolCallingChatOptions(tool_callbacks=[make("b"), make("a")])
    manager = DefaultToolCallingManager()
    options.tool_callbacks.sort(key=lambda cb: cb.name)
    options.tool_callbacks.reverse()
    assert [d.name for d in manager.resolve_tool_definitions(options)] == ["b", "a"]


def test_assigning_a_plain_list_stores_a_tool_callback_list() -> None:
    options = ToolCallingChatOptions()
    options.tool_callbacks = [make("a")]
    assert type(options.tool_callbacks) is ToolCallbackList
    assert options.tool_callbacks == [options.tool_callbacks[0]]
    assert options.tool_callbacks.by_name() == {"a": options.tool_callbacks[0]}


def test_the_index_is_built_once_per_list_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request offering many tools checks their names once, however many calls it makes."""
    checks: list[int] = []
    real = ToolCallbackList.by_name

    def counting(self: ToolCallbackList) -> dict[str, Any]:
        if self.cached_index is None:
            checks.append(len(self))
        return real(self)

    monkeypatch.setattr(ToolCallbackList, "by_name", counting)
    tools = [make(f"t{i}") for i in range(300)] + [FunctionToolCallback(add)]
    prompt = prompt_with(tools)
    manager = DefaultToolCallingManager()
    for _ in range(5):
        manager.execute_tool_calls(prompt, response_with(call("add", '{"a": 1, "b": 1}')))
    assert checks == [301]


def test_duplicate_names_in_a_tool_list_still_raise_on_every_call() -> None:
    prompt = prompt_with([make("same"), make("same")])
    manager = DefaultToolCallingManager()
    for _ in range(2):
        with pytest.raises(ToolDefinitionError, match="Duplicate tool name 'same'"):
            manager.execute_tool_calls(prompt, response_with(call("same")))


def test_a_copied_tool_list_keeps_its_own_index() -> None:
    tools = ToolCallbackList([FunctionToolCallback(add)])
    tools.by_name()
    copied = copy.copy(tools)
    assert type(copied) is ToolCallbackList
    assert copied == tools
    copied.append(make("extra"))
    assert sorted(copied.by_name()) == ["add", "extra"]
    assert sorted(tools.by_name()) == ["add"]
    assert tools.index(tools[0]) == 0  # list.index is still list.index


# -- batches: the caller's thread takes part ---------------------------------------------------


def test_with_a_bound_of_one_every_call_runs_on_the_callers_thread() -> None:
    threads: list[int] = []
    callback = FunctionToolCallback(lambda: threads.append(threading.get_ident()) or "ok", name="t")
    result = run(DefaultToolCallingManager(max_concurrent_calls=1), [callback], *[call("t")] * 5)
    assert texts(result) == ["ok"] * 5
    assert threads == [threading.get_ident()] * 5


class _StalledPool(ThreadPoolExecutor):
    """A pool whose threads are all busy: nothing submitted starts until it is released."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.release = threading.Event()
        self.submitted = 0
        self.submit(self.release.wait)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_a_batch_finishes_on_the_callers_thread_when_the_pool_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No thread waits for a call nobody took: a full pool slows a batch, never blocks it."""
    pool = _StalledPool()
    monkeypatch.setattr(manager_module, "_shared_pool", lambda: pool)
    try:
        result = run(
            DefaultToolCallingManager(max_concurrent_calls=4),
            [FunctionToolCallback(add)],
            *[call("add", f'{{"a": {i}, "b": 1}}') for i in range(6)],
        )
        assert texts(result) == [str(i + 1) for i in range(6)]
        assert pool.submitted == 2  # the stalled task, and one request for a helper
    finally:
        pool.release.set()
        pool.shutdown(wait=True)


def test_a_call_of_a_batch_cannot_change_the_callers_context_variables() -> None:
    flag: contextvars.ContextVar[str] = contextvars.ContextVar("flag", default="caller")

    def mark() -> str:
        seen = flag.get()
        flag.set("tool")
        return seen

    result = run(
        DefaultToolCallingManager(max_concurrent_calls=1),
        [FunctionToolCallback(mark, name="mark")],
        *[call("mark")] * 3,
    )
    assert texts(result) == ["caller"] * 3  # each call starts from the caller's values
    assert flag.get() == "caller"


def test_helpers_never_exceed_the_bound() -> None:
    """Helpers join one after another, but the caller plus helpers stay within the bound."""
    running = 0
    most = 0
    lock = threading.Lock()
    gate = threading.Event()

    def hold() -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            if running == 3:
                gate.set()
        gate.wait(5)
        with lock:
            running -= 1
        return "ok"

    callback = FunctionToolCallback(hold, name="hold")
    result = run(DefaultToolCallingManager(max_concurrent_calls=3), [callback], *[call("hold")] * 9)
    assert texts(result) == ["ok"] * 9
    assert most == 3


# -- limits without per-call objects -----------------------------------------------------------


def reference_breaches(
    limits: ToolCallLimits, earlier: list[str], names: list[str]
) -> list[tuple[str | None, int] | None]:
    """The documented rule, literally: count each call, then check per tool, then the total."""
    counts = {n: earlier.count(n) for n in set(earlier)}
    total = len(earlier)
    found: list[tuple[str | None, int] | None] = []
    for name in names:
        counts[name] = counts.get(name, 0) + 1
        total += 1
        per_tool = limits.limit_for(name)
        if per_tool is not None and counts[name] > per_tool:
            found.append((name, per_tool))
        elif limits.max_total_tool_calls is not None and total > limits.max_total_tool_calls:
            found.append((None, limits.max_total_tool_calls))
        else:
            found.append(None)
    return found


def test_find_breaches_agrees_with_the_rule_on_random_turns() -> None:
    rng = random.Random(12)
    names = ["a", "b", "c"]
    for _ in range(2000):
        limits = ToolCallLimits(
            max_calls_per_tool=rng.choice([None, 1, 2, 3, 5]),
            per_tool={n: rng.choice([None, 1, 2, 4]) for n in rng.sample(names, rng.randint(0, 2))},
            excluded_tools=rng.sample(names, rng.randint(0, 1)),
            max_total_tool_calls=rng.choice([None, 1, 3, 6, 10]),
            on_limit_exceeded=ToolCallLimitBehavior.RETURN_ERROR_RESPONSE,
        )
        earlier = [rng.choice(names) for _ in range(rng.randint(0, 5))]
        batch = [rng.choice(names) for _ in range(rng.randint(1, 6))]
        history: list[Any] = [UserMessage("go")]
        if earlier:
            calls = [ToolCall(f"h{i}", n, "{}") for i, n in enumerate(earlier)]
            history += [
                AssistantMessage(tool_calls=calls),
                ToolResponseMessage([ToolResponse(c.id, c.name, "ok") for c in calls]),
            ]
        got = find_breaches(
            limits, history, [ToolCall(f"c{i}", n, "{}") for i, n in enumerate(batch)]
        )
        expected = reference_breaches(limits, earlier, batch)
        assert (got or [None] * len(batch)) == expected, (limits, earlier, batch)


# -- @tool: signatures from code objects, pydantic deferred ------------------------------------


def _plain(a: int, b: str = "x", *rest: int, c: bool, d: float = 1.0, **more: Any) -> None: ...


def _posonly(a: int, /, b: int, *, c: int = 3) -> None: ...


def _defaults(a: int = 1, b: Optional[str] = None) -> None: ...  # noqa: UP045 - on purpose


def _keyword_only_after_star(*, a: int) -> None: ...


def _kwargs_only(**kw: Any) -> None: ...


class _Holder:
    def method(self, a: int) -> None: ...

    @staticmethod
    def static(a: int) -> None: ...


@functools.wraps(_plain)
def _wrapped(*args: Any, **kwargs: Any) -> None: ...


@pytest.mark.parametrize(
    "function",
    [
        _plain,
        _posonly,
        _defaults,
        _keyword_only_after_star,
        _kwargs_only,
        _Holder().method,
        _Holder.static,
        _Holder.method,
        _wrapped,
        functools.partial(_posonly, 1),
        lambda x, y=2: None,
        print,
    ],
)
def test_parameters_are_what_inspect_signature_says(function: Any) -> None:
    expected = [
        (p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()
    ]
    assert [tuple(p) for p in schema_module.parameters(function)] == expected


class _Local(pydantic.BaseModel):
    x: int


def _strings(a: "int", b: "str", c: "_Local", d: "None", e: "list[int]") -> "bool": ...  # noqa: UP037


def _real(a: int, b: list[int], c: typing.Annotated[int, "meta"]) -> None: ...


def _shadowing(a: "int") -> "str": ...  # noqa: UP037


@pytest.mark.parametrize("function", [_strings, _real, _shadowing, _Holder.method, _wrapped])
def test_type_hints_are_what_typing_get_type_hints_says(function: Any) -> None:
    assert schema_module.type_hints(function) == typing.get_type_hints(
        function, include_extras=True
    )


def test_an_unresolvable_name_still_fails_at_definition() -> None:
    def uses_missing(a: "Missing") -> str:  # type: ignore[name-defined]  # noqa: F821, UP037
        return ""

    with pytest.raises(ToolDefinitionError, match="cannot resolve the type hints"):
        tool(uses_missing)


KNOWN_ANNOTATIONS: list[Any] = [
    str,
    int,
    float,
    bool,
    bytes,
    Any,
    list,
    dict,
    tuple,
    set,
    frozenset,
    list[str],
    set[int],
    frozenset[str],
    tuple[int, ...],
    tuple[int, str],
    tuple[()],
    dict[str, float],
    dict[str, list[int]],
    typing.Sequence[str],
    typing.AbstractSet[int],
    typing.Mapping[str, bool],
    Optional[int],  # noqa: UP045
    int | None,
    str | int,
    Literal["a", "b"],
    Literal[1, True, None],
    Optional[list[dict[str, int]]],  # noqa: UP045
    __import__("decimal").Decimal,
    __import__("uuid").UUID,
    __import__("datetime").date,
    __import__("datetime").datetime,
    __import__("datetime").time,
    __import__("datetime").timedelta,
]


@pytest.mark.parametrize("annotation", KNOWN_ANNOTATIONS, ids=repr)
def test_every_type_whose_build_is_deferred_builds_without_error(annotation: Any) -> None:
    """Deferring pydantic is safe only for types it always accepts: this proves each one."""
    assert schema_module._known_to_pydantic(annotation)
    namespace: dict[str, Any] = {"T": annotation}
    exec("def probe(value: T = None, other: T | None = None) -> str:\n    return ''", namespace)
    spec = get_spec(tool(namespace["probe"]))
    assert spec is not None
    spec.arguments.build()  # the schema and the validator, now
    assert spec.definition.input_schema["type"] == "object"


@pytest.mark.parametrize(
    "annotation",
    [_Local, typing.Annotated[int, pydantic.Field(gt=0)], type, Callable[[], int] | None],
    ids=repr,
)
def test_other_types_are_not_deferred(annotation: Any) -> None:
    assert not schema_module._known_to_pydantic(annotation)


def test_a_simple_tool_builds_no_pydantic_type_until_used(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    real = pydantic.TypeAdapter

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(schema_module.pydantic, "TypeAdapter", counting)

    @tool
    def lookup(query: str, limit: int = 10) -> str:
        """Look it up."""
        return query * limit

    assert built == []
    callback = FunctionToolCallback(lookup)
    assert callback.definition.name == "lookup"
    assert built == []
    assert callback.call('{"query": "ab", "limit": 2}') == "abab"
    assert len(built) == 1  # the validator
    assert callback.definition.input_schema["required"] == ["query"]
    assert len(built) == 2  # and the schema


def test_a_tool_taking_a_model_is_built_at_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    real = pydantic.TypeAdapter
    monkeypatch.setattr(
        schema_module.pydantic, "TypeAdapter", lambda *a, **k: built.append(a) or real(*a, **k)
    )

    @tool
    def place(item: _Local) -> str:
        """Place it."""
        return "ok"

    assert len(built) == 2  # schema and validator, so any error is raised here


def test_a_deferred_definition_behaves_as_a_built_one() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    spec = get_spec(echo)
    assert spec is not None
    deferred = spec.definition
    assert "input_schema" not in vars(deferred)
    built = ToolDefinition("echo", "Echo.", deferred.input_schema)
    assert deferred == built
    assert dataclasses.asdict(deferred) == dataclasses.asdict(built)
    assert pickle.loads(pickle.dumps(deferred)) == built
    assert hash(deferred) == hash(built)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        deferred.nope  # type: ignore[attr-defined]  # noqa: B018


def test_a_deferred_schema_is_built_once_under_threads() -> None:
    @tool
    def probe(a: int, b: str = "") -> str:
        """Probe."""
        return b

    spec = get_spec(probe)
    assert spec is not None
    with ThreadPoolExecutor(8) as pool:
        schemas = list(pool.map(lambda _: spec.definition.input_schema, range(32)))
    assert all(s is schemas[0] for s in schemas)


# -- flat argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1, "b": 2}', "3"),
        (
            '{"a": 1, "b": 2, "a": 5}',
            "Invalid arguments for tool 'add': the key 'a' appears more than once; "
            "send each key once.",
        ),
        (
            '{"b": 2, "a": NaN}',
            "Invalid arguments for tool 'add':\n- a: Input should be a valid integer",
        ),
        (
            '{"a": 1, "b": Infinity}',
            "Invalid arguments for tool 'add':\n- b: Input should be a valid integer",
        ),
    ],
)
def test_a_flat_tool_still_refuses_duplicate_keys_and_constants(
    arguments: str, expected: str
) -> None:
    result = run(DefaultToolCallingManager(), [FunctionToolCallback(add)], call("add", arguments))
    assert texts(result)[0].startswith(expected)


def test_a_colon_inside_a_string_takes_the_full_check() -> None:
    @tool
    def note(text: str, tag: str = "") -> str:
        """Note it."""
        return f"{tag}:{text}"

    callback = FunctionToolCallback(note)
    assert callback.call('{"text": "a: b", "tag": "t"}') == "t:a: b"
    with pytest.raises(ToolArgumentsError, match="the key 'text' appears more than once"):
        callback.validate_arguments('{"text": "a: b", "text": "c"}')


# -- plain attributes, still read-only ----------------------------------------------------------


def test_a_prompt_is_immutable_and_copies() -> None:
    prompt = Prompt("hi", ToolCallingChatOptions(model="m"))
    with pytest.raises(AttributeError, match="Prompt is immutable"):
        prompt.messages = []  # type: ignore[misc]
    with pytest.raises(AttributeError, match="Prompt is immutable"):
        del prompt.options  # type: ignore[misc]
    assert copy.deepcopy(prompt) == prompt
    assert pickle.loads(pickle.dumps(prompt)) == prompt
    assert prompt.instructions is prompt.messages


def test_a_function_callbacks_definition_is_its_specs() -> None:
    callback = FunctionToolCallback(add)
    spec = get_spec(add)
    assert spec is not None
    assert callback.definition is spec.definition
    assert callback.name == "add"
    assert callback.metadata.return_direct is False
    assert FunctionToolCallback(shout).metadata.return_direct is True


def test_a_subclass_may_still_override_definition_and_metadata_as_properties() -> None:
    """The plain attributes are for speed; a subclass that computes them keeps working."""

    class Tagged(FunctionToolCallback):
        @property
        def metadata(self) -> ToolMetadata:
            return ToolMetadata(requires_approval=True, tags=("billing",))

    class Renamed(FunctionToolCallback):
        @property
        def definition(self) -> ToolDefinition:
            return ToolDefinition("renamed", "Adds.", {"type": "object", "properties": {}})

    tagged = Tagged(add)
    assert tagged.metadata.tags == ("billing",)
    assert tagged.name == "add"
    assert tagged.call('{"a": 1, "b": 2}') == "3"
    renamed = Renamed(add)
    assert renamed.name == "renamed"
    assert renamed.metadata.return_direct is False
    assert FunctionToolCallback(add).name == "add"
