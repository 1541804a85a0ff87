"""The admin's dashboards in a real browser: the usage of a tool and the overview.

Debian's chromium through Playwright reads the charts the server drew (SVG) and the tables
beside them, and compares them with what the database holds for calls, runs and messages
placed on known days; then it goes through the dashboards by keyboard alone. The pictures of
the docs (docs/tool-usage.png, docs/overview.png) are taken here (``scripts/screenshots.sh``).
On failure every page's screenshot, HTML and script errors are kept (the path is printed).
Needs ``bash scripts/setup_browser.sh``; fails, never skips, without it.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.browser._browser import OPERATOR, admin_page, artifacts_dir, screenshot
from tests.django._usage import Call, limit_refusal, write_answers, write_calls, write_runs
from tool_calling import models
from tool_calling.sync import sync_tools

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOOL = "get_weather"


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    """The superuser ``admin_page`` logs in as."""
    return django_user_model.objects.create_superuser(OPERATOR[0], "op@example.com", OPERATOR[1])


def weather_calls() -> list[Call]:
    """Two weeks of calls of the weather tool, a different number each day, some failing."""
    calls = []
    for days_ago in range(14):
        for number in range(3 + (days_ago * 7) % 11):
            failed = number < days_ago % 3
            calls.append(
                Call(
                    days_ago,
                    status=models.ExecutionStatus.FAILED if failed else "succeeded",
                    duration_ms=40 + 13 * number + 5 * days_ago,
                    result="Upstream said 503" if failed else "Sunny",
                    error_type="weather.UpstreamError" if failed else "",
                    hour=8 + number % 12,
                )
            )
    calls += [limit_refusal(1), limit_refusal(1), limit_refusal(5)]
    calls.append(Call(20))  # before the window
    return calls


def seed() -> dict[str, Any]:
    """The calls, runs, waiting approvals and model messages the pages show; their figures."""
    sync_tools()
    write_calls(TOOL, weather_calls())
    write_calls("add_numbers", [Call(0), Call(2)])
    conversation = models.Conversation.objects.create(title="Weather")
    write_runs(conversation, {"succeeded": 7, "failed": 1, "running": 2}, days_ago=0)
    write_runs(conversation, {"succeeded": 5}, days_ago=1)
    # Asked hours before now, not at hours of today: early in the day those would lie in the
    # future, and the overview (and its picture) would say the oldest waits for 0 minutes.
    waiting = write_calls(
        "refund_order",
        [Call(0, status=models.ExecutionStatus.AWAITING_APPROVAL, duration_ms=None)] * 3,
    )
    for row, minutes in zip(waiting, (330, 180, 60), strict=True):
        asked = timezone.now() - timedelta(minutes=minutes)
        models.ToolExecution.objects.filter(pk=row.pk).update(created_at=asked)
    write_answers(
        conversation,
        {
            days_ago: [
                {"prompt_tokens": 900 + 40 * n, "completion_tokens": 60 + 5 * n}
                for n in range(2 + days_ago % 4)
            ]
            for days_ago in range(14)
        },
    )
    since = timezone.localdate() - timedelta(days=13)
    rows = models.ToolExecution.objects.filter(tool_name=TOOL)
    in_window = [
        row
        for row in rows.only("created_at", "is_error")
        if timezone.localdate(row.created_at) >= since
    ]
    return {
        "tool": models.Tool.objects.get(name=TOOL),
        "calls": Counter(timezone.localdate(r.created_at).isoformat() for r in in_window),
        "errors": Counter(
            timezone.localdate(r.created_at).isoformat() for r in in_window if r.is_error
        ),
        "runs": {
            status: models.Run.objects.filter(
                status=status, created_at__date=timezone.localdate()
            ).count()
            for status in models.RunStatus
        },
        "oldest": models.ToolExecution.objects.filter(status="awaiting_approval")
        .order_by("created_at")
        .first(),
    }


def chart_bars(page: Any, chart: str) -> dict[str, dict[str, Any]]:
    """Each bar group of the chart ``chart``: its day, and each rect's value and height."""
    return page.evaluate(
        """(chart) => Object.fromEntries(
            [...document.querySelectorAll(`#${chart} g.tc-chart-bar`)].map((group) => [
              group.dataset.key,
              Object.fromEntries([...group.querySelectorAll("rect")].map((rect) => [
                rect.dataset.series,
                {
                  value: Number(rect.dataset.value),
                  height: rect.getBBox().height,
                  title: rect.querySelector("title").textContent,
                },
              ])),
            ]))""",
        chart,
    )


