"""Reads of the request log: usage aggregates and the calls themselves (the dashboard, exports
and anything else showing an organization its calls read them here, never the table).

Every function is scoped by ``organization_id`` and a half-open ``[start, end)`` range of
datetimes, so each query is served by the request log's ``(organization_id, …, -created_at)``
indexes; aggregation is done by the database (``GROUP BY``), never in Python over rows.
Usage of whole UTC days is summed over the daily rollups (:class:`inference.models.UsageDailyLive`,
equal to the log by construction), a few rows a day instead of every call; other ranges over
the log (:func:`rollup_days`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

from django.conf import settings
from django.db.models import Aggregate, Case, Count, F, FloatField, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from accounts.models import ApiKey, Project
from inference.models import RequestLog, RequestStatus, UsageDailyLive

Dimension = Literal["model", "vendor", "project", "key"]
_DIMENSION_FIELD: dict[Dimension, str] = {
    "model": "model",
    "vendor": "vendor",
    "project": "project_id",
    "key": "api_key_id",
}


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One bucket of usage: a day or one value of a dimension."""

    label: str
    requests: int
    input_tokens: int  # every prompt token, cache reads and writes included
    output_tokens: int  # reasoning tokens included
    cost_nanos: int
    value: Any = None  # the dimension's own value (model name, project or key id) of the row
    cached_input_tokens: int = 0  # of input_tokens: read from the vendor's prompt cache
    cache_write_tokens: int = 0  # of input_tokens: written to it
    reasoning_tokens: int = 0  # of output_tokens: hidden reasoning

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


# The request-log status filter's "any failure" value (every status but ok).
FAILED = "failed"
STATUS_FILTER_CHOICES = [(FAILED, "Any failure"), *RequestStatus.choices]


@dataclass(frozen=True, slots=True)
class LogFilters:
    """Request-log filters; empty strings / None mean "any"."""

    status: str = ""
    model: str = ""
    vendor: str = ""
    api_key_id: int | None = None


def day_bounds(start: date, end: date) -> tuple[datetime, datetime]:
    """``[start 00:00 UTC, end+1 00:00 UTC)`` — an inclusive date range as datetimes."""
    return (
        datetime.combine(start, time.min, tzinfo=UTC),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
    )


def has_calls(*, organization_id: int) -> bool:
    """Whether the organization ever made a call (any status)."""
    return RequestLog.objects.filter(organization_id=organization_id).exists()


def request_recorded(*, organization_id: int, request_id: str) -> bool:
    """Whether the call ``request_id`` of ``organization_id`` is in the request log yet."""
    return RequestLog.objects.filter(
        organization_id=organization_id, request_id=request_id
    ).exists()


def _logs(*, organization_id: int, start: datetime, end: datetime) -> QuerySet[RequestLog]:
    return RequestLog.objects.filter(
        organization_id=organization_id, created_at__gte=start, created_at__lt=end
    )


#: The figures every usage row sums, named as :class:`UsageRow`'s fields.
SUM_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_nanos",
)
_LOG_SUMS: dict[str, Any] = {
    "requests": Count("id"),
    **{f: Coalesce(Sum(f), 0) for f in SUM_FIELDS},
}
_ROLLUP_SUMS: dict[str, Any] = {
    "requests": Coalesce(Sum("requests"), 0),
    **{f: Coalesce(Sum(f), 0) for f in SUM_FIELDS},
}
_NAMES = tuple(_LOG_SUMS)


def rollup_days(start: datetime, end: datetime) -> tuple[date, date] | None:
    """The UTC days ``[first, after)`` whose daily rollups (:class:`UsageDailyLive`) sum exactly
    the calls of ``[start, end)``, or None when they cannot (``start`` not at a UTC midnight,
    ``end`` neither at one nor in the future, or ``INFRAI_USAGE_FROM_ROLLUPS`` off). An ``end``
    after now counts as the end of its day: no call is logged after its arrival."""
    if not settings.INFRAI_USAGE_FROM_ROLLUPS:
        return None
    lo, hi = start.astimezone(UTC), end.astimezone(UTC)
    if lo.timetz() != time.min.replace(tzinfo=UTC):
        return None
    if hi.timetz() == time.min.replace(tzinfo=UTC):
        after = hi.date()
    elif hi >= timezone.now():
        after = hi.date() + timedelta(days=1)
    else:
        return None
    return lo.date(), max(after, lo.date())


