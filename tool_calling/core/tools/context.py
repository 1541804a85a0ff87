"""ToolContext: data for tools that never reaches the model."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["ToolContext"]


class ToolContext(Mapping[str, Any]):
    """A read-only mapping of data passed to tools (tenant, user, request ids).

    A tool receives it by declaring a parameter annotated ``ToolContext``; that parameter never
    appears in the tool's schema, so nothing in it is sent to the model. Writing raises
    ``TypeError``.
    """

    __slots__ = ("_data",)
    _data: MappingProxyType[str, Any]

    def __init__(self, mapping: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        object.__setattr__(self, "_data", MappingProxyType({**(mapping or {}), **kwargs}))

    @property
    def context(self) -> Mapping[str, Any]:
        """The data as a read-only mapping (Spring AI's ``getContext()``)."""
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("ToolContext is read-only")

    def __delattr__(self, name: str) -> None:
        raise TypeError("ToolContext is read-only")

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("ToolContext is read-only")

    def __delitem__(self, key: str) -> None:
        raise TypeError("ToolContext is read-only")

    def __repr__(self) -> str:
        # Values may be secrets; show only the keys.
        return f"ToolContext(keys={sorted(self._data)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolContext, (dict(self._data),))
