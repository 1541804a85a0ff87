"""The API's live side: run events (JSON polling and SSE), approvals, retry.

Celery runs eagerly (tests.settings) and there is no Redis here, so the event stream falls back
to reading the database every second; tests/celery/test_api_end_to_end.py covers uvicorn, a real
worker and Redis wake-ups.
"""

import asyncio
import json
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission, User
from django.test import AsyncClient, override_settings
from kombu.exceptions import OperationalError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.django._api import client_for, url
from tests.django._tools import registered, tool_calling_settings
from tool_calling import models, tasks, tool
from tool_calling.calls import approvals
from tool_calling.testing import text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[tuple[str, object]] = []


@tool(requires_approval=True)
def live_refund(order: str, amount: int) -> str:
    """Refund an order (a person approves each refund)."""
    RAN.append(("live_refund", (order, amount)))
    return f"refunded {amount} on {order}"


@tool
def live_lookup(order: str) -> str:
    """Look an order up."""
    RAN.append(("live_lookup", order))
    return f"order {order}: paid"


TOOLS = (live_refund, live_lookup)
GATED = (
    tool_calls(tool_call("live_lookup", order="A1")),
    tool_calls(tool_call("live_refund", order="A1", amount=30)),
    text("Refund handled"),
)


@pytest.fixture(autouse=True)
def live_tools():
    RAN.clear()
    with registered(*TOOLS):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob():
    return User.objects.create_user("bob", password="pw")


@pytest.fixture
def approver():
    """Staff holding the permission approving takes (being staff is not enough)."""
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    return user


def start(user, steps=GATED, script=None, text_="Refund A1"):
    script(*steps)
    conversation = models.Conversation.objects.create(owner=user)
    response = client_for(user).post(
        url("conversation-messages", conversation.pk), {"text": text_}, format="json"
    )
    assert response.status_code == 202, response.data
    return conversation, models.Run.objects.get(pk=response.data["id"])


def gated(run):
    return models.ToolExecution.objects.get(run=run, tool_name="live_refund")


def kinds(run):
    return list(run.events.order_by("sequence").values_list("kind", flat=True))


# -- approvals through the API ------------------------------------------------------------------


def test_the_approval_queue_shows_approvers_the_arguments_and_owners_only_the_state(
    alice, bob, approver, script
):
    _, run = start(alice, script=script)
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert client_for(alice).get(url("run-detail", run.pk)).data["status"] == "awaiting_approval"

    queue = client_for(approver).get(url("tool-execution-list") + "?status=awaiting_approval")
    assert queue.status_code == 200
    (entry,) = queue.data["results"]
    assert (entry["tool_name"], entry["approval"], entry["run"]) == (
        "live_refund",
        "pending",
        run.pk,
    )
    assert json.loads(entry["arguments"]) == {"order": "A1", "amount": 30}
    assert entry["requested_by"] == "alice"
    assert entry["urls"]["approve"].endswith(f"/api/tool-executions/{entry['id']}/approve/")

    own = client_for(alice).get(url("tool-execution-detail", entry["id"]))
    assert own.status_code == 200 and own.data["approval"] == "pending"
    assert own.data["requested_by"] == "alice"
    assert "arguments" not in own.data  # not an approver
    assert client_for(bob).get(url("tool-execution-detail", entry["id"])).status_code == 404
    assert client_for(bob).get(url("tool-execution-list")).data["results"] == []


def test_an_approver_sees_every_gated_call_and_no_other_users_ungated_call(alice, bob, approver):
    """What an approver may see is scoped: calls that needed a decision, and their own."""
    bobs = models.Conversation.objects.create(owner=bob)
    mine = models.Conversation.objects.create(owner=approver)
    plain = models.ToolExecution.objects.create(
        conversation=bobs, user=bob, tool_name="lookup", arguments='{"q": "private"}'
    )
    gated_call = models.ToolExecution.objects.create(
        conversation=bobs,
        user=bob,
        tool_name="live_refund",
        arguments='{"order": "B7"}',
        status="awaiting_approval",
        approval="pending",
    )
    decided = models.ToolExecution.objects.create(
        conversation=bobs, user=bob, tool_name="live_refund", status="denied", approval="denied"
    )
    own = models.ToolExecution.objects.create(conversation=mine, user=approver, tool_name="lookup")

    listed = client_for(approver).get(url("tool-execution-list")).data["results"]
    assert {entry["id"] for entry in listed} == {gated_call.pk, decided.pk, own.pk}
    assert client_for(approver).get(url("tool-execution-detail", plain.pk)).status_code == 404
    detail = client_for(approver).get(url("tool-execution-detail", gated_call.pk)).data
    assert detail["arguments"] == '{"order": "B7"}'  # what the decision needs
    # Staff who may not decide see only their own calls here.
    otto = User.objects.create_user("otto", is_staff=True)
    assert client_for(otto).get(url("tool-execution-list")).data["results"] == []