@dataclass(frozen=True, slots=True)
class _Usage:
    """Where usage of a range is summed: the rows, their UTC day, and the sums."""

    rows: QuerySet[Any]
    day: Any
    sums: dict[str, Any]


def _usage(*, organization_id: int, start: datetime, end: datetime) -> _Usage:
    """The daily rollups when they answer ``[start, end)`` exactly (:func:`rollup_days`), else
    the request log itself."""
    days = rollup_days(start, end)
    if days is None:
        return _Usage(
            _logs(organization_id=organization_id, start=start, end=end),
            TruncDate("created_at", tzinfo=UTC),
            _LOG_SUMS,
        )
    rows = UsageDailyLive.objects.filter(
        organization_id=organization_id, day__gte=days[0], day__lt=days[1]
    )
    return _Usage(rows, F("day"), _ROLLUP_SUMS)


def _row(label: str, r: dict[str, Any] | None, value: Any = None) -> UsageRow:
    sums = {k: r[k] for k in _NAMES} if r else dict.fromkeys(_NAMES, 0)
    return UsageRow(label=label, value=value, **sums)


def usage_totals(*, organization_id: int, start: datetime, end: datetime) -> UsageRow:
    """Requests, tokens and cost of the range in one aggregate query."""
    usage = _usage(organization_id=organization_id, start=start, end=end)
    return _row("total", usage.rows.aggregate(**usage.sums))


def usage_by_day(*, organization_id: int, start: date, end: date) -> list[UsageRow]:
    """One row per UTC day from ``start`` to ``end`` inclusive; days without calls are zeros."""
    lo, hi = day_bounds(start, end)
    usage = _usage(organization_id=organization_id, start=lo, end=hi)
    rows: Any = (  # django-stubs cannot type aggregate keys of values().annotate()
        usage.rows.annotate(bucket_day=usage.day)
        .values("bucket_day")
        .annotate(**usage.sums)
        .order_by("bucket_day")
    )
    by_day: dict[date, dict[str, Any]] = {r["bucket_day"]: r for r in rows}
    out: list[UsageRow] = []
    day = start
    while day <= end:
        out.append(_row(day.isoformat(), by_day.get(day)))
        day += timedelta(days=1)
    return out


def usage_by(
    *,
    organization_id: int,
    dimension: Dimension,
    start: datetime,
    end: datetime,
    limit: int = 12,
) -> list[UsageRow]:
    """The top ``limit`` values of ``dimension`` by cost (then requests), with their sums.

    Projects and keys are labelled with their names; ids of deleted rows as ``#id``.
    """
    field = _DIMENSION_FIELD[dimension]
    usage = _usage(organization_id=organization_id, start=start, end=end)
    rows = list(
        usage.rows.values(field)
        .annotate(**usage.sums)
        .filter(requests__gt=0)  # a rollup group emptied by a replaced abandoned row
        .order_by("-cost_nanos", "-requests")[:limit]
    )
    labels = _labels(
        organization_id=organization_id, dimension=dimension, ids=[r[field] for r in rows]
    )
    return [_row(labels.get(r[field], str(r[field] or "—")), r, r[field]) for r in rows]


@dataclass(frozen=True, slots=True)
class DaySeries:
    """Usage per UTC day (one list entry per day of the range) of one value of a dimension, or
    of all the values not named (``value`` None, ``label`` "Other")."""

    value: Any
    label: str
    requests: list[int]
    input_tokens: list[int]
    cached_input_tokens: list[int]
    cache_write_tokens: list[int]
    output_tokens: list[int]
    reasoning_tokens: list[int]
    cost_nanos: list[int]

    @property
    def tokens(self) -> list[int]:
        return [i + o for i, o in zip(self.input_tokens, self.output_tokens, strict=True)]


