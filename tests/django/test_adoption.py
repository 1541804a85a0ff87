"""What a new project meets on its first message through the API.

Turns started through the API run as Celery tasks, whatever ``EXECUTION["MODE"]`` says about
tool calls. Without Celery, or with a Celery app that has no broker, the first message is a 503
that says so, and saves nothing (a broker that is down is another 503: the message and a failed
run are kept for a retry). ``CELERY_TASK_ALWAYS_EAGER`` is the development path without a
broker or a worker. A project that names no rate for the turn throttle gets the default one.
"""

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import override_settings

from tests.django._api import client_for, url
from tests.django._tools import current_celery_app
from tool_calling import _celery, models, runs
from tool_calling.conf import DEFAULT_TURN_RATE
from tool_calling.testing import text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_throttle_history():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


def send(user, conversation, message="Hi"):
    return client_for(user).post(
        url("conversation-messages", conversation.pk), {"text": message}, format="json"
    )


def assert_nothing_saved(conversation):
    assert not conversation.messages.exists()
    assert not models.Run.objects.exists()
    conversation.refresh_from_db()
    assert conversation.turn_token == ""  # free for the next message


def test_without_celery_the_first_message_is_a_503_that_says_so(alice, monkeypatch):
    monkeypatch.setattr(_celery, "installed", lambda: False)
    conversation = models.Conversation.objects.create(owner=alice)
    response = send(alice, conversation)
    assert response.status_code == 503
    assert response.data["detail"].code == "celery_unavailable"
    assert str(response.data["detail"]) == (
        "The turn was not started, nothing was saved: turns run as Celery tasks, and Celery is "
        "not installed (manage.py check reports it as tool_calling.E017)."
    )
    assert_nothing_saved(conversation)


def test_a_celery_app_without_a_broker_is_a_503_that_says_so(alice):
    """The project installed Celery but defined no app: Celery's default one has no broker."""
    conversation = models.Conversation.objects.create(owner=alice)
    with current_celery_app("default"):
        response = send(alice, conversation)
    assert response.status_code == 503
    assert str(response.data["detail"]) == (
        "The turn was not started, nothing was saved: turns run as Celery tasks, and the current "
        "Celery app ('default') has no broker URL (manage.py check reports it as "
        "tool_calling.E018)."
    )
    assert_nothing_saved(conversation)


def test_start_turn_raises_the_cause_and_saves_nothing(alice, monkeypatch):
    monkeypatch.setattr(_celery, "installed", lambda: False)
    conversation = models.Conversation.objects.create(owner=alice)
    with pytest.raises(runs.CeleryUnavailableError) as raised:
        runs.start_turn(conversation, "Hi", user=alice)
    assert str(raised.value) == "Turns run as Celery tasks, and Celery is not installed."
    assert raised.value.problem.check_id == "tool_calling.E017"
    assert_nothing_saved(conversation)


def test_retrying_without_celery_is_a_503_and_the_run_stays_failed(alice, monkeypatch, script):
    conversation = models.Conversation.objects.create(owner=alice)
    run = models.Run.objects.create(
        conversation=conversation, user=alice, text="Hi", status="failed", error="broker down"
    )
    monkeypatch.setattr(_celery, "installed", lambda: False)
    response = client_for(alice).post(url("run-retry", run.pk))
    assert response.status_code == 503
    assert str(response.data["detail"]) == (
        f"Run {run.pk} was not queued again: turns run as Celery tasks, and Celery is not "
        "installed (manage.py check reports it as tool_calling.E017)."
    )
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "broker down")


def test_with_eager_celery_a_turn_runs_in_the_request_without_a_broker(alice, script):
    """The development path of docs/chat-page.md: CELERY_TASK_ALWAYS_EAGER, no broker, no worker."""
    script(text("Hello"))
    conversation = models.Conversation.objects.create(owner=alice)
    with current_celery_app("default", task_always_eager=True) as app:
        assert not app.conf.broker_url
        response = send(alice, conversation)
    assert response.status_code == 202, response.data
    run = models.Run.objects.get(pk=response.data["id"])
    assert (run.status, run.answer) == ("succeeded", "Hello")


def test_without_a_turn_rate_the_default_rate_applies(alice):
    """A project that names no rate for tool_calling_turns gets 30 a minute, not a 500."""
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {}}
    conversation = models.Conversation.objects.create(owner=alice)
    assert DEFAULT_TURN_RATE == "30/min"
    with override_settings(REST_FRAMEWORK=rest):
        # Refused as blank, and counted all the same: the throttle runs first.
        answers = [send(alice, conversation, "").status_code for _ in range(30)]
        assert answers == [400] * 30
        throttled = send(alice, conversation, "")
    assert throttled.status_code == 429
    assert throttled.data["detail"].code == "throttled"


def test_a_turn_rate_of_none_turns_the_limit_off(alice):
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"tool_calling_turns": None}}
    conversation = models.Conversation.objects.create(owner=alice)
    with override_settings(REST_FRAMEWORK=rest):
        answers = {send(alice, conversation, "").status_code for _ in range(35)}
    assert answers == {400}