def test_an_approver_approves_through_the_api_and_the_run_finishes(alice, approver, script):
    conversation, run = start(alice, script=script)
    call = gated(run)
    response = client_for(approver).post(
        url("tool-execution-approve", call.pk), {"note": "refund policy ok"}, format="json"
    )
    assert response.status_code == 200, response.data
    assert (response.data["approval"], response.data["decided_by"]) == ("approved", "staff")
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Refund handled")
    assert ("live_refund", ("A1", 30)) in RAN
    assert "approval_decided" in kinds(run)
    again = client_for(approver).post(url("tool-execution-approve", call.pk), {}, format="json")
    assert again.status_code == 409
    assert again.data["detail"].code == "not_awaiting_approval"


def test_edited_arguments_are_validated_against_the_schema(alice, approver, script):
    _, run = start(alice, script=script)
    call = gated(run)
    client = client_for(approver)
    bad = client.post(
        url("tool-execution-approve", call.pk),
        {"arguments": {"order": "A1", "amount": "a lot"}},
        format="json",
    )
    assert bad.status_code == 400
    assert "amount" in str(bad.data["errors"]["arguments"])
    not_object = client.post(
        url("tool-execution-approve", call.pk), {"arguments": [1, 2]}, format="json"
    )
    assert not_object.status_code == 400
    assert gated(run).status == "awaiting_approval"
    good = client.post(
        url("tool-execution-approve", call.pk),
        {"arguments": {"order": "A1", "amount": 10}},
        format="json",
    )
    assert good.status_code == 200
    assert json.loads(good.data["original_arguments"]) == {"order": "A1", "amount": 30}
    assert RAN[-1] == ("live_refund", ("A1", 10))


def test_a_denial_reason_reaches_the_model_and_the_run_goes_on(alice, approver, script):
    conversation, run = start(alice, script=script)
    response = client_for(approver).post(
        url("tool-execution-deny", gated(run).pk),
        {"reason": "Refunds over 20 need a manager"},
        format="json",
    )
    assert response.status_code == 200, response.data
    assert (response.data["status"], response.data["approval"]) == ("denied", "denied")
    run.refresh_from_db()
    assert run.status == "succeeded"
    tool_message = conversation.messages.filter(role="tool").order_by("sequence").last()
    (refund,) = tool_message.tool_responses
    assert refund["is_error"] is True
    assert "Refunds over 20 need a manager" in refund["response_data"]
    assert not any(name == "live_refund" for name, _ in RAN)


def test_only_approvers_decide(alice, bob, script):
    _, run = start(alice, script=script)
    call = gated(run)
    # The owner sees the call but may not decide it; another user does not see it at all.
    owner = client_for(alice).post(url("tool-execution-approve", call.pk), {}, format="json")
    assert owner.status_code == 403
    assert client_for(bob).post(url("tool-execution-deny", call.pk), {}).status_code == 404
    assert gated(run).status == "awaiting_approval"
    # In words for the person who asked: no database ids, no settings keys.
    assert str(owner.data["detail"]) == (
        "You asked for this call of 'live_refund' yourself, so another person must approve it."
    )
    # Staff without the permission do not even see another user's call (being staff is not
    # enough to approve): 404, nothing changes.
    otto = User.objects.create_user("otto", is_staff=True)
    refused = client_for(otto).post(url("tool-execution-deny", call.pk), {}, format="json")
    assert refused.status_code == 404
    assert gated(run).status == "awaiting_approval"
    # A user who is not staff but holds the permission may.
    bob.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    bob = User.objects.get(pk=bob.pk)
    response = client_for(bob).post(url("tool-execution-deny", call.pk), {}, format="json")
    assert response.status_code == 200
    assert gated(run).decided_by == bob


