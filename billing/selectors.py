"""Reads of the billing app (the dashboard and admin use these; nothing here writes)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Sum
from django.utils import timezone

from billing.models import Hold, HoldStatus, LedgerEntry, ProjectSpend, Wallet
from billing.services.holds import month_start


@dataclass(frozen=True, slots=True)
class WalletSummary:
    """An organization's money right now, in nano-USD (all 0 when it has no wallet yet)."""

    balance_nanos: int
    held_nanos: int
    available_nanos: int
    open_holds: int


@dataclass(frozen=True, slots=True)
class ProjectUsage:
    """One project's spend in one UTC month (the numbers its budget is enforced against)."""

    project_id: int
    used_nanos: int
    held_nanos: int


def wallet_summary(*, organization_id: int) -> WalletSummary:
    """Balance, held, available (= balance - held) and the number of open holds."""
    row = (
        Wallet.objects.filter(organization_id=organization_id)
        .values_list("pk", "balance_nanos", "held_nanos")
        .first()
    )
    if row is None:
        return WalletSummary(0, 0, 0, 0)
    wallet_id, balance, held = row
    holds = Hold.objects.filter(wallet_id=wallet_id, status=HoldStatus.OPEN).count()
    return WalletSummary(balance, held, balance - held, holds)


def open_holds(*, organization_id: int, limit: int = 100) -> list[Hold]:
    """The organization's open holds, oldest first."""
    return list(
        Hold.objects.filter(
            wallet__organization_id=organization_id, status=HoldStatus.OPEN
        ).order_by("created_at")[:limit]
    )


def ledger_page(
    *, organization_id: int, before_id: int | None = None, limit: int = 50
) -> list[LedgerEntry]:
    """Ledger entries newest first; pass the last id seen as ``before_id`` for the next page."""
    qs = LedgerEntry.objects.filter(wallet__organization_id=organization_id)
    if before_id is not None:
        qs = qs.filter(pk__lt=before_id)
    return list(qs.select_related("project", "api_key").order_by("-pk")[:limit])


def project_usage(*, organization_id: int, month: dt.date | None = None) -> dict[int, ProjectUsage]:
    """Month-to-date usage (settled) and open holds per project of the organization."""
    first = month or month_start(timezone.now())
    rows = ProjectSpend.objects.filter(
        project__organization_id=organization_id, month=first
    ).values_list("project_id", "used_nanos", "held_nanos")
    return {pid: ProjectUsage(pid, used, held) for pid, used, held in rows}


def ledger_sum(*, wallet_id: int) -> int:
    """The sum of a wallet's ledger (what its balance must equal)."""
    return int(
        LedgerEntry.objects.filter(wallet_id=wallet_id).aggregate(s=Sum("amount_nanos"))["s"] or 0
    )
