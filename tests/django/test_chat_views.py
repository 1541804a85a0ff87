"""The chat page's views (tool_calling.contrib.chat): login, whose conversations, escaping.

What the page does in a browser (sending, streaming, approvals, reloads, the keyboard) is
tests/celery/test_chat_page_browser.py; here are the server's answers and the system checks.
"""

import json
import re
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.staticfiles import finders
from django.core import checks
from django.test import override_settings
from django.urls import include, path, reverse

from tool_calling import models
from tool_calling.contrib.chat import checks as chat_checks
from tool_calling.contrib.chat import views

pytestmark = pytest.mark.django_db

PAYLOAD = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"

urlpatterns = [path("", include("tool_calling.contrib.chat.urls"))]
"""A project that mounts the chat page but not the API (for tool_calling_chat.E001)."""


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob():
    return User.objects.create_user("bob", password="pw")


def logged_in(client, user):
    client.force_login(user)
    return client


def page(client, name="tool_calling_chat:index", *args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200, response
    return response.content.decode()


def config(html):
    """The page's configuration, as chat.js reads it."""
    found = re.search(
        r'<script id="tool-calling-chat-config" type="application/json">(.*?)</script>', html, re.S
    )
    assert found, "no configuration in the page"
    return json.loads(found.group(1))


def conversation_with_a_tool_call(owner, text=PAYLOAD):
    """A stored turn: the user's message, a tool call, its result (all ``text``) and the answer."""
    conversation = models.Conversation.objects.create(owner=owner, title=text)
    add = conversation.messages.create
    add(sequence=1, role="user", text=text)
    add(
        sequence=2,
        role="assistant",
        text=text,
        tool_calls=[{"id": "call_1", "name": "get_weather", "arguments": json.dumps({"x": text})}],
    )
    add(
        sequence=3,
        role="tool",
        tool_responses=[
            {"id": "call_1", "name": "get_weather", "response_data": text, "is_error": False}
        ],
    )
    add(sequence=4, role="assistant", text=f"Answer: {text}")
    return conversation


# -- logging in ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, args", [("index", ()), ("conversation", (uuid.uuid4(),))])
def test_the_pages_need_a_logged_in_user(client, name, args):
    target = reverse(f"tool_calling_chat:{name}", args=args)
    response = client.get(target)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={target}"


def test_the_login_page_logs_a_user_in_and_sends_them_to_the_chat(client, alice):
    form = client.get("/login/?next=/")
    assert form.status_code == 200
    html = form.content.decode()
    assert '<label for="id_username">Username</label>' in html
    assert '<label for="id_password">Password</label>' in html

    wrong = client.post("/login/", {"username": "alice", "password": "nope", "next": "/"})
    assert wrong.status_code == 200
    assert "Please enter a correct username and password." in wrong.content.decode()

    right = client.post("/login/", {"username": "alice", "password": "pw", "next": "/"})
    assert (right.status_code, right["Location"]) == (302, "/")
    assert client.get("/login/")["Location"] == "/"  # already logged in

    out = client.post("/logout/")
    assert (out.status_code, out["Location"]) == (302, "/login/")
    assert client.get("/").status_code == 302


def test_the_project_sends_anonymous_users_to_the_chat_login():
    from django.conf import settings

    assert settings.LOGIN_URL == "tool_calling_chat:login"


# -- whose conversations -------------------------------------------------------------------------


def test_the_index_lists_only_the_users_own_conversations(client, alice, bob):
    models.Conversation.objects.create(owner=alice, title="Alice's trip")
    models.Conversation.objects.create(owner=bob, title="Bob's taxes")
    staff = User.objects.create_user("carol", is_staff=True)
    models.Conversation.objects.create(owner=staff, title="Carol's notes")

    html = page(logged_in(client, alice))
    assert "Alice&#x27;s trip" in html
    assert "Bob" not in html and "Carol" not in html
    # Staff read other people's conversations in the admin, not here.
    html = page(logged_in(client, staff))
    assert "Carol&#x27;s notes" in html
    assert "Alice" not in html and "Bob" not in html


def test_another_users_conversation_is_a_404_for_everyone_staff_included(client, alice, bob):
    conversation = models.Conversation.objects.create(owner=alice, title="Private")
    target = reverse("tool_calling_chat:conversation", args=[conversation.pk])
    assert logged_in(client, bob).get(target).status_code == 404
    staff = User.objects.create_user("carol", is_staff=True)
    assert logged_in(client, staff).get(target).status_code == 404
    assert logged_in(client, alice).get(target).status_code == 200


def test_conversations_are_listed_newest_first_in_pages(client, alice):
    for number in range(views.PAGE_SIZE + 1):
        models.Conversation.objects.create(owner=alice, title=f"c{number}")
    logged_in(client, alice)
    first = client.get("/").content.decode()
    listed = re.findall(r'href="/conversations/[^"]+/">(c\d+)</a>', first)
    assert len(listed) == views.PAGE_SIZE
    assert listed[0] == f"c{views.PAGE_SIZE}" and "c0" not in listed
    assert 'href="?page=2" rel="next">Older</a>' in first
    second = client.get("/?page=2").content.decode()
    assert re.findall(r'href="/conversations/[^"]+/">(c\d+)</a>', second) == ["c0"]


# -- what a conversation page shows ----------------------------------------------------------------


def test_everything_a_model_a_tool_or_a_user_wrote_is_escaped(client, alice):
    conversation = conversation_with_a_tool_call(alice)
    html = page(logged_in(client, alice), "tool_calling_chat:conversation", conversation.pk)
    assert PAYLOAD not in html
    assert "<img" not in html
    body = html.split("<body", 1)[1]
    assert body.count("<script") == 2  # the configuration and chat.js, nothing else
    assert html.count(ESCAPED) >= 4  # title (twice), the user's text, the model's text, result
    assert f"Answer: {ESCAPED}" in html
    # The arguments, indented, as JSON text: escaped twice over (JSON, then HTML).
    assert "&quot;x&quot;: &quot;&lt;script&gt;alert(\\&quot;x\\&quot;)" in html


def test_a_stored_turn_shows_its_calls_with_status_duration_arguments_and_result(client, alice):
    conversation = conversation_with_a_tool_call(alice, text="Oslo")
    models.ToolExecution.objects.create(
        conversation=conversation,
        tool_call_id="call_1",
        tool_name="get_weather",
        status="succeeded",
        duration_ms=12,
    )
    html = page(logged_in(client, alice), "tool_calling_chat:conversation", conversation.pk)
    call = html.split('<li class="tc-tool-call" data-call-id="call_1" data-status="succeeded">')[1]
    call = call.split("</li>", 1)[0]
    assert '<code class="tc-tool-name">get_weather</code>' in call
    assert '<span class="tc-tool-status">Succeeded</span>' in call
    assert '<span class="tc-tool-duration">12 ms</span>' in call
    # Folded away (no "open"), the arguments indented.
    assert '<details class="tc-tool-arguments">' in call
    assert "<pre>{\n  &quot;x&quot;: &quot;Oslo&quot;\n}</pre>" in call
    assert '<details class="tc-tool-result">' in call and "<pre>Oslo</pre>" in call
    # The tool message shows with its call, not on its own.
    assert html.count('class="tc-message tc-') == 3
    assert config(html)["activeRun"] is None


@pytest.mark.parametrize(
    "approval, reason, original, note",
    [
        ("pending", "", "", "Waiting for a person to approve this call."),
        ("approved", "", "", "Approved."),
        ("approved", "", '{"x": "Bergen"}', "Approved, with edited arguments."),
        ("denied", PAYLOAD, "", f"Denied: {ESCAPED}"),
        ("denied", "", "", "Denied."),
        ("expired", "", "", "Nobody approved it in time."),
    ],
)
def test_a_gated_call_says_what_became_of_its_approval(
    client, alice, approval, reason, original, note
):
    conversation = conversation_with_a_tool_call(alice, text="Oslo")
    models.ToolExecution.objects.create(
        conversation=conversation,
        tool_call_id="call_1",
        tool_name="get_weather",
        status="awaiting_approval" if approval == "pending" else "denied",
        approval=approval,
        decision_reason=reason,
        original_arguments=original,
    )
    html = page(logged_in(client, alice), "tool_calling_chat:conversation", conversation.pk)
    assert f'<p class="tc-tool-note">{note}</p>' in html


def test_during_a_run_the_page_shows_what_came_before_and_hands_the_run_to_the_script(
    client, alice
):
    conversation = conversation_with_a_tool_call(alice, text="Earlier")
    question = conversation.messages.create(sequence=5, role="user", text="And now?")
    conversation.messages.create(sequence=6, role="assistant", text="Being written")
    run = models.Run.objects.create(
        conversation=conversation, user=alice, text="And now?", user_message=question
    )
    html = page(logged_in(client, alice), "tool_calling_chat:conversation", conversation.pk)
    assert "And now?" in html and "Being written" not in html  # the events rebuild the rest
    assert config(html)["activeRun"] == {
        "id": str(run.pk),
        "eventsUrl": f"/api/runs/{run.pk}/events/",
        "cancelUrl": f"/api/runs/{run.pk}/cancel/",
        "userSequence": 5,
    }
    assert config(html)["conversation"] == {
        "id": str(conversation.pk),
        "url": f"/api/conversations/{conversation.pk}/",
        "messagesUrl": f"/api/conversations/{conversation.pk}/messages/",
    }

    run.status = models.RunStatus.SUCCEEDED
    run.save()
    html = page(client, "tool_calling_chat:conversation", conversation.pk)
    assert "Being written" in html and config(html)["activeRun"] is None


def test_a_long_conversation_shows_its_newest_messages(client, alice, monkeypatch):
    monkeypatch.setattr(views, "MAX_MESSAGES", 3)
    conversation = models.Conversation.objects.create(owner=alice)
    for sequence in range(1, 6):
        conversation.messages.create(sequence=sequence, role="user", text=f"message {sequence}")
    html = page(logged_in(client, alice), "tool_calling_chat:conversation", conversation.pk)
    assert re.findall(r"message \d", html) == ["message 3", "message 4", "message 5"]
    assert "2 earlier messages are not shown." in html
    assert '<h1 id="conversation-title">Untitled conversation</h1>' in html


def test_the_page_gives_its_script_the_api_and_the_session_csrf_token(client, alice):
    html = page(logged_in(client, alice))
    settings = config(html)
    assert settings["api"] == {
        "conversations": "/api/conversations/",
        "executions": "/api/tool-executions/",
    }
    assert settings["conversation"] is None and settings["canApprove"] is False
    assert settings["csrfToken"]
    assert settings["statusLabels"]["awaiting_approval"] == "Awaiting approval"
    assert settings["conversationPage"] == f"/conversations/{settings['anyId']}/"
    assert '<script src="/static/tool_calling_chat/chat.js" defer></script>' in html
    assert '<link rel="stylesheet" href="/static/tool_calling_chat/chat.css">' in html
    assert finders.find("tool_calling_chat/chat.js") and finders.find("tool_calling_chat/chat.css")


def test_only_approvers_get_the_approval_queue(client, alice):
    assert 'id="approvals"' not in page(logged_in(client, alice))
    holder = User.objects.create_user("rita")
    holder.user_permissions.add(
        Permission.objects.get(
            content_type__app_label="tool_calling", codename="approve_toolexecution"
        )
    )
    superuser = User.objects.create_superuser("sam")
    for approver in (holder, superuser):
        html = page(logged_in(client, approver))
        assert 'id="approvals"' in html and config(html)["canApprove"] is True
    # Staff without the permission do not decide (being staff is not enough).
    staff = User.objects.create_user("carol", is_staff=True)
    html = page(logged_in(client, staff))
    assert 'id="approvals"' not in html and config(html)["canApprove"] is False


def test_the_script_writes_model_and_tool_text_only_as_text():
    """chat.js never parses HTML: no innerHTML, outerHTML, insertAdjacentHTML or document.write."""
    source = open(finders.find("tool_calling_chat/chat.js"), encoding="utf-8").read()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in source, sink


# -- system checks -------------------------------------------------------------------------------


def test_the_example_project_passes_the_chat_checks():
    assert chat_checks.check_setup() == []


@override_settings(ROOT_URLCONF=__name__, LOGIN_URL="tool_calling_chat:login")
def test_e001_the_api_is_not_mounted():
    [error] = chat_checks.check_setup()
    assert error.id == "tool_calling_chat.E001"
    assert error.msg == (
        "The chat page needs tool_calling's HTTP API under the URL namespace 'tool_calling', "
        "and 'tool_calling:conversation-list' does not resolve."
    )
    assert (
        error.hint
        == 'Add path("api/", include("tool_calling.api.urls")) to the project\'s URLconf.'
    )


@override_settings(
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"]
    }
)
def test_e002_the_api_takes_no_session_authentication():
    [error] = chat_checks.check_setup()
    assert error.id == "tool_calling_chat.E002"
    assert "has no SessionAuthentication" in error.msg
    assert "rest_framework.authentication.SessionAuthentication" in error.hint


@pytest.mark.parametrize("login_url", ["/accounts/login/", "no_such_name"])
def test_w001_login_url_is_not_a_page_of_the_project(login_url):
    with override_settings(LOGIN_URL=login_url):
        [warning] = chat_checks.check_setup()
    assert isinstance(warning, checks.Warning) and warning.id == "tool_calling_chat.W001"
    assert warning.msg == (
        f"LOGIN_URL ({login_url!r}) is not a page of this project; the chat page sends users "
        "who are not logged in there."
    )


@pytest.mark.parametrize("login_url", ["/admin/login/", "https://sso.example.com/login"])
def test_another_login_page_or_site_is_fine(login_url):
    with override_settings(LOGIN_URL=login_url):
        assert chat_checks.check_setup() == []


def test_the_checks_run_with_manage_py_check():
    registered = checks.run_checks(tags=[checks.Tags.urls])
    assert not [m for m in registered if m.id and m.id.startswith("tool_calling_chat.")]
    with override_settings(LOGIN_URL="/nowhere/"):
        ids = [m.id for m in checks.run_checks(tags=[checks.Tags.urls])]
    assert "tool_calling_chat.W001" in ids
