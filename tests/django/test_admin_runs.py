"""The admin of runs: filters by state and age, a run's events inline, retry and cancel (S16)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from tests.django._tools import registered
from tool_calling import models, runs, tasks, tool
from tool_calling.testing import text, tool_call

# Transactions commit: a run is published on commit, as in production.
pytestmark = pytest.mark.django_db(transaction=True)

RUNS_URL = reverse("admin:tool_calling_run_changelist")


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


@pytest.fixture(autouse=True)
def ping_tool():
    with registered(ping):
        yield


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice")


def staff(django_user_model: Any, username: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", *codenames]))
    return user


def failed_run(alice: Any, script: Any) -> models.Run:
    """A run whose first step the broker refused: failed, retryable."""
    script(tool_call("ping"), text("Pong."))
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(tasks.run_step, "apply_async", side_effect=OperationalError("down")):
        with pytest.raises(runs.RunQueueError) as raised:
            runs.start_turn(conversation, "Ping", user=alice)
    return raised.value.run


def queued_run(alice: Any) -> models.Run:
    conversation = models.Conversation.objects.create(owner=alice)
    with mock.patch.object(runs.lifecycle, "publish"):  # queued, not sent yet
        return runs.start_turn(conversation, "Ping", user=alice)


def listed(client: Any, **params: str) -> list[str]:
    response = client.get(RUNS_URL, params)
    assert response.status_code == 200
    return sorted(str(run.pk) for run in response.context["cl"].result_list)


def page_messages(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def act(client: Any, action: str, selected: list[models.Run]) -> Any:
    return client.post(
        RUNS_URL, {"action": action, "_selected_action": [str(r.pk) for r in selected]}, follow=True
    )


def test_the_list_filters_by_state_and_by_age(admin_client: Any, alice: Any, script: Any) -> None:
    failed = failed_run(alice, script)
    queued = queued_run(alice)
    old = queued_run(alice)
    models.Run.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))

    assert listed(admin_client, status="failed") == [str(failed.pk)]
    assert listed(admin_client, status="queued") == sorted([str(queued.pk), str(old.pk)])
    assert listed(admin_client, age="24h") == sorted([str(failed.pk), str(queued.pk)])
    assert listed(admin_client, age="older30d") == [str(old.pk)]
    assert listed(admin_client, age="older7d", status="queued") == [str(old.pk)]
    # Found by its id or its conversation's, exactly; any other text finds nothing.
    assert listed(admin_client, q=str(failed.pk)) == [str(failed.pk)]
    assert listed(admin_client, q=str(queued.conversation_id)) == [str(queued.pk)]
    assert listed(admin_client, q="not-an-id") == []


def test_a_run_shows_its_events_in_order_escaped(admin_client: Any, alice: Any, script: Any):
    run = failed_run(alice, script)
    models.RunEvent.objects.filter(run=run, kind="failed").update(data={"note": "<script>x"})
    page = admin_client.get(reverse("admin:tool_calling_run_change", args=[run.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert body.index(">queued<") < body.index(">failed<")
    assert "&lt;script&gt;x" in body and "<script>x" not in body
    # Read-only: no save button, no add or delete.
    assert 'name="_save"' not in body


def test_retry_queues_failed_runs_again_and_records_who(
    client: Any, django_user_model: Any, alice: Any, script: Any
) -> None:
    run = failed_run(alice, script)
    other = queued_run(django_user_model.objects.create_user("bob"))
    operator = staff(django_user_model, "operator", "retry_run")
    client.force_login(operator)

    response = act(client, "retry_selected", [run, other])

    run.refresh_from_db()
    assert run.status == "succeeded" and run.answer == "Pong."  # Celery runs eagerly here
    assert page_messages(response) == [
        "1 run queued again.",
        f"Left as they are: {str(other.pk)[:8]}: Queued, not failed.",
    ]
    [entry] = LogEntry.objects.filter(object_id=str(run.pk))
    assert (entry.user_id, entry.get_change_message()) == (operator.pk, "Retried (admin action).")


def test_cancel_asks_active_runs_to_stop(
    client: Any, django_user_model: Any, alice: Any, script: Any
) -> None:
    active = queued_run(alice)
    ended = failed_run(alice, script)
    operator = staff(django_user_model, "operator", "cancel_run")
    client.force_login(operator)

    response = act(client, "cancel_selected", [active, ended])

    assert models.Run.objects.get(pk=active.pk).cancel_requested is True
    assert page_messages(response) == [
        "1 run asked to stop.",
        f"Left as they are: {str(ended.pk)[:8]}: Failed, nothing to cancel.",
    ]
    tasks.run_step(str(active.pk))
    assert models.Run.objects.get(pk=active.pk).status == "cancelled"


@pytest.mark.parametrize(
    ("action", "codename"), [("retry_selected", "cancel_run"), ("cancel_selected", "retry_run")]
)
def test_each_action_needs_its_own_permission(
    client: Any, django_user_model: Any, alice: Any, script: Any, action: str, codename: str
) -> None:
    run = failed_run(alice, script) if action == "retry_selected" else queued_run(alice)
    client.force_login(staff(django_user_model, "viewer", codename))  # the other one only

    page = client.get(RUNS_URL)
    choices = [value for value, _label in page.context["action_form"].fields["action"].choices]
    assert action not in choices
    act(client, action, [run])

    after = models.Run.objects.get(pk=run.pk)
    assert (after.status, after.cancel_requested) == (run.status, False)
    assert not LogEntry.objects.filter(object_id=str(run.pk)).exists()
