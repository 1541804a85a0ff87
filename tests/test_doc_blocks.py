"""Every fenced block of the documentation runs in a test, so a pasted block works.

The collector finds every fenced block of README.md and the pages under docs/ (indented ones
in list items too; a fence it cannot read fails), and each must be claimed by exactly one
entry of ``BLOCKS`` below: ``Entry(page, marker, how)``, where ``marker`` is a substring found
in that block only and ``how`` says how it runs:

- ``Run``: a Python block, executed with the page's other ``Run`` blocks in document order, in
  one fresh interpreter (a traceback names the page and its line). A block whose first line
  names a module (``# weather/tools.py``) is written as that file instead. ``prelude`` is code
  run before the block, only for what the page's prose says is there (an object it describes,
  an import it names); ``after`` checks what the block did. A page whose blocks build
  ``OpenAIChatModel()`` gets ``OPENAI_BASE_URL`` of a ``ReplayServer(mode="demo")``.
- ``Project``: a settings or URLconf fragment, added to a project made by ``django-admin
  startproject`` (the ``# urls.py`` or ``# <project>/celery.py`` line that starts a section
  names the file it goes to; ``settings.py`` otherwise), then ``manage.py check`` must report
  no issues. A fragment extends the project's values (``INSTALLED_APPS += [...]``): a ``...``
  placeholder would replace them when pasted, and fails.
- ``Shell``: a ``bash`` block run as a script (``set -e``) in such a project or the example
  project, with a temporary SQLite database and the demo replay server.
- ``Json``: parsed, and checked against what the code answers where ``check`` says so.
- ``Output``: what a program prints, checked against the code where ``check`` says so.
- ``Syntax``: only parsed (``bash -n``, or Python's compiler; the scripts it names exist), with
  the reason it cannot run here (root, the network, a real key, the whole system).
- ``ByTest``: run by another test (``tests/<file>.py::<test>``); that test must exist and still
  contain the block's marker, so the claim cannot go stale.

A new block fails ``test_every_block_is_claimed_by_exactly_one_entry`` with the entry to add.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from tool_calling.testing import ReplayServer

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)
# What a subprocess must not inherit from this one (pytest-django's settings module) or from
# the developer's shell (a real model).
SCRUBBED = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    text: str
    line: int  # of the block's first line of code, 1-based

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


# A block at the start of a line, or indented in a list item (its indentation then removed).
FENCE = re.compile(r"^([ ]*)```(\w*)\n(.*?)^\1```", re.S | re.M)


def fenced_blocks() -> list[Block]:
    found = []
    for page in pages():
        text = (ROOT / page).read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start(3)) + 1
            indent = len(match.group(1))
            code = "".join(row[indent:] for row in match.group(3).splitlines(keepends=True))
            found.append(Block(page, match.group(2), code, line))
    return found


# How a block runs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Executed with the page's other Run blocks, in order, in one fresh interpreter."""

    prelude: str = ""
    after: str = ""
    langs = ("python",)


@dataclass(frozen=True)
class Project:
    """Added to a startproject's files; then ``manage.py check`` reports no issues."""

    prelude: str = ""  # settings.py lines before the fragment, for what the page says is there
    files: dict[str, str] = field(default_factory=dict)  # more files the prose names
    also: tuple[str, ...] = ()  # a Python statement run in the project afterwards
    langs = ("python",)


@dataclass(frozen=True)
class Shell:
    """A bash block run as a script (``set -e``) in a project, see ``test_shell_blocks``."""

    project: str  # "weather" (startproject and the page's weather app) or "example"
    setup: str = ""  # bash run before the block, for what the prose says exists
    subs: dict[str, str] = field(default_factory=dict)  # placeholder -> value
    check: Callable[[subprocess.CompletedProcess[str], Path], None] | None = None
    langs = ("bash",)


@dataclass(frozen=True)
class Json:
    check: Callable[[object], None] | None = None
    langs = ("json",)


@dataclass(frozen=True)
class Output:
    check: Callable[[str], None] | None = None
    langs = ("text", "console")


@dataclass(frozen=True)
class Syntax:
    why: str
    check: Callable[[str], None] | None = None
    langs = ("bash", "python")


@dataclass(frozen=True)
class ByTest:
    test: str  # tests/<file>.py::<test function>
    langs = ("bash", "python", "json", "text", "console")


How = Run | Project | Shell | Json | Output | Syntax | ByTest


