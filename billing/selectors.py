"""Reads of the billing app (the dashboard and admin use these; nothing here writes)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import BigIntegerField, Case, Count, F, Sum, Value, When
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from billing.services.holds import month_start


@dataclass(frozen=True, slots=True)
class WalletBalance:
    """An organization's money right now, in nano-USD (all 0 when it has no wallet yet)."""

    balance_nanos: int
    held_nanos: int
    available_nanos: int
    open_holds: int


def wallet_summary(*, organization_id: int) -> WalletBalance:
    """Balance, held, available (= balance - held) and the number of open holds."""
    row = (
        Wallet.objects.filter(organization_id=organization_id)
        .values_list("pk", "balance_nanos", "held_nanos")
        .first()
    )
    if row is None:
        return WalletBalance(0, 0, 0, 0)
    wallet_id, balance, held = row
    holds = Hold.objects.filter(wallet_id=wallet_id, status=HoldStatus.OPEN).count()
    return WalletBalance(balance, held, balance - held, holds)


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


@dataclass(frozen=True, slots=True)
class AutoRecharge:
    """A wallet's auto-recharge settings (all off/empty when it has no wallet yet)."""

    enabled: bool
    threshold_nanos: int
    amount_nanos: int
    payment_method_id: str


def auto_recharge_settings(*, organization_id: int) -> AutoRecharge:
    """The organization's auto-recharge settings and saved card id (one query)."""
    row = (
        Wallet.objects.filter(organization_id=organization_id)
        .values_list(
            "auto_recharge_enabled",
            "auto_recharge_threshold_nanos",
            "auto_recharge_amount_nanos",
            "auto_recharge_payment_method_id",
        )
        .first()
    )
    return AutoRecharge(*row) if row is not None else AutoRecharge(False, 0, 0, "")


@dataclass(frozen=True, slots=True)
class StatementLine:
    day: dt.date
    kind: str
    description: str
    amount_nanos: int


@dataclass(frozen=True, slots=True)
class Statement:
    """One UTC month of a wallet: opening and closing balance and the lines between."""

    organization_name: str
    month: dt.date
    opening_nanos: int
    closing_nanos: int
    lines: list[StatementLine]

    @property
    def credits_nanos(self) -> int:
        return sum(line.amount_nanos for line in self.lines if line.amount_nanos > 0)

    @property
    def debits_nanos(self) -> int:
        return sum(line.amount_nanos for line in self.lines if line.amount_nanos < 0)


def _month_bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    first = month.replace(day=1)
    nxt = (
        first.replace(year=first.year + 1, month=1)
        if first.month == 12
        else first.replace(month=first.month + 1)
    )
    return (
        dt.datetime.combine(first, dt.time.min, tzinfo=dt.UTC),
        dt.datetime.combine(nxt, dt.time.min, tzinfo=dt.UTC),
    )


def _balance_before(*, organization_id: int, moment: dt.datetime) -> int:
    last = (
        LedgerEntry.objects.filter(wallet__organization_id=organization_id, created_at__lt=moment)
        .order_by("-created_at", "-id")
        .values_list("balance_after_nanos", flat=True)
        .first()
    )
    return last or 0


def statement(*, organization_id: int, organization_name: str, month: dt.date) -> Statement:
    """The statement of one UTC month: opening and closing balance, every non-usage entry,
    and usage summed per day (one line per day instead of one per call)."""
    start, end = _month_bounds(month)
    entries = LedgerEntry.objects.filter(
        wallet__organization_id=organization_id, created_at__gte=start, created_at__lt=end
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
        .annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
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
    return Statement(
        organization_name=organization_name,
        month=start.date(),
        opening_nanos=_balance_before(organization_id=organization_id, moment=start),
        closing_nanos=_balance_before(organization_id=organization_id, moment=end),
        lines=lines,
    )


@dataclass(frozen=True, slots=True)
class LowBalanceAlert:
    """A wallet's low-balance e-mail setting: the threshold (nano-USD, 0 = off) and whether
    the next debit below it sends one (``armed``)."""

    threshold_nanos: int
    armed: bool


def low_balance_alert(*, organization_id: int) -> LowBalanceAlert:
    """The organization's low-balance alert (the default one when it has no wallet yet)."""
    row = (
        Wallet.objects.filter(organization_id=organization_id)
        .values_list("low_balance_threshold_nanos", "low_balance_armed")
        .first()
    )
    if row is None:
        field = Wallet._meta.get_field("low_balance_threshold_nanos")
        return LowBalanceAlert(int(field.default), True)
    return LowBalanceAlert(*row)


def key_month_spend(*, api_key_id: int, month: dt.date | None = None) -> int:
    """What a key has spent this UTC month (nano-USD) as its budget counts it: settled holds
    at what they charged, open ones at their amount, expired ones at what they charged."""
    first = month or month_start(timezone.now())
    spent = Hold.objects.filter(api_key_id=api_key_id, month=first).aggregate(
        s=Sum(
            Case(
                When(status=HoldStatus.OPEN, then=F("amount_nanos")),
                default=Coalesce(F("captured_nanos"), Value(0)),
                output_field=BigIntegerField(),
            )
        )
    )["s"]
    return int(spent or 0)
