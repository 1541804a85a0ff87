"""The admin at scale: capped counts, a date hierarchy without DISTINCT, indexed orderings.

``benchmarks/admin.py`` times the pages with a million audit rows; these tests prove the
properties that make that possible, on small data: the date hierarchy shows what Django's own
shows (compared level by level) without ``SELECT DISTINCT``, counts stop at the cap, the tool
filter reads the ``Tool`` table, each list runs the same statements whatever the data, and
SQLite's plans of the page queries walk an index in the list's order (no sort of the table).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tool_calling import models
from tool_calling._compat import DJANGO_5_0
from tool_calling.admin import ToolExecutionAdmin
from tool_calling.admin.scale import CappedCountPaginator

pytestmark = pytest.mark.django_db

EXECUTIONS_URL = reverse("admin:tool_calling_toolexecution_changelist")
CONVERSATIONS_URL = reverse("admin:tool_calling_conversation_changelist")


def at(*parts: int) -> datetime:
    return timezone.make_aware(datetime(*parts))


def executions_at(*moments: datetime, **fields: Any) -> list[models.ToolExecution]:
    fields.setdefault("tool_name", "t")
    rows = [models.ToolExecution.objects.create(**fields) for _ in moments]
    for row, moment in zip(rows, moments, strict=True):
        models.ToolExecution.objects.filter(pk=row.pk).update(created_at=moment)
    return rows


def get(client: Any, url: str, params: dict[str, Any] | None = None) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params or {})
    assert response.status_code == 200, response
    return response, [query["sql"] for query in captured.captured_queries]


# -- the date hierarchy ------------------------------------------------------------------------


SPREAD = (
    at(2024, 3, 5, 10),
    at(2024, 7, 10, 23, 59),
    at(2025, 1, 2, 0, 0),
    at(2025, 1, 20, 8),
    at(2025, 1, 20, 9),
    at(2025, 11, 30, 12),
)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"created_at__year": "2024"},
        {"created_at__year": "2025"},
        {"created_at__year": "2025", "created_at__month": "1"},
        {"created_at__year": "2025", "created_at__month": "1", "created_at__day": "20"},
        {"created_at__year": "2025", "status": "failed"},
        {"created_at__year": "2023"},
    ],
)
def test_the_date_hierarchy_shows_what_djangos_shows_without_distinct(
    admin_client: Any, params: dict[str, str]
) -> None:
    executions_at(*SPREAD)
    executions_at(at(2025, 1, 21, 7), at(2025, 3, 1, 7), status="failed")

    response, queries = get(admin_client, EXECUTIONS_URL, params)

    cl = response.context["cl"]
    ours = cl.bounded_date_hierarchy
    assert ours == date_hierarchy(cl)  # Django's own, computed with DISTINCT, for comparison
    assert not [sql for sql in queries if "DISTINCT" in sql]
    html = response.content.decode()
    for choice in ours["choices"]:
        assert str(choice["title"]) in html


@pytest.mark.parametrize(
    ("moments", "level"),
    [
        ((at(2025, 6, 1, 1), at(2025, 6, 30, 23)), "days of June 2025"),
        ((at(2025, 2, 1, 1), at(2025, 6, 30, 23)), "months of 2025"),
        ((), "nothing"),
    ],
)
def test_the_date_hierarchy_starts_where_djangos_does(
    admin_client: Any, moments: tuple[datetime, ...], level: str
) -> None:
    """One month of rows opens on its days, one year on its months; no rows, no choices."""
    executions_at(*moments)

    response, _queries = get(admin_client, EXECUTIONS_URL)

    cl = response.context["cl"]
    assert cl.bounded_date_hierarchy == date_hierarchy(cl), level


def test_the_date_hierarchy_of_conversations_is_bounded_too(admin_client: Any) -> None:
    for moment in (at(2024, 12, 31, 23), at(2025, 1, 1, 1)):
        conversation = models.Conversation.objects.create(title=str(moment))
        models.Conversation.objects.filter(pk=conversation.pk).update(updated_at=moment)

    response, queries = get(admin_client, CONVERSATIONS_URL)

    cl = response.context["cl"]
    assert cl.bounded_date_hierarchy == date_hierarchy(cl)
    assert [choice["title"] for choice in cl.bounded_date_hierarchy["choices"]] == ["2024", "2025"]
    assert not [sql for sql in queries if "DISTINCT" in sql]


# -- counts ------------------------------------------------------------------------------------


def test_a_list_counts_up_to_the_cap_and_then_says_more_than(
    admin_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CappedCountPaginator, "cap", 3)
    monkeypatch.setattr(ToolExecutionAdmin, "list_per_page", 2)
    executions_at(*[at(2025, 1, day) for day in range(1, 6)])

    response, queries = get(admin_client, EXECUTIONS_URL)

    cl = response.context["cl"]
    assert (cl.result_count, cl.paginator.capped, cl.paginator.num_pages) == (3, True, 2)
    html = response.content.decode()
    assert re.search(r"\nmore than 3 tool executions\n", html)
    assert "Select all matching tool executions (more than 3)" in html
    [count] = [sql for sql in queries if "COUNT(" in sql]
    assert "LIMIT 4" in count  # never more rows than the cap and one


def test_a_list_under_the_cap_gives_the_exact_count(admin_client: Any) -> None:
    executions_at(at(2025, 1, 1), at(2025, 1, 2))

    response, queries = get(admin_client, EXECUTIONS_URL)

    cl = response.context["cl"]
    assert (cl.result_count, cl.paginator.capped) == (2, False)
    assert re.search(r"\n2 tool executions\n", response.content.decode())
    assert len([sql for sql in queries if "COUNT(" in sql]) == 1  # no full count either


# -- the tool filter ---------------------------------------------------------------------------


def test_no_list_offers_counts_per_filter_choice(admin_client: Any) -> None:
    """Django's "Show counts" (facets) counts every choice over the whole table: not offered."""
    executions_at(at(2025, 1, 1))
    for url in (EXECUTIONS_URL, CONVERSATIONS_URL):
        # Django 4.2 has no facets, and refuses the parameter as an unknown filter.
        response, _queries = get(admin_client, url, {"_facets": "True"} if DJANGO_5_0 else {})
        assert "Show counts" not in response.content.decode()
        assert getattr(response.context["cl"], "add_facets", False) is False


