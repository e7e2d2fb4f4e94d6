"""The one module that talks to Stripe (API version pinned below).

Everything Stripe-shaped stops here: callers pass and get nano-USD and plain values; the
cents ↔ nano-USD conversion for Stripe is done here (with :mod:`money.usd`). Stripe errors
are translated into :class:`StripeFailure` at this boundary. ``settings.STRIPE_API_BASE``
points the client at another server (``localstripe`` in tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import stripe
from django.conf import settings

from money.usd import cents_to_nanos, nanos_to_cents

# The version the installed stripe-python (16.x) is generated for; changing it is a reviewed
# change (payload shapes differ between versions).
STRIPE_API_VERSION = "2026-10-28.endive"
# Stripe's own default: a signature older than this many seconds is rejected (replays).
WEBHOOK_TOLERANCE_S = 300


class StripeFailure(Exception):
    """A Stripe call failed. ``declined`` is True for a card decline (no point retrying)."""

    def __init__(self, message: str, *, code: str = "", declined: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.declined = declined


class BadSignature(Exception):
    """The webhook payload or its ``Stripe-Signature`` header did not verify."""


@dataclass(frozen=True, slots=True)
class CheckoutSession:
    id: str
    url: str


@dataclass(frozen=True, slots=True)
class OffSessionCharge:
    payment_intent_id: str
    succeeded: bool
    amount_nanos: int
    error_code: str = ""
    error_message: str = ""


@lru_cache(maxsize=4)
def _client_for(api_key: str, api_base: str) -> stripe.StripeClient:
    base = {"api": api_base} if api_base else None
    return stripe.StripeClient(
        api_key,
        stripe_version=STRIPE_API_VERSION,
        base_addresses=base,  # type: ignore[arg-type]
        max_network_retries=2,
    )


def client() -> stripe.StripeClient:
    """The configured client (``STRIPE_SECRET_KEY``, optional ``STRIPE_API_BASE``)."""
    if not settings.STRIPE_SECRET_KEY:
        raise StripeFailure("Stripe is not configured (STRIPE_SECRET_KEY is empty).")
    return _client_for(settings.STRIPE_SECRET_KEY, settings.STRIPE_API_BASE)


@contextmanager
def _translated() -> Iterator[None]:
    """Inside: a Stripe error leaves as :class:`StripeFailure` (the boundary's one mapping)."""
    try:
        yield
    except stripe.StripeError as exc:
        code = getattr(exc, "code", None) or ""
        declined = isinstance(exc, stripe.CardError)
        raise StripeFailure(exc.user_message or str(exc), code=code, declined=declined) from exc


def customer_create(*, organization_id: int, name: str) -> str:
    """Create the Stripe customer of an organization; returns its id.

    Idempotency key per organization: a retried call returns the same customer.
    """
    with _translated():
        customer = client().v1.customers.create(
            params={"name": name, "metadata": {"organization_id": str(organization_id)}},
            options={"idempotency_key": f"infrai-customer-{organization_id}"},
        )
    return str(customer.id)


def payment_method_attach(*, customer_id: str, payment_method_id: str) -> str:
    """Attach a payment method to the customer; returns the attached method's id."""
    with _translated():
        pm = client().v1.payment_methods.attach(payment_method_id, params={"customer": customer_id})
    return str(pm.id)


def checkout_session_create(
    *,
    customer_id: str,
    organization_id: int,
    amount_nanos: int,
    success_url: str,
    cancel_url: str,
) -> CheckoutSession:
    """A one-off Checkout session charging ``amount_nanos`` (whole cents) in USD.

    ``client_reference_id`` and the metadata carry the organization, so a webhook can be
    matched even without our own row. The card is saved for later off-session charges
    (``setup_future_usage="off_session"``); the ``payment_intent.succeeded`` webhook stores it
    on the wallet, which is what lets auto-recharge be switched on.
    """
    metadata = {"organization_id": str(organization_id), "infrai_kind": "topup"}
    with _translated():
        session = client().v1.checkout.sessions.create(
            params={
                "mode": "payment",
                "customer": customer_id,
                "client_reference_id": str(organization_id),
                "success_url": success_url,
                "cancel_url": cancel_url,
                "metadata": metadata,
                "payment_intent_data": {
                    "metadata": metadata,
                    "setup_future_usage": "off_session",
                },
                "line_items": [
                    {
                        "quantity": 1,
                        "price_data": {
                            "currency": "usd",
                            "unit_amount": nanos_to_cents(amount_nanos),
                            "product_data": {"name": "infrai credit"},
                        },
                    }
                ],
            }
        )
    return CheckoutSession(id=str(session.id), url=str(session.url or ""))


def checkout_setup_session_create(
    *, customer_id: str, organization_id: int, success_url: str, cancel_url: str
) -> CheckoutSession:
    """A Checkout session in setup mode: the customer saves a (new) card, nothing is charged.

    The ``setup_intent.succeeded`` webhook (metadata ``infrai_kind=card_setup``) stores the card.
    """
    metadata = {"organization_id": str(organization_id), "infrai_kind": "card_setup"}
    with _translated():
        session = client().v1.checkout.sessions.create(
            params={
                "mode": "setup",
                "currency": "usd",
                "customer": customer_id,
                "client_reference_id": str(organization_id),
                "success_url": success_url,
                "cancel_url": cancel_url,
                "metadata": metadata,
                "setup_intent_data": {"metadata": metadata},
            }
        )
    return CheckoutSession(id=str(session.id), url=str(session.url or ""))


def payment_method_detach(*, payment_method_id: str) -> None:
    """Detach a saved card from its customer (it can no longer be charged)."""
    with _translated():
        client().v1.payment_methods.detach(payment_method_id)


def payment_method_label(*, payment_method_id: str) -> str:
    """A card as a person reads it (``"visa •••• 4242"``); raises StripeFailure."""
    with _translated():
        pm = client().v1.payment_methods.retrieve(payment_method_id)
    card = getattr(pm, "card", None)
    if card is None:
        return str(pm.type or "payment method")
    return f"{card.brand} •••• {card.last4}"


def charge_off_session(
    *,
    customer_id: str,
    payment_method_id: str,
    amount_nanos: int,
    idempotency_key: str,
    metadata: dict[str, str],
) -> OffSessionCharge:
    """Charge a saved method without the customer present (auto-recharge).

    A decline is a result (``succeeded=False`` with the code), not an exception; other Stripe
    failures raise :class:`StripeFailure`. ``idempotency_key`` makes a retried call return the
    same PaymentIntent on Stripe.
    """
    with _translated():
        try:
            intent = client().v1.payment_intents.create(
                params={
                    "amount": nanos_to_cents(amount_nanos),
                    "currency": "usd",
                    "customer": customer_id,
                    "payment_method": payment_method_id,
                    "confirm": True,
                    "off_session": True,
                    "metadata": metadata,
                },
                options={"idempotency_key": idempotency_key},
            )
        except stripe.CardError as exc:
            err = exc.error
            pi = getattr(err, "payment_intent", None) if err is not None else None
            return OffSessionCharge(
                payment_intent_id=str(pi["id"]) if pi else "",
                succeeded=False,
                amount_nanos=amount_nanos,
                error_code=str(exc.code or "card_declined"),
                error_message=exc.user_message or "The card was declined.",
            )
    return OffSessionCharge(
        payment_intent_id=str(intent.id),
        succeeded=intent.status == "succeeded",
        amount_nanos=cents_to_nanos(int(intent.amount)),
        error_code="" if intent.status == "succeeded" else str(intent.status),
    )


def charge_customer_id(*, charge_id: str) -> str | None:
    """The customer a charge belongs to (to attribute a dispute we have no record of)."""
    with _translated():
        charge = client().v1.charges.retrieve(charge_id)
    customer = charge.customer
    if customer is None:
        return None
    return customer if isinstance(customer, str) else str(customer.id)


def webhook_event_verify(*, payload: bytes, signature_header: str) -> dict[str, Any]:
    """Verify ``Stripe-Signature`` over the exact raw ``payload``; return the event as a dict.

    Raises :class:`BadSignature` for a missing/invalid/stale signature or an unparsable body.
    """
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:
        raise BadSignature("STRIPE_WEBHOOK_SECRET is not configured.")
    try:
        text = payload.decode("utf-8")
        stripe.WebhookSignature.verify_header(
            text, signature_header, secret, tolerance=WEBHOOK_TOLERANCE_S
        )
        event = json.loads(text)
    except (stripe.SignatureVerificationError, UnicodeDecodeError, ValueError) as exc:
        raise BadSignature(str(exc)) from None
    if not isinstance(event, dict) or not event.get("id") or not event.get("type"):
        raise BadSignature("The payload is not a Stripe event.")
    return event


def amount_nanos(cents: int) -> int:
    """A Stripe amount in cents (USD) as nano-USD."""
    return cents_to_nanos(cents)
