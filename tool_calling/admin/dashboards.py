"""The admin's dashboards: a tool's usage over 14 days, and the overview of today.

Two pages of the admin site, mounted by ``ToolAdmin.get_urls``:

- ``admin:tool_calling_tool_usage`` (``tool/<id>/usage/``): calls per day, errors and the error
  rate, p50 and p95 duration, limit refusals and the last error of one tool;
- ``admin:tool_calling_overview`` (``tool/overview/``): today's runs per state, the calls
  waiting for approval and the oldest one, and the tokens the model used per day.

Both read the audit, so they need the permission to view tool executions (staff, as every admin
page); the usage page also needs the permission to view the tool. The figures come from
:mod:`tool_calling.admin.usage` (a fixed number of queries each) and every chart from
:mod:`tool_calling.admin.charts`, with a table of the same figures beside it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.formats import date_format, number_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from tool_calling.admin import usage
from tool_calling.admin.charts import Category, Series, bar_chart, legend
from tool_calling.calls import approvals

OVERVIEW_URL_NAME = "tool_calling_overview"
TOOL_USAGE_URL_NAME = "tool_calling_tool_usage"


def dashboard_urls(tool_admin: admin.ModelAdmin) -> list[URLPattern]:
    """The dashboards' URLs, under those of ``tool_admin`` (the admin of ``Tool``)."""
    wrap = tool_admin.admin_site.admin_view

    def overview_view(request: HttpRequest) -> HttpResponse:
        return overview_page(tool_admin, request)

    def tool_usage_view(request: HttpRequest, object_id: str) -> HttpResponse:
        return tool_usage_page(tool_admin, request, object_id)

    return [
        path("overview/", wrap(overview_view), name=OVERVIEW_URL_NAME),
        path("<path:object_id>/usage/", wrap(tool_usage_view), name=TOOL_USAGE_URL_NAME),
    ]


def can_read_audit(request: HttpRequest) -> bool:
    """Whether the user may see the audit of tool calls (the dashboards' source)."""
    user = request.user
    return bool(
        user.is_active
        and user.is_staff
        and (
            user.has_perm("tool_calling.view_toolexecution")
            or user.has_perm("tool_calling.change_toolexecution")
        )
    )


def _link(name: str, *args: Any, query: dict[str, Any] | None = None) -> str | None:
    try:
        url = reverse(name, args=args)
    except NoReverseMatch:
        return None
    return f"{url}?{urlencode(query)}" if query else url


def _percent(rate: float | None) -> str:
    if rate is None:
        return "–"
    return f"{number_format(round(rate, 1), 1).removesuffix('.0')}%"


def _ms(value: int | None) -> str:
    return "–" if value is None else f"{number_format(value, force_grouping=True)} ms"


DAY_FORMAT = "D j M Y"
"""The one way the dashboards write a day in text and tables ("Fri 4 Dec 2026"); the charts'
axes shorten it to "4 Dec" under each bar, with the full day as the bar's title."""


def _count(value: int) -> str:
    return str(number_format(value, force_grouping=True))


def _categories(days: list[usage.Day]) -> list[Category]:
    return [
        Category(
            label=date_format(day.date, "j M"),
            key=day.date.isoformat(),
            title=date_format(day.date, DAY_FORMAT),
        )
        for day in days
    ]


def _render(
    tool_admin: admin.ModelAdmin,
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
) -> TemplateResponse:
    site = tool_admin.admin_site
    request.current_app = site.name
    return TemplateResponse(
        request,
        template,
        {
            **site.each_context(request),
            "opts": tool_admin.opts,
            "app_label": tool_admin.opts.app_label,
            "overview_url": _link(f"{site.name}:{OVERVIEW_URL_NAME}"),
            **context,
        },
    )


# -- one tool's usage --------------------------------------------------------------------------


