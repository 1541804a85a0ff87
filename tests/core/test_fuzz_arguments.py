"""Hypothesis over tool-argument text (S3, strict argument validation): never a crash.

Whatever the model sends as a call's arguments (JSON of every shape, nesting far deeper than
Python's parser goes, long strings, ``NaN``, ``Infinity`` and huge numbers, duplicate keys,
unpaired surrogates, NUL, truncated or non-JSON text):

- ``FunctionToolCallback.call`` runs the tool with arguments that fit its signature, or raises
  ``ToolArgumentsError`` (never another exception) with a short message, and the tool does not
  run;
- the manager answers every call of the batch: an ``is_error`` response for the bad one, and
  the other call still runs; with strict tool calls it raises ``ToolArgumentsError`` instead.

Time bounds are not asserted here (benchmarks measure); a hang shows as pytest-timeout's failure.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tool_calling import DefaultToolCallingManager, tool, tool_callbacks
from tool_calling.exceptions import ToolArgumentsError

from ._builders import call, responses, run

MAX_ERROR_CHARS = 2_000
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Address(pydantic.BaseModel):
    street: str
    zip: int


RAN: list[dict[str, Any]] = []


@tool
def ship(name: str, qty: int, address: Address, tags: list[str] | None = None) -> str:
    """Ship an order."""
    RAN.append({"name": name, "qty": qty, "address": address, "tags": tags})
    return "shipped"


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


SHIP, PING = tool_callbacks(ship, ping)

keys = st.sampled_from(["name", "qty", "address", "street", "zip", "tags", "admin"]) | st.text(
    max_size=6
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
    max_leaves=15,
)
near_valid = st.fixed_dictionaries(
    {
        "name": st.text(max_size=10) | st.integers(),
        "qty": st.integers() | st.floats(allow_nan=False) | st.text(max_size=3) | st.booleans(),
        "address": st.fixed_dictionaries(
            {"street": st.text(max_size=10), "zip": st.integers() | st.text(max_size=3)}
        )
        | json_values,
    },
    optional={
        "tags": st.lists(st.text(max_size=5) | st.integers(), max_size=3),
        "admin": st.none(),
    },
)
"""Arguments close to valid ones, so that validation (not only parsing) is exercised."""


def _deep(depth: int, bracket: str) -> str:
    closing = {"[": "]", '{"a":': "}"}[bracket]
    inner = "1" if bracket != "[" else ""
    return bracket * depth + inner + closing * depth


arguments = st.one_of(
    json_values.map(json.dumps),
    near_valid.map(json.dumps),
    st.builds(_deep, st.integers(100, 100_000), st.sampled_from(["[", '{"a":'])),
    st.builds(
        lambda size: json.dumps(
            {"name": "x" * size, "qty": 1, "address": {"street": "s", "zip": 1}}
        ),
        st.sampled_from([1_000, 100_000, 1_000_000]),
    ),
    st.builds(
        lambda constant: (
            f'{{"name": "a", "qty": {constant}, "address": {{"street": "s", "zip": 1}}}}'
        ),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "1" * 5_000, "1.0", "-0"]),
    ),
    st.builds(
        lambda first, second: (
            f'{{"name": {json.dumps(first)}, "name": {json.dumps(second)}, '
            '"qty": 1, "address": {"street": "s", "zip": 1}}'
        ),
        json_values,
        json_values,
    ),
    st.builds(
        lambda escape: f'{{"name": "a{escape}", "qty": 1, "address": {{"street": "s", "zip": 1}}}}',
        st.sampled_from(["\\ud800", "\\udfff", "\\u0000", "\\ud83d"]),
    ),
    json_values.map(json.dumps).map(lambda text: text[: max(1, len(text) // 2)]),
    st.text(max_size=50),
    st.none(),
)

EXAMPLES = [
    "[" * 100_000 + "]" * 100_000,
    '{"name": "a", "qty": NaN, "address": {"street": "s", "zip": 1}}',
    '{"name": "a", "name": 1, "qty": 1, "address": {"street": "s", "zip": 1}}',
    '{"name": "\\ud800", "qty": 1, "address": {"street": "s", "zip": 1}}',
    "5",
    "null",
]


def assert_ran_with_valid_arguments() -> None:
    (ran,) = RAN
    assert isinstance(ran["name"], str)
    assert type(ran["qty"]) is int  # noqa: E721 - no bool, no float
    assert isinstance(ran["address"], Address)
    assert ran["tags"] is None or all(isinstance(tag, str) for tag in ran["tags"])


def with_examples(test):
    for value in EXAMPLES:
        test = example(value)(test)
    return test


@FUZZ
@given(arguments)
@with_examples
def test_the_callback_runs_the_tool_or_raises_tool_arguments_error(text: str | None) -> None:
    RAN.clear()
    try:
        answer = SHIP.call(text)  # type: ignore[arg-type]
    except ToolArgumentsError as exc:
        assert RAN == []  # the tool never ran
        assert 0 < len(str(exc)) < MAX_ERROR_CHARS
    else:
        assert answer == "shipped"
        assert_ran_with_valid_arguments()


@FUZZ
@given(arguments)
@with_examples
def test_the_manager_answers_every_call_of_the_batch(text: str | None) -> None:
    RAN.clear()
    result = run(DefaultToolCallingManager(), [SHIP, PING], call("ship", text), call("ping"))
    bad, ok = responses(result)
    assert ok.response_data == "pong"  # the rest of the batch went on
    if bad.is_error:
        assert RAN == []
        assert bad.response_data.startswith("Invalid arguments for tool 'ship'")
        assert len(bad.response_data) < MAX_ERROR_CHARS
    else:
        assert bad.response_data == "shipped"
        assert_ran_with_valid_arguments()


@FUZZ
@given(arguments)
@with_examples
def test_strict_tool_calls_raise_tool_arguments_error(text: str | None) -> None:
    RAN.clear()
    manager = DefaultToolCallingManager(strict_tool_calls=True)
    try:
        run(manager, [SHIP, PING], call("ship", text))
    except ToolArgumentsError as exc:
        assert RAN == []
        assert 0 < len(str(exc)) < MAX_ERROR_CHARS
    else:
        assert_ran_with_valid_arguments()


@pytest.mark.parametrize("text", EXAMPLES)
def test_the_named_cases_are_refused(text: str) -> None:
    """The classic bad inputs are errors (none of them is a valid call of ``ship``)."""
    RAN.clear()
    with pytest.raises(ToolArgumentsError):
        SHIP.call(text)
    assert RAN == []
