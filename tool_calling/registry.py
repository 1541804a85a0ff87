"""The tool registry: the project's tools, filled by autodiscovery like ``admin.site``.

Pure Python (no Django import at module level); ``autodiscover()`` imports Django inside.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tool_calling.core.tools.callback import ToolCallback, tool_callbacks
from tool_calling.exceptions import ToolDefinitionError

__all__ = ["RegisteredTool", "ToolRegistry", "autodiscover", "registry"]


@dataclass(frozen=True)
class RegisteredTool:
    """A tool in the registry and where it came from."""

    callback: ToolCallback
    """The callback the framework calls."""
    source: str
    """The app label (or other source) that registered it."""
    origin: str
    """``module.qualname`` of the tool, or the callback's repr."""


def _origin_of(callback: ToolCallback) -> str:
    function = getattr(callback, "function", None)
    if function is not None:
        module = getattr(function, "__module__", "?")
        return f"{module}.{getattr(function, '__qualname__', function)}"
    return repr(callback)


class ToolRegistry:
    """Tools by name. Registering a second tool under an existing name raises."""

    def __init__(self) -> None:
        self._registry: dict[str, RegisteredTool] = {}

    def register(self, *objects: Any, source: str = "") -> list[ToolCallback]:
        """Register the tools of ``objects`` (anything ``tool_callbacks`` accepts).

        All or nothing: when one tool is refused, none of ``objects`` is registered. Names that
        differ only in case count as the same name (a model that mixes them up would run the
        wrong tool). Registering the same tool from the same source again does nothing.

        Raises:
            ToolDefinitionError: a name is already registered (the message names both origins).
        """
        callbacks = tool_callbacks(*objects)
        new: dict[str, RegisteredTool] = {}
        for callback in callbacks:
            name = callback.definition.name
            origin = _origin_of(callback)
            existing = self._same_name(name)
            if existing is not None:
                existing_name = existing.callback.definition.name
                same_tool = existing.origin == origin and existing.source == source
                if existing_name == name and same_tool:
                    continue  # the same module imported twice
                by = f"app {existing.source!r} " if existing.source else ""
                if existing_name == name:
                    problem = f"Tool {name!r} is already registered by {by}({existing.origin})"
                else:
                    problem = (
                        f"Tool {name!r} differs only in case from tool {existing_name!r}, "
                        f"registered by {by}({existing.origin})"
                    )
                raise ToolDefinitionError(
                    f"{problem}; cannot register {origin}"
                    + (f" from app {source!r}" if source else "")
                    + ". Rename one with @tool(name=...)."
                )
            new[name] = RegisteredTool(callback, source, origin)
        self._registry.update(new)
        return callbacks

    def _same_name(self, name: str) -> RegisteredTool | None:
        entry = self._registry.get(name)
        if entry is not None:
            return entry
        folded = name.casefold()
        return next((e for n, e in self._registry.items() if n.casefold() == folded), None)

    def unregister(self, name: str) -> None:
        """Remove the tool named ``name``.

        Raises:
            KeyError: no tool has that name.
        """
        del self._registry[name]

    def get(self, name: str) -> ToolCallback | None:
        """Return the callback named ``name``, or ``None``."""
        entry = self._registry.get(name)
        return entry.callback if entry is not None else None

    def entry(self, name: str) -> RegisteredTool | None:
        """Return the registry entry (callback and source) for ``name``, or ``None``."""
        return self._registry.get(name)

    def callbacks(self) -> list[ToolCallback]:
        """Return every registered callback, in registration order."""
        return [entry.callback for entry in self._registry.values()]

    def entries(self) -> list[RegisteredTool]:
        """Return every registry entry, in registration order."""
        return list(self._registry.values())

    def clear(self) -> None:
        """Remove every tool."""
        self._registry.clear()

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._registry))

    def __len__(self) -> int:
        return len(self._registry)


registry = ToolRegistry()
"""The project's tools, filled from each installed app's ``tools`` module."""


def autodiscover(target: ToolRegistry | None = None) -> None:
    """Import every installed app's ``tools`` module and register its ``@tool`` functions."""
    import importlib

    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    target = registry if target is None else target
    for app_config in apps.get_app_configs():
        if not module_has_submodule(app_config.module, "tools"):
            continue
        module = importlib.import_module(f"{app_config.name}.tools")
        target.register(module, source=app_config.label)