@dataclass(frozen=True)
class Entry:
    page: str
    marker: str
    how: How


# Checks of particular blocks ------------------------------------------------------------------


def api_error_body(body: object) -> None:
    """The API's 400 for an empty message, as the serializer and the error handler make it."""
    from tool_calling.api.errors import summary
    from tool_calling.api.serializers import TurnSerializer

    turn = TurnSerializer(data={"text": ""})
    assert not turn.is_valid()
    made = {"detail": summary(turn.errors), "errors": turn.errors}
    assert json.loads(json.dumps(made)) == body


def sse_message(text: str) -> None:
    """The event stream's message format: the API writes the event the same way."""
    from tool_calling.api.events import _sse
    from tool_calling.runs.events import as_json

    fields = dict(line.split(": ", 1) for line in text.splitlines())
    event = json.loads(fields["data"])
    event["created_at"] = datetime.fromisoformat(event["created_at"])
    assert _sse(as_json(event)) == text + "\n"


def generic_error_text(text: str) -> None:
    """What the model reads of an unexpected error, with the page's tool name and error id."""
    from tool_calling.calls.failures import generic_text

    name, error_id = re.search(r"Tool '(\w+)' .*\(error id (\w+)\)", text).groups()  # type: ignore[union-attr]
    assert re.fullmatch(r"[0-9a-f]{12}", error_id)  # as new_error_id() makes them
    assert generic_text(name, error_id) == " ".join(text.split())


def layout_paths(text: str) -> None:
    """Each path of the development page's layout exists (indented ones under their parent)."""
    parents: list[tuple[int, str]] = []
    for line in text.splitlines():
        match = re.match(r"( *)(\S+)(?:\s{2,}|$)", line)
        if match is None or not re.fullmatch(r"[\w.\-{},/*]+", match.group(2)):
            continue
        indent, name = len(match.group(1)), match.group(2)
        if indent >= 21:  # a continuation line of a description
            continue
        parents = [(i, p) for i, p in parents if i < indent]
        path = "/".join([*(p.rstrip("/") for _, p in parents), name.rstrip("/")])
        if "{" in path or "*" in path:
            continue
        assert (ROOT / path).exists(), f"docs/development.md's layout names {path}: not found"
        if name.endswith("/"):
            parents.append((indent, name))


def manage_py_commands(text: str) -> None:
    """The commands the console block shows parse with the real command's parser."""
    from django.core.management import load_command_class

    for line in text.splitlines():
        if line.startswith("$ python manage.py "):
            argv = line.removeprefix("$ python manage.py ").split("#")[0].split()
            command = load_command_class("tool_calling", argv[0])
            command.create_parser("manage.py", argv[0]).parse_args(argv[1:])


def mcp_client_config(config: object) -> None:
    """The stdio entry starts a command that exists, with arguments it takes."""
    from django.core.management import load_command_class

    stdio = config["mcpServers"]["tool-calling-stdio"]  # type: ignore[index]
    script, name, *argv = stdio["args"]
    assert script.endswith("/manage.py") and (ROOT / "manage.py").exists()
    load_command_class("tool_calling", name).create_parser("manage.py", name).parse_args(argv)
    assert config["mcpServers"]["tool-calling"]["url"].endswith("/mcp/")  # type: ignore[index]


def variables_the_deployment_reads(text: str) -> None:
    """Each variable the block sets is read by the example project or its compose file."""
    read = (ROOT / "project" / "settings.py").read_text() + (
        ROOT / "docker/compose.yml"
    ).read_text()
    for name in re.findall(r"^([A-Z_]+)=", text, re.M):
        assert name in read, f"{name} is read by neither project/settings.py nor compose.yml"


def one_conversation_about_oslo(stdout: str, project: Path) -> None:
    """Both turns went to one conversation; the first called the tool and reports its result."""
    ids = re.findall(r"^Conversation: (\S+)$", (project / "stderr.txt").read_text(), re.M)
    assert len(ids) == 2 and ids[0] == ids[1], ids
    assert "In Oslo it is 21 °C." in stdout, stdout


# The registry ----------------------------------------------------------------------------------

RUN_ON_THE_SYSTEM = (
    "tests/test_main_job.py::test_run_sh_runs_the_example_system_and_ctrl_c_stops_all_of_it"
)
STARTS_THE_SYSTEM = "starts the whole example system (tests/test_main_job.py runs run.sh)"
ADOPTED_PROJECT = (
    "tests/integration/test_adopt_project.py::"
    "test_the_adoption_blocks_make_a_project_that_answers_through_the_api"
)