def table(page: Any, selector: str) -> list[list[str]]:
    """The cells of a table's body, row by row, as the page shows them."""
    return page.locator(f"{selector} tbody tr").evaluate_all(
        "(rows) => rows.map((row) => [...row.cells].map((cell) => cell.innerText.trim()))"
    )


@pytest.mark.screenshots
def test_the_usage_chart_shows_the_calls_the_database_holds(
    live_server: Any, operator: Any, request: pytest.FixtureRequest
) -> None:
    """The chart's bars and the table count the calls stored for each day, errors apart.

    The page of the weather tool is the documentation's picture (docs/tool-usage.png).
    """
    data = seed()
    artifacts = artifacts_dir(request.node.name)
    url = live_server.url + reverse("admin:tool_calling_tool_usage", args=[data["tool"].pk])
    with admin_page(live_server.url, artifacts) as page:
        page.goto(url)
        bars = chart_bars(page, "tc-calls-chart")
        durations = chart_bars(page, "tc-durations-chart")
        rows = table(page, "#tc-usage-table")
        summary = page.locator("#tc-summary").inner_text()
        described = page.locator("#tc-calls-chart desc").text_content()
        last_error = page.locator("#tc-last-error").inner_text()
        screenshot(page, "tool-usage", artifacts)

    days = [(timezone.localdate() - timedelta(days=back)).isoformat() for back in range(13, -1, -1)]
    assert list(bars) == days
    shown = {
        day: bar["calls without an error"]["value"] + bar["errors"]["value"]
        for day, bar in bars.items()
    }
    assert shown == {day: data["calls"][day] for day in days}
    assert {day: bar["errors"]["value"] for day, bar in bars.items()} == {
        day: data["errors"][day] for day in days
    }
    # The bars are drawn to scale: the same height per call on every day.
    parts = [part for bar in bars.values() for part in bar.values()]
    largest = max(parts, key=lambda part: part["value"])
    scale = largest["height"] / largest["value"]
    assert all(abs(part["height"] - part["value"] * scale) <= 0.15 for part in parts), parts
    today = days[-1]
    assert bars[today]["errors"]["title"].endswith(f", errors: {data['errors'][today]}")
    # The table says the same, newest day first, with each day's median duration.
    assert [(row[1], row[2]) for row in rows] == [
        (str(data["calls"][day]), str(data["errors"][day])) for day in reversed(days)
    ]
    assert [row[4] for row in rows] == [
        f"{durations[day]['p50']['value']} ms" for day in reversed(days)
    ]
    assert [row[-1] for row in rows][:6] == ["0", "2", "0", "0", "0", "1"]
    total = sum(data["calls"].values())
    assert f"Calls\n{total}" in summary
    assert described.startswith(f"{total} calls in 14 days, {sum(data['errors'].values())} of")
    assert "Refused" in last_error


