"""The Stripe webhook: verify, store the event once, move money in the same transaction.

:func:`webhook_receive` is the whole contract of ``POST /billing/stripe/webhook``:

- The signature is verified on the exact raw body (tolerance 300 s). Bad, missing or stale →
  400 and **nothing is written**.
- Each event is stored once by its id (:class:`~billing.models.StripeEvent`) with its status,
  in the same durable transaction as the ledger entries it causes. A repeated delivery →
  200, nothing changes. Two deliveries racing each other: the ledger's unique idempotency key
  and the event's unique id let exactly one commit; the other rolls back and answers 200.
- Money moves only when Stripe says it is paid: ``checkout.session.completed`` with
  ``payment_status == "paid"`` or ``checkout.session.async_payment_succeeded`` credit the top-up
  (one entry per Checkout session, whichever arrives first); refunds (``charge.refunded``,
  cumulative ``amount_refunded``) and disputes (``charge.dispute.created``/``closed``) become
  negative entries (a won dispute a positive one). Every entry's key comes from Stripe's object
  ids, so events arriving twice, late or in any order give the same final balance.
- Every event that would move money is checked first: its amount (``amount_total``,
  ``amount_refunded``, ``amount``, ``amount_received``) must be a positive integer number of
  cents and its currency the platform's (``usd``). Otherwise — missing, zero, negative, not an
  integer, another or no currency — it is stored ``refused`` with the reason, logged at WARNING
  and answered 200 (Stripe stops retrying; redelivery cannot fix it); nothing is credited or
  debited.
- A top-up's ``payment_intent.succeeded`` (Checkout saves the card with
  ``setup_future_usage=off_session``) and a setup session's ``setup_intent.succeeded`` store the
  card on the wallet (``auto_recharge_payment_method_id``); they move no money.
- An event we cannot attribute (unknown customer/organization) is stored ``failed`` with the
  reason for staff, logged at ERROR and answered 200 (retrying cannot fix it). An unexpected
  error rolls everything back and answers 500, so Stripe delivers it again.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from billing import stripe_gateway
from billing.models import (
    EntryKind,
    LedgerEntry,
    StripeEvent,
    StripeEventStatus,
    TopUp,
    TopUpStatus,
    Wallet,
)
from billing.services.ledger import post_entry
from money.usd import nanos_to_usd_str

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WebhookResult:
    """What the view answers: ``http_status`` and a short ``detail`` (no secrets)."""

    http_status: int
    detail: str
    event_status: str = ""
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class _Outcome:
    status: StripeEventStatus
    detail: str


def _ok(detail: str) -> _Outcome:
    return _Outcome(StripeEventStatus.PROCESSED, detail)


def _ignored(detail: str) -> _Outcome:
    return _Outcome(StripeEventStatus.IGNORED, detail)


def _failed(detail: str) -> _Outcome:
    return _Outcome(StripeEventStatus.FAILED, detail)


def _refused(detail: str) -> _Outcome:
    return _Outcome(StripeEventStatus.REFUSED, detail)


# --- what a money-moving event must carry -----------------------------------------------------

PLATFORM_CURRENCY = "usd"


def _money_refusal(obj: Obj, amount_field: str) -> _Outcome | None:
    """Why ``obj`` must not move money (``None``: it may). Amounts are whole cents, > 0."""
    if not obj.get("id"):
        return _refused("the object has no id: nothing moved")
    currency = obj.get("currency")
    if not isinstance(currency, str) or currency.lower() != PLATFORM_CURRENCY:
        return _refused(f"currency {currency!r} is not {PLATFORM_CURRENCY!r}: nothing moved")
    amount = obj.get(amount_field)
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        return _refused(f"{amount_field} {amount!r} is not a positive amount: nothing moved")
    return None


# --- attribution ------------------------------------------------------------------------------


def _wallet_by(*, customer: str | None = None, metadata: Obj | None = None) -> Wallet | None:
    if customer:
        wallet = Wallet.objects.filter(stripe_customer_id=customer).first()
        if wallet is not None:
            return wallet
    org_id = str((metadata or {}).get("organization_id") or "")
    if org_id.isdigit():
        return Wallet.objects.filter(organization_id=int(org_id)).first()
    return None


def _wallet_of_payment(payment_intent: str | None) -> Wallet | None:
    """The wallet a payment credited (top-up or auto-recharge), from our own records."""
    if not payment_intent:
        return None
    topup = TopUp.objects.filter(payment_intent_id=payment_intent).select_related("wallet").first()
    if topup is not None:
        return topup.wallet
    entry = LedgerEntry.objects.filter(external_ref=payment_intent).select_related("wallet").first()
    return entry.wallet if entry is not None else None


def _customer_of(obj: Obj) -> str | None:
    customer = obj.get("customer")
    if isinstance(customer, dict):
        return str(customer.get("id") or "") or None
    return str(customer) if customer else None


def _id_of(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("id") or "")
    return str(value or "")


# --- checkout ---------------------------------------------------------------------------------


def _topup_and_wallet(session: Obj) -> tuple[TopUp | None, Wallet | None]:
    topup = (
        TopUp.objects.select_for_update()
        .select_related("wallet")
        .filter(checkout_session_id=session["id"])
        .first()
    )
    if topup is not None:
        return topup, topup.wallet
    metadata = dict(session.get("metadata") or {})
    metadata.setdefault("organization_id", session.get("client_reference_id"))
    return None, _wallet_by(customer=_customer_of(session), metadata=metadata)


def _credit_checkout(session: Obj) -> _Outcome:
    refusal = _money_refusal(session, "amount_total")
    if refusal is not None:
        return refusal
    topup, wallet = _topup_and_wallet(session)
    if wallet is None:
        return _failed("no organization for this Checkout session")
    amount = stripe_gateway.amount_nanos(int(session["amount_total"]))
    payment_intent = _id_of(session.get("payment_intent"))
    _, created = post_entry(
        wallet_id=wallet.pk,
        amount_nanos=amount,
        kind=EntryKind.TOPUP,
        idempotency_key=f"checkout:{session['id']}",
        external_ref=payment_intent or session["id"],
        description=f"Top-up of ${nanos_to_usd_str(amount)} (Stripe Checkout)",
    )
    if topup is not None and topup.status != TopUpStatus.PAID:
        topup.status = TopUpStatus.PAID
        topup.paid_at = timezone.now()
        topup.payment_intent_id = payment_intent
        topup.save(update_fields=["status", "paid_at", "payment_intent_id"])
    return _ok("credited" if created else "already credited")


def _checkout_completed(session: Obj) -> _Outcome:
    payment_status = session.get("payment_status")
    if payment_status == "paid":
        return _credit_checkout(session)
    if payment_status == "unpaid":
        topup, _ = _topup_and_wallet(session)
        if topup is not None and topup.status == TopUpStatus.OPEN:
            topup.status = TopUpStatus.PENDING
            topup.payment_intent_id = _id_of(session.get("payment_intent"))
            topup.save(update_fields=["status", "payment_intent_id"])
        return _ok("payment not yet paid; waiting for async_payment_succeeded")
    return _ignored(f"payment_status {payment_status!r}: nothing to credit")


def _checkout_closed_unpaid(session: Obj, status: TopUpStatus) -> _Outcome:
    topup, _ = _topup_and_wallet(session)
    if topup is not None and topup.status in (TopUpStatus.OPEN, TopUpStatus.PENDING):
        topup.status = status
        topup.save(update_fields=["status"])
    return _ok(f"top-up {status}")


# --- refunds, disputes, off-session payments --------------------------------------------------


def _charge_refunded(charge: Obj) -> _Outcome:
    refusal = _money_refusal(charge, "amount_refunded")
    if refusal is not None:
        return refusal
    wallet = _wallet_by(customer=_customer_of(charge), metadata=charge.get("metadata")) or (
        _wallet_of_payment(_id_of(charge.get("payment_intent")))
    )
    if wallet is None:
        return _failed("no organization for this charge")
    Wallet.objects.select_for_update().filter(pk=wallet.pk).first()  # serialize this charge
    recorded = -(
        LedgerEntry.objects.filter(
            wallet=wallet, kind=EntryKind.REFUND, external_ref=charge["id"]
        ).aggregate(s=Sum("amount_nanos"))["s"]
        or 0
    )
    refunded_cents = int(charge["amount_refunded"])
    delta = stripe_gateway.amount_nanos(refunded_cents) - recorded
    if delta <= 0:
        return _ok("refund already recorded")
    post_entry(
        wallet_id=wallet.pk,
        amount_nanos=-delta,
        kind=EntryKind.REFUND,
        idempotency_key=f"refund:{charge['id']}:{refunded_cents}",
        external_ref=charge["id"],
        description=f"Refund of ${nanos_to_usd_str(delta)}",
    )
    return _ok("refund recorded")


def _dispute_wallet(dispute: Obj) -> Wallet | None:
    wallet = _wallet_of_payment(_id_of(dispute.get("payment_intent")))
    if wallet is not None:
        return wallet
    charge_id = _id_of(dispute.get("charge"))
    customer = stripe_gateway.charge_customer_id(charge_id=charge_id) if charge_id else None
    return _wallet_by(customer=customer)


def _dispute_moved(dispute: Obj, *, won: bool, done: str) -> _Outcome:
    """Debit the disputed amount (once per dispute, whichever event comes first) and, when the
    dispute is ``won``, credit it back (once); ``done`` is the outcome's detail."""
    refusal = _money_refusal(dispute, "amount")
    if refusal is not None:
        return refusal
    wallet = _dispute_wallet(dispute)
    if wallet is None:
        return _failed("no organization for this dispute")
    amount = stripe_gateway.amount_nanos(int(dispute["amount"]))
    charge = _id_of(dispute.get("charge"))
    post_entry(
        wallet_id=wallet.pk,
        amount_nanos=-amount,
        kind=EntryKind.DISPUTE,
        idempotency_key=f"dispute:{dispute['id']}",
        external_ref=charge,
        description=f"Dispute of ${nanos_to_usd_str(amount)} ({dispute.get('reason', '')})",
    )
    if won:
        post_entry(
            wallet_id=wallet.pk,
            amount_nanos=amount,
            kind=EntryKind.DISPUTE_WON,
            idempotency_key=f"dispute_won:{dispute['id']}",
            external_ref=charge,
            description=f"Dispute won: ${nanos_to_usd_str(amount)} reinstated",
        )
    return _ok(done)