def test_a_session_approval_needs_the_csrf_token(alice, approver, script):
    _, run = start(alice, script=script)
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="staff", password="pw")
    response = client.post(url("tool-execution-approve", gated(run).pk), {}, format="json")
    assert response.status_code == 403
    assert "CSRF" in str(response.data["detail"])
    assert gated(run).status == "awaiting_approval"


def test_unknown_filters_are_400(approver):
    client = client_for(approver)
    assert client.get(url("tool-execution-list") + "?status=nope").status_code == 400
    assert client.get(url("tool-execution-list") + "?approval=nope").status_code == 400
    assert client.get(url("tool-execution-list") + "?run=not-a-uuid").status_code == 400


# -- retry ---------------------------------------------------------------------------------------


def test_a_failed_run_is_retried_through_the_api(alice, bob, script):
    script(text("Back online"))
    conversation = models.Conversation.objects.create(owner=alice)
    client = client_for(alice)
    with mock.patch.object(
        tasks.run_step, "apply_async", side_effect=OperationalError("Connection refused")
    ):
        down = client.post(
            url("conversation-messages", conversation.pk), {"text": "Hi"}, format="json"
        )
    assert down.status_code == 503
    run = models.Run.objects.get()
    assert client_for(bob).post(url("run-retry", run.pk)).status_code == 404
    response = client.post(url("run-retry", run.pk))
    assert response.status_code == 202, response.data
    run.refresh_from_db()
    assert (run.status, run.answer) == ("succeeded", "Back online")
    again = client.post(url("run-retry", run.pk))
    assert again.status_code == 409 and again.data["detail"].code == "run_not_retryable"


# -- events: JSON polling ------------------------------------------------------------------------


def test_polling_returns_the_events_after_the_last_one_seen(alice, bob, script):
    _, run = start(alice, steps=(text("Hello there"),), script=script)
    client = client_for(alice)
    first = client.get(url("run-events", run.pk))
    assert first.status_code == 200
    body = first.json()
    sequences = [e["sequence"] for e in body["events"]]
    assert sequences == list(range(1, len(sequences) + 1))
    assert (body["status"], body["finished"], body["last_event_id"]) == (
        "succeeded",
        True,
        sequences[-1],
    )
    assert [e["kind"] for e in body["events"]][-1] == "succeeded"
    later = client.get(url("run-events", run.pk) + "?after=2").json()
    assert [e["sequence"] for e in later["events"]] == sequences[2:]
    assert client.get(url("run-events", run.pk) + "?after=-1").status_code == 400
    assert client.get(url("run-events", run.pk) + "?after=x").status_code == 400
    assert client_for(bob).get(url("run-events", run.pk)).status_code == 404
    anonymous = APIClient().get(url("run-events", run.pk))
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Token"


