"""One trace per turn across processes: a durable run on real workers.

The test process is the web request (its spans in memory); every pool process of the workers
exports its spans to a file (tests/celery/toolsapp/apps.py). The run's steps and its tool call
run on the workers and all join the request's trace.
"""

from __future__ import annotations

import os
import time

import pytest
from django.conf import settings
from opentelemetry import trace

from tests._otel import read_json_lines, recording
from tool_calling import models, runs
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

from .test_runs_on_workers import finished

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]


def spans_of(trace_id: str, expected: int, timeout: float = 30.0) -> list[dict]:
    """The workers' spans of the trace, once ``expected`` of them were written."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            s for s in read_json_lines(settings.STATE_DIR) if s["context"]["trace_id"] == trace_id
        ]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_background_run_on_workers_is_one_trace_across_processes():
    sync_tools()
    steps = [
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "otel", "seconds": 0.05}}]},
        {"text": "Traced"},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT), recording() as web:
        conversation = models.Conversation.objects.create(title="traced")
        with trace.get_tracer("web").start_as_current_span("POST /messages") as request:
            run = runs.start_turn(conversation, "Go")
        run = finished(run)
    assert (run.status, run.answer) == ("succeeded", "Traced")

    context = request.get_span_context()
    trace_id = f"0x{context.trace_id:032x}"
    # The turn, the first model call, the tool call, the second model call.
    worker_spans = spans_of(trace_id, expected=4)
    by_name: dict[str, list[dict]] = {}
    for span in worker_spans:
        by_name.setdefault(span["name"], []).append(span)
    chat = f"chat {settings.TOOL_CALLING['CHAT_MODEL']['MODEL']}"  # the model asked for
    assert sorted(by_name) == [chat, "execute_tool sleepy", "invoke_agent"]
    (turn,) = by_name["invoke_agent"]
    (tool_span,) = by_name["execute_tool sleepy"]
    assert len(by_name[chat]) == 2
    # The turn span continues the request (sent in the step's task headers) ...
    assert turn["parent_id"] == f"0x{context.span_id:016x}"
    # ... and every later span joins it, from whichever process ran it.
    children = [tool_span, *by_name[chat]]
    assert {span["parent_id"] for span in children} == {turn["context"]["span_id"]}
    assert tool_span["attributes"]["tool_calling.tool_call.execution_mode"] == "celery"
    assert tool_span["attributes"]["tool_calling.run.id"] == str(run.pk)
    assert tool_span["attributes"]["tool_calling.tool_call.outcome"] == "succeeded"
    assert turn["attributes"]["gen_ai.conversation.id"] == str(conversation.pk)
    assert run.trace_context.split("-")[2] == turn["context"]["span_id"].removeprefix("0x")
    # Spans from at least two processes: this one (the request) and the workers' pool processes.
    pids = {span["pid"] for span in worker_spans}
    assert os.getpid() not in pids and len(pids) >= 1
    assert [s.name for s in web.spans()] == ["POST /messages"]
    assert len(pids | {os.getpid()}) >= 2
