"""The tool catalogue and labelled requests of benchmarks/tool_search.py.

Tools come from the JSON files in benchmarks/tool_search_data/: MCP servers' tool lists
(``tools/list`` of npm packages), operations of OpenAPI specs that packages ship, and tools
written for this benchmark. Requests are labelled by hand; each expected entry is a tool name or
a list of equivalent names (any one of them counts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tool_calling import ToolDefinition

DATA = Path(__file__).resolve().parent / "tool_search_data"


@dataclass(frozen=True)
class Request:
    text: str
    expected: tuple[tuple[str, ...], ...]
    """Per needed tool, the names that satisfy it."""


def _handwritten() -> list[ToolDefinition]:
    tools = []
    for item in json.loads((DATA / "handwritten_tools.json").read_text()):
        properties = {}
        for name, (kind, description) in item["params"].items():
            prop = {"type": kind, "description": description}
            if kind == "array":
                prop["items"] = {"type": "string"}
            properties[name] = prop
        schema = {
            "type": "object",
            "properties": properties,
            "required": item["required"],
            "additionalProperties": False,
        }
        tools.append(ToolDefinition(item["name"], item["description"], schema))
    return tools


def catalogue() -> tuple[list[ToolDefinition], dict[str, str]]:
    """Return every tool of the catalogue and, per tool name, the source it came from."""
    tools: list[ToolDefinition] = []
    sources: dict[str, str] = {}
    servers = json.loads((DATA / "mcp_servers.json").read_text())
    for alias, server in servers.items():
        for tool in server["tools"]:
            name = f"{alias}__{tool['name']}"
            schema = dict(tool["input_schema"]) or {"type": "object"}
            schema.setdefault("type", "object")
            tools.append(ToolDefinition(name, tool["description"], schema))
            sources[name] = f"MCP {server['package']}@{server['version']}"
    specs = json.loads((DATA / "openapi_tools.json").read_text())
    for spec in specs.values():
        for tool in spec["tools"]:
            tools.append(ToolDefinition(tool["name"], tool["description"], tool["input_schema"]))
            sources[tool["name"]] = f"OpenAPI in {spec['package']}@{spec['version']}"
    for definition in _handwritten():
        tools.append(definition)
        sources[definition.name] = "written for this benchmark"
    names = [t.name for t in tools]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate tool names in the catalogue: {sorted(duplicates)}")
    return tools, sources


def requests(file: str = "requests.json") -> list[Request]:
    """Return the labelled requests of one file of tool_search_data/."""
    found = []
    for item in json.loads((DATA / file).read_text()):
        expected = tuple(
            tuple(entry) if isinstance(entry, list) else (entry,) for entry in item["expected"]
        )
        found.append(Request(item["request"], expected))
    return found


def check_labels(tools: list[ToolDefinition], labelled: list[Request]) -> None:
    """Raise if a request expects a tool the catalogue does not have."""
    names = {t.name for t in tools}
    missing = sorted({n for r in labelled for group in r.expected for n in group} - names)
    if missing:
        raise ValueError(f"requests expect tools that are not in the catalogue: {missing}")
