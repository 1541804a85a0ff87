"""The demo model of ``ReplayServer(mode="demo")``: rules that read a request like a model would.

Standard library only, and deterministic. It is not a language model: it picks the offered tools
a message names (or describes: "2 + 3" adds, "temperature" is weather), fills their arguments
from the message (ids after their noun, amounts next to a currency, other numbers in order,
cities after a preposition, time zones from city names), carries a follow-up such as "and in
Bergen?" over from the previous call, and answers tool results with sentences built from them.
Streamed answers go word by word (``"words_per_chunk": 1``).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["content_text", "demo_step"]

NOT_A_MODEL = "[scripted demo answer, not a real model]"

STOPWORDS = frozenset(
    """a an and are as at be by can could do does for from give how i in is it me my of on or
    please show tell that the this to use call run what whats what's when where which who with
    would you your get set find about named called""".split()
)
PREPOSITIONS = frozenset({"in", "for", "of", "at", "to", "from", "about", "named", "called"})

# Words of a tool name that say nothing about what it is for ("get_weather" is about weather).
_GENERIC_WORDS = {"get", "set", "list", "fetch", "find", "current", "lookup", "look", "up", "do"}

# Other words for what a tool name's word means, as people ask for it.
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "add": ("plus", "sum", "total", "+"),
    "numbers": ("plus", "sum", "+"),
    "weather": ("temperature", "forecast", "rain", "raining", "sunny", "cold", "warm", "degrees"),
    "time": ("clock", "o'clock", "date"),
    "refund": ("refund", "reimburse", "money back", "pay back"),
}

_FOLLOW_UP = re.compile(r"^\s*(and|what about|how about|also|same for)\b", re.IGNORECASE)

_CURRENCY = r"(?:eur|euros?|usd|dollars?|nok|kr|gbp|pounds?|€|\$|£)"
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)?(?![\w])")
_MONEY_NAMES = {"amount", "price", "cost", "total", "sum", "value"}
_ZONE_NAMES = {"timezone", "time_zone", "tz", "zone"}

_CITY_ZONES = {
    "oslo": "Europe/Oslo",
    "bergen": "Europe/Oslo",
    "trondheim": "Europe/Oslo",
    "stockholm": "Europe/Stockholm",
    "copenhagen": "Europe/Copenhagen",
    "helsinki": "Europe/Helsinki",
    "london": "Europe/London",
    "paris": "Europe/Paris",
    "berlin": "Europe/Berlin",
    "madrid": "Europe/Madrid",
    "rome": "Europe/Rome",
    "new york": "America/New_York",
    "chicago": "America/Chicago",
    "los angeles": "America/Los_Angeles",
    "tokyo": "Asia/Tokyo",
    "sydney": "Australia/Sydney",
    "utc": "UTC",
}

_UNIT_SYMBOLS = {"celsius": " °C", "fahrenheit": " °F", "kelvin": " K"}


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text") or "") for part in content if isinstance(part, Mapping)
        )
    return ""


def demo_step(body: Mapping[str, Any]) -> dict[str, Any]:
    """The demo's answer to a chat completion request body, as a ReplayServer step."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    if messages and messages[-1].get("role") == "tool":
        return {"text": summarise(messages), "words_per_chunk": 1}
    user_text = next(
        (content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"),
        "",
    )
    tools = [
        tool["function"]
        for tool in body.get("tools") or []
        if isinstance(tool, Mapping)
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
    ]
    calls = _plan(user_text, tools, messages)
    if calls:
        return {"tool_calls": calls}
    return {
        "text": f"{NOT_A_MODEL} You said: {user_text!r}. "
        "Name one of the offered tools in your message and this demo server will call it.",
        "words_per_chunk": 1,
    }


# -- which tools -----------------------------------------------------------------------------------


def _has_word(text: str, word: str) -> bool:
    if not word[0].isalnum():  # "+": a symbol, not a word
        return word in text
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None


def _name_words(name: str) -> list[str]:
    return [w for w in re.split(r"[_.\-]+", name.lower()) if w and w not in _GENERIC_WORDS]


def mentions(text: str, name: str) -> bool:
    """True when ``text`` names the tool, or uses every meaningful word of its name."""
    if _has_word(text, name) or _has_word(text, name.replace("_", " ")):
        return True
    words = _name_words(name)
    return bool(words) and all(_has_word(text, w) for w in words)


def _describes(text: str, name: str) -> bool:
    """True when ``text`` asks for what the tool does in other words ("2 + 3" for add_numbers)."""
    return any(
        _has_word(text, word) or any(_has_word(text, other) for other in _SYNONYMS.get(word, ()))
        for word in _name_words(name)
    )


def _plan(
    text: str, tools: list[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    explicit = json_object_in(text)
    chosen = [tool for tool in tools if mentions(text, tool["name"])]
    if not chosen:
        chosen = [tool for tool in tools if _describes(text, tool["name"])]
    if chosen:
        return [
            {
                "name": tool["name"],
                "arguments": explicit
                if explicit is not None
                else fill_arguments(tool.get("parameters") or {}, text, tool["name"]),
            }
            for tool in chosen
        ]
    previous = _previous_calls(messages)
    offered = {tool["name"]: tool for tool in tools}
    if previous and (_FOLLOW_UP.search(text) or len(text.split()) <= 4):
        # "And in Bergen?": the previous calls again, with what the new message changes.
        calls = []
        for name, arguments in previous:
            if name not in offered:
                continue
            schema = offered[name].get("parameters") or {}
            changes = fill_arguments(schema, text, name, only_found=True)
            if changes:
                calls.append({"name": name, "arguments": {**arguments, **changes}})
        return calls
    return []


def _previous_calls(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    for message in reversed(messages[:-1]):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            found = []
            for call in calls:
                function = call.get("function") or {} if isinstance(call, Mapping) else {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                if isinstance(arguments, dict) and isinstance(function.get("name"), str):
                    found.append((function["name"], arguments))
            return found
    return []


# -- arguments ---------------------------------------------------------------------------------


def json_object_in(text: str) -> dict[str, Any] | None:
    """The JSON object written in ``text``, if there is one (it is then the arguments)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
        json.dumps(value)  # the answer must be able to carry it
    except (ValueError, RecursionError):  # not JSON, or nested too deeply for Python's parser
        return None
    return value if isinstance(value, dict) else None


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    for option in schema.get("anyOf") or []:
        if isinstance(option, Mapping):
            types += _schema_types(option)
    return types


class _Numbers:
    """The numbers of a message, each used once: money ones, id ones, the others in order."""

    def __init__(self, text: str) -> None:
        self.found = []
        for match in _NUMBER.finditer(text):
            before = text[max(0, match.start() - 6) : match.start()].lower()
            after = text[match.end() : match.end() + 9].lower()
            money = bool(
                re.match(rf"\s*{_CURRENCY}(?![a-z])", after)
                or re.search(rf"{_CURRENCY}\s*$", before)
            )
            self.found.append((match.start(), match.group().replace(",", "."), money))
        self.used: set[int] = set()

    def take(self, *, money: bool | None = None, at: int | None = None) -> str | None:
        for position, number, is_money in self.found:
            if position in self.used or (money is not None and is_money != money):
                continue
            if at is not None and position != at:
                continue
            self.used.add(position)
            return number
        return None


def _id_for(name: str, text: str, numbers: _Numbers) -> str | None:
    """An id for ``order_id``: what follows "order" (42, #42, A-1001), else a bare number."""
    noun = name[: -len("_id")] if name.endswith("_id") else ""
    patterns = [rf"\b{re.escape(noun)}s?\s*(?:#|no\.?|number|id)?\s*:?\s*(#?[A-Za-z]*-?\d[\w-]*)"]
    patterns.append(r"#([\w-]+)")
    for pattern in patterns if noun else patterns[1:]:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            value = match.group(1).lstrip("#")
            numbers.take(at=match.start(1) + (1 if match.group(1).startswith("#") else 0))
            return value
    number = numbers.take(money=False)
    return number


def _zone_in(text: str) -> str | None:
    match = re.search(r"\b([A-Z][a-z]+/[A-Za-z_]+)\b", text)
    if match:
        return match.group(1)
    lowered = text.lower()
    for city, zone in _CITY_ZONES.items():
        if _has_word(lowered, city):
            return zone
    return None


def _number_value(number: str, types: list[str]) -> int | float:
    value = float(number)
    return int(value) if "integer" in types or value.is_integer() else value


def fill_arguments(
    schema: Mapping[str, Any], text: str, tool_name: str, *, only_found: bool = False
) -> dict[str, Any]:
    """Arguments for the tool from the words of ``text``.

    Every required parameter gets a value (a guess when the message says nothing); an optional
    one only when the message gives it. With ``only_found``, only what the message gives.
    """
    properties = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    names = required + [name for name in properties if name not in required]
    numbers = _Numbers(text)
    words = iter(_candidate_words(text, tool_name))
    arguments: dict[str, Any] = {}
    for name in names:
        spec = properties.get(name) or {}
        types = _schema_types(spec)
        guess = name in required and not only_found
        lowered = name.lower()
        value: Any = None
        found = False
        if spec.get("enum"):
            options = list(spec["enum"])
            mentioned = [o for o in options if isinstance(o, str) and mentions(text, o)]
            found = bool(mentioned)
            value = mentioned[0] if mentioned else options[0]
        elif lowered == "id" or lowered.endswith("_id"):
            value = _id_for(lowered, text, numbers)
            found = value is not None
            if found and ("integer" in types or "number" in types):
                value = _number_value(value, types) if _NUMBER.fullmatch(value) else value
        elif "integer" in types or "number" in types:
            number = (
                numbers.take(money=True) or numbers.take()
                if lowered in _MONEY_NAMES
                else numbers.take(money=False) or numbers.take()
            )
            found = number is not None
            value = _number_value(number or "0", types)
        elif lowered in _ZONE_NAMES:
            value = _zone_in(text)
            found = value is not None
        elif "null" in types:
            value = None
        elif "boolean" in types:
            value = True
        elif "array" in types:
            value = []
        elif "object" in types:
            value = {}
        else:
            value = next(words, None)
            found = value is not None
            value = value or ""
        if found or guess:
            arguments[name] = value
    return arguments


def _candidate_words(text: str, tool_name: str) -> list[str]:
    """Words likely to be argument values: quoted text, words after prepositions, names."""
    skip = STOPWORDS | {part.lower() for part in re.split(r"[_\W]+", tool_name) if part}
    skip |= {word for words in _SYNONYMS.values() for word in words}
    tokens = re.findall(r"[^\W\d_][\w'-]*", text)
    ordered = re.findall(r'"([^"]+)"', text)
    ordered += [
        token
        for previous, token in zip(tokens, tokens[1:], strict=False)
        if previous.lower() in PREPOSITIONS
    ]
    ordered += [token for token in tokens[1:] if token[0].isupper()]
    ordered += [token for token in tokens if len(token) > 2]
    seen: set[str] = set()
    result = []
    for word in ordered:
        if (
            word.lower() not in skip
            and not re.fullmatch(_CURRENCY, word.lower())
            and word not in seen
        ):
            seen.add(word)
            result.append(word)
    return result


# -- answers ---------------------------------------------------------------------------------------


def _number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _words_of(name: str) -> str:
    return " ".join(name.replace("_", " ").split())


def _calls_by_id(messages: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if not isinstance(call, Mapping):
                continue
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls[str(call.get("id"))] = (
                str(function.get("name")),
                arguments if isinstance(arguments, dict) else {},
            )
    return calls


def _latest_results(messages: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(message)
    return reversed(results)


def summarise(messages: Sequence[Mapping[str, Any]]) -> str:
    """Sentences that say what the last tool results mean, one per result, in call order."""
    calls = _calls_by_id(messages)
    sentences = []
    for message in _latest_results(messages):
        name, arguments = calls.get(str(message.get("tool_call_id")), ("tool", {}))
        sentences.append(_sentence(name, arguments, content_text(message.get("content"))))
    return " ".join(sentences)


def _sentence(name: str, arguments: Mapping[str, Any], content: str) -> str:
    try:
        value = json.loads(content)
    except ValueError:
        value = content
    if isinstance(value, Mapping):
        if "temperature" in value:
            unit = _UNIT_SYMBOLS.get(str(value.get("unit", "celsius")), f" {value.get('unit')}")
            place = value.get("city") or arguments.get("city") or "there"
            conditions = value.get("conditions")
            weather = f"{conditions} and " if conditions else ""
            return f"In {place} it is {weather}{_number_text(value['temperature'])}{unit}."
        details = ", ".join(
            f"{_words_of(str(key))} {_number_text(item)}" for key, item in value.items()
        )
        return f"{_words_of(name).capitalize()}: {details}."
    if isinstance(value, bool):
        return f"{_words_of(name).capitalize()}: {'yes' if value else 'no'}."
    if isinstance(value, int | float):
        numbers = [v for v in arguments.values() if isinstance(v, int | float)]
        if "add" in name.lower().split("_") and len(numbers) >= 2:
            sum_text = " + ".join(_number_text(n) for n in numbers)
            return f"{sum_text} = {_number_text(value)}."
        return f"The {_words_of(name)} result is {_number_text(value)}."
    if isinstance(value, list):
        items = ", ".join(_number_text(item) for item in value[:10])
        more = f" and {len(value) - 10} more" if len(value) > 10 else ""
        return f"{_words_of(name).capitalize()} found {len(value)}: {items}{more}."
    text = str(value).strip()
    moment = _moment(text)
    if moment is not None:
        zone = arguments.get("timezone") or moment.strftime("UTC%z")
        day = f"{moment:%A} {moment.day} {moment:%B %Y}"
        return f"It is {moment:%H:%M} on {day} in {zone}."
    if not text:
        return f"{_words_of(name).capitalize()} returned nothing."
    return text if text[-1] in ".!?" else f"{text}."


def _moment(text: str) -> datetime.datetime | None:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?([+-]\d{2}:\d{2}|Z)?", text):
        return None
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
