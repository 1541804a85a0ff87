"""The REST API: tools, conversations, turns and runs over DRF.

Celery runs eagerly (tests.settings), so a turn started through the API has run by the time the
POST answers; tests that need a run still queued patch ``runs.lifecycle.publish``. The model is a
``ScriptedChatModel`` set as ``CHAT_MODEL`` (the ``script`` fixture).
"""

from unittest import mock

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.test import override_settings
from kombu.exceptions import OperationalError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.django._api import client_for, url
from tool_calling import models, runs, tasks, tool
from tool_calling.api.throttling import TurnRateThrottle
from tool_calling.registry import registry
from tool_calling.sync import sync_tools
from tool_calling.testing import text, tool_call, tool_calls

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def api_counted(key: str) -> str:
    """Count something."""
    return f"counted {key}"


@tool
def api_admin_only(key: str) -> str:
    """A tool only the operators' group may use."""
    return f"admin {key}"


TOOLS = (api_counted, api_admin_only)
ONE_ROUND = (
    tool_calls(tool_call("api_counted", key="a"), tool_call("api_counted", key="b")),
    text("Done"),
)


@pytest.fixture(autouse=True)
def api_tools():
    registry.register(*TOOLS, source="tests")
    sync_tools()
    operators = Group.objects.create(name="operators")
    models.Tool.objects.get(name="api_admin_only").allowed_groups.add(operators)
    try:
        yield
    finally:
        for callback in TOOLS:
            registry.unregister(callback.__name__)


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob():
    return User.objects.create_user("bob", password="pw")


@pytest.fixture
def staff():
    return User.objects.create_user("staff", password="pw", is_staff=True)


def conversation_of(user, title=""):
    return models.Conversation.objects.create(owner=user, title=title)


def send(client, conversation, text_="Go", query=""):
    return client.post(
        url("conversation-messages", conversation.pk) + query, {"text": text_}, format="json"
    )


def queued(client, conversation, text_="Go"):
    """Start a turn whose first step is not sent: the run stays queued."""
    with mock.patch.object(runs.lifecycle, "publish"):
        response = send(client, conversation, text_)
    assert response.status_code == 202, response.data
    return models.Run.objects.get(pk=response.data["id"])


# -- tools --------------------------------------------------------------------------------------


def test_tools_lists_the_tools_the_user_may_use(alice):
    response = client_for(alice).get(url("tool-list"))
    assert response.status_code == 200
    by_name = {entry["name"]: entry for entry in response.data}
    assert "api_admin_only" not in by_name
    assert by_name["api_counted"]["description"] == "Count something."
    assert by_name["api_counted"]["input_schema"]["type"] == "object"
    assert "key" in by_name["api_counted"]["input_schema"]["properties"]

    alice.groups.add(Group.objects.get(name="operators"))
    names = {entry["name"] for entry in client_for(alice).get(url("tool-list")).data}
    assert {"api_counted", "api_admin_only"} <= names


def test_a_disabled_tool_is_not_listed(alice):
    models.Tool.objects.filter(name="api_counted").update(enabled=False)
    names = {entry["name"] for entry in client_for(alice).get(url("tool-list")).data}
    assert "api_counted" not in names


# -- conversations ------------------------------------------------------------------------------


def test_create_list_retrieve_and_delete_a_conversation(alice):
    client = client_for(alice)
    created = client.post(url("conversation-list"), {"title": "Trip"}, format="json")
    assert created.status_code == 201, created.data
    pk = created.data["id"]
    assert created.data["title"] == "Trip"
    assert created.data["url"].endswith(f"/api/conversations/{pk}/")
    assert created.data["messages_url"].endswith(f"/api/conversations/{pk}/messages/")
    assert models.Conversation.objects.get(pk=pk).owner == alice

    untitled = client.post(url("conversation-list"), {}, format="json")
    assert untitled.status_code == 201 and untitled.data["title"] == ""

    listed = client.get(url("conversation-list"))
    assert listed.status_code == 200
    assert listed.data["count"] == 2
    assert {c["id"] for c in listed.data["results"]} == {pk, untitled.data["id"]}

    detail = client.get(url("conversation-detail", pk))
    assert detail.status_code == 200
    assert detail.data["messages"] == []

    assert client.delete(url("conversation-detail", pk)).status_code == 204
    assert not models.Conversation.objects.filter(pk=pk).exists()
    assert client.get(url("conversation-detail", pk)).status_code == 404


