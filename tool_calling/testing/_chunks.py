"""Stdlib-only helpers shared by ScriptedChatModel and ReplayServer: text chunking, word counts."""

from __future__ import annotations

import re

_PIECE = re.compile(r"\S+\s*|\s+")
WORDS_PER_CHUNK = 3


def split_text(text: str, words_per_chunk: int = WORDS_PER_CHUNK) -> list[str]:
    """Split ``text`` into chunks of a few words; joining the chunks gives ``text`` back."""
    pieces = _PIECE.findall(text)
    return [
        "".join(pieces[start : start + words_per_chunk])
        for start in range(0, len(pieces), words_per_chunk)
    ]


def split_arguments(arguments: str, parts: int = 3) -> list[str]:
    """Split tool-call arguments into up to ``parts`` pieces, as a streaming server sends them."""
    if not arguments:
        return []
    size = max(1, -(-len(arguments) // parts))
    return [arguments[start : start + size] for start in range(0, len(arguments), size)]


def count_words(*texts: str | None) -> int:
    """Deterministic stand-in for a token count: the whitespace-separated words of ``texts``."""
    return sum(len(text.split()) for text in texts if text)
