"""Template filters for money and tokens."""

from __future__ import annotations

from django import template

from money.usd import nanos_to_usd_str

register = template.Library()


@register.filter
def usd(nanos: int | None) -> str:
    """Integer nano-USD as ``$1.23`` (cents shown always; sub-cent digits kept exactly)."""
    if nanos is None:
        return "—"
    text = nanos_to_usd_str(int(nanos))
    sign = "-" if text.startswith("-") else ""
    text = text.lstrip("-")
    whole, _, frac = text.partition(".")
    frac = (frac + "00")[: max(2, len(frac))]
    return f"{sign}${int(whole):,}.{frac}"


@register.filter
def pct_of(value: int, total: int) -> int:
    """``value`` as a whole percentage of ``total`` (0 when the total is 0), for bar widths."""
    return 0 if not total else round(100 * value / total)
