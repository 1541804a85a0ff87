"""Tool search and argument augmentation on real Celery workers (Django).

A durable run whose every step is a task on a worker finds a tool with ``tool_search`` (run in
the step, on the worker) and calls it on a worker; what it found is read back from the
database by the steps that follow and by the next turn. An augmented tool's call reaches the
worker with the tool's own arguments only, from a turn in this process and from a durable run,
while its reason is stored on the call.

The durable runs here need tool search in the workers' settings: this module starts a worker of
its own with ``TC_CELERY_SEARCH_QUEUE`` set (tests/settings_celery.py then turns search on and
makes that queue the workers' queue) and sends its runs to that queue, which no other worker
consumes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from tool_calling import models, runs
from tool_calling.core.chat.advisors.tool_search import SEARCH_TOOL_NAME
from tool_calling.governance import governed_chat_client
from tool_calling.search import discovered_tools
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer, ScriptedChatModel, text, tool_call
from tool_calling.testing.services import celery_worker_argv

from .conftest import ROOT, Worker, stop_worker, wait_ready

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

SEARCH_QUEUE = "tc_search"
REASON = {"inner_thought": "The user wants a nap.", "confidence": "medium"}


@pytest.fixture(autouse=True)
def tool_rows() -> None:
    sync_tools()
    for log in settings.STATE_DIR.glob("runs-*.log"):
        log.unlink()


@pytest.fixture(scope="module")
def search_worker(workers: list[Worker]) -> Iterator[Worker]:
    """A worker with tool search on, consuming ``SEARCH_QUEUE`` only."""
    name = f"tcsearch-{uuid.uuid4().hex[:8]}@%h"
    log = settings.STATE_DIR / "worker-search.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_celery",
        "TC_CELERY_SEARCH_QUEUE": SEARCH_QUEUE,
    }
    process = subprocess.Popen(
        celery_worker_argv(name, SEARCH_QUEUE),
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = Worker(name.replace("%h", socket.gethostname()), log, process)
    try:
        wait_ready(worker)
        yield worker
    finally:
        stop_worker(worker)


def searching_settings() -> dict:
    """This process's side of the search worker's settings (the same keys)."""
    return {
        **settings.TOOL_CALLING,
        "EXECUTION": {**settings.TOOL_CALLING["EXECUTION"], "QUEUE": SEARCH_QUEUE},
        "TOOL_SEARCH": {"ENABLED": True, "THRESHOLD": 0},
    }


def finished(run: models.Run, timeout: float = 60.0) -> models.Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("succeeded", "failed", "cancelled"):
            return run
        time.sleep(0.1)
    pytest.fail(f"run {run.pk} still {run.status} after {timeout} s")


def tool_names(request: dict) -> list[str]:
    return [entry["function"]["name"] for entry in request.get("tools", [])]


def sleepy_runs() -> list[str]:
    log = settings.STATE_DIR / "runs-sleepy.log"
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_durable_run_finds_a_tool_on_a_worker_and_its_next_turn_sees_it(search_worker):
    models.Tool.objects.filter(name="sleepy").update(augment_arguments=True)
    steps = [
        {
            "tool_calls": [
                {"name": SEARCH_TOOL_NAME, "arguments": {"query": "sleepy", "max_results": 1}}
            ]
        },
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "found", "seconds": 0, **REASON}}]},
        {"text": "Slept"},
        # The next turn: the tool found is offered at once.
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "again", "seconds": 0, **REASON}}]},
        {"text": "Slept again"},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT) as server:
        with override_settings(TOOL_CALLING=searching_settings()):
            conversation = models.Conversation.objects.create(title="search on workers")
            run = finished(runs.start_turn(conversation, "Take a nap"))
            assert (run.status, run.answer) == ("succeeded", "Slept"), run.error
            second = finished(runs.start_turn(conversation, "Another one"))
        requests = list(server.requests)

    assert (second.status, second.answer) == ("succeeded", "Slept again"), second.error
    assert len(requests) == 5  # every model call was made by the worker's steps
    assert tool_names(requests[0]) == [SEARCH_TOOL_NAME]
    assert tool_names(requests[1]) == [SEARCH_TOOL_NAME, "sleepy"]
    # The tool's schema as the model saw it: the reason first, then the tool's own arguments.
    (sleepy,) = [t for t in requests[1]["tools"] if t["function"]["name"] == "sleepy"]
    assert list(sleepy["function"]["parameters"]["properties"]) == [
        "inner_thought",
        "confidence",
        "key",
        "seconds",
    ]
    assert tool_names(requests[3]) == [SEARCH_TOOL_NAME, "sleepy"]
    assert discovered_tools(conversation) == ["sleepy"]
    assert sleepy_runs() == ["found", "again"]

    search, found, again = models.ToolExecution.objects.filter(conversation=conversation).order_by(
        "created_at", "pk"
    )
    assert (search.tool_name, search.mode, search.status, search.run_id) == (
        SEARCH_TOOL_NAME,
        "inline",
        "succeeded",
        run.pk,
    )
    for row in (found, again):
        assert (row.tool_name, row.mode, row.status) == ("sleepy", "celery", "succeeded")
        assert row.worker.split(" (pid ")[0] == search_worker.name
        assert row.augmented_arguments == REASON
    assert json.loads(found.arguments) == {"key": "found", "seconds": 0}


def test_an_augmented_call_from_a_turn_here_runs_on_a_worker_with_its_own_arguments(workers):
    """Without the split the worker's plain tool would refuse the extra fields."""
    models.Tool.objects.filter(name="sleepy").update(augment_arguments=True)
    model = ScriptedChatModel([tool_call("sleepy", key="why", seconds=0, **REASON), text("Done")])
    client = governed_chat_client(model=model, tool_names=["sleepy"])
    assert client.prompt("Nap").call().content() == "Done"
    assert sleepy_runs() == ["why"]
    row = models.ToolExecution.objects.get()
    assert (row.mode, row.status, row.augmented_arguments) == ("celery", "succeeded", REASON)
    assert row.worker.split(" (pid ")[0] in {worker.name for worker in workers}
    assert json.loads(row.arguments) == {"key": "why", "seconds": 0}
    response = model.requests[1].messages[-1].responses[0]
    assert not response.is_error and response.response_data.startswith("why slept 0 s")
