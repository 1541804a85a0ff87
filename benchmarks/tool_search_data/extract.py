"""Rebuilds the package-sourced parts of the tool catalogue (not run by the benchmark).

The benchmark reads the JSON files beside this script. This script is how they were made: it
starts MCP servers that npm packages ship and asks each for its tools (``tools/list`` over
stdio), and turns operations of the OpenAPI specs that packages ship into tool definitions.

    mkdir /tmp/mcp && cd /tmp/mcp && npm install @modelcontextprotocol/server-github ...
    python benchmarks/tool_search_data/extract.py /tmp/mcp [more folders with node_modules]

Dummy credentials are passed where a server insists on one at start: listing tools never
calls the service.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent

# alias -> (npm package, arguments after the entry point, environment)
SERVERS = {
    "github": ("@modelcontextprotocol/server-github", [], {"GITHUB_PERSONAL_ACCESS_TOKEN": "x"}),
    "gitlab": ("@modelcontextprotocol/server-gitlab", [], {"GITLAB_PERSONAL_ACCESS_TOKEN": "x"}),
    "slack": (
        "@modelcontextprotocol/server-slack",
        [],
        {"SLACK_BOT_TOKEN": "x", "SLACK_TEAM_ID": "T0"},
    ),
    "maps": ("@modelcontextprotocol/server-google-maps", [], {"GOOGLE_MAPS_API_KEY": "x"}),
    "brave": ("@modelcontextprotocol/server-brave-search", [], {"BRAVE_API_KEY": "x"}),
    "fs": ("@modelcontextprotocol/server-filesystem", ["/tmp"], {}),
    "memory": ("@modelcontextprotocol/server-memory", [], {}),
    "postgres": ("@modelcontextprotocol/server-postgres", ["postgresql://localhost/x"], {}),
    "redis": ("@modelcontextprotocol/server-redis", ["redis://localhost:1"], {}),
    "everything": ("@modelcontextprotocol/server-everything", ["stdio"], {}),
    "stripe": ("@stripe/mcp", ["--tools=all", "--api-key=sk_test_x"], {}),
    "browser": ("@playwright/mcp", ["--headless"], {}),
    "k8s": ("mcp-server-kubernetes", [], {}),
    "circleci": ("@circleci/mcp-server-circleci", [], {"CIRCLECI_TOKEN": "x"}),
    "supabase": ("@supabase/mcp-server-supabase", ["--access-token=x"], {}),
    "mapbox": ("@mapbox/mcp-server", [], {"MAPBOX_ACCESS_TOKEN": "pk.x"}),
    "todoist": ("todoist-mcp", [], {"TODOIST_API_TOKEN": "x", "API_KEY": "x"}),
    "heroku": ("@heroku/mcp-server", [], {"HEROKU_API_KEY": "x"}),
    "sentry": ("@sentry/mcp-server", ["--access-token=x"], {}),
    "elastic": (
        "@elastic/mcp-server-elasticsearch",
        [],
        {"ES_URL": "http://localhost:1", "ES_API_KEY": "x"},
    ),
    "line": (
        "@line/line-bot-mcp-server",
        [],
        {"CHANNEL_ACCESS_TOKEN": "x", "DESTINATION_USER_ID": "U0"},
    ),
}


def _package_dir(roots: list[Path], package: str) -> Path:
    for root in roots:
        if (root / "node_modules" / package / "package.json").exists():
            return root / "node_modules" / package
    raise FileNotFoundError(f"{package} is not installed under {roots}")


def _entry(roots: list[Path], package: str) -> Path:
    folder = _package_dir(roots, package)
    meta = json.loads((folder / "package.json").read_text())
    binary = meta["bin"]
    target = binary if isinstance(binary, str) else next(iter(binary.values()))
    return folder / target


def list_tools(roots: list[Path], package: str, args: list[str], env: dict[str, str]) -> list[dict]:
    """Start one MCP server on stdio and return its ``tools/list`` answer."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "catalogue", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    process = subprocess.Popen(
        ["node", str(_entry(roots, package)), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", **env},
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    for message in messages:
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
    timer = threading.Timer(60, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            if not line.startswith("{"):
                continue
            answer = json.loads(line)
            if answer.get("id") == 2:
                return [
                    {
                        "name": t["name"],
                        "description": t.get("description", ""),
                        "input_schema": t.get("inputSchema", {"type": "object"}),
                    }
                    for t in answer["result"]["tools"]
                ]
    finally:
        timer.cancel()
        process.kill()
    raise RuntimeError(f"{package}: no tools/list answer")


def _snake(text: str) -> str:
    text = re.sub(r"[^A-Za-z0-9]+", "_", text)
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    return text.strip("_").lower()


def _first_paragraph(text: str, limit: int = 300) -> str:
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text or "")
    first = text.strip().split("\n\n")[0].replace("\n", " ").strip()
    return first if len(first) <= limit else first[: limit - 3].rsplit(" ", 1)[0] + "..."


def _resolve(spec: dict, node: dict) -> dict:
    while isinstance(node, dict) and "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        target = spec
        for part in path:
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def _simple(spec: dict, schema: dict, depth: int = 0) -> dict:
    """A small JSON Schema for one parameter: type, enum, description; nested one level."""
    schema = _resolve(spec, schema)
    out: dict = {}
    for key in ("type", "enum", "format"):
        if key in schema:
            out[key] = schema[key]
    if "description" in schema:
        out["description"] = _first_paragraph(schema["description"], 200)
    if out.get("type") == "array" and "items" in schema and depth < 1:
        out["items"] = _simple(spec, schema["items"], depth + 1)
    if out.get("type") == "object" and "properties" in schema and depth < 1:
        out["properties"] = {
            k: _simple(spec, v, depth + 1) for k, v in list(schema["properties"].items())[:12]
        }
    if "type" not in out and "anyOf" not in schema and "oneOf" not in schema:
        out["type"] = "string"
    if "type" not in out:
        out["type"] = "string"
    if isinstance(out["type"], list):
        out["type"] = [t for t in out["type"] if t != "null"][0]
    return out


def openapi_tools(spec: dict, prefix: str, keep) -> list[dict]:
    """Tools for the operations of an OpenAPI spec that ``keep(path, method, op)`` accepts."""
    tools = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete") or not keep(path, op):
                continue
            properties: dict = {}
            required: list[str] = []
            for param in [*item.get("parameters", []), *op.get("parameters", [])]:
                param = _resolve(spec, param)
                if param.get("in") not in ("path", "query"):
                    continue
                prop = _simple(spec, param.get("schema", {}))
                if param.get("description"):
                    prop["description"] = _first_paragraph(param["description"], 200)
                properties[param["name"]] = prop
                if param.get("required"):
                    required.append(param["name"])
            body = op.get("requestBody", {})
            body = _resolve(spec, body)
            media = body.get("content", {}).get("application/json", {})
            body_schema = _resolve(spec, media.get("schema", {}))
            for name, prop in list(body_schema.get("properties", {}).items())[:15]:
                properties[name] = _simple(spec, prop)
            required += [r for r in body_schema.get("required", []) if r in properties]
            name = prefix + _snake(op["operationId"])[: 64 - len(prefix)]
            summary = op.get("summary", "")
            detail = _first_paragraph(op.get("description", ""))
            description = summary if not detail or detail == summary else f"{summary}. {detail}"
            tools.append(
                {
                    "name": name,
                    "description": description.strip(),
                    "input_schema": {
                        "type": "object",
                        "properties": properties,
                        "required": sorted(set(required), key=required.index),
                    },
                }
            )
    return tools


# Operation groups (the operationId's prefix) of GitHub's REST API taken into the catalogue.
GITHUB_GROUPS = {
    "gists", "reactions", "teams", "checks", "activity", "packages", "dependabot", "codespaces",
}  # fmt: skip


def main(*folders: str) -> None:
    """Write mcp_servers.json and openapi_tools.json from the packages under ``folders``."""
    roots = [Path(f) for f in folders]
    servers = {}
    for alias, (package, args, env) in SERVERS.items():
        try:
            version = json.loads((_package_dir(roots, package) / "package.json").read_text())
            tools = list_tools(roots, package, args, env)
        except Exception as exc:  # a server that cannot start is left out, and said so
            print(f"{alias}: {exc}", file=sys.stderr)
            continue
        servers[alias] = {"package": package, "version": version["version"], "tools": tools}
        print(f"{alias}: {len(tools)} tools", file=sys.stderr)
    (HERE / "mcp_servers.json").write_text(json.dumps(servers, indent=1) + "\n")

    notion_pkg = _package_dir(roots, "@notionhq/notion-mcp-server")
    notion = json.loads((notion_pkg / "scripts/notion-openapi.json").read_text())
    github_pkg = _package_dir(roots, "@octokit/openapi")
    github = json.loads((github_pkg / "generated/api.github.com.json").read_text())

    def github_keep(path: str, op: dict) -> bool:
        group = op["operationId"].split("/")[0]
        deprecated = op.get("deprecated") or "enterprise" in path
        return group in GITHUB_GROUPS and not deprecated and "/installation" not in path

    specs = {
        "notion": {
            "package": "@notionhq/notion-mcp-server",
            "version": json.loads((notion_pkg / "package.json").read_text())["version"],
            "tools": openapi_tools(notion, "notion_", lambda p, o: True),
        },
        "github_rest": {
            "package": "@octokit/openapi",
            "version": json.loads((github_pkg / "package.json").read_text())["version"],
            "tools": openapi_tools(github, "gh_", github_keep),
        },
    }
    for alias, spec in specs.items():
        print(f"{alias}: {len(spec['tools'])} tools", file=sys.stderr)
    (HERE / "openapi_tools.json").write_text(json.dumps(specs, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
