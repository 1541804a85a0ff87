"""The HTTP API end to end: uvicorn, real workers, Redis, the replay model.

A client creates a conversation, posts a message and follows the run's Server-Sent Events to the
answer; an approval-gated tool is approved through the API on one turn and denied on the next,
while the client watches; another user gets 404s; many open streams hold no thread each.
Everything goes over HTTP to ``uvicorn project.asgi:application`` started with this tier's
settings (same SQLite file, same Redis, same workers).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token

from tool_calling import models
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

from .conftest import WebServer, start_web_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module")
def web(workers: object) -> Iterator[WebServer]:
    """``uvicorn project.asgi:application`` on a free port, with this tier's settings."""
    server = start_web_server("web")
    try:
        yield server
    finally:
        server.stop()


def api_client(web: WebServer, user: User) -> httpx.Client:
    token = Token.objects.create(user=user)
    return httpx.Client(
        base_url=web.url, headers={"Authorization": f"Token {token.key}"}, timeout=30
    )


@dataclass
class Event:
    id: int
    kind: str
    data: dict


def follow(
    client: httpx.Client,
    url: str,
    *,
    on_event: Callable[[Event], None] = lambda event: None,
    last_event_id: int | None = None,
    timeout: float = 60,
) -> list[Event]:
    """Read the run's SSE stream until it ends; ``on_event`` sees each event as it arrives."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[Event] = []
    fields: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    with client.stream("GET", url, headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            assert time.monotonic() < deadline, f"the stream did not end: {events}"
            if line == "":
                if "event" in fields:
                    event = Event(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                    events.append(event)
                    on_event(event)
                fields = {}
            elif not line.startswith(":") and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.removeprefix(" ")
    return events


def runs_of(tool: str) -> list[str]:
    log = settings.STATE_DIR / f"runs-{tool}.log"
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_client_posts_a_message_and_follows_the_run_live_to_its_answer(web):
    sync_tools()
    alice = User.objects.create_user("alice")
    steps = [
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "e2e-1", "seconds": 0.2}}]},
        {"text": "It is sunny in Paris today, according to the tool."},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT), api_client(web, alice) as client:
        conversation = client.post("/api/conversations/", json={"title": "weather"})
        assert conversation.status_code == 201, conversation.text
        posted = client.post(conversation.json()["messages_url"], json={"text": "Weather?"})
        assert posted.status_code == 202, posted.text
        run = posted.json()
        assert run["status"] in ("queued", "running")
        events = follow(client, run["urls"]["events"])

        kinds = [event.kind for event in events]
        assert [event.id for event in events] == list(range(1, len(events) + 1))
        assert kinds[0] == "queued" and kinds[-1] == "succeeded"
        assert (
            kinds.index("model_call")
            < kinds.index("tool_call_started")
            < kinds.index("tool_call_ended")
            < kinds.index("text_delta")
        )
        ended = next(e for e in events if e.kind == "tool_call_ended").data["data"]
        assert (ended["tool"], ended["status"]) == ("sleepy", "succeeded")
        assert ended["duration_ms"] >= 150
        answer = "It is sunny in Paris today, according to the tool."
        deltas = [e.data["data"]["text"] for e in events if e.kind == "text_delta"]
        assert "".join(deltas) == answer
        assert events[-1].data["data"]["answer"] == answer

        # Reconnecting with Last-Event-ID resumes after it: nothing missed, nothing twice.
        resumed = follow(client, run["urls"]["events"], last_event_id=3)
        assert [e.id for e in resumed] == [e.id for e in events[3:]]

        detail = client.get(run["urls"]["self"]).json()
        assert (detail["status"], detail["answer"]) == ("succeeded", answer)
        messages = client.get(conversation.json()["url"]).json()["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert runs_of("sleepy") == ["e2e-1"]


def test_gated_calls_wait_for_a_person_approved_once_and_denied_once(web):
    sync_tools()
    alice = User.objects.create_user("alice")
    reviewer = User.objects.create_user("rita", is_staff=True)
    reviewer.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    transfer = "guarded_transfer"
    steps = [
        {"tool_calls": [{"name": transfer, "arguments": {"account": "ACME", "amount": 10}}]},
        {"text": "Sent 10 to ACME."},
        {"tool_calls": [{"name": transfer, "arguments": {"account": "EVIL", "amount": 999}}]},
        {"text": "The transfer to EVIL was refused."},
    ]
    with (
        ReplayServer(steps, port=settings.MODEL_PORT) as model,
        api_client(web, alice) as client,
        api_client(web, reviewer) as staff,
    ):
        conversation = client.post("/api/conversations/", json={}).json()

        def decide(decision: str, body: dict) -> Callable[[Event], None]:
            def on_event(event: Event) -> None:
                if event.kind == "approval_needed":
                    execution = event.data["data"]["execution"]
                    # The owner may watch but not decide; the reviewer decides.
                    url = f"/api/tool-executions/{execution}/{decision}/"
                    assert client.post(url, json=body).status_code == 403
                    queue = staff.get("/api/tool-executions/?status=awaiting_approval").json()
                    assert [e["id"] for e in queue["results"]] == [execution]
                    answer = staff.post(url, json=body)
                    assert answer.status_code == 200, answer.text

            return on_event

        # Approved: the call runs on a worker and the run finishes.
        run = client.post(conversation["messages_url"], json={"text": "Pay ACME 10"}).json()
        events = follow(client, run["urls"]["events"], on_event=decide("approve", {}))
        kinds = [e.kind for e in events]
        assert kinds.index("approval_needed") < kinds.index("approval_decided")
        assert kinds.index("approval_decided") < kinds.index("tool_call_started")
        assert kinds[-1] == "succeeded"
        assert runs_of(transfer) == ["ACME:10"]
        approved = models.ToolExecution.objects.get(run_id=run["id"])
        assert (approved.approval, approved.decided_by, approved.status) == (
            "approved",
            reviewer,
            "succeeded",
        )
        assert approved.worker  # ran on a worker

        # Denied: the tool never runs and the model reads the reason.
        run = client.post(conversation["messages_url"], json={"text": "Pay EVIL 999"}).json()
        reason = {"reason": "EVIL is on the sanctions list"}
        events = follow(client, run["urls"]["events"], on_event=decide("deny", reason))
        assert events[-1].kind == "succeeded"
        assert events[-1].data["data"]["answer"] == "The transfer to EVIL was refused."
        assert runs_of(transfer) == ["ACME:10"]
        last_request = model.requests[-1]["messages"]
        tool_answer = next(m for m in reversed(last_request) if m["role"] == "tool")
        assert "EVIL is on the sanctions list" in tool_answer["content"]
        denied = models.ToolExecution.objects.get(run_id=run["id"])
        assert (denied.status, denied.approval, denied.decided_by) == ("denied", "denied", reviewer)


def test_another_user_gets_404_for_the_conversation_the_run_and_its_stream(web):
    sync_tools()
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    with (
        ReplayServer([{"text": "Hi Alice"}], port=settings.MODEL_PORT),
        api_client(web, alice) as client,
        api_client(web, bob) as other,
    ):
        conversation = client.post("/api/conversations/", json={}).json()
        run = client.post(conversation["messages_url"], json={"text": "Hi"}).json()
        assert follow(client, run["urls"]["events"])[-1].kind == "succeeded"
        assert other.get(conversation["url"]).status_code == 404
        assert other.post(conversation["messages_url"], json={"text": "x"}).status_code == 404
        assert other.get(run["urls"]["self"]).status_code == 404
        assert other.get(run["urls"]["events"]).status_code == 404
        stream = other.get(run["urls"]["events"], headers={"Accept": "text/event-stream"})
        assert stream.status_code == 404
        assert other.get("/api/conversations/").json()["results"] == []
        assert httpx.get(web.url + run["urls"]["events"].split(web.url)[1]).status_code == 401


def test_open_streams_hold_no_thread_each(web):
    """Forty clients follow a run that waits for approval: the server's threads stay few."""
    sync_tools()
    alice = User.objects.create_user("alice")
    steps = [
        {"tool_calls": [{"name": "guarded_transfer", "arguments": {"account": "A", "amount": 1}}]}
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT), api_client(web, alice) as client:
        conversation = client.post("/api/conversations/", json={}).json()
        run = client.post(conversation["messages_url"], json={"text": "Pay A"}).json()
        deadline = time.monotonic() + 30
        while client.get(run["urls"]["self"]).json()["status"] != "awaiting_approval":
            assert time.monotonic() < deadline, "the run never asked for approval"
            time.sleep(0.1)
        token = client.headers["Authorization"]
        before = web.threads()
        host, port = web.url.removeprefix("http://").split(":")
        path = run["urls"]["events"].removeprefix(web.url)
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
            f"Authorization: {token}\r\n\r\n"
        ).encode()
        # Plain sockets, as independent clients (browsers, curl) connect.
        clients = [socket.create_connection((host, int(port)), timeout=30) for _ in range(40)]
        try:
            for sock in clients:
                sock.sendall(request)
            for sock in clients:
                received = b""
                while b"retry:" not in received:
                    chunk = sock.recv(4096)
                    assert chunk, f"the stream closed early: {received!r}"
                    received += chunk
                assert received.startswith(b"HTTP/1.1 200"), received[:200]
            time.sleep(0.5)
            during = web.threads()
        finally:
            for sock in clients:
                sock.close()
    # Django's own ASGI handler would hold one thread per open stream (40 more).
    assert during - before < 10, (before, during)
