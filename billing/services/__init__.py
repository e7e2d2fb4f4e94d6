"""Writes of the billing app (the front door other apps call).

- :mod:`billing.services.holds` — hold / settle / expiry: the request path's contract.
- :mod:`billing.services.wallet` — credits, debits, staff adjustments.
- :mod:`billing.services.topups` — Stripe customer and Checkout top-ups.
- :mod:`billing.services.webhooks` — the Stripe webhook: verify, store, credit.
- :mod:`billing.services.recharge` — auto-recharge off-session.
"""

from billing.services.holds import (
    HoldExists,
    HoldNotFound,
    Settled,
    ahold_carve,
    ahold_open,
    aholds_renew,
    aprocess_seen,
    arequest_low_balance,
    arequest_recharge,
    asettle,
    hold_open,
    hold_settle,
    holds_expire,
    holds_renew,
    process_seen,
    process_token,
)
from billing.services.wallet import wallet_adjust, wallet_credit, wallet_get_or_create

__all__ = [
    "HoldExists",
    "HoldNotFound",
    "Settled",
    "ahold_carve",
    "ahold_open",
    "aholds_renew",
    "aprocess_seen",
    "arequest_low_balance",
    "arequest_recharge",
    "asettle",
    "hold_open",
    "hold_settle",
    "holds_expire",
    "holds_renew",
    "process_seen",
    "process_token",
    "wallet_adjust",
    "wallet_credit",
    "wallet_get_or_create",
]