def test_the_tool_filter_lists_the_tool_table_and_filters_any_name(admin_client: Any) -> None:
    models.Tool.objects.create(name="zz_idle")  # no calls: offered all the same
    executions_at(at(2025, 1, 1), tool_name="zz_hallucinated")  # not a tool: not offered
    executions_at(at(2025, 1, 2), tool_name="zz_idle")

    response, queries = get(admin_client, EXECUTIONS_URL)
    [spec] = [
        f
        for f in response.context["cl"].filter_specs
        if getattr(f, "parameter_name", None) == "tool_name"
    ]
    names = [choice["display"] for choice in spec.choices(response.context["cl"])]
    filtered, _ = get(admin_client, EXECUTIONS_URL, {"tool_name": "zz_hallucinated"})

    assert "zz_idle" in names and "zz_hallucinated" not in names
    assert names[1:] == sorted(models.Tool.objects.values_list("name", flat=True))
    assert not [sql for sql in queries if "DISTINCT" in sql]
    assert [row.tool_name for row in filtered.context["cl"].result_list] == ["zz_hallucinated"]


# -- statements and plans ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "params", "statements"),
    [
        # session, user, the Tool names of the filter, the capped count, the page, the date
        # hierarchy's first and last date, its EXISTS probes.
        (EXECUTIONS_URL, {}, 7),
        (EXECUTIONS_URL, {"created_at__year": "2025"}, 6),
        (EXECUTIONS_URL, {"tool_name": "t", "status": "succeeded"}, 7),
        # session, user, the capped count, the page (message counts included), the hierarchy.
        (CONVERSATIONS_URL, {}, 6),
    ],
)
def test_each_list_runs_the_same_statements_whatever_the_data(
    admin_client: Any, url: str, params: dict[str, str], statements: int
) -> None:
    executions_at(at(2025, 1, 1), at(2025, 2, 1), status="succeeded")
    models.Conversation.objects.create()
    _response, few = get(admin_client, url, params)
    for year in (2023, 2024, 2025):
        executions_at(*[at(year, month, 3) for month in range(1, 13)], status="succeeded")
    for number in range(30):
        conversation = models.Conversation.objects.create()
        for sequence in range(1, number % 4 + 1):
            models.Message.objects.create(conversation=conversation, sequence=sequence, role="user")
    _response, many = get(admin_client, url, params)

    assert len(few) == len(many) == statements, many


