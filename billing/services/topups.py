"""Stripe customers and Checkout top-ups. Credit never happens here: only the webhook credits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from billing import stripe_gateway
from billing.models import TopUp, Wallet
from billing.services.wallet import wallet_get_or_create
from money.usd import NANOS_PER_CENT, NANOS_PER_USD, nanos_to_usd_str

if TYPE_CHECKING:
    from accounts.models import Organization, User


@dataclass(frozen=True, slots=True)
class TopUpStarted:
    """A Checkout session to send the customer to (``checkout_url``)."""

    topup_id: int
    checkout_session_id: str
    checkout_url: str


def topup_bounds_nanos() -> tuple[int, int]:
    """The smallest and largest top-up allowed (``INFRAI_TOPUP_MIN_USD`` / ``MAX_USD``)."""
    return (
        settings.INFRAI_TOPUP_MIN_USD * NANOS_PER_USD,
        settings.INFRAI_TOPUP_MAX_USD * NANOS_PER_USD,
    )


def topup_amount_validate(*, amount_nanos: int) -> None:
    """Raise ValueError (a message for the customer) unless the amount may be charged."""
    low, high = topup_bounds_nanos()
    if amount_nanos % NANOS_PER_CENT:
        raise ValueError("The amount must be a whole number of cents.")
    if not low <= amount_nanos <= high:
        raise ValueError(
            f"The amount must be between ${nanos_to_usd_str(low)} and ${nanos_to_usd_str(high)}."
        )


def customer_ensure(*, organization: Organization) -> str:
    """The organization's Stripe customer id, creating the customer on first use.

    Exactly one customer is kept per organization: the id is stored only if none is stored
    yet (a racing second caller adopts the first one's id; Stripe's idempotency key per
    organization makes both calls return the same customer anyway).
    """
    wallet = wallet_get_or_create(organization=organization)
    if wallet.stripe_customer_id:
        return wallet.stripe_customer_id
    customer_id = stripe_gateway.customer_create(
        organization_id=organization.pk, name=organization.name
    )
    Wallet.objects.filter(pk=wallet.pk, stripe_customer_id="").update(
        stripe_customer_id=customer_id
    )
    return Wallet.objects.values_list("stripe_customer_id", flat=True).get(pk=wallet.pk)


def topup_checkout_start(
    *,
    organization: Organization,
    amount_nanos: int,
    success_url: str,
    cancel_url: str,
    created_by: User | None = None,
) -> TopUpStarted:
    """Create a Stripe Checkout session for ``amount_nanos`` and record it as an open top-up.

    Raises ValueError for an amount outside the bounds, ``StripeFailure`` when Stripe fails.
    The wallet is credited later by the webhook, when Stripe says the payment is paid.
    """
    topup_amount_validate(amount_nanos=amount_nanos)
    customer_id = customer_ensure(organization=organization)
    session = stripe_gateway.checkout_session_create(
        customer_id=customer_id,
        organization_id=organization.pk,
        amount_nanos=amount_nanos,
        success_url=success_url,
        cancel_url=cancel_url,
    )
    with transaction.atomic(durable=True):
        topup = TopUp.objects.create(
            wallet=organization.wallet,
            checkout_session_id=session.id,
            amount_nanos=amount_nanos,
            created_by=created_by,
        )
    return TopUpStarted(topup_id=topup.pk, checkout_session_id=session.id, checkout_url=session.url)
