"""Retention: RETENTION's days per kind of row, purged in batches by the command and the task."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tool_calling import models, retention, tasks

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def retention_settings(**values):
    return override_settings(TOOL_CALLING={"RETENTION": values})


def days_ago(days):
    return NOW - timedelta(days=days)


@pytest.fixture
def rows(django_user_model):
    """Runs and calls of several ages and states, with the ids each test expects to stay."""
    conversation = models.Conversation.objects.create(owner=django_user_model.objects.create())

    def run(status, finished_days, created_days):
        created = days_ago(created_days)
        finished = days_ago(finished_days) if finished_days is not None else None
        run = models.Run.objects.create(conversation=conversation, text="x", status=status)
        models.Run.objects.filter(pk=run.pk).update(created_at=created, finished_at=finished)
        for sequence in (1, 2):
            event = models.RunEvent.objects.create(run=run, sequence=sequence, kind="k")
            models.RunEvent.objects.filter(pk=event.pk).update(created_at=created)
        return run

    def call(status, created_days, run=None):
        execution = models.ToolExecution.objects.create(
            tool_name="t",
            tool_call_id=f"c{models.ToolExecution.objects.count()}",
            status=status,
            conversation=conversation,
            run=run,
        )
        models.ToolExecution.objects.filter(pk=execution.pk).update(
            created_at=days_ago(created_days)
        )
        return execution

    old_done = run("succeeded", 100, 100)
    old_active = run("awaiting_approval", None, 100)  # never purged while active
    recent_done = run("failed", 5, 5)
    return {
        "old_done": old_done,
        "old_active": old_active,
        "recent_done": recent_done,
        "old_call": call("succeeded", 200, run=old_done),
        "old_pending": call("pending", 200),  # still waiting: never purged
        "recent_call": call("failed", 10),
    }


def test_nothing_is_purged_while_every_retention_is_none(rows):
    report = retention.purge_expired()
    assert report.as_dict() == {"run_events": 0, "runs": 0, "audit": 0}
    assert report.kept == ["RUN_EVENT_DAYS", "FINISHED_RUN_DAYS", "AUDIT_DAYS"]
    assert models.RunEvent.objects.count() == 6 and models.ToolExecution.objects.count() == 3


def test_each_kind_is_purged_by_its_own_days(rows):
    with retention_settings(RUN_EVENT_DAYS=30):
        assert retention.purge_expired(now=NOW).as_dict() == {
            "run_events": 2,
            "runs": 0,
            "audit": 0,
        }
    # The active run's old events stay; the ended run stays without its events.
    assert sorted(models.RunEvent.objects.values_list("run_id", flat=True)) == sorted(
        [rows["old_active"].pk] * 2 + [rows["recent_done"].pk] * 2
    )
    with retention_settings(FINISHED_RUN_DAYS=30):
        assert retention.purge_expired(now=NOW).runs == 1
    assert set(models.Run.objects.values_list("pk", flat=True)) == {
        rows["old_active"].pk,
        rows["recent_done"].pk,
    }
    # Its audit row stays, without the link.
    assert models.ToolExecution.objects.get(pk=rows["old_call"].pk).run_id is None
    with retention_settings(AUDIT_DAYS=30):
        assert retention.purge_expired(now=NOW).audit == 1
    assert set(models.ToolExecution.objects.values_list("pk", flat=True)) == {
        rows["old_pending"].pk,
        rows["recent_call"].pk,
    }


def test_a_finished_run_goes_with_its_events(rows):
    with retention_settings(FINISHED_RUN_DAYS=1):
        assert retention.purge_expired(now=NOW).runs == 2
    assert list(models.Run.objects.values_list("pk", flat=True)) == [rows["old_active"].pk]
    assert set(models.RunEvent.objects.values_list("run_id", flat=True)) == {rows["old_active"].pk}


def test_rows_go_in_batches_of_batch_size_each_its_own_transaction(rows):
    for number in range(5):
        execution = models.ToolExecution.objects.create(
            tool_name="t", tool_call_id=f"b{number}", status="succeeded"
        )
        models.ToolExecution.objects.filter(pk=execution.pk).update(created_at=days_ago(90))
    with retention_settings(AUDIT_DAYS=30, BATCH_SIZE=2):
        with CaptureQueriesContext(connection) as queries:
            assert retention.purge_expired(now=NOW).audit == 6
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 3  # 2 + 2 + 2 rows, one statement each


def test_dry_run_counts_and_deletes_nothing_and_the_command_says_so(rows):
    out = StringIO()
    with retention_settings(RUN_EVENT_DAYS=30, AUDIT_DAYS=30):
        call_command("purge_expired", "--dry-run", stdout=out)
    assert out.getvalue().splitlines() == [
        "Would delete 2 run events",
        "Kept: finished runs (RETENTION['FINISHED_RUN_DAYS'] is None)",
        "Would delete 1 audit rows",
    ]
    assert models.RunEvent.objects.count() == 6 and models.ToolExecution.objects.count() == 3

    out = StringIO()
    with retention_settings(RUN_EVENT_DAYS=30, AUDIT_DAYS=30):
        call_command("purge_expired", stdout=out)
    assert out.getvalue().splitlines()[0] == "Deleted 2 run events"
    assert models.RunEvent.objects.count() == 4 and models.ToolExecution.objects.count() == 2


def test_the_periodic_task_reads_the_same_settings(rows):
    with retention_settings(FINISHED_RUN_DAYS=30):
        assert tasks.purge_expired.delay().get() == {"run_events": 0, "runs": 1, "audit": 0}
    assert not models.Run.objects.filter(pk=rows["old_done"].pk).exists()


def test_the_example_project_schedules_the_purge():
    from project import settings as project_settings

    schedule = project_settings.CELERY_BEAT_SCHEDULE["purge-expired"]
    assert schedule["task"] == tasks.purge_expired.name


@pytest.mark.parametrize(
    ("key", "value"), [("AUDIT_DAYS", 0), ("RUN_EVENT_DAYS", "30"), ("BATCH_SIZE", None)]
)
def test_a_retention_that_is_not_a_number_of_days_is_a_check_error(key, value):
    from tool_calling.checks import check_settings

    with retention_settings(**{key: value}):
        [error] = [e for e in check_settings() if "RETENTION" in e.msg]
    assert error.id == "tool_calling.E003"
    assert f'["RETENTION"]["{key}"]' in error.msg


def test_runs_that_ended_at_the_same_moment_across_batches_all_lose_their_events(
    django_user_model,
):
    conversation = models.Conversation.objects.create()
    ended = days_ago(60)
    for _ in range(5):
        run = models.Run.objects.create(conversation=conversation, text="x", status="succeeded")
        models.Run.objects.filter(pk=run.pk).update(finished_at=ended)
        for sequence in (1, 2, 3):
            models.RunEvent.objects.create(run=run, sequence=sequence, kind="k")
    with retention_settings(RUN_EVENT_DAYS=30, BATCH_SIZE=2):
        assert retention.purge_expired(now=NOW).run_events == 15
    assert models.RunEvent.objects.count() == 0
