"""Server-rendered stacked bar charts (no JavaScript, no chart library, no request of their own).

One chart is a ``<figure class="tchart">``: an SVG for the bars and grid lines, stretched to the
width of the page (``preserveAspectRatio="none"``; strokes keep their width), and HTML for
every piece of text — the y scale, the day labels, the axis titles and the legend — so text is
never stretched or clipped at any width. Each series is **one** ``<path>`` (all its bars as
sub-paths): a year of days by seven series stays a few kilobytes. Every bar's number is in the
path's ``data-values`` and in the page's tables, for screen readers, keyboard users and tests;
up to :data:`HOVER_MAX_DAYS` days each day also gets a hover box whose ``<title>`` lists it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

#: Series colours (Tableau 10, readable on light and dark backgrounds); "Other" is grey.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1")
OTHER_COLOUR = "#9ca3af"
#: Up to this many days each day gets a hover box with its numbers (beyond it, the table).
HOVER_MAX_DAYS = 92
_W_PER_DAY = 10  # SVG units per day; the SVG is stretched to the page width
_H = 100  # SVG units of the plot's height


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    values: Sequence[int]  # one per day, ≥ 0
    other: bool = False  # the "everything else" series, drawn grey


def nice_ticks(top: int, *, count: int = 4) -> list[int]:
    """Round y-axis ticks from 0 to at least ``top``: steps of 1, 2, 2.5 or 5 × 10ⁿ, about
    ``count`` of them (``[0, 1]`` when ``top`` is 0)."""
    if top <= 0:
        return [0, 1]
    rough = top / count
    magnitude = 10 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough)
    step = max(int(step), 1)
    n = math.ceil(top / step)
    return [i * step for i in range(n + 1)]


def _x_labelled(n: int) -> list[int]:
    """Which days carry a label: about eight evenly spaced, always the first and the last
    (today, on the default range), the regular one before the last dropped when too close."""
    every = max(1, math.ceil(n / 8))
    marks = list(range(0, n, every))
    if marks and n - 1 - marks[-1] < max(1, every // 2) and marks[-1] != 0:
        marks.pop()
    if n - 1 not in marks:
        marks.append(n - 1)
    return marks


def stacked_bar_chart(
    days: Sequence[date],
    series: Sequence[Series],
    *,
    title: str,
    y_title: str,
    tick_label: Callable[[int], str],
    caption: Callable[[int], str],
    today: date | None = None,
    testid: str = "",
) -> SafeString:
    """Bars per day stacked by series (drawn bottom-up in ``series`` order), with a y scale
    (:func:`nice_ticks`, labelled by ``tick_label``), day labels (``MM-DD``; ``today`` reads
    "Today") and a legend. ``caption`` formats one value for the hover boxes."""
    n = max(len(days), 1)
    totals = [sum(s.values[i] for s in series) for i in range(len(days))]
    ticks = nice_ticks(max(totals, default=0))
    top = ticks[-1]
    width = n * _W_PER_DAY
    bar = _W_PER_DAY * 0.7
    colours = _colours(series)

    svg = [
        f'<svg viewBox="0 0 {width} {_H}" preserveAspectRatio="none" role="img" '
        f'aria-label="{escape(title)}" focusable="false">'
    ]
    for tick in ticks[1:]:
        y = _H - _H * tick / top
        svg.append(
            f'<line class="grid" x1="0" x2="{width}" y1="{y:.2f}" y2="{y:.2f}" '
            'vector-effect="non-scaling-stroke"/>'
        )
    base = [0] * len(days)
    for s, colour in zip(series, colours, strict=True):
        parts = []
        for i, value in enumerate(s.values):
            if value <= 0:
                continue
            h = _H * value / top
            y = _H - _H * base[i] / top - h
            x = i * _W_PER_DAY + (_W_PER_DAY - bar) / 2
            parts.append(f"M{x:.1f} {y:.2f}h{bar:.1f}v{h:.2f}h-{bar:.1f}z")
            base[i] += value
        svg.append(
            f'<path fill="{colour}" d="{"".join(parts)}" data-series="{escape(s.label)}" '
            f'data-values="{",".join(str(v) for v in s.values)}"/>'
        )
    if len(days) <= HOVER_MAX_DAYS:
        for i, day in enumerate(days):
            lines = [f"{day.isoformat()}: {caption(totals[i])}"] + [
                f"{s.label}: {caption(s.values[i])}" for s in series if s.values[i]
            ]
            svg.append(
                f'<rect class="hit" x="{i * _W_PER_DAY}" y="0" width="{_W_PER_DAY}" '
                f'height="{_H}"><title>{escape(" · ".join(lines))}</title></rect>'
            )
    svg.append("</svg>")
    axis_y = "".join(
        f'<span style="bottom:{100 * t / top:.2f}%">{escape(tick_label(t))}</span>' for t in ticks
    )
    axis_x = []
    for i in _x_labelled(len(days)):
        day = days[i]
        text = "Today" if today is not None and day == today else day.strftime("%m-%d")
        edge = " first" if i == 0 else " last" if i == len(days) - 1 else ""
        axis_x.append(
            f'<span class="{edge.strip()}" style="left:{100 * (i + 0.5) / n:.2f}%">'
            f"{escape(text)}</span>"
        )
    legend = "".join(
        f'<li><span class="swatch" style="background:{c}" aria-hidden="true"></span>'
        f"{escape(s.label)}</li>"
        for s, c in zip(series, colours, strict=True)
    )
    test_attr = f' data-testid="{escape(testid)}"' if testid else ""
    html = (
        f'<figure class="tchart"{test_attr}>'
        f"<figcaption>{escape(title)}</figcaption>"
        f'<div class="tchart-body"><div class="tchart-ytitle" aria-hidden="true">'
        f"{escape(y_title)}</div>"
        f'<div class="tchart-y" aria-hidden="true">{axis_y}</div>'
        f'<div class="tchart-plot">{"".join(svg)}</div>'
        f'<div class="tchart-x" aria-hidden="true">{"".join(axis_x)}</div>'
        f'<div class="tchart-xtitle" aria-hidden="true">Day (UTC)</div></div>'
        f'<ul class="tchart-legend">{legend}</ul></figure>'
    )
    return mark_safe(html)  # every piece of text above is escaped


def _colours(series: Sequence[Series]) -> list[str]:
    out, i = [], 0
    for s in series:
        if s.other:
            out.append(OTHER_COLOUR)
        else:
            out.append(PALETTE[i % len(PALETTE)])
            i += 1
    return out


def compact_tokens(n: int) -> str:
    """``1,500`` → ``1.5k``, ``2,000,000`` → ``2M`` (axis labels)."""
    for size, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:.1f}".rstrip("0").rstrip(".") + suffix
    return str(n)
