"""What the API answers to bad requests: always JSON with a ``detail``, never a 5xx.

The bodies and parameters here are those a new user and an attacker sent: bare JSON values,
numbers where text belongs, bodies over ``DATA_UPLOAD_MAX_MEMORY_SIZE``, look-alike digits in
``?after=``, and the methods and paths that Django, not DRF, used to answer with HTML pages.
"""

import asyncio
import json
from unittest import mock
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import OperationalError
from django.test import AsyncClient, Client, override_settings
from rest_framework.test import APIClient

from tests.django._api import client_for, url
from tests.django._tools import registered
from tool_calling import models, runs, tool
from tool_calling.api import views
from tool_calling.testing import text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)


@tool(requires_approval=True)
def errors_refund(order: str) -> str:
    """Refund an order (a person approves each refund)."""
    return f"refunded {order}"


@pytest.fixture(autouse=True)
def gated_tool():
    with registered(errors_refund):
        yield


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def approver():
    """Staff holding the permission approving takes (being staff is not enough)."""
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="approve_toolexecution"))
    return user


def conversation_of(user):
    return models.Conversation.objects.create(owner=user)


def finished_run(user, script):
    script(text("Hello"))
    conversation = conversation_of(user)
    response = client_for(user).post(
        url("conversation-messages", conversation.pk), {"text": "Hi"}, format="json"
    )
    assert response.status_code == 202, response.data
    run = models.Run.objects.get(pk=response.data["id"])
    assert run.status == "succeeded"
    return run


def waiting_call(user, script):
    script(tool_calls(tool_call("errors_refund", order="A1")), text("Done"))
    conversation = conversation_of(user)
    response = client_for(user).post(
        url("conversation-messages", conversation.pk), {"text": "Refund A1"}, format="json"
    )
    assert response.status_code == 202, response.data
    return models.ToolExecution.objects.get(tool_name="errors_refund")


def assert_json_detail(response, status):
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json", response["Content-Type"]
    body = json.loads(response.content)
    assert isinstance(body["detail"], str) and body["detail"], body
    return body


# -- bodies that are not JSON objects ------------------------------------------------------------

BARE_VALUES = ["5", "true", "false", "null", "1.5", '"Hi"', "[]", '[{"text": "Hi"}]']


@pytest.mark.parametrize("body", BARE_VALUES)
def test_a_bare_json_value_as_a_message_is_a_400_not_a_500(alice, body):
    conversation = conversation_of(alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk), body, content_type="application/json"
    )
    detail = assert_json_detail(response, 400)["detail"]
    kind = type(json.loads(body)).__name__
    names = {"int": "a number", "float": "a number", "bool": "a boolean", "NoneType": "null"}
    names |= {"str": "a string", "list": "an array"}
    assert detail == f"JSON parse error - the body must be a JSON object, not {names[kind]}."
    assert not conversation.messages.exists() and not models.Run.objects.exists()


@pytest.mark.parametrize("body", BARE_VALUES)
def test_every_post_endpoint_refuses_a_bare_json_value(alice, approver, script, body):
    call = waiting_call(alice, script)
    for client, path in (
        (client_for(alice), url("conversation-list")),
        (client_for(approver), url("tool-execution-approve", call.pk)),
        (client_for(approver), url("tool-execution-deny", call.pk)),
    ):
        response = client.post(path, body, content_type="application/json")
        assert_json_detail(response, 400)
    call.refresh_from_db()
    assert call.status == "awaiting_approval"


# -- text fields take strings only ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [(123, "a number"), (1.5, "a number"), (True, "a boolean"), (["Hi"], "an array")],
)
def test_a_message_text_that_is_not_a_string_is_refused(alice, value, kind):
    conversation = conversation_of(alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk), {"text": value}, format="json"
    )
    body = assert_json_detail(response, 400)
    assert body == {
        "detail": f"text: Expected a string, got {kind}.",
        "errors": {"text": [f"Expected a string, got {kind}."]},
    }
    assert not conversation.messages.exists() and not models.Run.objects.exists()


def test_titles_tool_names_notes_and_reasons_take_strings_only(alice, approver, script):
    client = client_for(alice)
    created = client.post(url("conversation-list"), {"title": 7}, format="json")
    assert assert_json_detail(created, 400)["errors"] == {
        "title": ["Expected a string, got a number."]
    }
    conversation = conversation_of(alice)
    turn = client.post(
        url("conversation-messages", conversation.pk), {"text": "Hi", "tools": [1]}, format="json"
    )
    assert assert_json_detail(turn, 400) == {
        "detail": "tools.0: Expected a string, got a number.",
        "errors": {"tools": {"0": ["Expected a string, got a number."]}},
    }
    call = waiting_call(alice, script)
    approver = client_for(approver)
    for action, field in (("approve", "note"), ("deny", "reason")):
        response = approver.post(
            url(f"tool-execution-{action}", call.pk), {field: 1}, format="json"
        )
        assert assert_json_detail(response, 400)["errors"] == {
            field: ["Expected a string, got a number."]
        }
    call.refresh_from_db()
    assert call.status == "awaiting_approval"


