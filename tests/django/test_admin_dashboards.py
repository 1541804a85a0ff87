"""The admin's dashboards: a tool's usage and the overview (figures, query budgets, access).

The figures are checked against rows placed on known days (tests/django/_usage.py); the query
budgets are the statements each page runs, the same with one day of data as with fourteen.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.django._tools import chat_model, registered, tool_calling_settings
from tests.django._usage import (
    LIMIT_TEXT,
    Call,
    limit_refusal,
    moment,
    write_answers,
    write_calls,
    write_runs,
)
from tool_calling import models, tool
from tool_calling.admin import usage
from tool_calling.admin.charts import Category, Series, axis_step, bar_chart
from tool_calling.governance import governed_chat_client
from tool_calling.testing import ScriptedChatModel, text, tool_call, tool_calls

pytestmark = pytest.mark.django_db

OVERVIEW_URL = reverse("admin:tool_calling_overview")
XSS = "<script>alert(1)</script>"


@pytest.fixture(autouse=True)
def _empty_cache() -> Any:
    cache.clear()
    yield
    cache.clear()


def usage_url(tool_row: models.Tool) -> str:
    return reverse("admin:tool_calling_tool_usage", args=[tool_row.pk])


def staff(django_user_model: Any, name: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="tool_calling", codename=codename)
        )
    return user


# -- a tool's figures ------------------------------------------------------------------------------


def test_a_tools_usage_counts_each_days_calls_errors_durations_and_limit_refusals() -> None:
    """Per local day: calls in any state, errors (is_error or an error state), limit refusals."""
    models.Tool.objects.create(name="forecast")
    write_calls(
        "forecast",
        [
            Call(0, duration_ms=10),
            Call(0, duration_ms=30),
            Call(0, status=models.ExecutionStatus.FAILED, duration_ms=20),
            # A success whose result the tool marked an error counts as an error, as in the list.
            Call(0, is_error=True, duration_ms=40),
            Call(0, status=models.ExecutionStatus.RUNNING, duration_ms=None, is_error=False),
            limit_refusal(0),
            # Refused for another reason: an error, not a limit refusal.
            Call(0, status=models.ExecutionStatus.REFUSED, duration_ms=0, result="Unknown tool"),
            Call(3, status=models.ExecutionStatus.TIMED_OUT, duration_ms=None),
            Call(13, duration_ms=500),
            Call(14, duration_ms=900),  # the day before the window
        ],
    )
    write_calls("get_time", [Call(0), Call(3)])

    figures = usage.tool_usage("forecast")

    by_age = {(timezone.localdate() - row.day.date).days: row for row in figures.days}
    assert len(figures.days) == usage.DAYS == 14
    assert [row.day.date for row in figures.days] == sorted(row.day.date for row in figures.days)
    today, three, thirteen = by_age[0], by_age[3], by_age[13]
    assert (today.calls, today.errors, today.timed, today.limit_refusals) == (7, 4, 6, 1)
    assert today.error_rate == pytest.approx(400 / 7)
    # Durations of today: 0, 0, 10, 20, 30, 40 -> p50 is the 3rd (10), p95 the 6th (40).
    assert today.durations == {50: 10, 95: 40}
    assert (three.calls, three.errors, three.timed, three.durations) == (
        1,
        1,
        0,
        {50: None, 95: None},
    )
    assert (thirteen.calls, thirteen.durations) == (1, {50: 500, 95: 500})
    assert sum(row.calls for row in figures.days) == figures.calls == 9
    assert (figures.errors, figures.limit_refusals) == (5, 1)
    # Over the window: 0, 0, 10, 20, 30, 40, 500 -> p50 the 4th (20), p95 the 7th (500).
    assert figures.durations == {50: 20, 95: 500}
    assert figures.last_error is not None
    assert figures.last_error.status in {"failed", "refused"}


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        (list(range(1, 21)), {50: 10, 95: 19}),
        (list(range(1, 101)), {50: 50, 95: 95}),
        ([7], {50: 7, 95: 7}),
        ([5, 1], {50: 1, 95: 5}),
        ([3, 3, 3, 900], {50: 3, 95: 900}),
    ],
)
def test_percentiles_are_nearest_rank_values_of_the_durations(
    durations: list[int], expected: dict[int, int]
) -> None:
    """p = the duration at rank ceil(p/100 * n), as PostgreSQL's percentile_disc; no average."""
    write_calls("t", [Call(0, duration_ms=ms) for ms in durations] + [Call(0, duration_ms=None)])

    figures = usage.tool_usage("t")

    assert figures.days[-1].durations == expected == figures.durations


