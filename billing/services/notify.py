"""Billing's e-mails: the low-balance alert, a failed auto-recharge, a receipt per payment.

Each is sent **after** the money transaction that caused it has committed, from a Celery task
(``billing.tasks``; queued on commit by :mod:`billing.services.ledger` and
:mod:`billing.services.holds`, or by :mod:`billing.services.recharge` after a failed charge),
through Django's e-mail backend, to the organization's owners and billing members with a
verified address (:data:`NOTIFY_ROLES`). No e-mail carries a secret: amounts, dates, the
organization's name, the Stripe payment reference and a link to the wallet page.

**One low-balance e-mail per crossing.** A ledger entry that debits an *armed* wallet below
its threshold (available = balance − held < ``low_balance_threshold_nanos``) asks for the
e-mail; any number of such entries may ask, concurrently too. :func:`low_balance_claim`
disarms the wallet in one conditional ``UPDATE`` (the row lock serializes claimers; the loser
re-reads the row, finds it disarmed and updates nothing), so exactly one task sends it. Only a
credit that leaves the available balance at or above the threshold arms it again
(``ledger.wallet_apply``); a settlement releasing held money does not, so a wallet hovering at
the threshold is told once until money is added.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import F
from django.template.loader import render_to_string

from accounts.audit import AuditAction, audit_record
from accounts.policy import Actor
from accounts.roles import Role
from accounts.selectors import member_emails
from billing import receipts
from billing.models import Wallet
from money.usd import nanos_to_usd_str

log = logging.getLogger(__name__)

#: Who gets billing's e-mails.
NOTIFY_ROLES = frozenset({Role.OWNER, Role.BILLING})


@dataclass(frozen=True, slots=True)
class LowBalance:
    """A crossing won by :func:`low_balance_claim` (nano-USD)."""

    organization_id: int
    organization_name: str
    organization_slug: str
    available_nanos: int
    threshold_nanos: int


def dashboard_url(path: str) -> str:
    """An absolute link into the dashboard (``INFRAI_PUBLIC_BASE_URL`` without ``/v1``)."""
    base = settings.INFRAI_PUBLIC_BASE_URL.rstrip("/").removesuffix("/v1")
    return base + path


def low_balance_claim(*, wallet_id: int) -> LowBalance | None:
    """Disarm the wallet's low-balance alert if it is armed and its available balance is below
    the threshold now; the one caller that gets a :class:`LowBalance` back sends the e-mail,
    every other (concurrent or later) gets ``None``. One durable transaction."""
    with transaction.atomic(durable=True):
        won = Wallet.objects.filter(
            pk=wallet_id,
            low_balance_armed=True,
            low_balance_threshold_nanos__gt=0,
            balance_nanos__lt=F("held_nanos") + F("low_balance_threshold_nanos"),
        ).update(low_balance_armed=False)
        if not won:
            return None
        wallet = Wallet.objects.select_related("organization").get(pk=wallet_id)
    return LowBalance(
        organization_id=wallet.organization_id,
        organization_name=wallet.organization.name,
        organization_slug=wallet.organization.slug,
        available_nanos=wallet.balance_nanos - wallet.held_nanos,
        threshold_nanos=wallet.low_balance_threshold_nanos,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())  # a header is one line


def _send(
    *,
    organization_id: int,
    subject: str,
    template: str,
    context: dict[str, object],
    attachment: tuple[str, bytes, str] | None = None,
) -> int:
    """Mail ``template`` to the organization's :data:`NOTIFY_ROLES`; how many addresses."""
    recipients = member_emails(organization_id=organization_id, roles=NOTIFY_ROLES)
    if not recipients:
        return 0
    message = EmailMessage(
        subject=_one_line(subject),
        body=render_to_string(template, context),
        to=recipients,
    )
    if attachment is not None:
        message.attach(*attachment)
    message.send()
    return len(recipients)


def low_balance_notify(*, wallet_id: int) -> bool:
    """Send the low-balance e-mail if this call wins the crossing (:func:`low_balance_claim`);
    whether it did. At most once per crossing: a failed send is logged, not retried."""
    won = low_balance_claim(wallet_id=wallet_id)
    if won is None:
        return False
    try:
        _send(
            organization_id=won.organization_id,
            subject=f"Low balance: ${nanos_to_usd_str(max(won.available_nanos, 0))} left "
            f"for {won.organization_name} on infrai",
            template="billing/email/low_balance.txt",
            context={
                "org": won.organization_name,
                "available": nanos_to_usd_str(won.available_nanos),
                "threshold": nanos_to_usd_str(won.threshold_nanos),
                "url": dashboard_url(f"/o/{won.organization_slug}/wallet/"),
            },
        )
    except Exception:
        log.exception("low-balance e-mail of wallet %s could not be sent", wallet_id)
    return True


def recharge_failed_notify(*, wallet_id: int) -> int:
    """Tell the organization its auto-recharge was not charged (declined or Stripe failed);
    the reason is the one recorded on the wallet (a decline code and Stripe's message for the
    customer, never a card or key). How many addresses it went to."""
    wallet = Wallet.objects.select_related("organization").get(pk=wallet_id)
    org = wallet.organization
    return _send(
        organization_id=org.pk,
        subject=f"Auto-recharge failed for {org.name} on infrai",
        template="billing/email/recharge_failed.txt",
        context={
            "org": org.name,
            "amount": nanos_to_usd_str(wallet.auto_recharge_amount_nanos),
            "balance": nanos_to_usd_str(wallet.balance_nanos - wallet.held_nanos),
            "reason": wallet.auto_recharge_last_error or "the payment did not go through",
            "url": dashboard_url(f"/o/{org.slug}/wallet/card/"),
        },
    )


def receipt_send(*, entry_id: int) -> int:
    """Mail the receipt of one payment (a ``topup`` or ``auto_recharge`` ledger entry) with
    its PDF attached; how many addresses (0 when the entry is no payment)."""
    receipt = receipts.receipt_for_entry(entry_id=entry_id)
    if receipt is None:
        return 0
    return _send(
        organization_id=receipt.organization_id,
        subject=f"Receipt {receipt.number} for {receipt.organization_name}: "
        f"${nanos_to_usd_str(receipt.amount_nanos)}",
        template="billing/email/receipt.txt",
        context={
            "r": receipt,
            "amount": nanos_to_usd_str(receipt.amount_nanos),
            "url": dashboard_url(f"/o/{receipt.organization_slug}/wallet/receipts/{entry_id}/"),
        },
        attachment=(f"{receipt.filename}.pdf", receipts.receipt_pdf(receipt), "application/pdf"),
    )


def low_balance_threshold_set(
    *, organization_id: int, threshold_nanos: int, actor: Actor | None = None
) -> Wallet:
    """Set the organization's low-balance threshold (0: no e-mails) and arm it, so the next
    debit below it sends one; audited (``wallet.low_balance``) when it changes. Raises
    ValueError for a negative threshold."""
    if threshold_nanos < 0:
        raise ValueError("The threshold must not be negative.")
    with transaction.atomic():
        wallet = Wallet.objects.select_for_update().get(organization_id=organization_id)
        old = wallet.low_balance_threshold_nanos
        Wallet.objects.filter(pk=wallet.pk).update(
            low_balance_threshold_nanos=threshold_nanos, low_balance_armed=True
        )
        if old != threshold_nanos:
            audit_record(
                organization_id=organization_id,
                action=AuditAction.LOW_BALANCE,
                actor=actor,
                target="low-balance alert",
                changes={"threshold_nanos": [old, threshold_nanos]},
            )
    return Wallet.objects.get(pk=wallet.pk)