# -- one error shape: a detail, and the errors by field for a 400 --------------------------------


def test_a_validation_error_carries_a_detail_and_the_errors_by_field(alice):
    conversation = conversation_of(alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk) + "?wait=0", {"text": " "}, format="json"
    )
    assert assert_json_detail(response, 400) == {
        "detail": "wait: Ensure this value is greater than or equal to 1.",
        "errors": {"wait": ["Ensure this value is greater than or equal to 1."]},
    }
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk), {"text": " "}, format="json"
    )
    assert assert_json_detail(response, 400) == {
        "detail": "text: The message is empty.",
        "errors": {"text": ["The message is empty."]},
    }
    several = client_for(alice).post(
        url("conversation-messages", conversation.pk),
        {"text": "", "tools": ["nope"]},
        format="json",
    )
    body = assert_json_detail(several, 400)
    assert set(body["errors"]) == {"text", "tools"}
    assert body["detail"].startswith("text: The message is empty. tools: Unknown or unavailable")


def test_other_failures_answer_a_detail_only(alice):
    missing = client_for(alice).get(url("run-detail", "00000000-0000-0000-0000-000000000000"))
    assert assert_json_detail(missing, 404) == {"detail": "No Run matches the given query."}
    anonymous = APIClient().get(url("conversation-list"))
    assert set(assert_json_detail(anonymous, 401)) == {"detail"}


@pytest.mark.parametrize("wait", ["٣", "1_0", " 5", "5.0", "+5", "0x5"])
def test_wait_takes_ascii_digits_only(alice, wait):
    conversation = conversation_of(alice)
    path = url("conversation-messages", conversation.pk) + "?" + urlencode({"wait": wait})
    response = client_for(alice).post(path, {"text": "Hi"}, format="json")
    assert assert_json_detail(response, 400)["errors"] == {
        "wait": [f"Expected a number of seconds (digits 0-9), got {wait!r}."]
    }
    assert not conversation.messages.exists()


# -- errors Django raises before (or instead of) DRF ---------------------------------------------


