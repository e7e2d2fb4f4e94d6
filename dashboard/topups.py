"""The dashboard's one door to billing's top-up and auto-recharge services.

Stripe is called by ``billing`` only (``billing.services.topups`` → ``billing.stripe_gateway``);
this module turns its outcomes into what a page shows: a URL to go to, or a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from accounts.models import Organization, User
from accounts.policy import Actor
from billing.services import cards
from billing.services.recharge import auto_recharge_configure
from billing.services.topups import topup_checkout_start
from billing.stripe_gateway import StripeFailure
from dashboard.selectors import wallet_summary
from money.usd import usd_to_nanos

UNAVAILABLE = "Payments are unavailable right now; nothing was charged. Try again later."


@dataclass(frozen=True, slots=True)
class CheckoutStart:
    """Where to send the browser (Stripe's hosted page), or why not."""

    url: str = ""
    error: str = ""


def available() -> bool:
    """Whether this server can start a Stripe Checkout top-up."""
    return bool(settings.STRIPE_SECRET_KEY)


def checkout_start(
    *,
    organization: Organization,
    amount_nanos: int,
    user: User,
    success_url: str,
    cancel_url: str,
) -> CheckoutStart:
    """Create a Checkout session for ``amount_nanos``; the webhook credits the wallet later."""
    try:
        started = topup_checkout_start(
            organization=organization,
            amount_nanos=amount_nanos,
            success_url=success_url,
            cancel_url=cancel_url,
            created_by=user,
        )
    except ValueError as error:
        return CheckoutStart(error=str(error))
    except StripeFailure:
        return CheckoutStart(error=UNAVAILABLE)
    return CheckoutStart(url=started.checkout_url)


def auto_recharge_save(
    *,
    organization: Organization,
    enabled: bool,
    threshold_usd: Decimal,
    amount_usd: Decimal,
    actor: Actor | None = None,
) -> str:
    """Save auto-recharge settings on the card already saved for the organization.

    Returns a message for the user ('' on success). The dashboard has no card form of its own:
    the card is the one billing saved (``auto_recharge_payment_method_id``).
    """
    summary = wallet_summary(organization=organization)
    if not summary.payment_method_id:
        return NO_CARD
    try:
        auto_recharge_configure(
            organization=organization,
            payment_method_id=summary.payment_method_id,
            threshold_nanos=usd_to_nanos(threshold_usd),
            amount_nanos=usd_to_nanos(amount_usd),
            enabled=enabled,
            actor=actor,
        )
    except ValueError as error:
        return str(error)
    except StripeFailure:
        return UNAVAILABLE
    return ""


NO_CARD = (
    "Auto-recharge charges a saved card, and none is saved yet: your first top-up saves the card "
    "you pay with (or add one on the card page)."
)


def card_setup_start(
    *, organization: Organization, success_url: str, cancel_url: str
) -> CheckoutStart:
    """A Checkout session (setup mode) to save a new card; nothing is charged."""
    try:
        url = cards.card_setup_start(
            organization=organization, success_url=success_url, cancel_url=cancel_url
        )
    except StripeFailure:
        return CheckoutStart(error=UNAVAILABLE)
    return CheckoutStart(url=url)


def card_remove(*, organization: Organization, actor: Actor | None = None) -> str:
    """Remove the saved card (auto-recharge goes off); a message for the user."""
    try:
        removed = cards.card_remove(organization=organization, actor=actor)
    except StripeFailure:
        return UNAVAILABLE
    return "" if removed else "No card is saved."


def card_label(*, organization: Organization) -> str:
    return cards.card_label(organization=organization) if available() else ""
