"""Change lists that stay fast on a table of millions of rows (the audit, conversations).

Django's change list does three things whose cost grows with the table, whatever the page:

- it counts the rows that match (``SELECT COUNT(*)``), on every page;
- its date hierarchy lists the years, months or days that have rows with ``SELECT DISTINCT``
  of the date of every row in range (at the top level: of every row);
- ``AllValuesFieldListFilter`` lists a field's values with ``SELECT DISTINCT`` of every row.

Here, as large Django admins do:

- :class:`CappedCountPaginator` counts at most ``COUNT_CAP`` rows (one bounded query) and the
  list says "more than 10,000" beyond that; pages beyond the cap are not offered (filters and
  the date hierarchy narrow the list instead);
- :class:`BoundedChangeList` draws the date hierarchy from index probes: the first and the
  last date (two ``ORDER BY ... LIMIT 1``), then one ``EXISTS`` per candidate year, month or
  day, all in one statement, so at most two queries of a few index seeks each;
- :class:`ToolNameFilter` offers the tools of the ``Tool`` table instead of the distinct names
  of the audit (any name still filters, as the tool list's links do);
- Django's facets ("Show counts", a count of every filter choice over the whole table) are off.

Ordering and filters need indexes too (migration ``0008``): the audit's ``(created_at, id)``
for its default order, ``(tool_name, ...)`` and ``(status, created_at)`` for its filters, the
conversations' ``(updated_at, id)``.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime
from functools import cached_property
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ImproperlyConfigured
from django.core.paginator import Paginator
from django.db import connections
from django.db import models as db_models
from django.db.models import QuerySet, Subquery
from django.http import HttpRequest
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from tool_calling import models
from tool_calling._compat import DJANGO_5_0

COUNT_CAP = 10_000
"""The most rows a change list counts; beyond it, the list says "more than" this."""


class CappedCountPaginator(Paginator):
    """A paginator that counts at most ``COUNT_CAP`` rows: ``capped`` says when there are more.

    The count is one query, ``SELECT COUNT(*) FROM (SELECT ... LIMIT COUNT_CAP + 1)``, which
    reads at most that many index entries however large the table.
    """

    cap = COUNT_CAP

    @cached_property
    def count(self) -> int:
        """The rows that match, but no more than ``cap``."""
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return super().count
        found = rows.order_by().values("pk")[: self.cap + 1].count()
        self.capped = found > self.cap
        return min(found, self.cap)

    capped = False
    """Whether more rows match than ``count`` says."""


class ToolNameFilter(admin.SimpleListFilter):
    """Filter the audit by tool: the choices are the tools of the ``Tool`` table.

    Its parameter is the field's own (``tool_name``), so links such as the tool list's
    ``?tool_name=...`` keep working, for any name, known to the table or not.
    """

    title = _("tool")
    parameter_name = "tool_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The names of the tools, in order (one query of the small ``Tool`` table)."""
        names = models.Tool.objects.order_by("name").values_list("name", flat=True)
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The rows of the chosen tool, by name."""
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(tool_name=value)


def _midnight(day: date) -> datetime:
    moment = datetime.combine(day, datetime.min.time())
    if settings.USE_TZ:
        return timezone.make_aware(moment)
    return moment


class BoundedChangeList(ChangeList):
    """A change list whose date hierarchy comes from index probes, never ``DISTINCT``."""

    @cached_property
    def bounded_date_hierarchy(self) -> dict[str, Any] | None:
        """What Django's ``date_hierarchy`` tag returns, read in at most two queries."""
        if not self.date_hierarchy:
            return None
        field_name = self.date_hierarchy
        field = get_fields_from_path(self.model, field_name)[-1]
        datetimes = isinstance(field, db_models.DateTimeField)
        year_field, month_field, day_field = (
            f"{field_name}__{part}" for part in ("year", "month", "day")
        )
        generic = f"{field_name}__"

        def link(filters: dict[str, Any]) -> str:
            return str(self.get_query_string(filters, [generic]))

        year, month, day = (self.params.get(name) for name in (year_field, month_field, day_field))
        first = last = None
        if not year:  # (a month or day without a year is an ordinary filter)
            month = day = None
            first, last = self._first_and_last(field_name, datetimes)
            if first is None or last is None:
                return {"show": True, "back": None, "choices": []}
            if first.year == last.year:
                year = str(first.year)
                if first.month == last.month:
                    month = str(first.month)
        if year and month and day:
            chosen = date(int(year), int(month), int(day))
            return {
                "show": True,
                "back": {
                    "link": link({year_field: year, month_field: month}),
                    "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT")),
                },
                "choices": [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}],
            }
        if year and month:
            y, m = int(year), int(month)
            days = [date(y, m, d) for d in range(1, calendar.monthrange(y, m)[1] + 1)]
            periods = [(d, d, date.fromordinal(d.toordinal() + 1)) for d in days]
            return {
                "show": True,
                "back": {"link": link({year_field: year}), "title": str(year)},
                "choices": [
                    {
                        "link": link({year_field: year, month_field: month, day_field: d.day}),
                        "title": capfirst(formats.date_format(d, "MONTH_DAY_FORMAT")),
                    }
                    for d in self._periods_with_rows(field_name, datetimes, periods)
                ],
            }
        if year:
            y = int(year)
            months = [
                (date(y, m, 1), date(y, m, 1), date(y + (m == 12), m % 12 + 1, 1))
                for m in range(1, 13)
            ]
            return {
                "show": True,
                "back": {"link": link({}), "title": _("All dates")},
                "choices": [
                    {
                        "link": link({year_field: year, month_field: d.month}),
                        "title": capfirst(formats.date_format(d, "YEAR_MONTH_FORMAT")),
                    }
                    for d in self._periods_with_rows(field_name, datetimes, months)
                ],
            }
        assert first is not None and last is not None
        years = [
            (date(y, 1, 1), date(y, 1, 1), date(y + 1, 1, 1))
            for y in range(first.year, last.year + 1)
        ]
        return {
            "show": True,
            "back": None,
            "choices": [
                {"link": link({year_field: str(d.year)}), "title": str(d.year)}
                for d in self._periods_with_rows(field_name, datetimes, years)
            ],
        }

    def _probe(self, **expressions: Any) -> dict[str, Any]:
        """``expressions`` evaluated in one query: a row of the table, any row, selects them.

        They are uncorrelated subqueries (each an index seek), so the outer row only carries
        them; with an empty table there is nothing to probe.
        """
        rows = list(
            self.model._default_manager.order_by().annotate(**expressions).values(*expressions)[:1]
        )
        return rows[0] if rows else {}

    def _first_and_last(self, field_name: str, datetimes: bool) -> tuple[Any, Any]:
        matching = self.queryset.order_by().values(field_name)
        found = self._probe(
            first=Subquery(matching.order_by(field_name)[:1]),
            last=Subquery(matching.order_by(f"-{field_name}")[:1]),
        )
        first, last = found.get("first"), found.get("last")
        if datetimes and settings.USE_TZ:
            first = timezone.localtime(first) if first is not None else None
            last = timezone.localtime(last) if last is not None else None
        return first, last

    def _periods_with_rows(
        self, field_name: str, datetimes: bool, periods: list[tuple[date, date, date]]
    ) -> list[date]:
        """The periods ``(label, start, end)`` in which a matching row exists, in one query.

        The query selects, per period, its first matching row's date (``ORDER BY`` the field
        ``LIMIT 1``: an index seek; PostgreSQL would plan an ``EXISTS`` as a scan of the table,
        which the audit, stored in time order, makes long). Compiling up to 31 ORM subqueries
        costs more than running them, so one probe is compiled with stand-in bounds, and its
        SQL repeated with each period's bounds in place of the stand-ins.
        """
        if not periods:
            return []
        field = get_fields_from_path(self.model, field_name)[-1]
        using = self.queryset.db
        connection = connections[using]

        def bound(day: date) -> Any:
            return _midnight(day) if datetimes else day

        def adapted(value: Any) -> Any:
            return field.get_db_prep_value(value, connection, prepared=False)

        low, high = bound(date(1, 1, 2)), bound(date(1, 1, 3))  # no row is that old
        # The period's bounds come first in the WHERE clause: SQLite bounds its index range by
        # the first range on the field (here also the list's own year or month, if chosen).
        period = self.model._default_manager.filter(
            **{f"{field_name}__gte": low, f"{field_name}__lt": high}
        )
        probe = (period & self.queryset.order_by()).order_by(field_name)
        sql, params = probe.values(field_name)[:1].query.sql_with_params()
        slots = {adapted(low): 0, adapted(high): 1}
        where = [slots.get(param) for param in params]
        if where.count(0) != 1 or where.count(1) != 1:  # pragma: no cover - cannot happen
            raise ImproperlyConfigured(f"The date hierarchy's probe of {field_name!r} failed.")
        parts, values = [], []
        for _label, start, end in periods:
            given = (adapted(bound(start)), adapted(bound(end)))
            parts.append(f"({sql}) IS NOT NULL")
            values += [
                given[slot] if slot is not None else p
                for slot, p in zip(where, params, strict=True)
            ]
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(parts), values)
            found = cursor.fetchone()
        return [label for (label, _start, _end), hit in zip(periods, found, strict=True) if hit]


