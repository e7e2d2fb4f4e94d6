"""The dashboard's one door to billing's top-up and auto-recharge services.

Billing (``billing.services.topups`` / ``recharge``) was being written at the same time as the
dashboard. Until its Checkout service exists, :func:`available` is False and the wallet page
says top-ups are coming; the form, validation and redirect flow are ready. Wiring it is a change
to this module only.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from accounts.models import Organization, User

NOT_YET = "Top-ups are not available yet: Stripe Checkout is not configured on this server."


@dataclass(frozen=True, slots=True)
class CheckoutStart:
    """Where to send the browser (Stripe's hosted page), or why not."""

    url: str = ""
    error: str = ""


def available() -> bool:
    """Whether this server can start a Stripe Checkout top-up."""
    return False


def checkout_start(
    *,
    organization: Organization,
    amount_nanos: int,
    user: User,
    success_url: str,
    cancel_url: str,
) -> CheckoutStart:
    """Create a Checkout session for ``amount_nanos``; the webhook credits the wallet."""
    return CheckoutStart(error=NOT_YET)


def auto_recharge_save(
    *, organization: Organization, enabled: bool, threshold_usd: Decimal, amount_usd: Decimal
) -> str:
    """Save auto-recharge settings; returns an error message for the user, '' on success."""
    return "Auto-recharge is not available yet on this server."
