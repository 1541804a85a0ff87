"""Imports inside tool_calling/ run one way, read from the source with ``ast``.

The Django glue is layered::

    entry points (api/, admin/, management/, contrib/, asgi)
      -> tasks -> retention -> runs/ -> governance -> calls/
      -> conversations, search, augmentation -> resolvers, repositories, tool_state
      -> calls.authorization (who may call a tool: the gate and the tool lists ask it), models
      -> conf, signals, registry, _notify, _lease, _celery, _prepared, _connections, db, audit,
         observability, _compat
      -> exceptions -> core/

A module imports only its own layer or lower ones, no import runs in a circle, and no import of
a tool_calling module hides in a function body (``AppConfig.ready()`` aside, which registers
checks, receivers and tasks). A lower module that must tell a higher one something sends a
signal (``tool_calling.signals``) or returns a value.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tool_calling"

# (prefix, layer): the longest matching prefix decides a module's layer.
LAYERS = [
    ("tool_calling.core", 0),
    ("tool_calling.exceptions", 1),
    ("tool_calling.testing", 1),
    ("tool_calling.registry", 2),
    ("tool_calling.conf", 2),
    ("tool_calling.signals", 2),
    ("tool_calling._notify", 2),
    ("tool_calling._lease", 2),
    ("tool_calling._celery", 2),
    ("tool_calling.audit", 2),
    ("tool_calling._prepared", 2),
    ("tool_calling._connections", 2),
    ("tool_calling.db", 2),
    ("tool_calling._compat", 2),
    ("tool_calling.cache", 2),
    ("tool_calling.observability", 2),
    # Inside observability, one way: names and the SDK adapter, the scope, content and metrics,
    # then the observations (model calls, tool calls, the turn, a run's steps).
    ("tool_calling.observability.semconv", 2.0),
    ("tool_calling.observability._otel", 2.0),
    ("tool_calling.observability._scope", 2.01),
    ("tool_calling.observability._content", 2.02),
    ("tool_calling.observability._metrics", 2.02),
    ("tool_calling.observability._propagation", 2.02),
    ("tool_calling.observability._chat", 2.03),
    ("tool_calling.observability._tools", 2.03),
    ("tool_calling.observability._turns", 2.04),
    ("tool_calling.observability._runs", 2.05),
    ("tool_calling.checks", 3),
    ("tool_calling.models", 3),
    ("tool_calling.mcp", 3.5),
    ("tool_calling.mcp.clients", 3.5),
    ("tool_calling.mcp.mirror", 4),
    ("tool_calling.repositories", 4),
    ("tool_calling.resolvers", 4),
    ("tool_calling.sync", 4),
    # Operators' changes to tools: the ORM only.
    ("tool_calling.tool_state", 4),
    ("tool_calling.conversations", 5),
    ("tool_calling.search", 5),
    ("tool_calling.augmentation", 5),
    ("tool_calling.calls", 6),
    ("tool_calling.calls.lifecycle", 6.0),
    # Who may call a tool: it imports only the core, and the tool lists (resolvers) ask it too.
    ("tool_calling.calls.authorization", 3.9),
    ("tool_calling.calls.failures", 6.0),
    ("tool_calling.calls.quotas", 6.0),
    ("tool_calling.calls.retries", 6.0),
    ("tool_calling.calls.deadlines", 6.0),
    ("tool_calling.calls.gate", 6.05),
    ("tool_calling.calls.transport", 6.0),
    ("tool_calling.calls.dispatch", 6.1),
    ("tool_calling.calls.running", 6.1),
    ("tool_calling.calls.approvals", 6.2),
    ("tool_calling.calls.notify", 6.3),
    ("tool_calling.calls.policies", 6.0),
    ("tool_calling.calls.inline", 6.2),
    ("tool_calling.calls.executors", 6.3),
    ("tool_calling.calls.worker", 6.3),
    ("tool_calling.calls.sweeper", 6.4),
    ("tool_calling.governance", 7),
    ("tool_calling.runs", 8),
    ("tool_calling.runs.events", 8.0),
    ("tool_calling.runs.lifecycle", 8.1),
    ("tool_calling.runs.steps", 8.2),
    ("tool_calling.runs.receivers", 8.2),
    ("tool_calling.runs.sweeper", 8.2),
    # The purge of expired rows: the calls' lifecycle unlinks the audit of deleted runs.
    ("tool_calling.retention", 8.5),
    ("tool_calling.tasks", 9),
    ("tool_calling.mcp.serving", 9.5),
    ("tool_calling.api", 10),
    ("tool_calling.admin", 10),
    ("tool_calling.management", 10),
    ("tool_calling.contrib", 10),
    ("tool_calling.asgi", 10),
    ("tool_calling.apps", 11),
    ("tool_calling", 1),  # the package root: the core's public names
]

# Imports allowed inside a function body: an AppConfig's ready() registers checks, receivers
# and tasks; and the lazy imports below.
FUNCTION_IMPORTS_ALLOWED = {
    # Lazy heavy SDK imports: the mcp SDK takes seconds to import and is
    # optional, and resolvers import tool_calling.mcp.clients in every process.
    ("tool_calling.mcp.clients", "sdk"),
    # After django.setup(): the MCP endpoint reads models, which need the app registry.
    ("tool_calling.asgi", "with_mcp"),
}


def allowed_in_function(module: str, function: str | None) -> bool:
    return (module, function) in FUNCTION_IMPORTS_ALLOWED or (
        function == "ready" and (module == "tool_calling.apps" or module.endswith(".apps"))
    )


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_name(path): path for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts}


def layer(module: str) -> float:
    best = max((p for p, _ in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def _target(module: str, node: ast.ImportFrom | ast.Import, alias: ast.alias) -> list[str]:
    """The tool_calling modules an import statement names (a module, or one of its names)."""
    if isinstance(node, ast.Import):
        names = [alias.name]
    else:
        base = node.module or ""
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            parts = package.split(".")
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{alias.name}", base]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name:
            found.append(name)
            break
    return found


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """``(imported module, enclosing function or None, line)`` for each tool_calling import."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[str, str | None, int]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child.name if function is None else function
            if isinstance(child, ast.Import | ast.ImportFrom):
                for alias in child.names:
                    for target in _target(module, child, alias):
                        if target.startswith("tool_calling") and target != module:
                            found.append((target, function, child.lineno))
            visit(child, inner)

    visit(tree, None)
    return found


