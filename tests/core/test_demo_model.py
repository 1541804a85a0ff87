"""The demo model of ReplayServer(mode="demo"): the docs' prompts, as a person types them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tool_calling.testing._demo import demo_step


def function(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


# The example project's demo tools, as the OpenAI adapter offers them.
TOOLS = [
    function("get_current_time", {"timezone": {"type": "string", "default": "UTC"}}, []),
    function(
        "get_weather",
        {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"], "type": "string"}},
        ["city"],
    ),
    function("add_numbers", {"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
    function(
        "refund_order",
        {"order_id": {"type": "string"}, "amount": {"type": "number"}},
        ["order_id", "amount"],
    ),
]


def ask(text: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    messages = [*(history or []), {"role": "user", "content": text}]
    return demo_step({"messages": messages, "tools": TOOLS})


def calls(step: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(call["name"], call["arguments"]) for call in step.get("tool_calls", [])]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Refund order 42, 30 EUR", ("refund_order", {"order_id": "42", "amount": 30})),
        (
            "Please refund order #77 for 15 euros",
            ("refund_order", {"order_id": "77", "amount": 15}),
        ),
        ("Refund €12.50 on order A-1001", ("refund_order", {"order_id": "A-1001", "amount": 12.5})),
        ("What is 2 + 3?", ("add_numbers", {"a": 2, "b": 3})),
        ("Add 2.5 and 40", ("add_numbers", {"a": 2.5, "b": 40})),
        ("What's the weather in Oslo?", ("get_weather", {"city": "Oslo"})),
        (
            "What's the weather in Oslo in fahrenheit?",
            ("get_weather", {"city": "Oslo", "unit": "fahrenheit"}),
        ),
        ("What time is it in Tokyo?", ("get_current_time", {"timezone": "Asia/Tokyo"})),
        ("What time is it in Europe/Oslo?", ("get_current_time", {"timezone": "Europe/Oslo"})),
    ],
)
def test_the_arguments_come_from_what_the_message_says(text: str, expected: tuple) -> None:
    assert calls(ask(text)) == [expected]


def test_a_json_object_in_the_message_is_taken_as_the_arguments() -> None:
    step = ask('refund order {"order_id": "42", "amount": 30}')
    assert calls(step) == [("refund_order", {"order_id": "42", "amount": 30})]


def turn(tool: str, arguments: dict[str, Any], result: Any) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": tool, "arguments": json.dumps(arguments)}
    content = result if isinstance(result, str) else json.dumps(result)
    return [
        {"role": "user", "content": "..."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": content},
    ]


def test_a_follow_up_calls_the_previous_tool_with_what_changed() -> None:
    oslo = {"city": "Oslo", "temperature": 12, "unit": "celsius", "conditions": "rainy"}
    history = [*turn("get_weather", {"city": "Oslo", "unit": "fahrenheit"}, oslo)]
    history.append({"role": "assistant", "content": "In Oslo it is rainy and 12 °C."})

    assert calls(ask("and in Bergen?", history)) == [
        ("get_weather", {"city": "Bergen", "unit": "fahrenheit"})
    ]
    refund = [*turn("refund_order", {"order_id": "42", "amount": 30}, "Refunded.")]
    refund.append({"role": "assistant", "content": "Refunded."})
    assert calls(ask("And 20 EUR on order 43?", refund)) == [
        ("refund_order", {"order_id": "43", "amount": 20})
    ]
    # Not a follow-up, and no tool named: an answer, no call.
    assert "tool_calls" not in ask("Tell me something nice about the sea today, please", history)


@pytest.mark.parametrize(
    ("tool", "arguments", "result", "sentence"),
    [
        (
            "get_weather",
            {"city": "Bergen"},
            {"city": "Bergen", "temperature": 7, "unit": "celsius", "conditions": "windy"},
            "In Bergen it is windy and 7 °C.",
        ),
        (
            "get_weather",
            {"city": "Oslo", "unit": "fahrenheit"},
            {"city": "Oslo", "temperature": 54, "unit": "fahrenheit", "conditions": "sunny"},
            "In Oslo it is sunny and 54 °F.",
        ),
        ("add_numbers", {"a": 2, "b": 3}, 5.0, "2 + 3 = 5."),
        (
            "get_current_time",
            {"timezone": "Asia/Tokyo"},
            "2026-12-05T07:30:00+09:00",
            "It is 07:30 on Saturday 5 December 2026 in Asia/Tokyo.",
        ),
        (
            "refund_order",
            {"order_id": "42", "amount": 30},
            "Refunded 30.00 EUR on order 42 (demo: no money moved).",
            "Refunded 30.00 EUR on order 42 (demo: no money moved).",
        ),
        ("lookup_stock", {}, {"sku": "A1", "in_stock": 3}, "Lookup stock: sku A1, in stock 3."),
        ("list_rooms", {}, ["Aurora", "Fjord"], "List rooms found 2: Aurora, Fjord."),
    ],
)
def test_results_are_answered_in_sentences_never_raw_json(
    tool: str, arguments: dict[str, Any], result: Any, sentence: str
) -> None:
    step = demo_step({"messages": turn(tool, arguments, result), "tools": TOOLS})
    assert step == {"text": sentence, "words_per_chunk": 1}
    assert "{" not in step["text"] and '"' not in step["text"]
