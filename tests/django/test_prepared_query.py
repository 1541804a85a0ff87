"""The worker's read of a call, compiled once, finds what the ORM's queryset finds."""

from __future__ import annotations

import logging
import threading

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import F
from django.utils import timezone

from tool_calling import models, resolvers
from tool_calling._prepared import PREPARED, PreparedQuery, update_rows
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


def test_threads_share_one_compiled_query_and_run_it_on_their_own_connections(calls):
    """Compiled once per process (a worker's hundreds of threads each compiled it before: 20 ms
    of CPU apiece); each thread runs it on its own connection, never another thread's."""
    prepared = PreparedQuery(
        models.ToolExecution, lambda pk: models.ToolExecution.objects.filter(pk=pk)
    )
    found: list[object] = []
    used: list[object] = []

    def read() -> None:
        def seen(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            used.append(context["connection"])
            return execute(sql, params, many, context)

        with connection.execute_wrapper(seen):
            found.append(prepared.first(calls[1].pk).tool_call_id)

    read()
    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == ["call_1"] * 4
    assert len(prepared._cache) == 1  # one compilation for the four threads
    assert len({id(c) for c in used}) == 4  # four connections ran it


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


# -- the app's prepared queries never fall back ------------------------------------------------


def _apps_queries() -> list[PreparedQuery]:
    return [query for query in PREPARED if query.module.startswith("tool_calling.")]


def _exercise_the_apps_queries(calls) -> None:
    """Run every prepared query of the app, for every shape it has (the kinds of user)."""
    alice = calls[0].user
    root = User.objects.create_superuser("root")
    for query in _apps_queries():
        query.forget()
    for call in calls:
        worker.claim(call.pk, task_id="t", worker="w")  # worker._CALL
    for user in (alice, root, None):
        resolvers.call_rules("t_open", user)  # resolvers._RULES, one shape per kind of user
        resolvers.GovernedTools(user)  # resolvers._SNAPSHOT, likewise


def test_the_apps_prepared_queries_never_fall_back_to_the_orm(calls, caplog):
    """A query the app prepares but that falls back to the ORM fails here (Django changed)."""
    with caplog.at_level(logging.WARNING, logger="tool_calling.db"):
        before = {query: (query.compiled, query.fallbacks) for query in _apps_queries()}
        _exercise_the_apps_queries(calls)
    queries = _apps_queries()
    # Every module that prepares a query is exercised above; a new one must be added there.
    assert {query.module for query in queries} == {
        "tool_calling.calls.worker",
        "tool_calling.resolvers",
    }
    assert [q.module for q in queries if q.fallbacks != before.get(q, (0, 0))[1]] == []
    assert all(query.compiled > before.get(query, (0, 0))[0] for query in queries)
    assert "cannot compile" not in caplog.text


def test_a_changed_django_internal_is_caught_not_silently_slower(calls, monkeypatch):
    """Django 6 gives ``get_related_populators`` another parameter: the guard above sees it."""
    from tool_calling import _prepared

    def changed(klass_info, select, db, fetch_mode):  # Django 6's signature
        raise AssertionError("not reached")

    monkeypatch.setattr(_prepared, "get_related_populators", changed)
    before = {query: query.fallbacks for query in _apps_queries()}
    _exercise_the_apps_queries(calls)
    fell_back = {q.module for q in _apps_queries() if q.fallbacks > before.get(q, 0)}
    assert fell_back == {"tool_calling.calls.worker", "tool_calling.resolvers"}
    # ... and the calls still found their rows (the ORM built them).
    assert models.ToolExecution.objects.filter(status="running").count() == len(calls)
