"""The worker's read of a call, compiled once, finds what the ORM's queryset finds."""

from __future__ import annotations

import logging
import threading

import pytest
from django.contrib.auth.models import Group, User
from django.db.models import F
from django.utils import timezone

from tool_calling import models
from tool_calling._prepared import PreparedQuery, update_rows
from tool_calling.calls import worker
from tool_calling.resolvers import call_rules_of_call

pytestmark = pytest.mark.django_db(transaction=True)


def orm_read(execution_id: int) -> models.ToolExecution | None:
    """The same read, built and compiled by the ORM on every call."""
    return (
        models.ToolExecution.objects.select_related("user")
        .annotate(rules=call_rules_of_call(), run_trace_context=F("run__trace_context"))
        .filter(pk=execution_id)
        .first()
    )


def as_seen(row: models.ToolExecution | None) -> object:
    if row is None:
        return None
    fields = {field.attname: getattr(row, field.attname) for field in row._meta.concrete_fields}
    user = row.user
    return (
        fields,
        row.rules,
        row.run_trace_context,
        None if user is None else (user.pk, user.username, user.is_superuser),
        row._state.adding,
        row._state.db,
    )


@pytest.fixture
def calls():
    alice = User.objects.create_user("alice")
    staff = Group.objects.create(name="staff")
    open_tool = models.Tool.objects.create(name="t_open", retries=2, idempotent=True)
    closed = models.Tool.objects.create(name="t_staff_only")
    closed.allowed_groups.add(staff)
    models.Tool.objects.create(name="t_disabled", enabled=False)
    conversation = models.Conversation.objects.create(owner=alice)
    run = models.Run.objects.create(
        conversation=conversation,
        user=alice,
        trace_context="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01",
    )
    made = []
    for number, (tool, user, with_run) in enumerate(
        [
            (open_tool, alice, True),
            (open_tool, None, False),
            (closed, alice, False),
            (None, alice, False),
        ]
    ):
        made.append(
            models.ToolExecution.objects.create(
                tool=tool,
                tool_name=tool.name if tool is not None else "t_disabled",
                tool_call_id=f"call_{number}",
                user=user,
                run=run if with_run else None,
                conversation=conversation,
                payload={"arguments": '{"a": 1}'},
            )
        )
    return made


def test_the_compiled_read_finds_what_the_orm_finds(calls):
    for call in calls:
        assert as_seen(worker._CALL.first(call.pk)) == as_seen(orm_read(call.pk))
    assert worker._CALL.first(10**9) is None
    seen = as_seen(worker._CALL.first(calls[0].pk))
    assert seen[1]["retries"] == 2 and seen[1]["idempotent"] in (True, 1)  # rules read
    assert seen[2].startswith("00-abab")  # the run's trace context
    assert worker._CALL.first(calls[2].pk).rules is None  # not alice's group: refused (S2)
    assert worker._CALL.first(calls[3].pk).rules is None  # disabled


def test_each_thread_compiles_its_own(calls):
    """A compiler holds its thread's connection; a second thread must not borrow it."""
    prepared = PreparedQuery(
        models.ToolExecution, lambda pk: models.ToolExecution.objects.filter(pk=pk)
    )
    found: list[object] = []

    def read() -> None:
        found.append(prepared.first(calls[1].pk).tool_call_id)

    read()
    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert found == ["call_1", "call_1"]


def test_a_query_must_use_its_value_as_a_parameter(calls, caplog):
    twice = PreparedQuery(
        models.ToolExecution,
        lambda pk: (
            models.ToolExecution.objects.filter(pk=pk)
            | models.ToolExecution.objects.filter(tool_id=pk)
        ),
    )
    assert [row.pk for row in twice.all(calls[0].tool_id)] == [calls[1].pk, calls[0].pk]
    # The value does not reach the SQL (0 computed in Python): the ORM builds it each time.
    never = PreparedQuery(
        models.ToolExecution, lambda pk: models.ToolExecution.objects.filter(attempt=pk - pk)
    )
    with caplog.at_level(logging.WARNING, logger="tool_calling.db"):
        found = never.all(1)
    assert sorted(row.pk for row in found) == sorted(call.pk for call in calls)
    assert "cannot compile ToolExecution once" in caplog.text


def test_a_value_no_marker_can_stand_for_is_left_to_the_orm(calls, caplog):
    """A UUID primary key turns the marker into a UUID (or fails): the ORM builds the query."""
    conversation = calls[0].conversation
    by_conversation = PreparedQuery(
        models.Conversation, lambda pk: models.Conversation.objects.filter(pk=pk)
    )
    with caplog.at_level(logging.WARNING, logger="tool_calling.db"):
        assert by_conversation.first(conversation.pk) == conversation
        assert by_conversation.first(conversation.pk) == conversation
    assert caplog.text.count("cannot compile Conversation once") == 1


def test_a_shaped_query_compiles_once_per_shape(calls):
    """Text values too (a text field's lookup turns the marker into text)."""
    by_name = PreparedQuery(
        models.ToolExecution,
        lambda shape, name: models.ToolExecution.objects.filter(tool_name=name).order_by(shape),
        shaped=True,
    )
    ids = sorted(call.pk for call in calls if call.tool_name == "t_open")
    assert [row.pk for row in by_name.all("t_open", shape="pk")] == ids
    assert [row.pk for row in by_name.all("t_open", shape="-pk")] == ids[::-1]
    assert by_name.all("nothing", shape="pk") == []


def test_update_rows_writes_what_the_orms_update_writes(calls):
    """Values prepared by their fields (JSON, datetimes, None); equality and IN guards."""
    now = timezone.now()
    values = {
        "status": "running",
        "attempt": 1,
        "lease_expires_at": now,
        "payload": {"outcome": {"kind": "ok", "text": "é \u2603 'quoted'"}},
        "error": "",
        "duration_ms": None,
    }
    first, second = calls[0], calls[1]
    guard = {"status": ("pending", "running"), "attempt": 0}
    assert update_rows(models.ToolExecution, {"pk": first.pk, **guard}, values) == 1
    models.ToolExecution.objects.filter(pk=second.pk, status__in=("pending", "running")).filter(
        attempt=0
    ).update(**values)
    ours, orms = (
        models.ToolExecution.objects.values(*values).get(pk=pk) for pk in (first.pk, second.pk)
    )
    assert ours == orms == {**values, "status": "running"}
    # The guard holds: the attempt moved on, so the same UPDATE changes nothing now.
    assert update_rows(models.ToolExecution, {"pk": first.pk, **guard}, values) == 0
    assert update_rows(models.ToolExecution, {"pk": first.pk, "status": ()}, values) == 0
    with pytest.raises(TypeError, match="plain values"):
        update_rows(models.ToolExecution, {"pk": first.pk}, {"attempt": F("attempt") + 1})