def usage_by_day_split(
    *,
    organization_id: int,
    dimension: Dimension,
    start: date,
    end: date,
    named: list[tuple[Any, str]],
) -> tuple[list[date], list[DaySeries]]:
    """Days ``start``…``end`` (inclusive) and, per day, the usage of each ``named`` value of
    ``dimension`` (``(value, label)``, in that order) plus an "Other" series for every other
    value when it has any call. One ``GROUP BY day, series`` query (the values not named fold
    into one series in SQL): at most days × (len(named) + 1) rows, whatever the data."""
    field = _DIMENSION_FIELD[dimension]
    lo, hi = day_bounds(start, end)
    named = [(v, label) for v, label in named if v is not None]  # calls without one: "Other"
    values = [v for v, _ in named]
    usage = _usage(organization_id=organization_id, start=lo, end=hi)
    rows: Any = (
        usage.rows.annotate(
            bucket_day=usage.day,
            series=Case(When(**{f"{field}__in": values}, then=F(field)), default=Value(None)),
        )
        .values("bucket_day", "series")
        .annotate(**usage.sums)
        .order_by()
    )
    days: list[date] = []
    day = start
    while day <= end:
        days.append(day)
        day += timedelta(days=1)
    index = {d: i for i, d in enumerate(days)}
    sums: dict[Any, dict[str, list[int]]] = {}
    for r in rows:
        series = r["series"] if r["series"] in values else None
        bucket = sums.setdefault(series, {k: [0] * len(days) for k in _NAMES})
        for k in bucket:
            bucket[k][index[r["bucket_day"]]] += r[k]
    out = [
        DaySeries(value, label, **sums.get(value, {k: [0] * len(days) for k in _NAMES}))
        for value, label in named
    ]
    if None in sums:
        out.append(DaySeries(None, "Other", **sums[None]))
    return days, out


def day_totals(days: list[date], series: list[DaySeries]) -> list[UsageRow]:
    """The per-day sums of :func:`usage_by_day_split`'s series — what :func:`usage_by_day`
    returns for the same range, without another query (the series cover every call)."""
    return [
        UsageRow(
            label=day.isoformat(),
            **{k: sum(getattr(s, k)[i] for s in series) for k in _NAMES},
        )
        for i, day in enumerate(days)
    ]


def _labels(
    *, organization_id: int, dimension: Dimension, ids: Iterable[object]
) -> dict[object, str]:
    wanted = [i for i in ids if isinstance(i, int)]
    if dimension == "project":
        projects = Project.objects.filter(organization_id=organization_id, pk__in=wanted)
        return {p.pk: p.name for p in projects}
    if dimension == "key":
        keys = ApiKey.objects.filter(organization_id=organization_id, pk__in=wanted)
        return {k.pk: f"{k.name or 'unnamed'} ({k.display})" for k in keys}
    return {}


def request_log(
    *,
    organization_id: int,
    start: datetime,
    end: datetime,
    filters: LogFilters,
    before_id: int | None = None,
    limit: int = 50,
) -> list[RequestLog]:
    """Newest calls first, ``limit`` at a time; pass the last row's id as ``before_id`` for
    the next page (keyset pagination on ``(created_at, id)``, the order of the page: no
    ``COUNT(*)`` or ``OFFSET`` over a year of rows, and no row skipped or repeated when ids
    and times disagree — a row is logged when its call ends, not when it starts)."""
    qs = _logs(organization_id=organization_id, start=start, end=end)
    if filters.status == FAILED:
        qs = qs.exclude(status=RequestStatus.OK)
    elif filters.status:
        qs = qs.filter(status=filters.status)
    if filters.model:
        qs = qs.filter(model=filters.model)
    if filters.vendor:
        qs = qs.filter(vendor=filters.vendor)
    if filters.api_key_id is not None:
        qs = qs.filter(api_key_id=filters.api_key_id)
    if before_id is not None:
        cursor = (
            RequestLog.objects.filter(organization_id=organization_id, id=before_id)
            .values_list("created_at", flat=True)
            .first()
        )
        if cursor is None:
            return []
        qs = qs.filter(Q(created_at__lt=cursor) | Q(created_at=cursor, id__lt=before_id))
    return list(qs.order_by("-created_at", "-id")[:limit])


