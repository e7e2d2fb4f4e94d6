"""Celery tasks of billing (thin: each calls one service) and their beat schedule."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.core.cache import cache

from billing.audit import audit_findings
from billing.services import holds, notify, recharge

log = logging.getLogger(__name__)


@shared_task(name="billing.holds_expire", ignore_result=True)
def holds_expire() -> int:
    """Release open holds past their expiry (a process died before settling)."""
    return holds.holds_expire()


@shared_task(name="billing.auto_recharge_wallet", ignore_result=True)
def auto_recharge_wallet(wallet_id: int) -> str:
    """Charge one wallet's saved method if its recharge is due (at most once per crossing)."""
    return str(recharge.auto_recharge_wallet(wallet_id=wallet_id))


@shared_task(name="billing.low_balance_notify", ignore_result=True)
def low_balance_notify(wallet_id: int) -> bool:
    """Send the wallet's low-balance e-mail if this task wins the crossing (one per crossing)."""
    return notify.low_balance_notify(wallet_id=wallet_id)


@shared_task(name="billing.recharge_failed_notify", ignore_result=True)
def recharge_failed_notify(wallet_id: int) -> int:
    """Tell the organization its auto-recharge was not charged."""
    return notify.recharge_failed_notify(wallet_id=wallet_id)


@shared_task(name="billing.receipt_send", ignore_result=True)
def receipt_send(entry_id: int) -> int:
    """Mail the receipt of one payment (a ledger entry)."""
    return notify.receipt_send(entry_id=entry_id)


@shared_task(name="billing.auto_recharge_sweep", ignore_result=True)
def auto_recharge_sweep() -> int:
    """Safety net for missed triggers: queue every wallet whose recharge is due."""
    due = recharge.auto_recharge_due_wallets()
    for wallet_id in due:
        auto_recharge_wallet.delay(wallet_id)
    return len(due)


# Where the last audit's result is kept for ``/metrics`` (config/scrape.py).
AUDIT_RESULT_KEY = "infrai:billing_audit"


@shared_task(name="billing.audit", ignore_result=True)
def audit() -> int:
    """Run the money audit (``billing.audit``); log each finding at ERROR; keep the count per
    check and the time for ``/metrics`` (``infrai_billing_audit_findings``); return how many."""
    report = audit_findings()
    checks: dict[str, int] = {}
    for finding in report.findings:
        log.error("billing audit: %s", finding)
        checks[finding.check] = checks.get(finding.check, 0) + 1
    cache.set(AUDIT_RESULT_KEY, {"at": time.time(), "checks": checks}, timeout=None)
    return len(report.findings)


BEAT_SCHEDULE = {
    "billing.holds_expire": {"task": "billing.holds_expire", "schedule": 60.0},
    "billing.auto_recharge_sweep": {"task": "billing.auto_recharge_sweep", "schedule": 300.0},
    "billing.audit": {"task": "billing.audit", "schedule": 300.0},
}