BLOCKS: list[Entry] = [
    # README.md
    Entry(
        "README.md", "bash scripts/test.sh", Syntax(STARTS_THE_SYSTEM + "; test.sh is the suite")
    ),
    Entry("README.md", "# weather/tools.py", Run()),
    Entry(
        "README.md",
        "ChatClient.create(OpenAIChatModel())",
        Run(after='assert "Oslo" in client.prompt("Weather in Oslo?").call().content()'),
    ),
    # docs/getting-started.md
    Entry("docs/getting-started.md", "bash scripts/test.sh", Syntax(STARTS_THE_SYSTEM)),
    Entry(
        "docs/getting-started.md",
        "pip install /path/to/this/checkout",
        Syntax("installs into the environment (tests/test_release.py installs the wheel)"),
    ),
    Entry(
        "docs/getting-started.md",
        '"tool_calling.apps.SimpleToolCallingConfig"',
        Project(),
    ),
    Entry("docs/getting-started.md", "# weather/tools.py", Run()),
    Entry(
        "docs/getting-started.md",
        "model = OpenAIChatModel()",
        Run(after='assert "Oslo" in answer'),
    ),
    Entry("docs/getting-started.md", "from tool_calling.testing import ScriptedChatModel", Run()),
    Entry("docs/getting-started.md", "DefaultToolCallingManager()", Run()),
    Entry(
        "docs/getting-started.md",
        "python manage.py migrate             #",
        Shell(
            "weather",
            # What the commands print on stderr (the conversation's id) is kept in a file.
            setup="exec 2>stderr.txt",
            subs={"<id printed before>": '"$(sed -n "s/^Conversation: //p" stderr.txt)"'},
            check=lambda done, cwd: one_conversation_about_oslo(done.stdout, cwd),
        ),
    ),
    *(
        Entry("docs/getting-started.md", marker, ByTest(ADOPTED_PROJECT))
        for marker in (
            "# mysite/settings.py",
            "# mysite/urls.py",
            "# mysite/celery.py",
            "# mysite/__init__.py",
            "# mysite/asgi.py",
            "python manage.py check && python manage.py migrate",
        )
    ),
    Entry(
        "docs/getting-started.md",
        "TOOL_CALLING_EXECUTION_MODE=celery",
        # With the addresses run.sh printed, against the system it started.
        ByTest(RUN_ON_THE_SYSTEM),
    ),
    Entry(
        "docs/getting-started.md",
        "OPENAI_API_KEY=sk-...",
        Syntax("a real model's key, or a local Ollama; and starts the whole system"),
    ),
    # docs/api.md
    Entry("docs/api.md", '"detail": "text: The message is empty."', Json(api_error_body)),
    Entry(
        "docs/api.md",
        "JSONErrorMiddleware",
        Project(
            prelude='INSTALLED_APPS += ["rest_framework", "tool_calling"]',
            # The WSGI handler loads every middleware: a wrong path fails here.
            also=("import mysite.wsgi",),
        ),
    ),
    Entry("docs/api.md", "drf_create_token admin", ByTest(RUN_ON_THE_SYSTEM)),
    Entry("docs/api.md", "event: model_call", Output(sse_message)),
    Entry("docs/api.md", "Last-Event-ID: 5", ByTest(RUN_ON_THE_SYSTEM)),
    # docs/approvals.md
    Entry(
        "docs/approvals.md",
        "approve_toolexecution",
        ByTest(RUN_ON_THE_SYSTEM),  # after the API walk-through, whose $AUTH and $CONV it uses
    ),
    Entry("docs/approvals.md", "requires_confirmation=True", Run()),
    Entry(
        "docs/approvals.md",
        "ToolCallDecision.allow",
        Run(
            # The prose: a reply whose calls need confirmation; the manager raised
            # ToolCallConfirmationRequiredError for it; a client continues the conversation.
            prelude="""
from tool_calling import ChatClient, Prompt, ToolCallConfirmationRequiredError
from tool_calling import ToolCallingChatOptions, tool_callbacks
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

model = ScriptedChatModel([
    tool_calls(
        tool_call("delete_file", path="notes.txt"),
        tool_call("refund_order", order_id="A1", amount=250),
        tool_call("delete_file", path="thesis.txt"),
    ),
    text("Deleted notes.txt, refunded 120 of A1, kept thesis.txt."),
])
options = ToolCallingChatOptions(
    tool_callbacks=tool_callbacks(delete_file, refund_order),
    internal_tool_execution_enabled=False,
)
prompt = Prompt("Tidy up and refund A1.", options)
reply = model.call(prompt)
try:
    manager.execute_tool_calls(prompt, reply)
except ToolCallConfirmationRequiredError as waiting:
    assert [p.tool_call.id for p in waiting.pending] == ["call_1", "call_2", "call_3"]
client = ChatClient.create(model)
""",
            after='assert answer.startswith("Deleted notes.txt")',
        ),
    ),
    # docs/chat-page.md
    Entry(
        "docs/chat-page.md",
        "# settings.py",
        Project(files={"mysite/__init__.py": "from .celery import app as celery_app\n"}),
    ),
    # docs/development.md
    Entry("docs/development.md", "the example project's entry point", Output(layout_paths)),
    # docs/governance.md
    Entry(
        "docs/governance.md",
        "def owns_order(call: CallRequest)",
        # The page is about a Django project's tools: Django is set up (tests.settings).
        Run(prelude="import django\n\ndjango.setup()"),
    ),
    Entry("docs/governance.md", "failed with an unexpected error", Output(generic_error_text)),
    # docs/mcp.md
    Entry(
        "docs/mcp.md",
        "@modelcontextprotocol/server-everything",
        Syntax("starts server-everything with npx and connects to mcp.example.com"),
    ),
    Entry("docs/mcp.md", "class Forecast(BaseModel)", Run()),
    Entry(
        "docs/mcp.md",
        "def refund(amount: int, ctx: ToolContext)",
        Run(
            # A first call asks; the call again with the client's answer and the state refunds.
            after="""
from tool_calling.core.tools.context import INPUT_RESPONSES_KEY, REQUEST_STATE_KEY

assert isinstance(refund(30, ToolContext()), InputRequired)
answered = {INPUT_RESPONSES_KEY: {"sure": {"content": {"ok": True}}}}
assert refund(30, ToolContext(answered, **{REQUEST_STATE_KEY: "refund:30"})) == "refunded 30"
""",
        ),
    ),
    Entry(
        "docs/mcp.md",
        "McpToolServer(list_tools=tools_for, call_tool=run_for)",
        Run(
            # The prose: the two callables and authenticate(headers), which returns a principal.
            prelude="""
from tool_calling.core.mcp import McpToolServer

def tools_for(principal):
    return [forecast]

def run_for(principal, name, arguments, meta):
    return "done"

def principal_from_headers(headers):
    return "alice"
""",
            after="assert callable(app)",
        ),
    ),
    Entry("docs/mcp.md", "$ python manage.py mcp sync everything", Output(manage_py_commands)),
    Entry(
        "docs/mcp.md",
        "with_mcp(application)",
        Project(
            # The prose: /mcp/ takes DRF tokens (rest_framework.authtoken).
            prelude='INSTALLED_APPS += ["rest_framework", "rest_framework.authtoken", '
            '"tool_calling"]',
            also=("import mysite.asgi",),
        ),
    ),
    Entry("docs/mcp.md", '"mcpServers"', Json(mcp_client_config)),
    Entry(
        "docs/mcp.md",
        'INSTALLED_APPS += ["oauth2_provider"]',
        Project(prelude='INSTALLED_APPS += ["rest_framework", "tool_calling"]'),
    ),
    Entry(
        "docs/mcp.md",
        "# urls.py: the authorize and token endpoints",
        Project(prelude='INSTALLED_APPS += ["oauth2_provider"]'),
    ),
    # docs/many-users.md
    Entry(
        "docs/many-users.md",
        '"ENGINE": "tool_calling.db.backends.sqlite3"',
        Project(
            # Connected, the database is in WAL mode, as its init_command asks.
            also=(
                "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'mysite.settings'; "
                "django.setup(); from django.db import connections; db = connections['default']; "
                "cursor = db.cursor(); cursor.execute('PRAGMA journal_mode'); "
                "assert cursor.fetchone()[0] == 'wal'; "
                "assert type(db).__module__ == 'tool_calling.db.backends.sqlite3.base'",
            ),
        ),
    ),
    # docs/observability.md
    Entry(
        "docs/observability.md",
        "export OTEL_EXPORTER_OTLP_ENDPOINT",
        Syntax("starts the web server and a worker, which run until stopped"),
    ),
    Entry("docs/observability.md", "from opentelemetry import trace", Run()),
    Entry(
        "docs/observability.md",
        '"()": "tool_calling.observability.LogContextFilter"',
        Project(prelude='INSTALLED_APPS += ["rest_framework", "tool_calling"]'),
    ),
    # docs/operations.md
    Entry(
        "docs/operations.md",
        "docker compose -f docker/compose.yml up --build",
        Syntax("builds and starts the containers (docker, the network)"),
    ),
    Entry(
        "docs/operations.md",
        "DJANGO_SECRET_KEY=...                                  # required",
        Syntax("the deployment's variables, placeholders", check=variables_the_deployment_reads),
    ),
    Entry(
        "docs/operations.md",
        "python manage.py tools disable refund_order",
        Shell(
            "example",
            # The prose: "recorded as ops's change": ops is a user of the site.
            setup='python manage.py shell -c "from django.contrib.auth.models import User; '
            "User.objects.create_user('ops')\"",
        ),
    ),
    # docs/release.md
    Entry(
        "docs/release.md",
        "twine check --strict dist/*",
        # In a copy of the checkout: the build writes dist/ where it runs.
        ByTest("tests/test_release.py::test_twine_accepts_the_sdist_and_the_wheel"),
    ),
    # docs/search.md
    Entry(
        "docs/search.md",
        "ToolSearchToolCallingAdvisor(max_results=5",
        Run(
            # The prose: a model, and hundreds of tools among which the pinned one.
            prelude='''
from tool_calling import tool
from tool_calling.testing import ScriptedChatModel, text, tool_call

@tool
def get_current_user() -> str:
    """The user who asks."""
    return "alice"

filed = []

@tool
def jira_create_issue(title: str) -> str:
    """Create an issue in Jira."""
    filed.append(title)
    return "JIRA-7"

hundreds_of_tools = [get_current_user, jira_create_issue]
model = ScriptedChatModel([
    tool_call("tool_search", query="jira issue"),
    tool_call("jira_create_issue", title="Login is broken on Safari"),
    text("Filed JIRA-7."),
])
''',
            after="model.assert_consumed()\nassert filed == ['Login is broken on Safari']",
        ),
    ),
    Entry(
        "docs/search.md",
        "class Reasoning(pydantic.BaseModel)",
        Run(
            # The prose: a logger, the tools to wrap and a client.
            prelude='''
import logging

from tool_calling.testing import ScriptedChatModel, text, tool_call

log = logging.getLogger("reasons")

@tool
def cancel_order(order_id: int) -> str:
    """Cancel an order."""
    return f"cancelled {order_id}"

my_tools = [cancel_order]
client = ChatClient.create(ScriptedChatModel([
    tool_call("cancel_order", order_id=5, inner_thought="The user asked.", confidence="high"),
    text("Cancelled."),
]))
''',
        ),
    ),
    Entry(
        "docs/search.md",
        '"TOOL_SEARCH": {"ENABLED": True',
        Project(
            prelude='INSTALLED_APPS += ["rest_framework", "tool_calling"]',
        ),
    ),
]