def test_a_call_refused_by_its_limit_in_a_governed_turn_counts_as_a_limit_refusal(
    django_user_model: Any,
) -> None:
    """The real refusal text (core.execution.limits) is what the count recognises."""
    alice = django_user_model.objects.create_user("alice")

    @tool
    def forecast(city: str) -> str:
        """Return the weather."""
        return "Sunny"

    model = ScriptedChatModel(
        [
            tool_calls(tool_call("forecast", city="Oslo"), tool_call("forecast", city="Bergen")),
            text("Done."),
        ]
    )
    settings = tool_calling_settings(LIMITS={"MAX_CALLS_PER_TOOL_DEFAULT": 1})
    with registered(forecast), chat_model(model), override_settings(TOOL_CALLING=settings):
        governed_chat_client(user=alice).prompt("Weather in Oslo and Bergen?").call()

    rows = models.ToolExecution.objects.filter(tool_name="forecast")
    assert sorted(rows.values_list("status", flat=True)) == ["refused", "succeeded"]
    figures = usage.tool_usage("forecast")
    assert (figures.calls, figures.errors, figures.limit_refusals) == (2, 1, 1)
    assert rows.get(status="refused").result.startswith(usage.LIMIT_REFUSAL_TEXTS)


def test_days_are_those_of_the_current_time_zone() -> None:
    """A call at 23:30 UTC belongs to the next day in Auckland (UTC+13 in December)."""
    [row] = write_calls("t", [Call(1)])
    late = timezone.localtime(row.created_at).replace(hour=23, minute=30)
    models.ToolExecution.objects.filter(pk=row.pk).update(created_at=late)

    in_utc = usage.tool_usage("t", days=usage.last_days(now=late + timedelta(minutes=10)))
    with timezone.override("Pacific/Auckland"):
        days = usage.last_days(now=late + timedelta(minutes=10))
        in_auckland = usage.tool_usage("t", days=days)

    assert [row.day.date for row in in_utc.days if row.calls] == [late.date()]
    assert [row.day.date for row in in_auckland.days if row.calls] == [
        late.date() + timedelta(days=1)
    ]
    assert in_auckland.days[-1].day.start.utcoffset() == timedelta(hours=13)


def test_the_last_error_is_the_newest_however_old() -> None:
    write_calls(
        "t",
        [
            Call(40, status=models.ExecutionStatus.FAILED, error_type="app.Old", result="old"),
            Call(30, status=models.ExecutionStatus.FAILED, error_type="app.Newer", result="new"),
            Call(1),
        ],
    )
    write_calls("other", [Call(0, status=models.ExecutionStatus.FAILED)])

    figures = usage.tool_usage("t")

    assert figures.calls == 1 and figures.errors == 0
    assert figures.last_error is not None
    assert (figures.last_error.error_type, figures.last_error.result) == ("app.Newer", "new")
    assert usage.tool_usage("never_failed").last_error is None


# -- the overview ---------------------------------------------------------------------------------


