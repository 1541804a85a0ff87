"""Request parsers of the API: DRF's, with every malformed body a 400."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

__all__ = ["PARSERS", "JSONParser"]


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser; a body nested too deeply for Python's parser is a 400, not a 500."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Parse the body; ``RecursionError`` (e.g. 100,000 ``[``) becomes ``ParseError``."""
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply.") from None


PARSERS = [JSONParser, parsers.FormParser, parsers.MultiPartParser]
"""What the API's views accept: DRF's defaults, with the JSON parser above."""