def test_a_title_longer_than_the_model_allows_is_a_400(alice):
    response = client_for(alice).post(url("conversation-list"), {"title": "x" * 201}, format="json")
    assert response.status_code == 400
    assert "title" in response.data["errors"]


def test_conversations_are_paginated_by_20(alice):
    for number in range(25):
        conversation_of(alice, f"c{number}")
    client = client_for(alice)
    first = client.get(url("conversation-list"))
    assert first.data["count"] == 25
    assert len(first.data["results"]) == 20
    assert first.data["next"] and first.data["previous"] is None
    second = client.get(first.data["next"])
    assert len(second.data["results"]) == 5 and second.data["next"] is None


# -- turns --------------------------------------------------------------------------------------


def test_a_message_starts_a_turn_that_answers_202_with_the_run(alice, script):
    script(*ONE_ROUND)
    conversation = conversation_of(alice)
    client = client_for(alice)
    response = send(client, conversation, "Go")
    assert response.status_code == 202, response.data
    run_id = response.data["id"]
    assert response.data["conversation"] == conversation.pk
    assert response.data["urls"]["self"].endswith(f"/api/runs/{run_id}/")
    assert response.data["urls"]["cancel"].endswith(f"/api/runs/{run_id}/cancel/")
    assert response["Location"] == response.data["urls"]["self"]

    run = client.get(url("run-detail", run_id))
    assert run.status_code == 200
    assert (run.data["status"], run.data["answer"], run.data["error"]) == ("succeeded", "Done", "")
    kinds = [event["kind"] for event in run.data["events"]]
    assert kinds[0] == "queued" and kinds[-1] == "succeeded"
    assert [event["sequence"] for event in run.data["events"]] == list(range(1, len(kinds) + 1))
    executions = run.data["tool_executions"]
    assert [(e["tool_name"], e["status"], e["is_error"]) for e in executions] == [
        ("api_counted", "succeeded", False),
        ("api_counted", "succeeded", False),
    ]
    assert not {"arguments", "result", "error"} & set(executions[0])  # a summary (S13)

    messages = client.get(url("conversation-detail", conversation.pk)).data["messages"]
    assert [(m["sequence"], m["role"]) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "tool"),
        (4, "assistant"),
    ]
    assert messages[0]["text"] == "Go" and messages[3]["text"] == "Done"
    assert [call["name"] for call in messages[1]["tool_calls"]] == ["api_counted", "api_counted"]
    assert messages[2]["tool_responses"] == [
        {"id": "call_1", "name": "api_counted", "response_data": "counted a", "is_error": False},
        {"id": "call_2", "name": "api_counted", "response_data": "counted b", "is_error": False},
    ]
    assert messages[0]["created_at"]


def test_after_limits_a_conversation_to_the_messages_a_client_has_not_read(alice, script):
    script(*ONE_ROUND)
    conversation = conversation_of(alice)
    client = client_for(alice)
    assert send(client, conversation).status_code == 202
    detail = url("conversation-detail", conversation.pk)

    assert [m["sequence"] for m in client.get(detail + "?after=0").data["messages"]] == [1, 2, 3, 4]
    newer = client.get(detail + "?after=2").data
    assert [(m["sequence"], m["role"]) for m in newer["messages"]] == [
        (3, "tool"),
        (4, "assistant"),
    ]
    assert newer["id"] == str(conversation.pk)
    assert client.get(detail + "?after=4").data["messages"] == []
    # The largest number a client may send (18 digits) is past every message.
    assert client.get(detail + "?after=" + "9" * 18).data["messages"] == []


def test_wait_answers_200_with_the_finished_run(alice, script):
    script(text("Hello"))
    response = send(client_for(alice), conversation_of(alice), "Hi", "?wait=5")
    assert response.status_code == 200, response.data
    assert (response.data["status"], response.data["answer"]) == ("succeeded", "Hello")
    assert response.data["events"][-1]["kind"] == "succeeded"