def test_events_accept_a_token(alice, script):
    _, run = start(alice, steps=(text("Hi"),), script=script)
    token = Token.objects.create(user=alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.get(url("run-events", run.pk)).json()["finished"] is True
    client.credentials(HTTP_AUTHORIZATION="Token wrong")
    assert client.get(url("run-events", run.pk)).status_code == 401


# -- events: Server-Sent Events ------------------------------------------------------------------


def parse_sse(raw: str) -> list[dict]:
    """The events of an SSE body: id, event, data (JSON) of each block."""
    events = []
    for block in raw.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.removeprefix(" ")
        if "event" in fields:
            events.append(
                {
                    "id": int(fields["id"]),
                    "event": fields["event"],
                    "data": json.loads(fields["data"]),
                }
            )
    return events


async def read_stream(client: AsyncClient, path: str, **headers) -> tuple[object, str]:
    response = await client.get(path, headers={"Accept": "text/event-stream", **headers})
    if not response.streaming:
        return response, response.content.decode()
    chunks = [chunk async for chunk in response.streaming_content]
    return response, b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode()


def logged_in_async(user) -> AsyncClient:
    client = AsyncClient()
    client.force_login(user)
    return client


def test_sse_sends_every_event_then_ends_with_the_run(alice, script):
    _, run = start(alice, steps=(text("Hello there"),), script=script)
    response, raw = asyncio.run(read_stream(logged_in_async(alice), url("run-events", run.pk)))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    assert response.is_async  # under ASGI: the stream waits on the event loop
    assert raw.startswith("retry: ")
    events = parse_sse(raw)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert [e["event"] for e in events] == kinds(run)
    assert (
        events[-1]["event"] == "succeeded" and events[-1]["data"]["data"]["answer"] == "Hello there"
    )
    deltas = "".join(e["data"]["data"]["text"] for e in events if e["event"] == "text_delta")
    assert deltas == "Hello there"


def test_sse_resumes_after_last_event_id_without_repeating(alice, script):
    _, run = start(alice, steps=(text("Hello there"),), script=script)
    _, raw = asyncio.run(
        read_stream(logged_in_async(alice), url("run-events", run.pk), **{"Last-Event-ID": "3"})
    )
    ids = [e["id"] for e in parse_sse(raw)]
    assert ids[0] == 4 and ids == list(range(4, run.events.count() + 1))


def test_sse_follows_a_waiting_run_live_until_it_ends(alice, approver, script):
    """The stream is open while the run waits; an approval made meanwhile arrives on it."""
    _, run = start(alice, script=script)
    call = gated(run)
    client = logged_in_async(alice)

    async def scenario():
        reader = asyncio.ensure_future(read_stream(client, url("run-events", run.pk)))
        await asyncio.sleep(0.5)
        assert not reader.done()  # waiting for the approval, stream open
        await sync_to_async(approvals.approve, thread_sensitive=False)(call, user=approver)
        return await asyncio.wait_for(reader, timeout=20)

    response, raw = asyncio.run(scenario())
    events = [e["event"] for e in parse_sse(raw)]
    assert "approval_needed" in events
    assert events.index("approval_needed") < events.index("approval_decided")
    assert events[-1] == "succeeded"
    assert len(events) == len(set(e["id"] for e in parse_sse(raw)))


@override_settings(
    TOOL_CALLING=tool_calling_settings(API={"SSE_KEEPALIVE_SECONDS": 1, "SSE_MAX_SECONDS": 3})
)
def test_a_quiet_stream_sends_keepalives_and_closes_at_its_limit(alice, script):
    _, run = start(alice, script=script)  # waits for an approval nobody gives
    client = logged_in_async(alice)

    async def scenario():
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await asyncio.wait_for(read_stream(client, url("run-events", run.pk)), timeout=20)
        return result, loop.time() - started

    (_, raw), elapsed = asyncio.run(scenario())
    assert ": keep-alive" in raw
    assert 2.5 <= elapsed < 10
    assert parse_sse(raw)[-1]["event"] == "approval_needed"  # nothing ended, nothing invented


def test_sse_refuses_strangers_and_anonymous_users(alice, bob, script):
    _, run = start(alice, steps=(text("Hi"),), script=script)
    response, _ = asyncio.run(read_stream(logged_in_async(bob), url("run-events", run.pk)))
    assert response.status_code == 404
    response, _ = asyncio.run(read_stream(AsyncClient(), url("run-events", run.pk)))
    assert response.status_code == 401


def test_a_body_nested_too_deeply_is_a_400_not_a_500(alice, approver, script):
    _, run = start(alice, script=script)
    deep = "[" * 100_000 + "]" * 100_000
    for client, path in (
        (client_for(alice), url("conversation-list")),
        (client_for(approver), url("tool-execution-approve", gated(run).pk)),
    ):
        response = client.post(path, deep, content_type="application/json")
        assert response.status_code == 400, response.content[:200]
        assert "nested too deeply" in str(response.data["detail"])
    assert gated(run).status == "awaiting_approval"


def test_tools_say_which_need_approval(alice):
    tools = {t["name"]: t for t in client_for(alice).get(url("tool-list")).data}
    assert tools["live_refund"]["requires_approval"] is True
    assert tools["live_lookup"]["requires_approval"] is False


def test_a_turn_can_offer_only_some_of_the_users_tools(alice, script):
    model = script(text("Looked"))
    conversation = models.Conversation.objects.create(owner=alice)
    client = client_for(alice)
    response = client.post(
        url("conversation-messages", conversation.pk),
        {"text": "Look A1 up", "tools": ["live_lookup"]},
        format="json",
    )
    assert response.status_code == 202, response.data
    offered = [c.definition.name for c in model.requests[0].options.tool_callbacks]
    assert offered == ["live_lookup"]
    assert models.Run.objects.get(pk=response.data["id"]).tool_names == ["live_lookup"]


@pytest.mark.parametrize(
    "tools, message",
    [
        (["live_lookup", "rm_rf"], "Unknown or unavailable tool(s): rm_rf."),
        ([], "This list may not be empty."),
        ("live_lookup", 'Expected a list of items but got type "str".'),
    ],
)
def test_unknown_tools_in_a_turn_are_a_400_and_nothing_is_stored(alice, script, tools, message):
    script(text("never"))
    conversation = models.Conversation.objects.create(owner=alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk), {"text": "Hi", "tools": tools}, format="json"
    )
    assert response.status_code == 400
    assert message in str(response.data["errors"]["tools"])
    assert not conversation.messages.exists() and not models.Run.objects.exists()


