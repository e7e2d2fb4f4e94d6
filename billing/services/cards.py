"""The saved card of an organization: what auto-recharge charges off-session.

A card is saved by the first Checkout top-up (``setup_future_usage=off_session``) or by a
Checkout session in setup mode (:func:`card_setup_start`, to replace it); in both cases the
webhook stores it on the wallet. :func:`card_remove` detaches it and switches auto-recharge off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from accounts.audit import AuditAction, audit_record
from billing import stripe_gateway
from billing.models import Wallet
from billing.services.topups import customer_ensure
from billing.services.wallet import wallet_get_or_create

if TYPE_CHECKING:
    from accounts.models import Organization
    from accounts.policy import Actor


def card_setup_start(*, organization: Organization, success_url: str, cancel_url: str) -> str:
    """A Checkout session (setup mode) to save a new card; returns the URL to send the customer
    to. Raises ``StripeFailure``. The card is stored by the ``setup_intent.succeeded`` webhook."""
    customer_id = customer_ensure(organization=organization)
    session = stripe_gateway.checkout_setup_session_create(
        customer_id=customer_id,
        organization_id=organization.pk,
        success_url=success_url,
        cancel_url=cancel_url,
    )
    return session.url


def card_remove(*, organization: Organization, actor: Actor | None = None) -> bool:
    """Forget the saved card and switch auto-recharge off; returns whether there was one.
    Audited (``wallet.card_remove``).

    The card is detached on Stripe first (raises ``StripeFailure``, changing nothing here).
    """
    wallet = wallet_get_or_create(organization=organization)
    method = wallet.auto_recharge_payment_method_id
    if not method:
        return False
    stripe_gateway.payment_method_detach(payment_method_id=method)
    with transaction.atomic(durable=True):
        removed = Wallet.objects.filter(
            pk=wallet.pk, auto_recharge_payment_method_id=method
        ).update(auto_recharge_payment_method_id="", auto_recharge_enabled=False)
        if removed:
            audit_record(
                organization_id=organization.pk,
                action=AuditAction.CARD_REMOVE,
                actor=actor,
                target="saved card",
                changes={"auto_recharge_enabled": False},
            )
    return True


def card_label(*, organization: Organization) -> str:
    """The saved card as a person reads it ('' when none; a generic label if Stripe fails)."""
    method = (
        Wallet.objects.filter(organization=organization)
        .values_list("auto_recharge_payment_method_id", flat=True)
        .first()
    )
    if not method:
        return ""
    try:
        return stripe_gateway.payment_method_label(payment_method_id=method)
    except stripe_gateway.StripeFailure:
        return "a saved card"
