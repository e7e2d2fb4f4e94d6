"""What the dashboard's pages read, composed from the other apps' selectors.

The dashboard owns no tables: calls are read through :mod:`inference.selectors`, money through
:mod:`billing.selectors`, models and prices through :mod:`catalog.selectors`, tenants through
:mod:`accounts`. This module only combines them into what a page shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiKey, Organization, Project
from billing import selectors as billing
from billing.selectors import Statement
from catalog import health as catalog_health
from catalog import selectors as catalog
from catalog.selectors import ModelPrice
from catalog.types import CircuitState
from inference import selectors as calls
from inference.selectors import UsageRow, day_bounds

if TYPE_CHECKING:  # rows billing's selectors hand out; never queried here
    from billing.models import Hold, LedgerEntry

__all__ = [
    "ROUTING_MODES",
    "ModelPrice",
    "OverviewSummary",
    "WalletSummary",
    "day_bounds",
    "ledger_page",
    "model_prices",
    "open_holds",
    "overview_summary",
    "statement",
    "wallet_summary",
]

log = logging.getLogger(__name__)

ROUTING_MODES = (
    ("auto", "auto — balanced routing across healthy vendors"),
    ("cheapest", "cheapest — the lowest expected cost"),
    ("smartest", "smartest — the highest quality tier"),
)


# --- calls ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OverviewSummary:
    today: UsageRow
    month: UsageRow
    project_count: int
    active_key_count: int
    has_calls: bool


def overview_summary(*, organization: Organization) -> OverviewSummary:
    """Today's and this month's usage plus what the "next step" hints need."""
    now = timezone.now()
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month_start = day_start.replace(day=1)
    org_id = organization.pk
    until = now + timedelta(seconds=1)
    month = calls.usage_totals(organization_id=org_id, start=month_start, end=until)
    today = calls.usage_totals(organization_id=org_id, start=day_start, end=until)
    return OverviewSummary(
        today=today,
        month=month,
        project_count=Project.objects.filter(organization=organization, archived_at=None).count(),
        active_key_count=ApiKey.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now),
            organization=organization,
            revoked_at=None,
        ).count(),
        has_calls=month.requests > 0 or calls.has_calls(organization_id=org_id),
    )


# --- money ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WalletSummary:
    """What the wallet page shows; money in nano-USD."""

    balance_nanos: int
    held_nanos: int
    available_nanos: int
    auto_recharge_enabled: bool
    auto_recharge_threshold_nanos: int
    auto_recharge_amount_nanos: int
    payment_method_id: str

    @property
    def has_payment_method(self) -> bool:
        return bool(self.payment_method_id)


def wallet_summary(*, organization: Organization) -> WalletSummary:
    """Balance, held and available plus the auto-recharge settings (two or three queries)."""
    money = billing.wallet_summary(organization_id=organization.pk)
    recharge = billing.auto_recharge_settings(organization_id=organization.pk)
    return WalletSummary(
        money.balance_nanos,
        money.held_nanos,
        money.available_nanos,
        recharge.enabled,
        recharge.threshold_nanos,
        recharge.amount_nanos,
        recharge.payment_method_id,
    )


def open_holds(*, organization: Organization, limit: int = 20) -> list[Hold]:
    """Open holds (calls in flight), newest first."""
    holds = billing.open_holds(organization_id=organization.pk, limit=limit)
    return sorted(holds, key=lambda h: h.created_at, reverse=True)


def ledger_page(
    *, organization: Organization, before_id: int | None = None, limit: int = 50
) -> list[LedgerEntry]:
    """Ledger entries newest first, keyset-paginated by id (``before_id`` = last id shown)."""
    return billing.ledger_page(organization_id=organization.pk, before_id=before_id, limit=limit)


def statement(*, organization: Organization, month: date) -> Statement:
    """The organization's statement of one UTC month."""
    return billing.statement(
        organization_id=organization.pk, organization_name=organization.name, month=month
    )


# --- models and prices ----------------------------------------------------------------------


def model_prices() -> list[ModelPrice]:
    """Routable models with the lowest input/output price **in force now** among their
    offerings (a future-dated price is not shown before its date); an empty list (the pages
    say the list appears once the catalog is loaded) when the catalog cannot be read."""
    try:
        return catalog.model_prices(at=timezone.now())
    except Exception:  # the pages work without the model list
        log.warning("catalog not readable for the dashboard model list", exc_info=True)
        return []


# --- model status (platform-wide) -----------------------------------------------------------