def test_conversations_show_their_message_counts(admin_client: Any) -> None:
    counts = {}
    for number in (0, 1, 3):
        conversation = models.Conversation.objects.create(title=f"c{number}")
        for sequence in range(1, number + 1):
            models.Message.objects.create(conversation=conversation, sequence=sequence, role="user")
        counts[conversation.pk] = number

    response, _queries = get(admin_client, CONVERSATIONS_URL)

    assert {c.pk: c.message_count for c in response.context["cl"].result_list} == counts


def sqlite_plan(sql: str) -> str:
    """SQLite's plan of ``sql`` (tests/settings.py: these tests always run on SQLite)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return " | ".join(str(row[-1]) for row in cursor.fetchall())


def page_query(queries: list[str], table: str) -> str:
    """The query of the listed rows: the one selecting whole rows of ``table`` in order."""
    [sql] = [s for s in queries if s.startswith(f'SELECT "{table}"."id"') and "ORDER BY" in s]
    return sql


@pytest.mark.parametrize(
    ("url", "params", "table", "index"),
    [
        (EXECUTIONS_URL, {}, "tool_calling_toolexecution", "tc_exec_created"),
        (EXECUTIONS_URL, {"tool_name": "t"}, "tool_calling_toolexecution", "tc_exec_tool_"),
        (EXECUTIONS_URL, {"status": "failed"}, "tool_calling_toolexecution", "tc_exec_status"),
        (CONVERSATIONS_URL, {}, "tool_calling_conversation", "tc_conv_updated"),
    ],
)
def test_the_page_queries_walk_an_index_in_the_lists_order(
    admin_client: Any, url: str, params: dict[str, str], table: str, index: str
) -> None:
    """No sort of the table for a page: the rows come off an index newest first."""
    executions_at(at(2025, 1, 1), at(2025, 1, 2), status="failed")
    models.Conversation.objects.create()

    _response, queries = get(admin_client, url, params)

    plan = sqlite_plan(page_query(queries, table))
    assert f"INDEX {index}" in plan, plan
    assert "TEMP B-TREE FOR ORDER BY" not in plan, plan


def test_the_audit_search_matches_identifiers_exactly_through_their_indexes(
    admin_client: Any,
) -> None:
    """A substring search would read every row (0.7-0.9 s at a million): identifiers, exactly."""
    executions_at(at(2025, 1, 1), at(2025, 1, 2), status="failed")
    row = models.ToolExecution.objects.first()
    models.ToolExecution.objects.filter(pk=row.pk).update(
        tool_call_id="call_abc", task_id="task-1", error_id="E7K2Q9"
    )
    for term in ("call_abc", "task-1", "E7K2Q9", " E7K2Q9 "):
        response, queries = get(admin_client, EXECUTIONS_URL, {"q": term})
        assert [r.pk for r in response.context["cl"].result_list] == [row.pk], term
    response, queries = get(admin_client, EXECUTIONS_URL, {"q": "call_ab"})
    assert list(response.context["cl"].result_list) == []

    plan = sqlite_plan(page_query(queries, "tool_calling_toolexecution"))
    indexes = ("tc_exec_call_id", "tc_exec_task_id", "tc_exec_error_id", "tc_exec_worker")
    for index in (*indexes, "tc_exec_tool_"):
        assert f"INDEX {index}" in plan, plan
    assert "SCAN tool_calling_toolexecution" not in plan, plan