def test_the_dashboards_work_by_keyboard(
    live_server: Any, operator: Any, request: pytest.FixtureRequest
) -> None:
    """From the tool list to a tool's usage, a day's audit rows, the overview and the queue."""
    data = seed()
    artifacts = artifacts_dir(request.node.name)
    seen: dict[str, Any] = {}
    with admin_page(live_server.url, artifacts) as page:
        page.goto(live_server.url + reverse("admin:tool_calling_tool_changelist"))
        tab_to(page, f"Usage of {TOOL}")
        seen["outline"] = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        page.keyboard.press("Enter")
        page.wait_for_url("**/usage/")
        seen["usage_title"] = page.locator("h1").inner_text()

        # The newest day of the table opens that day's audit rows of the tool.
        newest = page.locator("#tc-usage-table tbody tr th a").first
        tab_to(page, newest.inner_text())
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/toolexecution/\?"))
        seen["day_rows"] = page.locator("#result_list tbody tr").count()
        seen["paginator"] = page.locator("p.paginator").inner_text()
        seen["hierarchy"] = page.locator("nav.toplinks").inner_text()
        page.go_back()

        tab_to(page, "Overview")
        page.keyboard.press("Enter")
        page.wait_for_url("**/overview/")
        seen["waiting"] = page.locator("#tc-waiting").inner_text()
        seen["oldest"] = page.locator("#tc-oldest").inner_text()
        seen["runs"] = table(page, "#tc-runs-table")
        seen["tokens"] = table(page, "#tc-tokens-table")
        tab_to(page, seen["waiting"])
        page.keyboard.press("Enter")
        page.wait_for_url("**/pendingapproval/")
        seen["queue"] = page.locator("#result_list tbody tr").count()

    today = timezone.localdate().isoformat()
    assert seen["outline"] != "none"
    assert seen["usage_title"] == f"Usage of tool “{TOOL}”"
    assert seen["day_rows"] == data["calls"][today]
    assert seen["paginator"].strip().endswith(f"{data['calls'][today]} tool executions")
    assert seen["waiting"] == "3"
    # Asked 5 h 30 min before the seed (timesince joins numbers and units with no-break spaces;
    # a slow run may add minutes).
    oldest = seen["oldest"].replace("\xa0", " ")
    assert re.fullmatch(r"refund_order, for 5 hours, 3\d minutes", oldest), oldest
    assert seen["runs"] == [
        [str(status.label), str(data["runs"][status])] for status in models.RunStatus
    ]
    tokens_today = seen["tokens"][0]
    answers = models.Message.objects.filter(role="assistant", created_at__date=today)
    prompt = sum(m.usage["prompt_tokens"] for m in answers)
    completion = sum(m.usage["completion_tokens"] for m in answers)
    assert tokens_today[1:4] == [str(answers.count()), f"{prompt:,}", f"{completion:,}"]
    assert seen["queue"] == 3


def tab_to(page: Any, name: str, limit: int = 120) -> None:
    """Press Tab until the focused element is named ``name`` (its label, else its text)."""
    seen = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "(() => { const e = document.activeElement;"
            " return e.getAttribute('aria-label') || e.textContent.trim(); })()"
        )
        seen.append(focused)
        if focused == name:
            return
    pytest.fail(f"{name!r} is not reachable by keyboard; the focus went to {seen}")


@pytest.mark.screenshots
def test_the_overview_shows_todays_runs_the_queue_and_tokens(
    live_server: Any, operator: Any, request: pytest.FixtureRequest
) -> None:
    """The overview's chart and tables hold the runs, approvals and tokens stored.

    The documentation's picture of the overview (docs/overview.png) is taken here.
    """
    data = seed()
    artifacts = artifacts_dir(request.node.name)
    with admin_page(live_server.url, artifacts) as page:
        page.goto(live_server.url + reverse("admin:tool_calling_overview"))
        runs = chart_bars(page, "tc-runs-chart")
        tokens = chart_bars(page, "tc-tokens-chart")
        screenshot(page, "overview", artifacts)

    assert {status: bar["runs"]["value"] for status, bar in runs.items()} == {
        str(status): count for status, count in data["runs"].items()
    }
    by_day: dict[str, list[int]] = {}
    for message in models.Message.objects.filter(role="assistant"):
        day = by_day.setdefault(timezone.localdate(message.created_at).isoformat(), [0, 0])
        day[0] += message.usage["prompt_tokens"]
        day[1] += message.usage["completion_tokens"]
    assert {
        day: [bar["prompt tokens"]["value"], bar["completion tokens"]["value"]]
        for day, bar in tokens.items()
    } == by_day