def test_the_overview_counts_todays_runs_the_waiting_calls_and_the_tokens_per_day(
    django_user_model: Any,
) -> None:
    alice = django_user_model.objects.create_user("alice")
    conversation = models.Conversation.objects.create(owner=alice)
    write_runs(conversation, {"succeeded": 3, "failed": 1, "awaiting_approval": 2}, days_ago=0)
    write_runs(conversation, {"succeeded": 4, "cancelled": 1}, days_ago=1)
    write_calls(
        "refund",
        [
            Call(2, status=models.ExecutionStatus.AWAITING_APPROVAL, extra={"user": alice}),
            Call(0, status=models.ExecutionStatus.AWAITING_APPROVAL),
            Call(5, status=models.ExecutionStatus.DENIED),
        ],
    )
    write_answers(
        conversation,
        {
            0: [{"prompt_tokens": 100, "completion_tokens": 7}, {"prompt_tokens": 50}],
            # No usage reported, and a count that is not a number: nothing is added.
            1: [{}, {"prompt_tokens": None, "completion_tokens": 3}],
            13: [{"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}],
            14: [{"prompt_tokens": 99999}],  # before the window
        },
    )
    # A user message never carries usage, but if it did it would not count.
    models.Message.objects.create(
        conversation=conversation, sequence=99, role="user", usage={"prompt_tokens": 5}
    )

    figures = usage.overview()

    assert {run.status: run.count for run in figures.runs} == {
        "queued": 0,
        "running": 0,
        "awaiting_approval": 2,
        "succeeded": 3,
        "failed": 1,
        "cancelled": 0,
    }
    assert [run.status for run in figures.runs] == list(models.RunStatus)
    assert figures.runs_today == 6
    assert figures.waiting == 2
    assert figures.oldest is not None
    assert (figures.oldest.tool_name, figures.oldest.requested_by) == ("refund", "alice")
    tokens = {(timezone.localdate() - day.day.date).days: day for day in figures.tokens}
    assert len(tokens) == 14
    assert (tokens[0].messages, tokens[0].prompt, tokens[0].completion) == (2, 150, 7)
    assert (tokens[1].messages, tokens[1].prompt, tokens[1].completion) == (2, 0, 3)
    assert (tokens[13].prompt, tokens[13].completion, tokens[13].total) == (1000, 100, 1100)
    assert sum(day.total for day in figures.tokens) == 150 + 7 + 3 + 1100


def test_finished_days_of_tokens_are_cached_and_today_is_read_live() -> None:
    conversation = models.Conversation.objects.create()
    write_answers(conversation, {0: [{"prompt_tokens": 1}], 3: [{"prompt_tokens": 10}]})

    def token_query() -> str:
        with CaptureQueriesContext(connection) as captured:
            figures = usage.overview()
        [sql] = [q["sql"] for q in captured.captured_queries if "tool_calling_message" in q["sql"]]
        return sql, {(timezone.localdate() - d.day.date).days: d.prompt for d in figures.tokens}

    first, before = token_query()
    write_answers(conversation, {0: [{"prompt_tokens": 2}], 3: [{"prompt_tokens": 20}]})
    second, after = token_query()

    assert (before[0], before[3]) == (1, 10)
    # Today is read again; day 3 comes from the cache (its rows do not change once it is over).
    assert (after[0], after[3]) == (3, 10)
    # The first read summed the 14 days, one part each; the second only today (and yesterday
    # in the first minutes after midnight, before it settles).
    yesterday = usage.last_days()[-2]
    live = 2 if timezone.now() < yesterday.end + usage.SETTLED_AFTER else 1
    assert first.count("SUM(") == 2 * 14
    assert second.count("SUM(") == 2 * live
    assert str(timezone.localdate()) in second
    assert str(timezone.localdate() - timedelta(days=3)) not in second


def test_a_day_just_over_is_read_live_until_it_settles() -> None:
    """Rows written in a day's last moment may commit after it: it is cached 10 minutes later."""
    conversation = models.Conversation.objects.create()
    write_answers(conversation, {1: [{"prompt_tokens": 1}]})
    midnight = usage.last_days()[-1].start
    days = usage.last_days(now=midnight + timedelta(minutes=2))
    yesterday = usage._token_key(days[-2])

    usage.token_usage(days, now=midnight + timedelta(minutes=2))
    assert cache.get(yesterday) is None
    usage.token_usage(days, now=midnight + usage.SETTLED_AFTER)
    assert cache.get(yesterday) == (1, 1, 0)


def test_an_unreachable_cache_only_means_reading_every_day(caplog: Any) -> None:
    """Injected failure: the cache raises on reads and writes; the figures are still right."""
    conversation = models.Conversation.objects.create()
    write_answers(conversation, {0: [{"prompt_tokens": 4}], 2: [{"completion_tokens": 6}]})
    with (
        mock.patch.object(cache, "get_many", side_effect=ConnectionError("cache down")),
        mock.patch.object(cache, "set_many", side_effect=ConnectionError("cache down")),
    ):
        figures = usage.overview()

    assert sum(day.prompt for day in figures.tokens) == 4
    assert sum(day.completion for day in figures.tokens) == 6
    messages = [record.getMessage() for record in caplog.records]
    assert "The admin's token figures could not be read from the cache" in messages
    assert "The admin's token figures could not be cached" in messages


# -- the pages ------------------------------------------------------------------------------------


def test_the_usage_page_shows_the_chart_the_table_and_the_last_error_escaped(
    admin_client: Any,
) -> None:
    tool_row = models.Tool.objects.create(name="forecast")
    write_calls(
        "forecast",
        [
            Call(0, duration_ms=120),
            Call(0, duration_ms=80),
            Call(2, status="failed", duration_ms=300, result=XSS, error_type=f"app.{XSS}"),
        ],
    )

    response = admin_client.get(usage_url(tool_row))

    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    today = timezone.localdate().isoformat()
    two_days = (timezone.localdate() - timedelta(days=2)).isoformat()
    assert f'data-key="{today}" data-values="2,0"' in html
    assert f'data-key="{two_days}" data-values="0,1"' in html
    assert html.count('class="tc-chart-bar"') == 2 * 14
    assert (
        'role="img"' in html
        and 'aria-labelledby="tc-calls-chart-title tc-calls-chart-desc"' in html
    )
    assert "3 calls in 14 days, 1 of them errors (33.3%)." in html
    # The table: newest first, each day linking to its audit rows by the date hierarchy.
    rows = re.findall(r'<tr data-day="([\d-]+)">(.*?)</tr>', html, re.S)
    assert [day for day, _ in rows][:3] == [
        (timezone.localdate() - timedelta(days=back)).isoformat() for back in range(3)
    ]
    first = rows[0][1]
    assert "tool_name=forecast&amp;created_at__year=" in first
    assert re.findall(r'<td class="tc-number[^"]*">([^<]*)</td>', first) == [
        "2",
        "0",
        "0%",
        "80 ms",
        "120 ms",
        "0",
    ]
    assert "No call of this tool has failed" not in html
    assert (
        reverse(
            "admin:tool_calling_toolexecution_change",
            args=[models.ToolExecution.objects.get(status="failed").pk],
        )
        in html
    )


def test_the_usage_page_runs_five_queries_of_its_own_whatever_the_days(
    admin_client: Any, django_assert_num_queries: Any
) -> None:
    """Budget: 2 (session, user) + the tool + counts + percentiles + limit refusals + last error."""
    tool_row = models.Tool.objects.create(name="t")
    write_calls("t", [Call(0, status="failed")])
    with django_assert_num_queries(7):
        assert admin_client.get(usage_url(tool_row)).status_code == 200
    write_calls("t", [Call(days, duration_ms=days) for days in range(14) for _ in range(3)])
    write_calls("t", [limit_refusal(days) for days in range(14)])
    with django_assert_num_queries(7):
        assert admin_client.get(usage_url(tool_row)).status_code == 200


def test_the_overview_runs_at_most_five_queries_of_its_own(
    admin_client: Any, django_assert_num_queries: Any
) -> None:
    """Budget: 2 (session, user) + runs + oldest waiting call + how many wait + today's
    decisions + tokens."""
    conversation = models.Conversation.objects.create()
    write_runs(conversation, {"succeeded": 2}, days_ago=0)
    write_calls("t", [Call(0, status="awaiting_approval")])
    write_answers(conversation, {days: [{"prompt_tokens": days}] for days in range(14)})
    with django_assert_num_queries(7):
        response = admin_client.get(OVERVIEW_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="tc-waiting">1</a>' in html
    assert 'data-key="succeeded" data-values="2"' in html
    # With every past day cached, still one token query (today's).
    with django_assert_num_queries(7):
        admin_client.get(OVERVIEW_URL)


@pytest.mark.parametrize(
    ("codenames", "overview", "tool_usage"),
    [
        ((), 403, 403),
        (("view_tool",), 403, 403),
        (("view_toolexecution",), 200, 403),
        (("view_tool", "view_toolexecution"), 200, 200),
        (("change_tool", "view_toolexecution"), 200, 200),
    ],
)
def test_the_dashboards_need_the_audit_and_the_tool(
    client: Any, django_user_model: Any, codenames: tuple[str, ...], overview: int, tool_usage: int
) -> None:
    tool_row = models.Tool.objects.create(name="t")
    client.force_login(staff(django_user_model, "op", *codenames))

    assert client.get(OVERVIEW_URL).status_code == overview
    assert client.get(usage_url(tool_row)).status_code == tool_usage


def test_anonymous_users_are_sent_to_the_login(client: Any) -> None:
    response = client.get(OVERVIEW_URL)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_an_unknown_tool_has_no_usage_page(admin_client: Any) -> None:
    response = admin_client.get(reverse("admin:tool_calling_tool_usage", args=[999999]))
    assert response.status_code == 404


def test_the_tool_pages_link_the_dashboards_for_who_may_read_them(
    client: Any, django_user_model: Any
) -> None:
    tool_row = models.Tool.objects.create(name="t")
    client.force_login(staff(django_user_model, "reader", "view_tool", "view_toolexecution"))
    listing = client.get(reverse("admin:tool_calling_tool_changelist")).content.decode()
    page = client.get(reverse("admin:tool_calling_tool_change", args=[tool_row.pk])).content
    assert f'href="{OVERVIEW_URL}"' in listing
    assert f'href="{usage_url(tool_row)}" aria-label="Usage of t"' in listing
    assert f'href="{usage_url(tool_row)}"' in page.decode()

    client.force_login(staff(django_user_model, "tools_only", "view_tool"))
    listing = client.get(reverse("admin:tool_calling_tool_changelist")).content.decode()
    assert f'href="{OVERVIEW_URL}"' not in listing
    assert usage_url(tool_row) not in listing


# -- charts ---------------------------------------------------------------------------------------


def test_a_chart_names_its_figures_and_escapes_its_labels() -> None:
    svg = str(
        bar_chart(
            chart_id="c",
            title=f"Calls of {XSS}",
            description="3 calls.",
            categories=[Category("1 Dec", "2026-12-01", f"Tue {XSS}"), Category("2 Dec", "x")],
            series=[Series("ok", [2, None]), Series("errors", [1, 0])],
        )
    )
    assert "<script>" not in svg
    assert '<title id="c-title">Calls of &lt;script&gt;' in svg
    assert '<g class="tc-chart-bar" data-key="2026-12-01" data-values="2,1">' in svg
    assert '<g class="tc-chart-bar" data-key="x" data-values=",0">' in svg
    assert "<title>Tue &lt;script&gt;alert(1)&lt;/script&gt;, errors: 1</title>" in svg
    assert svg.count("<rect") == 3  # nothing is drawn for a missing value


def test_a_chart_refuses_series_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match=r"Series 'ok' has 1 values for 2 categories; give one"):
        bar_chart(
            chart_id="c",
            title="t",
            description="d",
            categories=[Category("a", "a"), Category("b", "b")],
            series=[Series("ok", [1])],
        )


@pytest.mark.parametrize(
    ("highest", "step"), [(0, 1), (4, 1), (5, 2), (13, 5), (41, 20), (150, 50), (38000, 10000)]
)
def test_the_axis_runs_in_round_steps(highest: int, step: int) -> None:
    assert axis_step(highest) == step


def test_the_limit_texts_match_what_the_model_is_told() -> None:
    assert LIMIT_TEXT.startswith(usage.LIMIT_REFUSAL_TEXTS)
    assert usage.LIMIT_REFUSAL_TEXTS == ("Tool call limit (", "Total tool call limit (")
    assert json.dumps(usage.LIMIT_REFUSAL_TEXTS)  # plain strings
    assert moment(0).date() == timezone.localdate()


def test_the_overview_counts_todays_decisions_by_kind_and_their_median_wait(
    admin_client: Any,
) -> None:
    now = timezone.now()
    for approval, deciders, waited in (
        ("approved", "user", 30),  # confirmed by its user
        ("approved", "user+approver", 90),
        ("approved", "approver", 600),
        ("denied", "approver", 60),
        ("expired", "approver", 86400),
    ):
        row = models.ToolExecution.objects.create(
            tool_call_id=f"c-{approval}-{deciders}",
            tool_name="t",
            status="succeeded" if approval == "approved" else "denied",
            approval=approval,
            deciders=deciders,
            decided_at=now,
        )
        # created_at is set on creation: move it back by the wait.
        models.ToolExecution.objects.filter(pk=row.pk).update(
            created_at=now - timedelta(seconds=waited)
        )
    html = admin_client.get(OVERVIEW_URL).content.decode()
    assert (
        '<dd id="tc-decisions">1 confirmed by their user, 2 approved by an approver, '
        "1 denied or declined, 1 expired.</dd>"
    ) in html
    assert '<dd id="tc-median-wait">90 s</dd>' in html


def test_the_overview_writes_every_day_one_way(admin_client: Any) -> None:
    """Title, captions, summaries and table rows: "Fri 4 Dec 2026", never another spelling."""
    conversation = models.Conversation.objects.create()
    write_runs(conversation, {"succeeded": 1}, days_ago=0)
    write_answers(conversation, {days: [{"prompt_tokens": 10 + days}] for days in range(14)})
    html = admin_client.get(OVERVIEW_URL).content.decode()
    text = re.sub(r"<[^>]+>", " ", html)
    weekday = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\w*"
    month = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\w*\.?"
    # Any day written in prose or tables (not the charts' "4 Dec" tick labels, which follow
    # a bar's title in the full form).
    written = re.findall(
        rf"{weekday},? \d{{1,2}} {month}(?: \d{{4}})?|{month} \d{{1,2}}, \d{{4}}", text
    )
    today = timezone.localdate()
    assert f"{today:%a} {today.day} {today:%b %Y}" in written
    assert written and all(
        re.fullmatch(r"[A-Z][a-z]{2} \d{1,2} [A-Z][a-z]{2} \d{4}", d) for d in written
    )
