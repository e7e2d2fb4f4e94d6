"""Template filters for money and tokens."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from money.usd import nanos_to_usd_display

register = template.Library()


@register.filter
def usd(nanos: int | None) -> str:
    """Integer nano-USD as ``$1.23`` (cents shown always; sub-cent digits kept exactly)."""
    if nanos is None:
        return "—"
    return nanos_to_usd_display(int(nanos))


@register.filter
def pct_of(value: int, total: int) -> int:
    """``value`` as a whole percentage of ``total`` (0 when the total is 0), for bar widths."""
    return 0 if not total else round(100 * value / total)


@register.filter
def ago(moment: datetime | None) -> str:
    """How long ago ``moment`` was, as people say it: ``"just now"`` under a minute (never
    "0 minutes ago"), else Django's ``timesince`` (``"3 hours, 2 minutes ago"``); ``""`` for
    ``None``."""
    if moment is None:
        return ""
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"
