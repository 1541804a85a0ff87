"""One trace per turn, web and workers, as an OTLP receiver gets it.

The example project's own OpenTelemetry set-up (project/telemetry.py, read from the environment
by its settings; project/asgi.py's span per request) runs in a uvicorn web server and a Celery
worker started here with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a real OTLP/HTTP receiver
(tests/_otlp.py, decoding what the SDK's exporter sends). A client posts a message over HTTP;
the turn's steps and its tool call run on the worker, with a thread pool (as docker/compose.yml
and the main job run them) and with a prefork pool (forked after the set-up). The receiver gets
one trace: the web request's span, the turn's ``invoke_agent`` span under it covering every step
with the usage of both model calls, and the model and tool calls under that.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests._otlp import OtlpReceiver, ReceivedSpan
from tool_calling import models
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

from .conftest import WebServer, start_web_server, start_worker, stop_worker, wait_ready

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

QUEUE = "tc_otlp"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """A traces-only OTLP/HTTP receiver (metrics answered 405, as Phoenix does)."""
    with OtlpReceiver() as otlp:
        yield otlp


@pytest.fixture(scope="module", params=["threads", "prefork"])
def web(
    request: pytest.FixtureRequest, workers: object, receiver: OtlpReceiver
) -> Iterator[WebServer]:
    """A web server and a worker that export to ``receiver``; the worker alone runs QUEUE."""
    exporting = {
        "TC_TESTS_OTLP": "1",
        "TC_CELERY_OTLP_QUEUE": QUEUE,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    worker = start_worker(
        f"otlp-{request.param}",
        queues=QUEUE,
        env={**exporting, "OTEL_SERVICE_NAME": "tool-calling-worker"},
        pool=request.param,
    )
    try:
        wait_ready(worker)
        server = start_web_server(
            "web-otlp", env={**exporting, "OTEL_SERVICE_NAME": "tool-calling-web"}
        )
        server.pool = request.param  # type: ignore[attr-defined]
        try:
            yield server
        finally:
            server.stop()
    finally:
        stop_worker(worker)


def finished(run_id: str, timeout: float = 60.0) -> models.Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = models.Run.objects.get(pk=run_id)
        if run.status in ("succeeded", "failed", "cancelled"):
            return run
        time.sleep(0.1)
    pytest.fail(f"run {run_id} did not end within {timeout} s")


def test_a_turn_is_one_trace_across_web_and_worker_with_its_summed_usage(web, receiver):
    sync_tools()
    user = User.objects.create_user("otlp")
    token = Token.objects.create(user=user)
    steps = [
        {
            "tool_calls": [{"name": "sleepy", "arguments": {"key": "otlp", "seconds": 0.5}}],
            "usage": {"prompt_tokens": 52, "completion_tokens": 2},
        },
        {"text": "Traced", "usage": {"prompt_tokens": 56, "completion_tokens": 9}},
    ]
    headers = {"Authorization": f"Token {token.key}"}
    with (
        ReplayServer(steps, port=settings.MODEL_PORT),
        httpx.Client(base_url=web.url, headers=headers, timeout=30) as client,
    ):
        conversation = client.post("/api/conversations/", json={"title": "otlp"}).json()
        posted = client.post(conversation["messages_url"], json={"text": "Go"})
        assert posted.status_code == 202, posted.text
        run = finished(posted.json()["id"])
    assert (run.status, run.answer) == ("succeeded", "Traced")

    def turn_of(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [
            s
            for s in spans
            if s.name == "invoke_agent" and s.attributes.get("tool_calling.run.id") == str(run.pk)
        ]

    received = receiver.wait_for(lambda spans: bool(turn_of(spans)))
    (turn,) = turn_of(received)

    def complete(spans: list[ReceivedSpan]) -> bool:
        # Every process exports its own batches: wait for the tool call's and the requests'.
        names = [s.name for s in spans if s.trace_id == turn.trace_id]
        return names.count("execute_tool sleepy") == 1 and any(
            s.kind == "SERVER" for s in spans if s.trace_id == turn.trace_id
        )

    received = receiver.wait_for(complete, timeout=15)
    trace = [s for s in received if s.trace_id == turn.trace_id]
    by_id = {s.span_id: s for s in trace}

    # The web request's span is the root; the turn continues it, on the worker.
    request = by_id[turn.parent_id]
    assert (request.kind, request.service, request.parent_id) == (
        "SERVER",
        "tool-calling-web",
        "",
    )
    assert request.name == f"POST /api/conversations/{conversation['id']}/messages/"
    assert request.attributes["http.status_code"] == 202
    assert turn.service == "tool-calling-worker"
    chats = [s for s in trace if s.name.startswith("chat ")]
    tools = [s for s in trace if s.name == "execute_tool sleepy"]
    assert len(chats) == 2 and len(tools) == 1
    assert {s.parent_id for s in (*chats, *tools)} == {turn.span_id}
    assert {s.service for s in (*chats, *tools)} == {"tool-calling-worker"}
    # On a thread pool the step runs its call itself and asks the model again: one step. On
    # prefork the call is a task of its own, and its end queues the run's second step.
    steps_seen = [c.attributes["tool_calling.run.step"] for c in chats]
    assert steps_seen == ([1, 1] if web.pool == "threads" else [1, 2])
    # The whole turn: both model calls' usage, every step and call inside its time.
    assert turn.attributes["gen_ai.usage.input_tokens"] == 52 + 56
    assert turn.attributes["gen_ai.usage.output_tokens"] == 2 + 9
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [52, 56]
    assert turn.attributes["gen_ai.provider.name"] == "openai"
    assert turn.start <= min(s.start for s in (*chats, *tools))
    assert turn.end >= max(s.end for s in (*chats, *tools))
    assert turn.end - turn.start >= 500_000_000  # the tool slept 0.5 s in it
    # Nothing of the run in another trace; no metrics sent to this traces-only receiver.
    of_run = [s for s in received if s.attributes.get("tool_calling.run.id") == str(run.pk)]
    assert {s.trace_id for s in of_run} == {turn.trace_id}
    assert {path for path, _ in receiver.requests} == {"/v1/traces"}