def _dispute_created(dispute: Obj) -> _Outcome:
    if str(dispute.get("status", "")).startswith("warning_"):
        return _ignored("inquiry: no funds withdrawn")
    return _dispute_moved(dispute, won=False, done="dispute debited")


def _dispute_closed(dispute: Obj) -> _Outcome:
    status = dispute.get("status")
    if status not in ("won", "lost"):
        return _ignored(f"dispute closed as {status!r}: no funds moved")
    return _dispute_moved(dispute, won=status == "won", done=f"dispute {status}")


def _card_store(obj: Obj, *, what: str) -> _Outcome:
    """Store the payment method a top-up (or a setup session) saved for off-session use."""
    method = _id_of(obj.get("payment_method"))
    if not method:
        return _ignored(f"{what} saved no payment method")
    wallet = _wallet_by(customer=_customer_of(obj), metadata=obj.get("metadata"))
    if wallet is None:
        return _failed(f"no organization for this {what}")
    Wallet.objects.filter(pk=wallet.pk).update(
        auto_recharge_payment_method_id=method[:64], auto_recharge_last_error=""
    )
    return _ok(f"card saved from the {what}")


def _setup_intent_succeeded(intent: Obj) -> _Outcome:
    if (intent.get("metadata") or {}).get("infrai_kind") != "card_setup":
        return _ignored("not an infrai card setup")
    return _card_store(intent, what="card setup")


