"""The one rule for whole numbers a client writes in a request: ASCII digits only.

``?after=`` of a conversation's messages and of a run's events, ``Last-Event-ID`` and ``?wait=``
all go through :func:`whole_number`. ``int()`` alone would take ``٣`` (an Arabic-Indic digit),
``1_0``, `` 5``, ``+5`` and ``5 ``.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DIGITS", "MAX_WHOLE_NUMBER", "whole_number"]

MAX_DIGITS = 18
"""The most digits a number may have: any 18-digit number fits a signed 64-bit integer, the
widest a database compares."""

MAX_WHOLE_NUMBER = 10**MAX_DIGITS - 1
"""The largest number :func:`whole_number` takes (what the OpenAPI schema gives as maximum)."""

_WHOLE_NUMBER = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def whole_number(raw: object) -> int | None:
    """``raw`` as an ``int`` when it is a string of 1 to ``MAX_DIGITS`` ASCII digits, else None."""
    if isinstance(raw, str) and _WHOLE_NUMBER.fullmatch(raw):
        return int(raw)
    return None