def test_wait_answers_202_when_the_run_did_not_finish_in_time(alice, script):
    script(text("Hello"))
    conversation = conversation_of(alice)
    with mock.patch.object(runs.lifecycle, "publish"):
        response = send(client_for(alice), conversation, "Hi", "?wait=1")
    assert response.status_code == 202, response.data
    assert response.data["status"] == "queued"


@pytest.mark.parametrize("wait", ["0", "-1", "61", "soon"])
def test_a_wait_outside_1_to_60_seconds_is_a_400(alice, script, wait):
    conversation = conversation_of(alice)
    response = send(client_for(alice), conversation, "Hi", f"?wait={wait}")
    assert response.status_code == 400
    assert set(response.data["errors"]) == {"wait"}
    assert not conversation.messages.exists()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"text": ""}, "The message is empty."),
        ({"text": "   \n"}, "The message is empty."),
        ({}, "This field is required."),
        ({"text": None}, "This field may not be null."),
    ],
)
def test_an_empty_or_missing_message_is_a_400(alice, body, expected):
    conversation = conversation_of(alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk), body, format="json"
    )
    assert response.status_code == 400
    assert [str(error) for error in response.data["errors"]["text"]] == [expected]
    assert not conversation.messages.exists() and not models.Run.objects.exists()


def test_a_message_longer_than_the_setting_is_a_400(alice, script):
    script(text("ok"))
    conversation = conversation_of(alice)
    client = client_for(alice)
    with override_settings(TOOL_CALLING={**settings.TOOL_CALLING, "API": {"MAX_MESSAGE_CHARS": 5}}):
        response = send(client, conversation, "123456")
        assert response.status_code == 400
        assert [str(e) for e in response.data["errors"]["text"]] == [
            "The message is 6 characters long; at most 5 are accepted."
        ]
        assert send(client, conversation, "12345").status_code == 202


def test_the_default_limit_is_32000_characters(alice, script):
    script(text("ok"))
    conversation = conversation_of(alice)
    response = send(client_for(alice), conversation, "x" * 32001)
    assert response.status_code == 400 and "32000" in str(response.data["errors"]["text"][0])