class FastActionCheckboxMixin:
    """Django's action checkbox of each row, written directly instead of through a template.

    The same markup as ``ModelAdmin.action_checkbox`` (a ``CheckboxInput`` rendered with the
    form renderer), which renders one template per row: for a page of 100 rows that costs more
    than the rest of the row together.
    """

    def action_checkbox(self, obj: Any) -> SafeString:
        """The row's checkbox for the admin actions."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            str(obj.pk),
            format_html(gettext("Select this object for an action - {}"), str(obj)),
        )


class ScaledModelAdmin(FastActionCheckboxMixin, admin.ModelAdmin):
    """For the admin of a large table: capped counts, a bounded date hierarchy.

    Its change list template draws the date hierarchy from ``BoundedChangeList`` and says
    "more than N" when the count is capped.
    """

    show_full_result_count = False
    # Facets ("Show counts") count each filter choice over the whole table.
    if DJANGO_5_0:  # Django 4.2 has no facets
        show_facets = admin.ShowFacets.NEVER
    change_list_template = "tool_calling/admin/scaled_change_list.html"

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        """:class:`BoundedChangeList`."""
        return BoundedChangeList

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> Paginator:
        """:class:`CappedCountPaginator`."""
        return CappedCountPaginator(queryset, per_page, orphans, allow_empty_first_page)