EDGES = {module: _imports(module) for module in MODULES}


def test_the_walk_sees_the_whole_package():
    assert {"tool_calling.calls.lifecycle", "tool_calling.runs.steps", "tool_calling.tasks"} <= set(
        MODULES
    )
    assert ("tool_calling.calls.lifecycle", None) in {
        (target, function) for target, function, _ in EDGES["tool_calling.runs.steps"]
    }


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_down_the_layers(module):
    upward = [
        f"{module}:{line} imports {target} (layer {layer(target)} above {layer(module)})"
        for target, function, line in EDGES[module]
        if layer(target) > layer(module)
        # A package's __init__ may gather its own modules.
        and not target.startswith(module + ".")
        and not allowed_in_function(module, function)
    ]
    assert upward == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_hides_in_a_function_body(module):
    hidden = [
        f"{module}:{line} imports {target} inside {function}()"
        for target, function, line in EDGES[module]
        if function is not None and not allowed_in_function(module, function)
    ]
    assert hidden == []


def test_no_imports_run_in_a_circle():
    """Tarjan's strongly connected components over every import, function bodies included."""
    graph = {
        module: {
            target
            for target, _, _ in edges
            # Importing one's own parent package to reach a sibling is not a circle.
            if not module.startswith(target + ".")
        }
        for module, edges in EDGES.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def strong(vertex: str) -> None:
        index[vertex] = low[vertex] = len(index)
        stack.append(vertex)
        on_stack.add(vertex)
        for target in graph[vertex]:
            if target not in index:
                strong(target)
                low[vertex] = min(low[vertex], low[target])
            elif target in on_stack:
                low[vertex] = min(low[vertex], index[target])
        if low[vertex] == index[vertex]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == vertex:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for vertex in sorted(graph):
        if vertex not in index:
            strong(vertex)
    assert circles == []


def test_a_layer_violation_is_caught(tmp_path):
    """The checks can fail: an upward import planted in a fake module is reported."""
    fake = "tool_calling.calls.fake"
    MODULES[fake] = tmp_path / "fake.py"
    MODULES[fake].write_text(
        "from tool_calling.runs import steps\n\ndef f():\n    import tool_calling.tasks\n"
    )
    try:
        edges = _imports(fake)
        assert [(t, f) for t, f, _ in edges] == [
            ("tool_calling.runs.steps", None),
            ("tool_calling.tasks", "f"),
        ]
        assert all(layer(t) > layer(fake) for t, _, _ in edges)
    finally:
        del MODULES[fake]