def claims() -> tuple[dict[Block, list[Entry]], list[str]]:
    """Which entries claim each block, and the entries that claim none or several."""
    blocks = fenced_blocks()
    claimed: dict[Block, list[Entry]] = {block: [] for block in blocks}
    problems = []
    for entry in BLOCKS:
        matching = [b for b in blocks if b.page == entry.page and entry.marker in b.text]
        if len(matching) != 1:
            where = ", ".join(b.where for b in matching)
            problems.append(
                f"the entry {entry.page!r}, {entry.marker!r} matches {len(matching)} blocks "
                f"{where}: its marker must be in exactly one block of its page"
            )
        for block in matching:
            claimed[block].append(entry)
    return claimed, problems


def entries(kind: type) -> list[tuple[Block, Entry]]:
    claimed, _ = claims()
    return [(b, e[0]) for b, e in claimed.items() if len(e) == 1 and isinstance(e[0].how, kind)]


def test_every_block_is_claimed_by_exactly_one_entry() -> None:
    claimed, problems = claims()
    for page in pages():  # a fence FENCE does not read would escape the claims
        text = (ROOT / page).read_text()
        read = {m.start() for m in FENCE.finditer(text)} | {m.end() for m in FENCE.finditer(text)}
        for fence in re.finditer(r"^[ \t>]*(`{3,}|~{3,}).*$", text, re.M):
            if fence.start() not in read and fence.end() not in read:
                line = text.count("\n", 0, fence.start()) + 1
                problems.append(
                    f"{page}:{line}: a fence this test cannot read ({fence.group()!r}): "
                    "write blocks as ```lang at the start of a line, closed by ```"
                )
    for block, by in claimed.items():
        first = block.text.splitlines()[0] if block.text.strip() else ""
        if not by:
            problems.append(
                f"{block.where}: a ```{block.lang} block nobody claims ({first[:50]!r}). Claim it "
                f"in BLOCKS of tests/test_doc_blocks.py: Entry({block.page!r}, '<text found in "
                "this block only>', Run() / Project() / Shell(...) / Json() / Output() / "
                "Syntax(why=...) / ByTest('tests/...::test_...')); the module docstring says "
                "what each does"
            )
        elif len(by) > 1:
            problems.append(f"{block.where}: claimed by {len(by)} entries: {by}")
        elif block.lang not in by[0].how.langs:
            problems.append(f"{block.where}: a ```{block.lang} block cannot be {by[0].how}")
    assert not problems, "\n".join(problems)


