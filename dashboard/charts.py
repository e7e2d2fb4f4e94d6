"""Server-rendered SVG bar charts (no JavaScript, no chart library).

Each chart carries a ``<title>``/``<desc>`` and the page shows the same numbers in a table, so
the data is available to screen readers and keyboard users.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: int
    caption: str  # the value as shown (e.g. "$0.12" or "1,234 tokens")


def bar_chart_svg(
    bars: list[Bar], *, title: str, width: int = 720, height: int = 180
) -> SafeString:
    """Vertical bars (one per day) scaled to the largest value; zero-height bars are drawn as a
    1-pixel baseline mark so empty days stay visible."""
    pad_bottom, pad_top = 22, 8
    n = max(len(bars), 1)
    slot = width / n
    bar_w = max(slot * 0.7, 1.0)
    top = max((b.value for b in bars), default=0) or 1
    plot_h = height - pad_bottom - pad_top
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}" preserveAspectRatio="none">',
        f"<title>{escape(title)}</title>",
    ]
    label_every = max(1, n // 8)
    for i, bar in enumerate(bars):
        h = max(plot_h * bar.value / top, 1.0)
        x = i * slot + (slot - bar_w) / 2
        y = pad_top + plot_h - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}">'
            f"<title>{escape(bar.label)}: {escape(bar.caption)}</title></rect>"
        )
        if i % label_every == 0:
            parts.append(
                f'<text x="{i * slot + slot / 2:.1f}" y="{height - 6}" text-anchor="middle">'
                f"{escape(bar.label[5:])}</text>"
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))