def test_malformed_json_is_a_400(alice):
    conversation = conversation_of(alice)
    response = client_for(alice).post(
        url("conversation-messages", conversation.pk),
        data='{"text": "unterminated',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.data["detail"].code == "parse_error"
    assert "JSON parse error" in str(response.data["detail"])


def test_a_second_message_while_a_turn_runs_is_a_409(alice, script):
    script(text("ok"))
    conversation = conversation_of(alice)
    client = client_for(alice)
    queued(client, conversation, "First")
    response = send(client, conversation, "Second")
    assert response.status_code == 409
    assert response.data["detail"].code == "conversation_busy"
    assert "already answering another message" in str(response.data["detail"])
    assert list(conversation.messages.values_list("text", flat=True)) == ["First"]


def test_broker_down_is_a_503_and_the_message_and_run_are_saved(alice, script):
    script(text("ok"))
    conversation = conversation_of(alice)
    with mock.patch.object(
        tasks.run_step, "apply_async", side_effect=OperationalError("Connection refused")
    ):
        response = send(client_for(alice), conversation, "Go")
    assert response.status_code == 503
    assert response.data["detail"].code == "broker_unavailable"
    run = models.Run.objects.get()
    assert str(response.data["detail"]) == (
        "The turn could not be queued: the message broker is unavailable. Your message and "
        f"run {run.pk} are saved; the run is marked failed and can be retried."
    )
    assert "Connection refused" not in str(response.data["detail"])
    assert run.status == "failed"
    assert list(conversation.messages.values_list("role", "text")) == [("user", "Go")]


def test_turn_creation_is_throttled_per_user(alice, bob, script):
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": "2/min"}}
    with override_settings(REST_FRAMEWORK=rest):
        client = client_for(alice)
        conversation = conversation_of(alice)
        assert send(client, conversation, "").status_code == 400  # counted all the same
        assert send(client, conversation, "").status_code == 400
        throttled = send(client, conversation, "Go")
        assert throttled.status_code == 429
        assert throttled.data["detail"].code == "throttled"
        assert "Retry-After" in throttled
        # Other endpoints and other users are not affected.
        assert client.get(url("conversation-list")).status_code == 200
        assert send(client_for(bob), conversation_of(bob), "").status_code == 400


def test_s24_the_turn_rate_is_a_sliding_window_kept_in_the_database(alice, script):
    """DRF's semantics (N per period, sliding; 429 with Retry-After), counted in a row."""
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": "2/min"}}
    clock = [1000.0]
    with (
        override_settings(REST_FRAMEWORK=rest),
        mock.patch.object(TurnRateThrottle, "timer", lambda self: clock[0]),
    ):
        client = client_for(alice)
        conversation = conversation_of(alice)
        assert send(client, conversation, "").status_code == 400  # at 1000
        clock[0] = 1030.0
        assert send(client, conversation, "").status_code == 400  # at 1030
        clock[0] = 1045.0
        throttled = send(client, conversation, "Go")
        assert (throttled.status_code, throttled["Retry-After"]) == (429, "15")
        clock[0] = 1060.5  # the first left the window: one more may pass
        assert send(client, conversation, "").status_code == 400
        assert send(client, conversation, "Go").status_code == 429
    (history,) = models.RequestHistory.objects.all()
    assert (history.key, history.times) == (
        f"throttle_tool_calling_turns_{alice.pk}",
        [1030.0, 1060.5],
    )
    assert not conversation.messages.exists()


def test_the_project_sets_a_turn_rate():
    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["tool_calling_turns"] == "30/min"


# -- runs ---------------------------------------------------------------------------------------


def test_runs_list_filters_by_status(alice, script):
    script(text("one"))
    client = client_for(alice)
    send(client, conversation_of(alice), "Go")
    with mock.patch.object(
        tasks.run_step, "apply_async", side_effect=OperationalError("Connection refused")
    ):
        send(client, conversation_of(alice), "Go")
    listed = client.get(url("run-list"))
    assert listed.status_code == 200 and listed.data["count"] == 2
    assert "events" not in listed.data["results"][0]
    succeeded = client.get(url("run-list"), {"status": "succeeded"})
    assert [r["status"] for r in succeeded.data["results"]] == ["succeeded"]
    failed = client.get(url("run-list"), {"status": "failed"})
    assert [r["status"] for r in failed.data["results"]] == ["failed"]
    unknown = client.get(url("run-list"), {"status": "done"})
    assert unknown.status_code == 400 and "status" in unknown.data["errors"]


def test_cancel_asks_a_queued_run_to_stop(alice, script):
    script(text("never"))
    conversation = conversation_of(alice)
    client = client_for(alice)
    run = queued(client, conversation)
    response = client.post(url("run-cancel", run.pk))
    assert response.status_code == 202
    assert response.data["cancel_requested"] is True
    assert client.post(url("run-cancel", run.pk)).status_code == 202  # asked already: no change
    tasks.run_step(str(run.pk))
    assert client.get(url("run-detail", run.pk)).data["status"] == "cancelled"
    ended = client.post(url("run-cancel", run.pk))
    assert ended.status_code == 409 and ended.data["detail"].code == "run_ended"


def test_a_conversation_with_a_running_turn_cannot_be_deleted(alice, script):
    script(text("never"))
    conversation = conversation_of(alice)
    client = client_for(alice)
    queued(client, conversation)
    response = client.delete(url("conversation-detail", conversation.pk))
    assert response.status_code == 409
    assert models.Conversation.objects.filter(pk=conversation.pk).exists()


# -- who sees what (S14) -------------------------------------------------------------------------


def test_another_users_conversations_and_runs_answer_404(alice, bob, script):
    script(text("Hello"))
    conversation = conversation_of(alice, "private")
    run_id = send(client_for(alice), conversation, "Hi").data["id"]
    intruder = client_for(bob)

    assert intruder.get(url("conversation-list")).data["count"] == 0
    assert intruder.get(url("run-list")).data["count"] == 0
    assert intruder.get(url("conversation-detail", conversation.pk)).status_code == 404
    assert intruder.delete(url("conversation-detail", conversation.pk)).status_code == 404
    assert send(intruder, conversation, "Hijack").status_code == 404
    assert intruder.get(url("run-detail", run_id)).status_code == 404
    assert intruder.post(url("run-cancel", run_id)).status_code == 404
    assert models.Conversation.objects.filter(pk=conversation.pk).exists()
    assert list(conversation.messages.values_list("text", flat=True)) == ["Hi", "Hello"]


def test_staff_who_may_view_see_everything_but_do_not_post_into_others_conversations(
    alice, staff, script
):
    script(text("Hello"))
    conversation = conversation_of(alice)
    run_id = send(client_for(alice), conversation, "Hi").data["id"]
    models.Conversation.objects.create(owner=None, title="from the CLI")
    staff = holding(staff, "view_conversation", "view_run", "delete_conversation")
    operator = client_for(staff)
    assert operator.get(url("conversation-list")).data["count"] == 2
    assert operator.get(url("run-list")).data["count"] == 1
    assert operator.get(url("conversation-detail", conversation.pk)).status_code == 200
    assert operator.get(url("run-detail", run_id)).status_code == 200
    refused = send(operator, conversation, "As staff")
    assert refused.status_code == 403
    # The run's events too: the owner's run is found first, another's by the permission.
    assert operator.get(url("run-events", run_id)).status_code == 200
    assert client_for(alice).get(url("run-events", run_id)).status_code == 200
    assert operator.delete(url("conversation-detail", conversation.pk)).status_code == 204


def test_others_run_events_answer_404_without_the_view_permission(alice, staff, script):
    script(text("Hello"))
    run_id = send(client_for(alice), conversation_of(alice), "Hi").data["id"]
    assert client_for(staff).get(url("run-events", run_id)).status_code == 404
    assert client_for(holding(staff, "view_run")).get(url("run-events", run_id)).status_code == 200


# -- staff powers follow model permissions (S23) ----------------------------------------------


def holding(user, *codenames):
    """``user`` with ``codenames`` of the app's permissions, read afresh (Django caches them)."""
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="tool_calling", codename__in=codenames)
    )
    return User.objects.get(pk=user.pk)


