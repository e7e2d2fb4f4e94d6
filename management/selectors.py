"""Reads of the management app: admin keys, and usage and cost buckets over the request log
and its daily rollups.

Aggregation is done by the database (``GROUP BY`` bucket and the requested dimensions), scoped by
``organization_id`` and a half-open ``[start, end)`` range, like :mod:`dashboard.selectors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDay, TruncHour
from django.utils import timezone

from inference.models import RequestLog, UsageDailyLive
from management.models import AdminKey

if TYPE_CHECKING:
    from accounts.models import Organization


def admin_keys_for_organization(*, organization: Organization) -> QuerySet[AdminKey]:
    """The organization's admin keys, revoked ones included (the audit trail), newest first,
    with their creator and revoker loaded."""
    return (
        AdminKey.objects.filter(organization=organization)
        .select_related("created_by", "revoked_by")
        .order_by("-created_at")
    )


def admin_key_get(*, organization: Organization, admin_key_id: int) -> AdminKey | None:
    """The organization's admin key with that id; None for a missing id and for another
    organization's key alike."""
    return AdminKey.objects.filter(organization=organization, pk=admin_key_id).first()


BucketWidth = Literal["1d", "1h"]
GROUP_FIELDS = {"project_id": "project_id", "api_key_id": "api_key_id", "model": "model"}
WIDTH = {"1d": timedelta(days=1), "1h": timedelta(hours=1)}
#: The token figures of a bucket, as :class:`UsageGroup` names them (the log's and the
#: rollups' columns alike).
TOKEN_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """The sums of one bucket for one combination of the grouped dimensions."""

    bucket_start: datetime
    group: dict[str, Any]
    requests: int
    input_tokens: int  # every prompt token, cache reads and writes included
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int  # reasoning tokens included
    reasoning_tokens: int
    cost_nanos: int


def align(moment: datetime, width: BucketWidth) -> datetime:
    """The start of the UTC day or hour ``moment`` falls in."""
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if width == "1d" else moment


def usage_groups(
    *,
    organization_id: int,
    start: datetime,
    end: datetime,
    width: BucketWidth,
    group_by: list[str],
) -> list[UsageGroup]:
    """Requests, tokens and cost per bucket (and per value of each ``group_by`` field) of the
    organization's calls in ``[start, end)``; only non-empty combinations are returned, in
    bucket order.

    Day buckets come from the daily rollups (:class:`inference.models.UsageDailyLive`) for the
    whole UTC days of the range; a partial first or last day (``start_time`` not at midnight,
    an ``end_time`` in the past not at midnight) and hour buckets are summed over the request
    log itself (``INFRAI_USAGE_FROM_ROLLUPS`` off: everything is)."""
    fields = [GROUP_FIELDS[g] for g in group_by]
    if width == "1h" or not settings.INFRAI_USAGE_FROM_ROLLUPS:
        return _from_log(organization_id, start, end, width, fields, group_by)
    first = align(start, "1d")
    whole_lo = first if first == start else first + WIDTH["1d"]
    whole_hi = align(end, "1d")
    if whole_hi < end and end >= timezone.now():
        whole_hi += WIDTH["1d"]  # no call is logged after it arrived: today is whole
    if whole_lo >= whole_hi:
        return _from_log(organization_id, start, end, width, fields, group_by)
    out = []
    if start < whole_lo:
        out += _from_log(organization_id, start, whole_lo, width, fields, group_by)
    out += _from_rollups(organization_id, whole_lo, whole_hi, fields, group_by)
    if whole_hi < end:
        out += _from_log(organization_id, whole_hi, end, width, fields, group_by)
    return out


def _group(r: dict[str, Any], bucket: datetime, group_by: list[str]) -> UsageGroup:
    return UsageGroup(
        bucket_start=bucket,
        group={g: r[GROUP_FIELDS[g]] for g in group_by},
        requests=r["requests"],
        cost_nanos=r["cost_nanos"],
        **{f: r[f] for f in TOKEN_FIELDS},
    )


def _from_log(
    organization_id: int,
    start: datetime,
    end: datetime,
    width: BucketWidth,
    fields: list[str],
    group_by: list[str],
) -> list[UsageGroup]:
    trunc = TruncDay if width == "1d" else TruncHour
    rows: Any = (
        RequestLog.objects.filter(
            organization_id=organization_id, created_at__gte=start, created_at__lt=end
        )
        .annotate(bucket=trunc("created_at", tzinfo=UTC))
        .values("bucket", *fields)
        .annotate(
            requests=Count("id"),
            cost_nanos_sum=Coalesce(Sum("cost_nanos"), 0),
            **{f"{f}_sum": Coalesce(Sum(f), 0) for f in TOKEN_FIELDS},
        )
        .order_by("bucket", *fields)
    )
    return [_group(_unsuffixed(r), r["bucket"], group_by) for r in rows]


def _from_rollups(
    organization_id: int,
    start: datetime,
    end: datetime,
    fields: list[str],
    group_by: list[str],
) -> list[UsageGroup]:
    rows: Any = (
        UsageDailyLive.objects.filter(
            organization_id=organization_id, day__gte=start.date(), day__lt=end.date()
        )
        .values("day", *fields)
        .annotate(
            requests_sum=Coalesce(Sum("requests"), 0),
            cost_nanos_sum=Coalesce(Sum("cost_nanos"), 0),
            **{f"{f}_sum": Coalesce(Sum(f), 0) for f in TOKEN_FIELDS},
        )
        .filter(requests_sum__gt=0)
        .order_by("day", *fields)
    )
    return [
        _group(_unsuffixed(r), datetime.combine(r["day"], time.min, tzinfo=UTC), group_by)
        for r in rows
    ]


def _unsuffixed(r: dict[str, Any]) -> dict[str, Any]:
    """``r`` with each ``…_sum`` annotation under its field's own name (an annotation cannot
    take the name of a model field)."""
    return {**r, **{k.removesuffix("_sum"): v for k, v in r.items() if k.endswith("_sum")}}
