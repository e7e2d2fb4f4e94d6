"""Money invariants, checked by ``manage.py billing_audit`` and the tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Sum

from billing.models import Hold, HoldStatus, LedgerEntry, ProjectSpend, Wallet


@dataclass
class AuditReport:
    wallets: int = 0
    entries: int = 0
    open_holds: int = 0
    drift: list[str] = field(default_factory=list)


def audit_findings() -> AuditReport:
    """Every drift between wallets, the ledger, holds and project spend (read-only)."""
    report = AuditReport()
    ledger: dict[int, tuple[int, int]] = {
        wallet_id: (total or 0, count)
        for wallet_id, total, count in LedgerEntry.objects.values("wallet_id")
        .annotate(s=Sum("amount_nanos"), n=Count("id"))
        .values_list("wallet_id", "s", "n")
    }
    holds = {
        row["wallet_id"]: row["s"]
        for row in Hold.objects.filter(status=HoldStatus.OPEN)
        .values("wallet_id")
        .annotate(s=Sum("amount_nanos"))
    }
    for wallet in Wallet.objects.order_by("pk").iterator():
        report.wallets += 1
        summed, count = ledger.get(wallet.pk, (0, 0))
        report.entries += count
        if wallet.balance_nanos != summed:
            report.drift.append(
                f"wallet {wallet.pk} (org {wallet.organization_id}): balance "
                f"{wallet.balance_nanos} != ledger sum {summed} "
                f"(drift {wallet.balance_nanos - summed})"
            )
        held = holds.get(wallet.pk) or 0
        if wallet.held_nanos != held:
            report.drift.append(
                f"wallet {wallet.pk}: held {wallet.held_nanos} != open holds {held}"
            )
        last = (
            LedgerEntry.objects.filter(wallet=wallet)
            .order_by("-pk")
            .values_list("balance_after_nanos", flat=True)
            .first()
        )
        if last is not None and last != wallet.balance_nanos:
            report.drift.append(
                f"wallet {wallet.pk}: newest entry says {last}, balance is {wallet.balance_nanos}"
            )
    report.open_holds = Hold.objects.filter(status=HoldStatus.OPEN).count()
    spend_holds = {
        (row["project_id"], row["month"]): row["s"]
        for row in Hold.objects.filter(status=HoldStatus.OPEN, project__isnull=False)
        .values("project_id", "month")
        .annotate(s=Sum("amount_nanos"))
    }
    for spend in ProjectSpend.objects.iterator():
        expected = spend_holds.pop((spend.project_id, spend.month), 0)
        if spend.held_nanos != expected:
            report.drift.append(
                f"project {spend.project_id} {spend.month:%Y-%m}: held {spend.held_nanos} "
                f"!= open holds {expected}"
            )
    for (project_id, month), amount in spend_holds.items():
        report.drift.append(f"project {project_id} {month:%Y-%m}: {amount} held, no spend row")
    return report