def tool_usage_page(
    tool_admin: admin.ModelAdmin, request: HttpRequest, object_id: str
) -> TemplateResponse:
    """A tool's calls over the last ``usage.DAYS`` days: charts, their table, the last error."""
    tool = tool_admin.get_object(request, unquote(object_id))
    if tool is None:
        raise Http404(
            _("No tool with ID “%(id)s” exists. Perhaps it was deleted?") % {"id": object_id}
        )
    if not (tool_admin.has_view_or_change_permission(request, tool) and can_read_audit(request)):
        raise PermissionDenied
    figures = usage.tool_usage(tool.name)
    site = tool_admin.admin_site.name
    days = figures.days
    categories = _categories([row.day for row in days])
    calls = [
        Series(_("calls without an error"), [row.calls - row.errors for row in days]),
        Series(_("errors"), [row.errors for row in days]),
    ]
    durations = [Series(f"p{p}", [row.durations[p] for row in days]) for p in usage.PERCENTILES]
    busiest = max(days, key=lambda row: row.calls)
    slowest = max(days, key=lambda row: row.durations[usage.PERCENTILES[-1]] or -1)
    calls_summary = ngettext(
        "%(calls)s call in %(days)d days, %(errors)s of them errors (%(rate)s).",
        "%(calls)s calls in %(days)d days, %(errors)s of them errors (%(rate)s).",
        figures.calls,
    ) % {
        "calls": _count(figures.calls),
        "days": len(days),
        "errors": _count(figures.errors),
        "rate": _percent(figures.error_rate),
    }
    if figures.calls:
        calls_summary += " " + _("The busiest day was %(day)s, with %(calls)s.") % {
            "day": date_format(busiest.day.date, DAY_FORMAT),
            "calls": _count(busiest.calls),
        }
    p_low, p_high = usage.PERCENTILES[0], usage.PERCENTILES[-1]
    if figures.durations[p_low] is None:
        durations_summary = _("No call had a duration in these days.")
    else:
        durations_summary = _(
            "Over the %(days)d days: p%(low)d %(low_ms)s, p%(high)d %(high_ms)s. "
            "The slowest day was %(day)s, with p%(high)d %(day_ms)s."
        ) % {
            "days": len(days),
            "low": p_low,
            "high": p_high,
            "low_ms": _ms(figures.durations[p_low]),
            "high_ms": _ms(figures.durations[p_high]),
            "day": date_format(slowest.day.date, DAY_FORMAT),
            "day_ms": _ms(slowest.durations[p_high]),
        }
    audit = f"{site}:tool_calling_toolexecution_changelist"
    rows = [
        {
            "date": row.day.date,
            "title": date_format(row.day.date, DAY_FORMAT),
            "audit_url": _link(
                audit,
                query={
                    "tool_name": tool.name,
                    "created_at__year": row.day.date.year,
                    "created_at__month": row.day.date.month,
                    "created_at__day": row.day.date.day,
                },
            )
            if row.calls
            else None,
            "calls": _count(row.calls),
            "errors": _count(row.errors),
            "error_rate": _percent(row.error_rate),
            "durations": [_ms(row.durations[p]) for p in usage.PERCENTILES],
            "limit_refusals": _count(row.limit_refusals),
        }
        for row in reversed(days)  # newest first, as the audit lists them
    ]
    last_error = figures.last_error
    context = {
        "title": _("Usage of tool “%(name)s”") % {"name": tool.name},
        "tool": tool,
        "original": tool,
        "figures": figures,
        "percentiles": usage.PERCENTILES,
        "summary": [
            (_("Calls"), _count(figures.calls)),
            (_("Errors"), f"{_count(figures.errors)} ({_percent(figures.error_rate)})"),
            *((f"p{p}", _ms(figures.durations[p])) for p in usage.PERCENTILES),
            (_("Limit refusals"), _count(figures.limit_refusals)),
        ],
        "calls_chart": bar_chart(
            chart_id="tc-calls-chart",
            title=_("Calls of %(name)s per day") % {"name": tool.name},
            description=calls_summary,
            categories=categories,
            series=calls,
            css_class="tc-chart-calls",
        ),
        "calls_legend": legend(calls),
        "calls_summary": calls_summary,
        "durations_chart": bar_chart(
            chart_id="tc-durations-chart",
            title=_("Duration of the calls of %(name)s per day") % {"name": tool.name},
            description=durations_summary,
            categories=categories,
            series=durations,
            stacked=False,
            unit="ms",
            css_class="tc-chart-durations",
        ),
        "durations_legend": legend(durations),
        "durations_summary": durations_summary,
        "rows": rows,
        "last_error": last_error,
        "last_error_url": (
            _link(f"{site}:tool_calling_toolexecution_change", last_error.id)
            if last_error is not None
            else None
        ),
        "tool_url": _link(f"{site}:tool_calling_tool_change", tool.pk),
        "audit_url": _link(audit, query={"tool_name": tool.name}),
        "limit_texts": usage.LIMIT_REFUSAL_TEXTS,
    }
    return _render(tool_admin, request, "tool_calling/admin/dashboards/tool_usage.html", context)