@pytest.fixture
def dave():
    """Staff with the view permissions only, as in the admin's "view-only" role."""
    user = User.objects.create_user("dave", password="pw", is_staff=True)
    return holding(user, "view_conversation", "view_run", "view_toolexecution")


def failed_run(conversation):
    """A failed run of ``conversation`` (its broker was down, say): retryable by its owner."""
    run = queued(client_for(conversation.owner), conversation)
    models.Run.objects.filter(pk=run.pk).update(status="failed", error="broker down")
    models.Conversation.objects.filter(pk=conversation.pk).update(turn_token="")
    return run


def test_s23_view_only_staff_read_but_may_not_delete_cancel_or_retry_others_objects(
    alice, dave, script
):
    conversation = conversation_of(alice)
    retryable = failed_run(conversation)
    active = queued(client_for(alice), conversation_of(alice))
    operator = client_for(dave)
    assert operator.get(url("conversation-detail", conversation.pk)).status_code == 200
    assert operator.get(url("run-detail", retryable.pk)).status_code == 200

    deleted = operator.delete(url("conversation-detail", conversation.pk))
    cancelled = operator.post(url("run-cancel", active.pk))
    retried = operator.post(url("run-retry", retryable.pk))
    assert (deleted.status_code, deleted.data["detail"]) == (
        403,
        "You need the permission tool_calling.delete_conversation to do that to another "
        "user's conversation.",
    )
    assert (cancelled.status_code, cancelled.data["detail"]) == (
        403,
        "You need the permission tool_calling.cancel_run to do that to another user's run.",
    )
    assert (retried.status_code, retried.data["detail"]) == (
        403,
        "You need the permission tool_calling.retry_run to do that to another user's run.",
    )
    assert models.Conversation.objects.filter(pk=conversation.pk).exists()
    active.refresh_from_db()
    retryable.refresh_from_db()
    assert (active.cancel_requested, retryable.status) == (False, "failed")


