"""Splitting tool names and texts into search terms (lower case, stop words out, stemmed)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

__all__ = ["STEM_MARK", "light_stem", "name_words", "synonym_table", "terms", "words"]

# camelCase, PascalCase and acronyms: "getHTTPResponse" -> get, HTTP, Response.
_CAMEL = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_WORD = re.compile(r"[A-Za-z0-9]+")
_VOWEL = re.compile(r"[aeiouy]")

STOP_WORDS = frozenset(
    """
    a an and any are as at be been being but by can could did do does doing for from had has
    have having he her here hers him his how i if in into is it its itself me my myself no nor
    not of off on once only or other our ours out over own please same she should so some such
    than that the their theirs them then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your yours
    yourself also just need needs want wants like let lets using use via one each all every
    """.split()
)
"""Words that say nothing about which tool fits ("please", "the", "could you")."""


def words(text: str) -> list[str]:
    """Return the lower-case words of ``text``, identifiers split at camelCase boundaries."""
    found: list[str] = []
    for chunk in _WORD.findall(text):
        if chunk.islower() or chunk.isdigit():
            found.append(chunk)
        else:
            found.extend(part.lower() for part in _CAMEL.findall(chunk))
    return found


def name_words(name: str) -> list[str]:
    """Return the words of a tool name: ``github__createIssue`` -> github, create, issue."""
    return words(name.replace("_", " ").replace(".", " ").replace("-", " "))


def _undouble(stem: str) -> str:
    # "running" -> "runn" -> "run"; "added" -> "add" stays (three letters or fewer).
    if len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
        return stem[:-1]
    return stem


@functools.lru_cache(maxsize=1 << 15)
def light_stem(word: str) -> str:
    """Strip common English inflections: plurals, -ing, -ed, a final e (``issues`` -> ``issu``).

    Deliberately lighter than Porter: tool texts are short and full of identifiers, where
    aggressive stemming merges words that mean different things (``organization`` and
    ``organ``). Forms of one word end alike: ``create``, ``created``, ``creating`` -> ``creat``.
    """
    if len(word) < 3 or not word.isalpha():
        return word
    if len(word) == 3:
        # Plural abbreviations: "ids" -> "id", "prs" -> "pr".
        return word[:-1] if word[-1] == "s" and word[-2] not in "su" else word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("ied") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith("ing") and _VOWEL.search(word[:-3]):
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) > 4 and _VOWEL.search(word[:-2]):
        word = _undouble(word[:-2])
    # Nouns of verbs: "translation" and "translate", "pollution" and "pollutant" end alike.
    if word.endswith("ization") and len(word) >= 10:
        word = word[:-5]
    elif word.endswith("tion") and len(word) >= 8:
        word = word[:-3]
    elif word.endswith("ant") and len(word) >= 8:
        word = word[:-3]
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


STEM_MARK = "~"
"""Prefix of stemmed terms, which are indexed beside the words as written."""


ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "pr": ("pull", "request"),
    "prs": ("pull", "requests"),
    "mr": ("merge", "request"),
    "repo": ("repository",),
    "repos": ("repositories",),
    "k8s": ("kubernetes",),
    "db": ("database",),
    "dm": ("direct", "message"),
    "env": ("environment",),
    "config": ("configuration",),
    "info": ("information",),
    "msg": ("message",),
    "docs": ("documentation",),
    "ci": ("continuous", "integration"),
    "vm": ("virtual", "machine"),
    "qr": ("qr", "code"),
}
"""Abbreviations read as the words they stand for, in tool texts and queries alike."""


def terms(tokens: Iterable[str], stem: Callable[[str], str] | None = light_stem) -> list[str]:
    """Return search terms: each word that is not a stop word, and its stem.

    The word as written and its stem (marked with ``STEM_MARK``) are separate terms: *issues*
    finds *issue* through the stem, and a tool that says *issues* ranks above one that says
    *issue* (list tools say plurals). ``stem=None`` keeps the words only.
    """
    kept = [
        word
        for token in tokens
        if token not in STOP_WORDS
        for word in ABBREVIATIONS.get(token, (token,))
    ]
    if stem is None:
        return kept
    found: list[str] = []
    for token in kept:
        found.append(token)
        found.append(STEM_MARK + stem(token))
    return found


# Words people use for the same tool action or object. Each group is symmetric: a query word
# also finds the other words of its group, at a lower weight (``LexicalToolIndex``).
SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("create", "make", "add", "new", "open", "generate", "insert", "register"),
    ("delete", "remove", "erase", "drop", "discard", "destroy", "forget", "purge"),
    ("get", "fetch", "retrieve", "read", "show", "view", "see", "display", "look"),
    ("list", "show", "enumerate", "browse", "all"),
    ("update", "edit", "modify", "change", "set", "alter", "adjust"),
    ("search", "find", "lookup", "look", "query", "locate", "discover"),
    ("write", "save", "store", "overwrite"),
    ("web", "internet", "online"),
    ("directions", "route", "navigate", "navigation"),
    ("alert", "warning", "warn", "alarm"),
    ("send", "post", "deliver", "submit", "share"),
    ("start", "run", "launch", "trigger", "begin", "execute", "kick"),
    ("stop", "halt", "end", "pause", "terminate", "kill"),
    ("cancel", "abort", "revoke", "void", "call"),
    ("email", "mail", "inbox", "mailbox"),
    ("message", "text", "sms", "chat", "note"),
    ("meeting", "event", "appointment", "calendar"),
    ("schedule", "book", "reserve", "arrange", "plan"),
    ("remind", "reminder", "alert", "notify", "notification"),
    ("folder", "directory", "dir"),
    ("file", "document", "doc"),
    ("image", "picture", "photo", "screenshot", "snapshot"),
    ("user", "person", "people", "member", "account"),
    ("price", "cost", "quote", "rate"),
    ("money", "payment", "pay", "paid", "charge"),
    ("refund", "reimburse", "reimbursement"),
    ("vacation", "holiday", "leave"),
    ("issue", "ticket", "bug", "problem"),
    ("error", "exception", "failure", "crash", "fail"),
    ("log", "logs", "record", "track"),
    ("stock", "share", "ticker", "inventory"),
    ("currency", "euro", "dollar", "exchange"),
    ("weather", "forecast", "rain", "temperature"),
    ("sun", "sunrise", "sunset"),
    ("website", "site", "page", "url", "web"),
    ("down", "status", "up", "health", "outage"),
    ("grammar", "spelling", "typo", "proofread"),
    ("recipe", "cook", "cooking", "dish", "meal"),
    ("collaborator", "collaborate", "member", "share"),
    ("elevation", "altitude", "height", "high"),
)
"""Groups of interchangeable words (lower case, before stemming)."""


def synonym_table(stem: Callable[[str], str] | None) -> dict[str, tuple[str, ...]]:
    """Return ``{term: other terms of its groups}``, for words and (with ``stem``) stems."""
    table: dict[str, dict[str, None]] = {}
    variants: list[list[str]] = [list(group) for group in SYNONYM_GROUPS]
    if stem is not None:
        variants += [[STEM_MARK + stem(w) for w in group] for group in SYNONYM_GROUPS]
    for group in variants:
        for term in group:
            others = table.setdefault(term, {})
            for other in group:
                if other != term:
                    others[other] = None
    return {term: tuple(others) for term, others in table.items()}
