"""Auto-recharge: charge a saved card off-session when the balance falls below a threshold.

At most once per threshold crossing: :func:`auto_recharge_wallet` first *disarms* the wallet in
one conditional UPDATE (only one worker can win it), then charges with an idempotency key made
of the wallet and its attempt number. Every later balance change at or above the threshold
re-arms it (see ``billing.services.ledger.wallet_apply``). A decline or a Stripe failure leaves
the wallet disarmed with the error recorded — never a second charge for the same crossing; a
charge Stripe made although our call failed is still credited by the ``payment_intent.succeeded``
webhook (same ledger key). A decline or failure is mailed to the organization's owners and
billing members (``billing.recharge_failed_notify``, queued after the wallet records it).
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import F

from accounts.audit import AuditAction, audit_record, diff
from billing import stripe_gateway
from billing.models import EntryKind, Wallet
from billing.services.ledger import post_entry, task_enqueue
from billing.services.topups import customer_ensure, topup_amount_validate
from money.usd import nanos_to_usd_str

if TYPE_CHECKING:
    from accounts.models import Organization
    from accounts.policy import Actor

log = logging.getLogger(__name__)

#: The Celery task that mails a failed charge's reason to the organization (``billing.tasks``).
RECHARGE_FAILED_TASK = "billing.recharge_failed_notify"


class RechargeOutcome(enum.StrEnum):
    NOT_DUE = "not_due"
    CHARGED = "charged"
    DECLINED = "declined"
    FAILED = "failed"


def auto_recharge_configure(
    *,
    organization: Organization,
    payment_method_id: str,
    threshold_nanos: int,
    amount_nanos: int,
    enabled: bool = True,
    actor: Actor | None = None,
) -> Wallet:
    """Save a payment method on the organization's Stripe customer and the recharge settings
    (audited: ``wallet.auto_recharge``, what changed, never the card).

    Raises ValueError for an amount outside the top-up bounds or a negative threshold,
    ``StripeFailure`` when Stripe refuses the method.
    """
    topup_amount_validate(amount_nanos=amount_nanos)
    if threshold_nanos < 0:
        raise ValueError("The threshold must not be negative.")
    customer_id = customer_ensure(organization=organization)
    attached = stripe_gateway.payment_method_attach(
        customer_id=customer_id, payment_method_id=payment_method_id
    )
    with transaction.atomic():
        before = Wallet.objects.select_for_update().get(organization=organization)
        Wallet.objects.filter(pk=before.pk).update(
            auto_recharge_enabled=enabled,
            auto_recharge_payment_method_id=attached,
            auto_recharge_threshold_nanos=threshold_nanos,
            auto_recharge_amount_nanos=amount_nanos,
            auto_recharge_armed=True,
            auto_recharge_last_error="",
        )
        changes = diff(
            {
                "enabled": before.auto_recharge_enabled,
                "threshold_nanos": before.auto_recharge_threshold_nanos,
                "amount_nanos": before.auto_recharge_amount_nanos,
            },
            {"enabled": enabled, "threshold_nanos": threshold_nanos, "amount_nanos": amount_nanos},
        )
        if changes or before.auto_recharge_payment_method_id != attached:
            audit_record(
                organization_id=organization.pk,
                action=AuditAction.AUTO_RECHARGE,
                actor=actor,
                target="auto-recharge",
                changes=changes,
            )
    return Wallet.objects.get(organization=organization)


def _claim(*, wallet_id: int) -> Wallet | None:
    """Disarm the wallet if a recharge is due; the winner of this UPDATE charges."""
    with transaction.atomic(durable=True):
        won = (
            Wallet.objects.filter(
                pk=wallet_id,
                auto_recharge_enabled=True,
                auto_recharge_armed=True,
                balance_nanos__lt=F("auto_recharge_threshold_nanos"),
            )
            .exclude(auto_recharge_payment_method_id="")
            .exclude(stripe_customer_id="")
            .update(
                auto_recharge_armed=False, auto_recharge_attempts=F("auto_recharge_attempts") + 1
            )
        )
        return Wallet.objects.get(pk=wallet_id) if won else None


def auto_recharge_wallet(*, wallet_id: int) -> RechargeOutcome:
    """Charge the wallet's saved method once if its balance is below the threshold.

    On success one ``auto_recharge`` ledger entry (key ``auto_recharge:<payment intent>``).
    """
    wallet = _claim(wallet_id=wallet_id)
    if wallet is None:
        return RechargeOutcome.NOT_DUE
    try:
        charge = stripe_gateway.charge_off_session(
            customer_id=wallet.stripe_customer_id,
            payment_method_id=wallet.auto_recharge_payment_method_id,
            amount_nanos=wallet.auto_recharge_amount_nanos,
            idempotency_key=f"infrai-recharge-{wallet.pk}-{wallet.auto_recharge_attempts}",
            metadata={
                "organization_id": str(wallet.organization_id),
                "wallet_id": str(wallet.pk),
                "infrai_kind": "auto_recharge",
            },
        )
    except stripe_gateway.StripeFailure as exc:
        log.warning("auto-recharge of wallet %s failed: %s", wallet.pk, exc)
        Wallet.objects.filter(pk=wallet.pk).update(auto_recharge_last_error=str(exc)[:255])
        task_enqueue(RECHARGE_FAILED_TASK, wallet.pk)
        return RechargeOutcome.FAILED
    if not charge.succeeded:
        message = f"{charge.error_code}: {charge.error_message}"[:255]
        Wallet.objects.filter(pk=wallet.pk).update(auto_recharge_last_error=message)
        task_enqueue(RECHARGE_FAILED_TASK, wallet.pk)
        return RechargeOutcome.DECLINED
    with transaction.atomic(durable=True):
        post_entry(
            wallet_id=wallet.pk,
            amount_nanos=charge.amount_nanos,
            kind=EntryKind.AUTO_RECHARGE,
            idempotency_key=f"auto_recharge:{charge.payment_intent_id}",
            external_ref=charge.payment_intent_id,
            description=f"Auto-recharge of ${nanos_to_usd_str(charge.amount_nanos)}",
        )
        Wallet.objects.filter(pk=wallet.pk).update(auto_recharge_last_error="")
    return RechargeOutcome.CHARGED


def auto_recharge_due_wallets() -> list[int]:
    """Ids of wallets whose recharge is due now (the beat task charges each)."""
    return list(
        Wallet.objects.filter(
            auto_recharge_enabled=True,
            auto_recharge_armed=True,
            balance_nanos__lt=F("auto_recharge_threshold_nanos"),
        ).values_list("pk", flat=True)
    )