def test_s23_staff_without_the_view_permissions_see_nothing_of_others(alice, staff, script):
    conversation = conversation_of(alice)
    run = failed_run(conversation)
    operator = client_for(staff)
    assert operator.get(url("conversation-list")).data["count"] == 0
    assert operator.get(url("run-list")).data["count"] == 0
    assert operator.get(url("conversation-detail", conversation.pk)).status_code == 404
    assert operator.get(url("run-detail", run.pk)).status_code == 404
    assert operator.delete(url("conversation-detail", conversation.pk)).status_code == 404


def test_s23_each_power_over_others_objects_is_its_own_permission(alice, dave, script):
    script(text("Retried"))
    conversation = conversation_of(alice)
    retryable = failed_run(conversation)
    active = queued(client_for(alice), conversation_of(alice))
    dave = holding(dave, "cancel_run", "retry_run", "delete_conversation")
    operator = client_for(dave)
    assert operator.post(url("run-cancel", active.pk)).status_code == 202
    assert operator.post(url("run-retry", retryable.pk)).status_code == 202
    retryable.refresh_from_db()
    assert (retryable.status, retryable.answer, retryable.user) == ("succeeded", "Retried", alice)
    assert operator.delete(url("conversation-detail", conversation.pk)).status_code == 204


def test_s23_a_retry_never_runs_a_tool_with_rights_the_retrier_lacks(alice, dave, script):
    """alice's turn may use the operators' tool; dave may not: he may not retry her run."""
    alice.groups.add(Group.objects.get(name="operators"))
    conversation = conversation_of(alice)
    retryable = failed_run(conversation)
    dave = holding(dave, "retry_run")
    refused = client_for(dave).post(url("run-retry", retryable.pk))
    assert (refused.status_code, refused.data["detail"]) == (
        403,
        "This run offers tools you may not use (api_admin_only): only someone who may use "
        "them retries it.",
    )
    retryable.refresh_from_db()
    assert retryable.status == "failed"
    # Narrowed to the tools dave may use too, alice's next run is his to retry.
    script(text("Retried"))
    models.Run.objects.filter(pk=retryable.pk).update(tool_names=["api_counted"])
    assert client_for(dave).post(url("run-retry", retryable.pk)).status_code == 202


@pytest.mark.parametrize(
    ("method", "name", "needs_pk"),
    [
        ("get", "tool-list", False),
        ("get", "conversation-list", False),
        ("post", "conversation-list", False),
        ("get", "conversation-detail", True),
        ("delete", "conversation-detail", True),
        ("post", "conversation-messages", True),
        ("get", "run-list", False),
    ],
)
def test_anonymous_requests_are_refused_with_401(alice, method, name, needs_pk):
    conversation = conversation_of(alice)
    target = url(name, conversation.pk if needs_pk else None)
    response = getattr(APIClient(), method)(target, {"text": "Hi"}, format="json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert not conversation.messages.exists()


def test_token_authentication(alice, script):
    script(text("Hello"))
    token = Token.objects.create(user=alice)
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    created = client.post(url("conversation-list"), {"title": "t"}, format="json")
    assert created.status_code == 201  # no CSRF token needed with a token
    conversation = models.Conversation.objects.get(pk=created.data["id"])
    assert send(client, conversation, "Hi").status_code == 202
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert client.get(url("conversation-list")).status_code == 401


def test_session_authenticated_unsafe_requests_need_the_csrf_token(alice):
    """S15: session authentication without the CSRF token is refused."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get(url("conversation-list")).status_code == 200
    refused = client.post(url("conversation-list"), {"title": "t"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in str(refused.data["detail"])
    conversation = conversation_of(alice)
    assert send(client, conversation, "Hi").status_code == 403
    assert client.delete(url("conversation-detail", conversation.pk)).status_code == 403
    assert not conversation.messages.exists()
    assert models.Conversation.objects.filter(owner=alice).count() == 1

    client.get(url("conversation-list"))  # any page that sets the cookie would do
    from django.middleware.csrf import _get_new_csrf_string

    secret = _get_new_csrf_string()
    client.cookies[settings.CSRF_COOKIE_NAME] = secret
    accepted = client.post(
        url("conversation-list"), {"title": "t"}, format="json", HTTP_X_CSRFTOKEN=secret
    )
    assert accepted.status_code == 201
