"""Bar charts drawn on the server as SVG: no script, no library, nothing from a CDN.

A chart is an ``<svg role="img">`` whose title and description say what it shows and its
largest value, so that a screen reader reads it as one picture; the exact figures are in the
table the dashboard puts beside every chart. Each bar is also a ``<title>`` (the figure under
the mouse) and carries its values as ``data-`` attributes (what the browser tests read).
Every text is escaped; colours come from the stylesheet (``tc-series-N`` classes), so the
admin's light and dark themes apply.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.formats import number_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH = 720
HEIGHT = 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 8, 12, 40
_TICKS = 4


@dataclass(frozen=True)
class Series:
    """One row of figures of a chart: one value per category."""

    name: str
    """What the values count, e.g. "errors" (in bar titles and the legend)."""
    values: Sequence[int | None]
    """``None``: no value for that category (nothing is drawn)."""


@dataclass(frozen=True)
class Category:
    """One place on the chart's horizontal axis."""

    label: str
    """Shown under the bars, e.g. "3 Dec"."""
    key: str
    """Identifies the category in ``data-key``, e.g. "2026-12-03"."""
    title: str = ""
    """The longer label of the bar titles (``label`` when empty), e.g. "Tue 3 Dec"."""


def axis_step(highest: float) -> float:
    """The step between the axis' gridlines: 1, 2 or 5 times a power of ten, at least 1.

    The axis then runs from 0 to the first multiple of the step at or above ``highest``, in
    at most ``_TICKS`` steps: round figures a reader takes in at a glance.
    """
    raw = highest / _TICKS
    if raw <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def _figure(value: float, unit: str) -> str:
    return f"{number_format(int(value), force_grouping=True)} {unit}".strip()


def bar_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    categories: Sequence[Category],
    series: Sequence[Series],
    stacked: bool = True,
    unit: str = "",
    css_class: str = "",
) -> SafeString:
    """An SVG bar chart of ``series`` over ``categories``: stacked, or side by side.

    Args:
        chart_id: The id of the ``<svg>``; its title and description get ids from it.
        title: What the chart shows (the picture's name for screen readers).
        description: Its gist in words, e.g. the total and the busiest day.
        categories: The bars' places, left to right.
        series: The figures; each ``values`` has one entry per category.
        stacked: Stack the series' bars (parts of a whole) or set them side by side.
        unit: Written after the figures of the axis and the bar titles, e.g. "ms".
        css_class: Added to the ``<svg>``'s class (the stylesheet's colours for this chart).
    """
    for row in series:
        if len(row.values) != len(categories):
            raise ValueError(
                f"Series {row.name!r} has {len(row.values)} values for {len(categories)} "
                "categories; give one value per category."
            )
    columns = [[row.values[index] or 0 for row in series] for index in range(len(categories))]
    highest = max((sum(c) if stacked else max(c, default=0) for c in columns), default=0)
    step = axis_step(highest)
    steps = max(1, math.ceil(highest / step))
    top = step * steps
    plot_width = WIDTH - _LEFT - _RIGHT
    plot_height = HEIGHT - _TOP - _BOTTOM
    band = plot_width / max(1, len(categories))

    def y(value: float) -> float:
        return _TOP + plot_height - value / top * plot_height

    parts: list[str] = []
    for tick in range(steps + 1):
        value = step * tick
        parts.append(
            format_html(
                '<line class="tc-chart-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="tc-chart-axis" x="{}" y="{}" text-anchor="end">{}</text>',
                _LEFT,
                WIDTH - _RIGHT,
                f"{y(value):.1f}",
                f"{y(value):.1f}",
                _LEFT - 6,
                f"{y(value) + 4:.1f}",
                _figure(value, unit),
            )
        )
    # Every label when they fit, else every other one (the table has them all).
    label_every = 1 if band >= 34 else 2
    for index, category in enumerate(categories):
        left = _LEFT + index * band
        values = [row.values[index] for row in series]
        bars = _bars(category, series, values, left, band, stacked, y, unit)
        label = ""
        if index % label_every == 0 or index == len(categories) - 1:
            label = format_html(
                '<text class="tc-chart-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                f"{left + band / 2:.1f}",
                HEIGHT - _BOTTOM + 16,
                category.label,
            )
        parts.append(
            format_html(
                '<g class="tc-chart-bar" data-key="{}" data-values="{}">{}{}</g>',
                category.key,
                ",".join("" if value is None else str(value) for value in values),
                bars,
                label,
            )
        )
    parts.append(
        format_html(
            '<line class="tc-chart-baseline" x1="{}" x2="{}" y1="{}" y2="{}"/>',
            _LEFT,
            WIDTH - _RIGHT,
            f"{y(0):.1f}",
            f"{y(0):.1f}",
        )
    )
    return format_html(
        '<svg id="{}" class="tc-chart {}" role="img" viewBox="0 0 {} {}" '
        'preserveAspectRatio="xMinYMin meet" aria-labelledby="{}-title {}-desc">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}</svg>',
        chart_id,
        css_class,
        WIDTH,
        HEIGHT,
        chart_id,
        chart_id,
        chart_id,
        title,
        chart_id,
        description,
        mark_safe("".join(parts)),  # noqa: S308 - each part is built with format_html
    )


def _bars(
    category: Category,
    series: Sequence[Series],
    values: Sequence[int | None],
    left: float,
    band: float,
    stacked: bool,
    y: Callable[[float], float],
    unit: str,
) -> SafeString:
    width = band * (0.7 if stacked else 0.8 / max(1, len(series)))
    start = left + band * (0.15 if stacked else 0.1)
    base = 0.0
    rects = []
    for number, (row, value) in enumerate(zip(series, values, strict=True)):
        if value is None:
            continue
        if stacked:
            x, low, high = start, base, base + value
            base = high
        else:
            x, low, high = start + number * width, 0.0, float(value)
        rects.append(
            (
                f"tc-series-{number + 1}",
                row.name,
                value,
                f"{x:.1f}",
                f"{y(high):.1f}",
                f"{max(width - 1, 1):.1f}",
                f"{y(low) - y(high):.1f}",
                f"{category.title or category.label}, {row.name}: {_figure(value, unit)}",
            )
        )
    return format_html_join(
        "",
        '<rect class="{}" data-series="{}" data-value="{}" x="{}" y="{}" width="{}" '
        'height="{}"><title>{}</title></rect>',
        rects,
    )


def legend(series: Sequence[Series]) -> SafeString:
    """The names of ``series`` beside their colours (for sighted readers; the SVG says it too)."""
    return format_html(
        '<ul class="tc-chart-legend" aria-hidden="true">{}</ul>',
        format_html_join(
            "",
            '<li><span class="tc-chart-swatch tc-series-{}"></span>{}</li>',
            ((number, row.name) for number, row in enumerate(series, start=1)),
        ),
    )