def _payment_intent_succeeded(intent: Obj) -> _Outcome:
    metadata = intent.get("metadata") or {}
    if metadata.get("infrai_kind") == "topup" and intent.get("setup_future_usage") == "off_session":
        # The money comes from the checkout events; this one only carries the saved card.
        return _card_store(intent, what="top-up")
    if metadata.get("infrai_kind") != "auto_recharge":
        return _ignored("not an auto-recharge (Checkout top-ups are credited by checkout events)")
    amount_field = "amount_received" if intent.get("amount_received") is not None else "amount"
    refusal = _money_refusal(intent, amount_field)
    if refusal is not None:
        return refusal
    wallet = _wallet_by(customer=_customer_of(intent), metadata=metadata)
    if wallet is None:
        return _failed("no organization for this payment")
    amount = stripe_gateway.amount_nanos(int(intent[amount_field]))
    _, created = post_entry(
        wallet_id=wallet.pk,
        amount_nanos=amount,
        kind=EntryKind.AUTO_RECHARGE,
        idempotency_key=f"auto_recharge:{intent['id']}",
        external_ref=intent["id"],
        description=f"Auto-recharge of ${nanos_to_usd_str(amount)}",
    )
    return _ok("credited" if created else "already credited")


_HANDLERS = {
    "checkout.session.completed": _checkout_completed,
    "checkout.session.async_payment_succeeded": _credit_checkout,
    "checkout.session.async_payment_failed": lambda s: _checkout_closed_unpaid(
        s, TopUpStatus.FAILED
    ),
    "checkout.session.expired": lambda s: _checkout_closed_unpaid(s, TopUpStatus.EXPIRED),
    "charge.refunded": _charge_refunded,
    "charge.dispute.created": _dispute_created,
    "charge.dispute.closed": _dispute_closed,
    "payment_intent.succeeded": _payment_intent_succeeded,
    "setup_intent.succeeded": _setup_intent_succeeded,
}