# Running them ----------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PATH"] = f"{PYTHON.parent}{os.pathsep}{env.get('PATH', '')}"  # `python` is this one
    return {**env, **extra}


def module_of(block: Block) -> str | None:
    """``weather/tools.py`` when the block's first line names the file it is."""
    match = re.fullmatch(r"# ([\w/]+\.py)", block.text.splitlines()[0])
    return match.group(1) if match else None


RUNNER = """
import json, sys
steps = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for name, line, source in steps:
    exec(compile("\\n" * (line - 1) + source, name, "exec"), namespace)
"""


def python_pages() -> list[str]:
    return sorted({block.page for block, _ in entries(Run)})


@pytest.mark.parametrize("page", python_pages())
def test_python_blocks_run_in_order_in_one_interpreter(page: str, tmp_path: Path) -> None:
    steps: list[tuple[str, int, str]] = []
    for block, entry in entries(Run):
        if block.page != page:
            continue
        assert isinstance(entry.how, Run)
        if module := module_of(block):
            (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / module).parent.joinpath("__init__.py").touch()
            (tmp_path / module).write_text(block.text)
            continue
        if entry.how.prelude:
            steps.append((f"<prelude of {block.where}>", 1, entry.how.prelude))
        steps.append((block.page, block.line, block.text))
        if entry.how.after:
            steps.append((f"<check after {block.where}>", 1, entry.how.after))
    env = clean_env(
        PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}",
        DJANGO_SETTINGS_MODULE="tests.settings",
        OPENAI_API_KEY="not-needed-by-the-replay-server",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",  # nothing: only the demo server answers
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
    )
    with ReplayServer(mode="demo") as server:
        if any("OpenAIChatModel()" in source for _, _, source in steps):
            env["OPENAI_BASE_URL"] = f"{server.base_url}/v1"
        done = subprocess.run(
            [PYTHON, "-c", RUNNER],
            input=json.dumps(steps),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def startproject(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new project as ``django-admin startproject mysite .`` makes it."""
    base = tmp_path_factory.mktemp("startproject")
    subprocess.run(
        [PYTHON, "-m", "django", "startproject", "mysite", str(base)],
        env=clean_env(),
        check=True,
        capture_output=True,
    )
    return base


def sections(block: Block) -> dict[str, str]:
    """The block's text by the file it goes to: a ``# urls.py`` line starts that file's part."""
    parts: dict[str, str] = {}
    target = "settings.py"
    for line in block.text.splitlines(keepends=True):
        if match := re.match(r"# (?:<project>/)?(\w+\.py)\b", line):
            target = match.group(1)
        parts[target] = parts.get(target, "") + line.replace("<project>", "mysite")
    return parts


def manage(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=project,
        env=clean_env(PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("block", "entry"), entries(Project), ids=lambda v: v.where if isinstance(v, Block) else ""
)
def test_project_fragments_pass_manage_py_check(
    block: Block, entry: Entry, startproject: Path, tmp_path: Path
) -> None:
    how = entry.how
    assert isinstance(how, Project)
    placeholder = re.search(r"\[\s*\.\.\.\s*,|^\s*# \.\.\.\s*$", block.text, re.M)
    assert placeholder is None, (
        f"{block.where}: a '...' placeholder does not paste; extend the project's own value "
        "instead: INSTALLED_APPS += [...], MIDDLEWARE = [..., *MIDDLEWARE]"
    )
    project = tmp_path / "project"
    shutil.copytree(startproject, project)
    if how.prelude:
        with (project / "mysite" / "settings.py").open("a") as settings:
            settings.write(f"\n{how.prelude}\n")
    for name, text in how.files.items():
        with (project / name).open("a") as file:
            file.write(text)
    for name, text in sections(block).items():
        with (project / "mysite" / name).open("a") as file:
            file.write(f"\n{text}")
    check = manage(project, "check")
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "System check identified no issues (0 silenced).", (
        check.stdout + check.stderr
    )
    for statement in how.also:
        done = subprocess.run(
            [PYTHON, "-c", statement],
            cwd=project,
            env=clean_env(PYTHONPATH=f"{project}{os.pathsep}{ROOT}"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def weather_project(startproject: Path, directory: Path) -> Path:
    """The getting-started page's project: the app installed, its weather app's tools."""
    project = directory / "project"
    shutil.copytree(startproject, project)
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write('\nINSTALLED_APPS += ["rest_framework", "tool_calling", "weather"]\n')
    tools = next(b for b, _ in entries(Run) if b.page == "docs/getting-started.md" and module_of(b))
    (project / "weather").mkdir()
    (project / "weather" / "__init__.py").touch()
    (project / "weather" / "tools.py").write_text(tools.text)
    return project


@pytest.mark.parametrize(
    ("block", "entry"), entries(Shell), ids=lambda v: v.where if isinstance(v, Block) else ""
)
def test_shell_blocks_run(block: Block, entry: Entry, startproject: Path, tmp_path: Path) -> None:
    how = entry.how
    assert isinstance(how, Shell)
    script = block.text
    for placeholder, value in how.subs.items():
        script = script.replace(placeholder, value)
    env = clean_env(DJANGO_SECRET_KEY="doc-blocks", OPENAI_API_KEY="not-needed")
    if how.project == "weather":
        cwd = weather_project(startproject, tmp_path)
        env["PYTHONPATH"] = str(ROOT)
        script = f"{how.setup}\n{script}"
    else:  # the example project, on a database of its own
        cwd = ROOT
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
        script = f"python manage.py migrate -v 0\n{how.setup}\n{script}"
    with ReplayServer(mode="demo") as server:
        env["OPENAI_BASE_URL"] = f"{server.base_url}/v1"
        done = subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{script}"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    kept = cwd / "stderr.txt"
    assert done.returncode == 0, (
        done.stdout + done.stderr + (kept.read_text() if kept.exists() else "")
    )
    if how.check:
        how.check(done, cwd)


@pytest.mark.parametrize(
    ("block", "entry"),
    entries(Json) + entries(Output),
    ids=lambda v: v.where if isinstance(v, Block) else "",
)
def test_json_and_output_blocks(block: Block, entry: Entry) -> None:
    how = entry.how
    if isinstance(how, Json):
        value = json.loads(block.text)
        if how.check:
            how.check(value)
    elif isinstance(how, Output) and how.check:
        how.check(block.text)


@pytest.mark.parametrize(
    ("block", "entry"), entries(Syntax), ids=lambda v: v.where if isinstance(v, Block) else ""
)
def test_blocks_that_cannot_run_here_parse(block: Block, entry: Entry) -> None:
    how = entry.how
    assert isinstance(how, Syntax) and how.why
    if block.lang == "python":
        ast.parse(block.text, filename=block.where)
    else:
        done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
        assert done.returncode == 0, f"{block.where}: {done.stderr}"
        for path in re.findall(r"\b(?:scripts|docker)/[\w./-]+\.(?:sh|yml)\b", block.text):
            assert (ROOT / path).exists(), f"{block.where} names {path}: not found"
    if how.check:
        how.check(block.text)


@pytest.mark.parametrize(
    ("block", "entry"), entries(ByTest), ids=lambda v: v.where if isinstance(v, Block) else ""
)
def test_blocks_run_by_other_tests_are_still_there(block: Block, entry: Entry) -> None:
    how = entry.how
    assert isinstance(how, ByTest)
    path, name = how.test.split("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"^def {name}\(", source, re.M), f"{how.test} is gone"
    assert entry.marker in source, f"{path} no longer reads the block with {entry.marker!r}"
