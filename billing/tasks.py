"""Celery tasks of billing (thin: each calls one service) and their beat schedule."""

from __future__ import annotations

import datetime as dt
import logging
import time

from celery import shared_task
from django.core.cache import cache

from billing.audit import HISTORY_CHECKS, audit_findings
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


# Where the last audit's result is kept for ``/metrics`` (config/scrape.py: ``at`` and
# ``checks``), with what the next routine audit needs (see :func:`_audit`).
AUDIT_RESULT_KEY = "infrai:billing_audit"


@shared_task(name="billing.audit", ignore_result=True)
def audit() -> int:
    """The routine money audit (beat, every 5 minutes): what was written since the previous
    audit began (``audit_findings(since=…)``, the docstring of :mod:`billing.audit`), or the
    whole books when no previous audit is on record (the first run, a cache that lost it).
    Logs each finding at ERROR, keeps the counts per check for ``/metrics``
    (``infrai_billing_audit_findings``); returns how many findings."""
    return _audit(full=False)


@shared_task(name="billing.audit_full", ignore_result=True)
def audit_full() -> int:
    """The full money audit (beat, daily; what ``manage.py billing_audit`` runs): the whole
    books, as :func:`audit` reports them."""
    return _audit(full=True)


def _audit(*, full: bool) -> int:
    """Run one audit and keep its result under :data:`AUDIT_RESULT_KEY`:

    - ``at``: when it ended (Unix time; ``infrai_billing_audit_timestamp_seconds``);
    - ``started``: when its snapshot began, the newest such of the audits that completed: the
      next routine audit reads what was written since (a failed run records nothing, so the
      next one reads its window too);
    - ``carried``: per check of history (:data:`billing.audit.HISTORY_CHECKS`), the most
      findings any audit found since the last full one, which sets them: a window loses
      sight of a finding once it is older than the window, the metric does not;
    - ``checks``: the metric, per check: this audit's findings, and for checks of history at
      least ``carried`` — a finding stays in the metric until a full audit no longer finds
      it (the daily run, or ``celery -A config call billing.audit_full`` after a fix).
    """
    previous = cache.get(AUDIT_RESULT_KEY) or {}
    since = None
    if not full and previous.get("started") is not None:
        since = dt.datetime.fromtimestamp(previous["started"], dt.UTC)
    started = time.time()  # before the snapshot: a row it misses was written after this
    report = audit_findings(since=since)
    found: dict[str, int] = {}
    for finding in report.findings:
        log.error("billing audit: %s", finding)
        found[finding.check] = found.get(finding.check, 0) + 1
    carried = {} if since is None else dict(previous.get("carried", {}))
    for check in HISTORY_CHECKS:
        if n := max(carried.get(check, 0), found.get(check, 0)):
            carried[check] = n
    cache.set(
        AUDIT_RESULT_KEY,
        {
            "at": time.time(),
            "started": max(started, previous.get("started") or 0.0),
            "since": None if since is None else previous["started"],
            "carried": carried,
            "checks": {**found, **carried},  # carried >= found, check by check
        },
        timeout=None,
    )
    return len(report.findings)


BEAT_SCHEDULE = {
    "billing.holds_expire": {"task": "billing.holds_expire", "schedule": 60.0},
    "billing.auto_recharge_sweep": {"task": "billing.auto_recharge_sweep", "schedule": 300.0},
    "billing.audit": {"task": "billing.audit", "schedule": 300.0},
    "billing.audit_full": {"task": "billing.audit_full", "schedule": 86400.0},
}