def test_a_body_over_the_upload_limit_is_a_json_413(alice):
    conversation = conversation_of(alice)
    client = Client()  # Django's own client: no DRF test machinery in between
    client.force_login(alice)
    too_big = json.dumps({"text": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    with mock.patch.object(runs, "start_turn") as start_turn:
        response = client.post(
            url("conversation-messages", conversation.pk), too_big, content_type="application/json"
        )
    assert assert_json_detail(response, 413) == {
        "detail": f"The request body is larger than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} "
        "bytes this server accepts."
    }
    start_turn.assert_not_called()


def test_an_unknown_path_under_the_api_is_a_json_404():
    response = Client().get("/api/no-such-thing/")
    assert assert_json_detail(response, 404) == {"detail": "Not found: '/api/no-such-thing/'."}
    # Outside the API, Django's pages stay as they are.
    assert Client().get("/admin-no-such-thing/")["Content-Type"].startswith("text/html")


def test_a_host_not_allowed_is_a_json_400():
    response = Client(HTTP_HOST="evil.example").get("/api/tools/")
    assert assert_json_detail(response, 400) == {"detail": "Bad request."}


@override_settings(ROOT_URLCONF="tests.django.urls_api_errors")
def test_every_error_django_answers_under_the_api_is_json_with_a_detail(alice):
    client = Client(raise_request_exception=False, enforce_csrf_checks=True)
    assert assert_json_detail(client.get("/api/_test/suspicious/"), 400) == {
        "detail": "Bad request."
    }
    assert assert_json_detail(client.get("/api/_test/forbidden/"), 403) == {"detail": "Forbidden."}
    client.force_login(alice)
    csrf = client.post("/api/_test/form/", {"a": "b"})
    assert assert_json_detail(csrf, 403) == {
        "detail": "CSRF verification failed: send the CSRF token (the X-CSRFToken header, from "
        "the csrftoken cookie) with session-authenticated requests."
    }
    client = Client(raise_request_exception=False)
    not_allowed = client.delete("/api/_test/only-get/")
    assert assert_json_detail(not_allowed, 405) == {"detail": "Method 'DELETE' not allowed."}
    assert not_allowed["Allow"] == "GET"  # kept from Django's answer
    broken = client.get("/api/_test/broken/")
    assert assert_json_detail(broken, 500) == {
        "detail": "Server error: the request failed; the server logged what happened."
    }
    assert "hunter2" not in broken.content.decode()
    # The view's own successes are untouched.
    assert client.get("/api/_test/only-get/").content == b"ok"


def test_an_unexpected_exception_in_an_api_view_is_a_json_500(alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    with mock.patch.object(views.ToolViewSet, "list", side_effect=RuntimeError("boom")):
        response = client.get(url("tool-list"))
    assert assert_json_detail(response, 500) == {
        "detail": "Server error: the request failed; the server logged what happened."
    }


def test_under_asgi_errors_are_json_too(alice):
    async def scenario():
        client = AsyncClient()
        return await client.get("/api/no-such-thing/")

    response = asyncio.run(scenario())
    assert assert_json_detail(response, 404) == {"detail": "Not found: '/api/no-such-thing/'."}


# -- run events ----------------------------------------------------------------------------------


async def _stream(client, path, **headers):
    response = await client.get(path, headers={"Accept": "text/event-stream", **headers})
    if not response.streaming:
        return response, response.content
    chunks = [chunk async for chunk in response.streaming_content]
    return response, b"".join(chunks)


def test_resuming_a_finished_runs_stream_at_its_last_event_answers_204(alice, script):
    """A 204 is what stops a browser's EventSource from reconnecting every 2 s forever."""
    run = finished_run(alice, script)
    last = run.events.order_by("-sequence").first().sequence
    client = AsyncClient()
    client.force_login(alice)
    for after in (str(last), str(last + 5)):
        response, body = asyncio.run(
            _stream(client, url("run-events", run.pk), **{"Last-Event-ID": after})
        )
        assert (response.status_code, body) == (204, b"")
    # Before its end, the events still come, ending with the terminal one.
    response, body = asyncio.run(
        _stream(client, url("run-events", run.pk), **{"Last-Event-ID": str(last - 1)})
    )
    assert response.status_code == 200
    assert b"event: succeeded" in body


@pytest.mark.parametrize("after", ["٣", "1_0", " 5", "5 ", "+5", "-1", "x", "", "9" * 19])
def test_after_and_last_event_id_take_ascii_digits_only(alice, script, after):
    run = finished_run(alice, script)
    client = client_for(alice)
    polled = client.get(url("run-events", run.pk), {"after": after})
    assert assert_json_detail(polled, 400) == {
        "detail": f"?after= must be an event sequence number (digits 0-9), got {after!r}."
    }
    if after:  # an empty Last-Event-ID is no Last-Event-ID
        resumed = client.get(url("run-events", run.pk), HTTP_LAST_EVENT_ID=after)
        assert assert_json_detail(resumed, 400) == {
            "detail": f"Last-Event-ID must be an event sequence number (digits 0-9), got {after!r}."
        }


@pytest.mark.parametrize(
    "after", ["٣", "1_0", " 5", "5 ", "+5", "-1", "x", "", "1.5", "0x5", "9" * 19]
)
def test_a_conversations_after_takes_ascii_digits_only(alice, after):
    """The rule of the run events' ``?after=`` (one function), with the conversation's message."""
    conversation = conversation_of(alice)
    response = client_for(alice).get(url("conversation-detail", conversation.pk), {"after": after})
    message = f"Expected a message sequence number (digits 0-9), got {after!r}."
    assert assert_json_detail(response, 400) == {
        "detail": f"after: {message}",
        "errors": {"after": [message]},
    }


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_other_methods_on_the_events_url_are_a_json_405(alice, script, method):
    run = finished_run(alice, script)
    client = Client(enforce_csrf_checks=True)  # a session, and no CSRF token
    client.force_login(alice)
    response = getattr(client, method)(url("run-events", run.pk))
    assert assert_json_detail(response, 405) == {
        "detail": f'Method "{method.upper()}" not allowed.'
    }
    assert response["Allow"] == "GET, HEAD"


# -- the turn rate limiter's database ----------------------------------------------------------


def test_a_rate_limiter_whose_database_fails_is_a_503_and_nothing_is_saved(alice, script):
    script(text("Hello"))
    conversation = conversation_of(alice)
    failing = mock.patch.object(
        models.RequestHistory.objects,
        "select_for_update",
        side_effect=OperationalError("database is locked"),
    )
    with failing:
        response = client_for(alice).post(
            url("conversation-messages", conversation.pk), {"text": "Hi"}, format="json"
        )
    assert assert_json_detail(response, 503) == {
        "detail": "The turn was not started: the rate limiter is unavailable. Nothing was "
        "saved; send the message again later."
    }
    assert not conversation.messages.exists() and not models.Run.objects.exists()


@override_settings(ROOT_URLCONF="tests.django.urls_without_api")
def test_where_the_api_is_not_mounted_the_middleware_changes_nothing():
    response = Client().get("/api/no-such-thing/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
