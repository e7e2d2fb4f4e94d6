"""Read-only views of the wallet for the dashboard, over ``billing.selectors``.

Billing owns these tables. What its selectors do not offer yet (the auto-recharge settings, the
monthly statement) is read here, read-only, and should move to ``billing.selectors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate

from accounts.models import Organization
from billing import selectors as billing_selectors
from billing.models import EntryKind, Hold, LedgerEntry, Wallet


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
    """Balance, held and available from ``billing.selectors`` plus the auto-recharge settings."""
    money = billing_selectors.wallet_summary(organization_id=organization.pk)
    recharge = (
        Wallet.objects.filter(organization=organization)
        .values_list(
            "auto_recharge_enabled",
            "auto_recharge_threshold_nanos",
            "auto_recharge_amount_nanos",
            "auto_recharge_payment_method_id",
        )
        .first()
    ) or (False, 0, 0, "")
    return WalletSummary(money.balance_nanos, money.held_nanos, money.available_nanos, *recharge)


def open_holds(*, organization: Organization, limit: int = 20) -> list[Hold]:
    """Open holds (calls in flight), newest first."""
    holds = billing_selectors.open_holds(organization_id=organization.pk, limit=limit)
    return sorted(holds, key=lambda h: h.created_at, reverse=True)


def ledger_page(
    *, organization: Organization, before_id: int | None = None, limit: int = 50
) -> list[LedgerEntry]:
    """Ledger entries newest first, keyset-paginated by id (``before_id`` = last id shown)."""
    return billing_selectors.ledger_page(
        organization_id=organization.pk, before_id=before_id, limit=limit
    )


@dataclass(frozen=True, slots=True)
class StatementLine:
    day: date
    kind: str
    description: str
    amount_nanos: int


@dataclass(frozen=True, slots=True)
class Statement:
    organization_name: str
    month: date
    opening_nanos: int
    closing_nanos: int
    lines: list[StatementLine]

    @property
    def credits_nanos(self) -> int:
        return sum(line.amount_nanos for line in self.lines if line.amount_nanos > 0)

    @property
    def debits_nanos(self) -> int:
        return sum(line.amount_nanos for line in self.lines if line.amount_nanos < 0)


def _month_bounds(month: date) -> tuple[datetime, datetime]:
    first = month.replace(day=1)
    nxt = (
        first.replace(year=first.year + 1, month=1)
        if first.month == 12
        else first.replace(month=first.month + 1)
    )
    return (
        datetime.combine(first, time.min, tzinfo=UTC),
        datetime.combine(nxt, time.min, tzinfo=UTC),
    )


def _balance_before(*, organization: Organization, moment: datetime) -> int:
    last = (
        LedgerEntry.objects.filter(wallet__organization=organization, created_at__lt=moment)
        .order_by("-created_at", "-id")
        .values_list("balance_after_nanos", flat=True)
        .first()
    )
    return last or 0


def statement(*, organization: Organization, month: date) -> Statement:
    """The statement of one UTC month: opening and closing balance, every non-usage entry,
    and usage summed per day (one line per day instead of one per call)."""
    start, end = _month_bounds(month)
    entries = LedgerEntry.objects.filter(
        wallet__organization=organization, created_at__gte=start, created_at__lt=end
    )
    lines = [
        StatementLine(
            day=e.created_at.date(),
            kind=EntryKind(e.kind).label if e.kind in EntryKind.values else e.kind,
            description=e.description,
            amount_nanos=e.amount_nanos,
        )
        for e in entries.exclude(kind=EntryKind.USAGE).order_by("created_at", "id")
    ]
    usage = (
        entries.filter(kind=EntryKind.USAGE)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day")
        .annotate(total=Sum("amount_nanos"), calls=Count("id"))
        .order_by("day")
    )
    lines += [
        StatementLine(
            day=u["day"],
            kind="Usage",
            description=f"{u['calls']} API calls",
            amount_nanos=u["total"],
        )
        for u in usage
    ]
    lines.sort(key=lambda line: line.day)
    opening = _balance_before(organization=organization, moment=start)
    return Statement(
        organization_name=organization.name,
        month=start.date(),
        opening_nanos=opening,
        closing_nanos=_balance_before(organization=organization, moment=end),
        lines=lines,
    )