# -- the overview ----------------------------------------------------------------------------------


def _seconds(seconds: float) -> str:
    """A wait in words: seconds under two minutes, else minutes, else hours."""
    if seconds < 120:
        return _("%(n)d s") % {"n": round(seconds)}
    if seconds < 7200:
        return _("%(n)d min") % {"n": round(seconds / 60)}
    return _("%(n).1f h") % {"n": seconds / 3600}


def _decisions_summary(decisions: usage.Decisions) -> str:
    """Today's decisions by kind, in one sentence."""
    return _(
        "%(confirmed)s confirmed by their user, %(approved)s approved by an approver, "
        "%(denied)s denied or declined, %(expired)s expired."
    ) % {
        "confirmed": _count(decisions.confirmed),
        "approved": _count(decisions.approved),
        "denied": _count(decisions.denied),
        "expired": _count(decisions.expired),
    }


def overview_page(tool_admin: admin.ModelAdmin, request: HttpRequest) -> TemplateResponse:
    """Today's runs per state, the approval queue's length and oldest call, tokens per day."""
    if not can_read_audit(request):
        raise PermissionDenied
    figures = usage.overview()
    site = tool_admin.admin_site.name
    runs = [Series(_("runs"), [run.count for run in figures.runs])]
    run_categories = [Category(label=run.label, key=run.status) for run in figures.runs]
    runs_summary = ngettext(
        "%(count)s run started today.", "%(count)s runs started today.", figures.runs_today
    ) % {"count": _count(figures.runs_today)}
    if figures.runs_today:
        runs_summary += " " + ", ".join(
            f"{_count(run.count)} {run.label.lower()}" for run in figures.runs if run.count
        )
        runs_summary += "."
    tokens = figures.tokens
    token_series = [
        Series(_("prompt tokens"), [day.prompt for day in tokens]),
        Series(_("completion tokens"), [day.completion for day in tokens]),
    ]
    total = sum(day.total for day in tokens)
    busiest = max(tokens, key=lambda day: day.total)
    tokens_summary = _("%(total)s tokens in %(days)d days.") % {
        "total": _count(total),
        "days": len(tokens),
    }
    if total:
        tokens_summary += " " + _("The busiest day was %(day)s, with %(tokens)s.") % {
            "day": date_format(busiest.day.date, DAY_FORMAT),
            "tokens": _count(busiest.total),
        }
    may_decide = approvals.can_decide(request.user)
    oldest = figures.oldest
    context = {
        "title": _("Tool calling overview"),
        "subtitle": date_format(figures.today.date, DAY_FORMAT),
        "today_label": date_format(figures.today.date, DAY_FORMAT),
        "figures": figures,
        "runs_chart": bar_chart(
            chart_id="tc-runs-chart",
            title=_("Runs started today, by state"),
            description=runs_summary,
            categories=run_categories,
            series=runs,
            stacked=False,
            css_class="tc-chart-runs",
        ),
        "runs_summary": runs_summary,
        "runs": [(run.label, _count(run.count), run.status) for run in figures.runs],
        "runs_today": _count(figures.runs_today),
        "waiting": _count(figures.waiting),
        "queue_url": _link(f"{site}:tool_calling_pendingapproval_changelist")
        if may_decide
        else None,
        "oldest": oldest,
        "decisions": figures.decisions,
        "decisions_summary": _decisions_summary(figures.decisions),
        "median_wait": (
            _seconds(figures.decisions.median_wait)
            if figures.decisions.median_wait is not None
            else None
        ),
        "oldest_url": (
            _link(f"{site}:tool_calling_pendingapproval_change", oldest.id)
            if oldest is not None and may_decide
            else None
        ),
        "tokens_chart": bar_chart(
            chart_id="tc-tokens-chart",
            title=_("Tokens per day"),
            description=tokens_summary,
            categories=_categories([day.day for day in tokens]),
            series=token_series,
            css_class="tc-chart-tokens",
        ),
        "tokens_legend": legend(token_series),
        "tokens_summary": tokens_summary,
        "token_rows": [
            {
                "title": date_format(day.day.date, DAY_FORMAT),
                "date": day.day.date,
                "messages": _count(day.messages),
                "prompt": _count(day.prompt),
                "completion": _count(day.completion),
                "total": _count(day.total),
            }
            for day in reversed(tokens)
        ],
        "tools_url": _link(f"{site}:tool_calling_tool_changelist"),
    }
    return _render(tool_admin, request, "tool_calling/admin/dashboards/overview.html", context)
