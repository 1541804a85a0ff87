"""Adopting the app in a new project, as docs/getting-started.md says, block by block.

``django-admin startproject mysite`` makes the project; the page's blocks are pasted into it as
they are (the settings appended, urls.py, celery.py, __init__.py and asgi.py written, the quick
start's tools as the app ``weather``), with only the Redis port and the web port changed. Then
the page's commands run it: ``manage.py check`` reports no issue, ``migrate``, a thread-pool
Celery worker and uvicorn start with the page's command lines, and a user's message through
the HTTP API comes back answered by the demo model after calling the tool on the worker.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests._processes import stop
from tests.integration._project import free_port
from tool_calling.testing import ReplayServer

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "getting-started.md").read_text()
SECTION = PAGE.split("## Adopting the app in an existing project", 1)[1].split("\n## ", 1)[0]


def block(text: str, language: str, first_line: str) -> str:
    found = [
        body
        for body in re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
        if body.startswith(first_line)
    ]
    assert len(found) == 1, f"one {language} block should start with {first_line!r}: {found}"
    return found[0]


@contextmanager
def started(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[None]:
    with log.open("ab") as output:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        yield
    finally:
        stop(process, patience=20)


def test_the_adoption_blocks_make_a_project_that_answers_through_the_api(
    tmp_path: Path, redis_url: tuple[str, subprocess.Popen[bytes]]
) -> None:
    broker, _ = redis_url
    site = tmp_path / "site"
    site.mkdir()
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(site)], check=True
    )
    (site / "weather").mkdir()
    (site / "weather" / "__init__.py").write_text("")
    (site / "weather" / "tools.py").write_text(block(PAGE, "python", "# weather/tools.py"))
    settings = block(SECTION, "python", "# mysite/settings.py")
    assert "redis://127.0.0.1:6379/0" in settings
    with (site / "mysite" / "settings.py").open("a") as file:
        file.write("\n" + settings.replace("redis://127.0.0.1:6379/0", broker))
    for first_line in ("# mysite/urls.py", "# mysite/celery.py", "# mysite/__init__.py",
                       "# mysite/asgi.py"):  # fmt: skip
        name = first_line.split()[1].split(":")[0]  # "mysite/urls.py"
        (site / name).write_text(block(SECTION, "python", first_line))

    model = ReplayServer(mode="demo").start()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": f"{site}:{ROOT}",
        "OPENAI_BASE_URL": f"{model.base_url}/v1",
        "OPENAI_API_KEY": "not-needed-by-the-replay-server",
        "HOME": str(tmp_path),
    }

    def manage(*argv: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *argv], cwd=site, env=env,
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"manage.py {argv}:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    commands = block(SECTION, "bash", "python manage.py check").splitlines()
    assert commands[0] == "python manage.py check && python manage.py migrate"
    assert "System check identified no issues (0 silenced)." in manage("check")
    manage("migrate", "--noinput")
    assert "get_weather" in manage("tools", "list")

    port = free_port()
    worker = [sys.executable, "-m", *shlex.split(commands[1])]
    web = [sys.executable, "-m", *shlex.split(commands[2].replace("8000", str(port)))]
    assert worker[2:4] == ["celery", "-A"] or worker[2] == "celery"
    with ExitStack() as stack:
        stack.callback(model.stop)
        stack.enter_context(started(worker, site, env, tmp_path / "worker.log"))
        stack.enter_context(started(web, site, env, tmp_path / "web.log"))
        manage("shell", "-c", "from django.contrib.auth.models import User; "
               "User.objects.create_user('alice', password='pw')")  # fmt: skip
        token = manage("drf_create_token", "alice").split()[2]
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api/",
            headers={"Authorization": f"Token {token}"},
            timeout=60,
        )
        deadline = time.monotonic() + 60
        while True:  # uvicorn and the worker start in parallel; the web server answers first
            try:
                api.get("tools/")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail((tmp_path / "web.log").read_text(errors="replace")[-3000:])
                time.sleep(0.2)
        conversation = api.post("conversations/", json={"title": "Weather"}).json()["id"]
        answered = api.post(
            f"conversations/{conversation}/messages/?wait=50",
            json={"text": "What's the weather in Oslo?"},
        )
        assert answered.status_code == 200, (
            answered.text + (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
        )
        run = answered.json()
        assert run["status"] == "succeeded", run
        transcript = api.get(f"conversations/{conversation}/").json()
        # The tool ran (on the worker), and the model's answer reports what it returned.
        assert "21" in str(transcript) and "Oslo" in str(transcript)
        error = api.get("runs/not-a-run/")
        assert error.headers["content-type"] == "application/json", error.text  # the middleware
