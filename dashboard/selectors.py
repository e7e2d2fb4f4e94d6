"""What the dashboard's pages read, composed from the other apps' selectors.

The dashboard owns no tables: calls are read through :mod:`inference.selectors`, money through
:mod:`billing.selectors`, models and prices through :mod:`catalog.selectors`, tenants through
:mod:`accounts`. This module only combines them into what a page shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING

from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiKey, Organization, Project
from billing import selectors as billing
from billing.selectors import Statement
from catalog import selectors as catalog
from catalog.selectors import ModelPrice
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
