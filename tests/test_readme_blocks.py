"""The quick starts' Python blocks run as a reader pastes them, in order, offline.

The README's quick start (the tool module, then a turn through ``OpenAIChatModel``) runs against
the replay server in demo mode, configured as the README says (``OPENAI_BASE_URL``). The full
quick start of docs/getting-started.md (the tool module, the scripted turn and the loop driven
by hand) runs in one fresh interpreter: a block that leans on state the one before it used up
(an exhausted scripted model) fails here. Its block that needs a real model
(``OpenAIChatModel()``) is replaced by its imports only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tool_calling.testing import ReplayServer

ROOT = Path(__file__).resolve().parent.parent


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)


def block(page: str, marker: str) -> str:
    found = [text for text in blocks(page) if marker in text]
    assert len(found) == 1, f"one block of {page} should contain {marker!r}, found {len(found)}"
    return found[0]


def run_in(directory: Path, tools: str, script: str, **env: str) -> subprocess.CompletedProcess:
    (directory / "weather").mkdir()
    (directory / "weather" / "__init__.py").write_text("")
    (directory / "weather" / "tools.py").write_text(tools)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": f"{directory}{os.pathsep}{ROOT}", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_readmes_quick_start_runs_against_the_demo_server(tmp_path: Path) -> None:
    with ReplayServer(mode="demo") as server:
        result = run_in(
            tmp_path,
            block("README.md", "# weather/tools.py"),
            block("README.md", "ChatClient.create(OpenAIChatModel())"),
            OPENAI_BASE_URL=f"{server.base_url}/v1",
            OPENAI_API_KEY="not-needed-by-the-replay-server",
        )
        asked = server.requests
    assert result.returncode == 0, result.stderr
    # The model called the tool, and its answer (printed) reports the tool's result.
    assert len(asked) == 2 and asked[1]["messages"][-1]["role"] == "tool"
    assert "Oslo" in result.stdout and "21" in result.stdout, result.stdout


def test_the_full_quick_start_blocks_run_in_order(tmp_path: Path) -> None:
    page = "docs/getting-started.md"
    turn = block(page, "model = OpenAIChatModel()")
    imports = "".join(line + "\n" for line in turn.splitlines() if line.startswith("from "))
    script = "\n".join(
        [
            imports,
            block(page, "from tool_calling.testing import ScriptedChatModel"),
            block(page, "DefaultToolCallingManager()"),
        ]
    )
    result = run_in(tmp_path, block(page, "# weather/tools.py"), script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Sunny, 21 °C."  # what the hand-driven loop prints
