"""Request parsers of the API: DRF's, with every malformed body a 400."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from tool_calling.api.errors import json_type

__all__ = ["PARSERS", "JSONParser"]


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, for bodies that are JSON objects (every body the API takes is one).

    A body nested too deeply for Python's parser, and a bare value (``5``, ``null``, ``[]``),
    are 400s, not 500s.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Parse the body; refuse what is not an object, or too deep to parse (``ParseError``)."""
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply.") from None
        if not isinstance(data, Mapping):
            raise ParseError(
                f"JSON parse error - the body must be a JSON object, not {json_type(data)}."
            )
        return data


PARSERS = [JSONParser, parsers.FormParser, parsers.MultiPartParser]
"""What the API's views accept: DRF's defaults, with the JSON parser above."""