#: Fewest calls in a window for its success rate and latencies to be shown: below it a figure
#: would describe a handful of (possibly one organization's) calls, so the page says "too few
#: calls" instead. No call counts are ever shown (they are other organizations' traffic).
STATUS_MIN_CALLS = 20
#: How long the request-log aggregates are reused (one computation for every viewer).
STATUS_CACHE_S = 30
_STATUS_CACHE_KEY = "dashboard:model-status:v1"


@dataclass(frozen=True, slots=True)
class HealthFigures:
    """Success rate (percent of the calls that count for health) and latency percentiles of
    the ok calls (ms) over one window; all ``None`` below :data:`STATUS_MIN_CALLS` calls."""

    success_pct: float | None
    p50_ms: int | None
    p95_ms: int | None

    @property
    def enough(self) -> bool:
        return self.success_pct is not None


@dataclass(frozen=True, slots=True)
class VendorStatus:
    name: str
    state: str  # catalog.types.CircuitState value: closed / open / half_open
    hour: HealthFigures
    day: HealthFigures


@dataclass(frozen=True, slots=True)
class ModelStatus:
    model_id: str
    display_name: str
    state: str  # operational / degraded / outage
    vendors: tuple[tuple[str, str], ...]  # (vendor, circuit state) of its routable offerings
    hour: HealthFigures
    day: HealthFigures


@dataclass(frozen=True, slots=True)
class StatusPage:
    models: list[ModelStatus]
    vendors: list[VendorStatus]
    computed_at: datetime  # when the request-log figures were computed (≤ STATUS_CACHE_S ago)


def _figures(health: calls.CallHealth | None) -> HealthFigures:
    if health is None or health.calls < STATUS_MIN_CALLS:
        return HealthFigures(None, None, None)
    return HealthFigures(round(100 * health.ok / health.calls, 1), health.p50_ms, health.p95_ms)


def _call_health_cached(
    now: datetime,
) -> tuple[datetime, dict[str, dict[str, tuple[calls.CallHealth, calls.CallHealth]]]]:
    cached = cache.get(_STATUS_CACHE_KEY)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    since, recent = now - timedelta(days=1), now - timedelta(hours=1)
    until = now + timedelta(seconds=1)
    found = (
        now,
        {
            by: calls.call_health(by=by, since=since, until=until, recent_since=recent)
            for by in ("model", "vendor")
        },
    )
    cache.set(_STATUS_CACHE_KEY, found, STATUS_CACHE_S)
    return found


def _model_state(states: list[str]) -> str:
    closed = sum(1 for s in states if s == CircuitState.CLOSED)
    if closed == len(states):
        return "operational"
    return "degraded" if closed else "outage"


def model_status(*, now: datetime | None = None) -> StatusPage:
    """Every model customers can call, its vendors' circuit breakers (live, one Redis round
    trip) and, per model and per vendor, the success rate and p50/p95 latency of the last hour
    and day from every organization's calls (:func:`inference.selectors.call_health`; cached
    for :data:`STATUS_CACHE_S`). Only percentages and latencies, each from at least
    :data:`STATUS_MIN_CALLS` calls: nothing counts another organization's traffic.

    A model is *operational* when every vendor serving it has a closed circuit, *degraded*
    when some do, *outage* when none does (routing then refuses it until a cool-down ends)."""
    now = now or timezone.now()
    snapshot = catalog.catalog_snapshot_sync()
    computed_at, health = _call_health_cached(now)
    served: dict[str, list[str]] = {
        m.model_id: sorted({o.vendor for o in catalog.routable_offerings(snapshot, m.model_id)})
        for m in catalog.listed_models(snapshot)
    }
    vendor_names = sorted({v for vendors in served.values() for v in vendors})
    circuits = catalog_health.health_of(vendor_names)
    state = {v: circuits[v].state.value for v in vendor_names}

    def pair(table: dict[str, tuple[calls.CallHealth, calls.CallHealth]], name: str) -> Any:
        day, hour = table.get(name, (None, None))
        return _figures(hour), _figures(day)

    models = []
    for model in catalog.listed_models(snapshot):
        vendors = served[model.model_id]
        hour, day = pair(health["model"], model.model_id)
        models.append(
            ModelStatus(
                model_id=model.model_id,
                display_name=model.display_name or model.model_id,
                state=_model_state([state[v] for v in vendors]),
                vendors=tuple((v, state[v]) for v in vendors),
                hour=hour,
                day=day,
            )
        )
    vendor_rows = []
    for name in vendor_names:
        hour, day = pair(health["vendor"], name)
        vendor_rows.append(VendorStatus(name=name, state=state[name], hour=hour, day=day))
    return StatusPage(models=models, vendors=vendor_rows, computed_at=computed_at)