def request_log_get(*, organization_id: int, request_id: str) -> RequestLog | None:
    """One call of ``organization_id`` by its public request id (None for another tenant's)."""
    return RequestLog.objects.filter(organization_id=organization_id, request_id=request_id).first()


def log_filter_choices(
    *, organization_id: int, start: datetime, end: datetime
) -> dict[str, list[str]]:
    """The distinct models and vendors seen in the range, for the filter drop-downs.

    From the daily rollups when the range is whole UTC days (:func:`rollup_days`): a few rows
    a day where the log would be scanned call by call (seconds for a month of a busy
    organization). They may then name a model whose calls of the range retention has since
    deleted (the rollups outlive the rows); filtering by it shows no call."""
    qs: QuerySet[Any]
    if (days := rollup_days(start, end)) is not None:
        qs = UsageDailyLive.objects.filter(
            organization_id=organization_id, day__gte=days[0], day__lt=days[1], requests__gt=0
        )
    else:
        qs = _logs(organization_id=organization_id, start=start, end=end)
    models = qs.exclude(model="").values_list("model", flat=True).distinct().order_by("model")
    vendors = qs.exclude(vendor="").values_list("vendor", flat=True).distinct().order_by("vendor")
    return {"models": list(models[:200]), "vendors": list(vendors[:200])}


# --- platform-wide call health (the dashboard's model status page) ---------------------------

#: Statuses a call can fail with on the platform's or a vendor's side. Client errors (a bad
#: request, no credit, a revoked key) and client disconnects say nothing about a model's health.
HEALTH_STATUSES = (
    RequestStatus.OK,
    RequestStatus.VENDOR_ERROR,
    RequestStatus.UNAVAILABLE,
    RequestStatus.ABANDONED,
)


class _Percentile(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expr)``."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, *, fraction: float, **extra: Any) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


@dataclass(frozen=True, slots=True)
class CallHealth:
    """Calls of one model or vendor over a window: ``calls`` that count for health (see
    :data:`HEALTH_STATUSES`), how many of them ``ok``, and the latency percentiles of the ok
    ones in milliseconds (``None`` without any)."""

    calls: int
    ok: int
    p50_ms: int | None
    p95_ms: int | None


def call_health(
    *, by: Literal["model", "vendor"], since: datetime, until: datetime, recent_since: datetime
) -> dict[str, tuple[CallHealth, CallHealth]]:
    """Every organization's calls of ``[since, until)`` grouped by resolved model or by vendor:
    ``{name: (health over the whole window, health since recent_since)}``.

    **Platform-wide**: callers must not show the counts to customers (the dashboard shows
    percentages only, above a minimum sample). One aggregate query (``GROUP BY``, percentiles
    by PostgreSQL), served by the request log's BRIN index on ``created_at``; calls without a
    resolved model or vendor (refused before routing) are left out, so are client errors."""
    field = _DIMENSION_FIELD[by]
    ok = Q(status=RequestStatus.OK)
    recent = Q(created_at__gte=recent_since)
    rows: Any = (
        RequestLog.objects.filter(
            created_at__gte=since, created_at__lt=until, status__in=HEALTH_STATUSES
        )
        .exclude(**{field: ""})
        .values(field)
        .annotate(
            calls=Count("id"),
            ok=Count("id", filter=ok),
            p50=_Percentile("latency_ms", fraction=0.5, filter=ok),
            p95=_Percentile("latency_ms", fraction=0.95, filter=ok),
            r_calls=Count("id", filter=recent),
            r_ok=Count("id", filter=ok & recent),
            r_p50=_Percentile("latency_ms", fraction=0.5, filter=ok & recent),
            r_p95=_Percentile("latency_ms", fraction=0.95, filter=ok & recent),
        )
        .order_by(field)
    )

    def ms(value: float | None) -> int | None:
        return None if value is None else round(value)

    return {
        r[field]: (
            CallHealth(r["calls"], r["ok"], ms(r["p50"]), ms(r["p95"])),
            CallHealth(r["r_calls"], r["r_ok"], ms(r["r_p50"]), ms(r["r_p95"])),
        )
        for r in rows
    }
