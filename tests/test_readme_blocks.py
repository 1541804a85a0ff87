"""The README's quick-start Python blocks run as a reader pastes them, in order, offline.

The tool module (``# weather/tools.py``), then the scripted turn and the loop driven by hand,
in one fresh interpreter: a block that leans on state the one before it used up (an exhausted
scripted model) fails here. The block that needs a real model (``OpenAIChatModel()``) is
replaced by its imports only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def block(marker: str) -> str:
    found = [text for text in BLOCKS if marker in text]
    assert len(found) == 1, f"one README block should contain {marker!r}, found {len(found)}"
    return found[0]


def test_the_quick_start_blocks_run_in_order(tmp_path: Path) -> None:
    (tmp_path / "weather").mkdir()
    (tmp_path / "weather" / "__init__.py").write_text("")
    (tmp_path / "weather" / "tools.py").write_text(block("# weather/tools.py"))
    turn = block("model = OpenAIChatModel()")
    imports = "".join(line + "\n" for line in turn.splitlines() if line.startswith("from "))
    script = "\n".join(
        [
            imports,
            block("from tool_calling.testing import ScriptedChatModel"),
            block("DefaultToolCallingManager()"),
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Sunny, 21 °C."  # what the hand-driven loop prints
