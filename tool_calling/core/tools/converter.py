"""Turning what a tool returns into the text the model sees."""

from __future__ import annotations

from typing import Any

import pydantic_core

__all__ = ["ToolCallResultConverter"]


class ToolCallResultConverter:
    """Converts a tool's return value to text for the model.

    The default: ``None`` from a function annotated ``-> None`` becomes ``"Done"``, any other
    ``None`` becomes ``"null"``, a ``str`` is sent as it is, and anything else becomes compact
    JSON (pydantic models, dataclasses, dates, Decimals, UUIDs and sets included; NaN and
    Infinity as the strings ``"NaN"`` and ``"Infinity"``). Subclass and
    override :meth:`convert` for another format.
    """

    def convert(self, result: Any, return_type: Any) -> str:
        """Return ``result`` as text.

        Raises:
            TypeError: the value cannot be encoded as JSON.
        """
        if result is None:
            return "Done" if return_type is None or return_type is type(None) else "null"
        if isinstance(result, str):
            return result
        if type(result) is int:  # the same digits as JSON, a tenth of the cost
            return str(result)
        try:
            # NaN and Infinity are not JSON: send them as the strings "NaN" / "Infinity".
            return pydantic_core.to_json(result, inf_nan_mode="strings").decode()
        except pydantic_core.PydanticSerializationError as exc:
            raise TypeError(
                f"the tool returned a value of type {type(result).__name__} that cannot be "
                "converted to JSON "
                f"({exc}); return a str, a JSON-compatible value, a dataclass or a pydantic model"
            ) from exc

    def __call__(self, result: Any, return_type: Any) -> str:
        """Same as :meth:`convert`."""
        return self.convert(result, return_type)


DEFAULT_CONVERTER = ToolCallResultConverter()
DEFAULT_CONVERT = DEFAULT_CONVERTER.convert
"""The default conversion as a bound method (one frame fewer than calling the converter)."""