# --- entry point ------------------------------------------------------------------------------


def webhook_receive(*, payload: bytes, signature_header: str) -> WebhookResult:
    """Verify, store and process one delivery (see the module docstring)."""
    try:
        event = stripe_gateway.webhook_event_verify(
            payload=payload, signature_header=signature_header
        )
    except stripe_gateway.BadSignature:
        return WebhookResult(400, "invalid signature")
    event_id = str(event["id"])
    if StripeEvent.objects.filter(event_id=event_id).exists():
        return WebhookResult(200, "duplicate", duplicate=True)
    handler = _HANDLERS.get(str(event["type"]))
    obj: Obj = (event.get("data") or {}).get("object") or {}
    try:
        with transaction.atomic(durable=True):
            outcome = handler(obj) if handler else _ignored("event type not handled")
            StripeEvent.objects.create(
                event_id=event_id,
                type=str(event["type"])[:64],
                status=outcome.status,
                livemode=bool(event.get("livemode")),
                stripe_created=dt.datetime.fromtimestamp(int(event.get("created") or 0), dt.UTC),
                payload=event,
                detail=outcome.detail[:255],
            )
    except IntegrityError:
        if StripeEvent.objects.filter(event_id=event_id).exists():
            return WebhookResult(200, "duplicate", duplicate=True)
        raise
    if outcome.status == StripeEventStatus.FAILED:
        log.error("stripe event %s (%s) failed: %s", event_id, event["type"], outcome.detail)
    elif outcome.status == StripeEventStatus.REFUSED:
        log.warning("stripe event %s (%s) refused: %s", event_id, event["type"], outcome.detail)
    return WebhookResult(200, outcome.detail, event_status=outcome.status)
