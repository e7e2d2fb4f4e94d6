"""Reads of the management app: admin keys, and usage and cost buckets over the request log.

Aggregation is done by the database (``GROUP BY`` bucket and the requested dimensions), scoped by
``organization_id`` and a half-open ``[start, end)`` range, like :mod:`dashboard.selectors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDay, TruncHour

from inference.models import RequestLog
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


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """The sums of one bucket for one combination of the grouped dimensions."""

    bucket_start: datetime
    group: dict[str, Any]
    requests: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
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
    organization's calls in ``[start, end)``; only non-empty combinations are returned."""
    trunc = TruncDay if width == "1d" else TruncHour
    fields = [GROUP_FIELDS[g] for g in group_by]
    rows: Any = (
        RequestLog.objects.filter(
            organization_id=organization_id, created_at__gte=start, created_at__lt=end
        )
        .annotate(bucket=trunc("created_at", tzinfo=UTC))
        .values("bucket", *fields)
        .annotate(
            requests=Count("id"),
            input_tokens_sum=Coalesce(Sum("input_tokens"), 0),
            cached_sum=Coalesce(Sum("cached_input_tokens"), 0),
            output_tokens_sum=Coalesce(Sum("output_tokens"), 0),
            cost_sum=Coalesce(Sum("cost_nanos"), 0),
        )
        .order_by("bucket", *fields)
    )
    return [
        UsageGroup(
            bucket_start=r["bucket"],
            group={g: r[GROUP_FIELDS[g]] for g in group_by},
            requests=r["requests"],
            input_tokens=r["input_tokens_sum"],
            cached_input_tokens=r["cached_sum"],
            output_tokens=r["output_tokens_sum"],
            cost_nanos=r["cost_sum"],
        )
        for r in rows
    ]