def test_a_tool_the_user_may_not_use_is_unknown_to_them(alice, script):
    models.Tool.objects.filter(name="live_lookup").update(enabled=False)
    conversation = models.Conversation.objects.create(owner=alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk),
        {"text": "Hi", "tools": ["live_lookup"]},
        format="json",
    )
    assert response.status_code == 400
    detail = str(response.data["errors"]["tools"])
    assert "Unknown or unavailable tool(s): live_lookup." in detail
    assert "live_refund" in detail.split("Your tools:")[1]
    assert "live_lookup" not in detail.split("Your tools:")[1]


def test_under_wsgi_the_stream_is_served_by_the_requests_thread(alice, approver, script):
    """A WSGI server cannot stream an async iterator: the view gives it a plain one, live."""
    import threading

    from django.test import Client

    _, run = start(alice, script=script)
    call = gated(run)
    client = Client()
    client.force_login(alice)
    response = client.get(url("run-events", run.pk), headers={"Accept": "text/event-stream"})
    assert response.status_code == 200 and not response.is_async
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.extend(response.streaming_content))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()  # open while the run waits
    approvals.approve(call, user=approver)
    reader.join(20)
    assert not reader.is_alive()
    events = parse_sse(b"".join(received).decode())
    assert [e["event"] for e in events] == kinds(run)
    assert events[-1]["event"] == "succeeded"


@override_settings(CELERY_BROKER_URL="redis://127.0.0.1:9/0")  # nothing listens there
def test_with_redis_down_streams_fall_back_to_reading_the_database(alice, approver, script):
    """Announcements cannot be published or heard: the stream still delivers every event."""
    _, run = start(alice, script=script)
    call = gated(run)
    client = logged_in_async(alice)

    async def scenario():
        reader = asyncio.ensure_future(read_stream(client, url("run-events", run.pk)))
        await asyncio.sleep(0.5)
        await sync_to_async(approvals.approve, thread_sensitive=False)(call, user=approver)
        return await asyncio.wait_for(reader, timeout=20)

    _, raw = asyncio.run(scenario())
    events = parse_sse(raw)
    assert [e["event"] for e in events] == kinds(run)
    assert events[-1]["event"] == "succeeded"


def test_self_approval_is_off_by_default(alice, script):
    """Four eyes by default: a call of your own turn is not yours to approve, even as approver."""
    alice.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    _, run = start(alice, script=script)
    call = gated(run)
    refused = client_for(alice).post(url("tool-execution-approve", call.pk), {}, format="json")
    assert refused.status_code == 403
    assert str(refused.data["detail"]) == (
        "You asked for this call of 'live_refund' yourself, so another person must approve it."
    )
    assert gated(run).status == "awaiting_approval"
    # Denying one's own call stays allowed.
    denied = client_for(alice).post(url("tool-execution-deny", call.pk), {}, format="json")
    assert denied.status_code == 200


def test_self_approval_can_be_turned_on(alice, script):
    alice.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    _, run = start(alice, script=script)
    with override_settings(
        TOOL_CALLING=tool_calling_settings(APPROVALS={"ALLOW_SELF_APPROVAL": True})
    ):
        response = client_for(alice).post(
            url("tool-execution-approve", gated(run).pk), {}, format="json"
        )
    assert response.status_code == 200
