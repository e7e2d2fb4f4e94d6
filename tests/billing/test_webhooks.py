"""The Stripe webhook: signatures, idempotency, every delivery order, refunds and disputes."""

from __future__ import annotations

import itertools
import secrets
import threading

import httpx
import pytest

from billing import stripe_gateway
from billing.audit import audit_findings
from billing.models import EntryKind, LedgerEntry, StripeEvent, StripeEventStatus, TopUp, Wallet
from billing.services.recharge import auto_recharge_wallet
from billing.services.topups import topup_checkout_start
from tests.billing.conftest import (
    USD,
    WEBHOOK_SECRET,
    arm_auto_recharge,
    signed,
    stripe_event,
)

URL = "/billing/stripe/webhook"
CENT = 10_000_000


def _post(client, event, **kw):
    body, header = signed(event, **kw)
    return client.post(
        URL, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )


def _start_topup(tenant, monkeypatch, amount_nanos=20 * USD) -> TopUp:
    """A Checkout top-up: a real customer on localstripe; the session itself is mocked
    (localstripe has no Checkout) at the one Stripe module."""
    session_id = f"cs_test_{secrets.token_hex(8)}"
    monkeypatch.setattr(
        stripe_gateway,
        "checkout_session_create",
        lambda **kw: stripe_gateway.CheckoutSession(
            session_id, f"https://checkout.test/{session_id}"
        ),
    )
    started = topup_checkout_start(
        organization=tenant.org,
        amount_nanos=amount_nanos,
        success_url="http://t/s",
        cancel_url="http://t/c",
    )
    return TopUp.objects.get(pk=started.topup_id)


def _session(topup: TopUp, *, payment_status: str, pi: str) -> dict:
    return {
        "id": topup.checkout_session_id,
        "object": "checkout.session",
        "amount_total": topup.amount_nanos // CENT,
        "currency": "usd",
        "customer": topup.wallet.stripe_customer_id,
        "client_reference_id": str(topup.wallet.organization_id),
        "metadata": {"organization_id": str(topup.wallet.organization_id)},
        "payment_intent": pi,
        "payment_status": payment_status,
        "mode": "payment",
    }


def _charge(topup: TopUp, *, pi: str, charge_id: str, refunded_cents: int) -> dict:
    return {
        "id": charge_id,
        "object": "charge",
        "amount": topup.amount_nanos // CENT,
        "amount_refunded": refunded_cents,
        "currency": "usd",
        "customer": topup.wallet.stripe_customer_id,
        "payment_intent": pi,
        "refunded": True,
        "metadata": {},
    }


def _balance(tenant) -> int:
    return Wallet.objects.get(organization=tenant.org).balance_nanos


@pytest.mark.django_db
def test_paid_checkout_credits_once_and_the_redirect_never_does(
    client, make_tenant, stripe_settings, monkeypatch
):
    tenant = make_tenant()
    topup = _start_topup(tenant, monkeypatch)
    assert topup.wallet.stripe_customer_id.startswith("cus_")  # created on localstripe
    assert (
        client.get("/billing/topup/success?session_id=" + topup.checkout_session_id).status_code
        == 200
    )
    assert _balance(tenant) == 0
    event = stripe_event(
        "checkout.session.completed", _session(topup, payment_status="paid", pi="pi_1")
    )
    assert _post(client, event).status_code == 200
    assert _post(client, event).status_code == 200  # redelivery
    assert _balance(tenant) == 20 * USD
    entry = LedgerEntry.objects.get(kind=EntryKind.TOPUP)
    assert entry.idempotency_key == f"checkout:{topup.checkout_session_id}"
    topup.refresh_from_db()
    assert topup.status == "paid" and topup.payment_intent_id == "pi_1"
    assert StripeEvent.objects.get().status == StripeEventStatus.PROCESSED


@pytest.mark.django_db
def test_unpaid_completion_waits_for_async_success_or_failure(
    client, make_tenant, stripe_settings, monkeypatch
):
    tenant = make_tenant()
    ok, bad = _start_topup(tenant, monkeypatch), _start_topup(tenant, monkeypatch)
    for topup in (ok, bad):
        _post(
            client,
            stripe_event(
                "checkout.session.completed", _session(topup, payment_status="unpaid", pi="pi_x")
            ),
        )
    assert _balance(tenant) == 0
    _post(
        client,
        stripe_event(
            "checkout.session.async_payment_failed",
            _session(bad, payment_status="unpaid", pi="pi_x"),
        ),
    )
    _post(
        client,
        stripe_event(
            "checkout.session.async_payment_succeeded",
            _session(ok, payment_status="paid", pi="pi_y"),
        ),
    )
    assert _balance(tenant) == 20 * USD
    assert TopUp.objects.get(pk=bad.pk).status == "failed"


def _topup_events(topup: TopUp) -> list[dict]:
    pi, ch = f"pi_{secrets.token_hex(6)}", f"ch_{secrets.token_hex(6)}"
    return [
        stripe_event("checkout.session.completed", _session(topup, payment_status="unpaid", pi=pi)),
        stripe_event(
            "checkout.session.async_payment_succeeded",
            _session(topup, payment_status="paid", pi=pi),
        ),
        stripe_event(
            "payment_intent.succeeded",
            {
                "id": pi,
                "object": "payment_intent",
                "amount": 2000,
                "metadata": {"organization_id": "x", "infrai_kind": "topup"},
                "customer": topup.wallet.stripe_customer_id,
            },
        ),
        stripe_event("charge.refunded", _charge(topup, pi=pi, charge_id=ch, refunded_cents=500)),
        stripe_event("charge.refunded", _charge(topup, pi=pi, charge_id=ch, refunded_cents=800)),
    ]


@pytest.mark.django_db
def test_every_delivery_order_of_a_topup_gives_the_same_balance(
    client, make_tenant, stripe_settings, monkeypatch
):
    """$20 paid asynchronously, then refunded $5 and $3 more: $12 whatever the order."""
    orders = 0
    for perm in itertools.permutations(range(5)):
        tenant = make_tenant()
        events = _topup_events(_start_topup(tenant, monkeypatch))
        for i in (*perm, perm[0], perm[-1]):  # and two redeliveries
            assert _post(client, events[i]).status_code == 200
        assert _balance(tenant) == 12 * USD, perm
        kinds = sorted(
            LedgerEntry.objects.filter(wallet__organization=tenant.org).values_list(
                "kind", "amount_nanos"
            )
        )
        assert sum(a for _, a in kinds) == 12 * USD
        assert [k for k, _ in kinds].count(EntryKind.TOPUP) == 1
        orders += 1
    print(f"\n[webhooks] delivery orders tried={orders} (5 events + 2 redeliveries each), all $12")
    assert orders == 120
    assert not audit_findings().drift


@pytest.mark.django_db
@pytest.mark.parametrize(
    "case",
    ["wrong-secret", "tampered", "missing", "stale", "garbage"],
)
def test_bad_or_stale_signature_is_400_and_writes_nothing(
    client, make_tenant, stripe_settings, monkeypatch, case
):
    tenant = make_tenant()
    topup = _start_topup(tenant, monkeypatch)
    event = stripe_event(
        "checkout.session.completed", _session(topup, payment_status="paid", pi="pi_1")
    )
    body, header = signed(
        event,
        secret="whsec_wrong" if case == "wrong-secret" else WEBHOOK_SECRET,
        age_s=600 if case == "stale" else 0,
    )
    if case == "tampered":
        body = body.replace(b'"amount_total": 2000', b'"amount_total": 200000')
    if case == "missing":
        header = ""
    if case == "garbage":
        header = "t=1,v1=deadbeef"
    response = client.post(
        URL, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )
    assert response.status_code == 400
    assert not StripeEvent.objects.exists()
    assert not LedgerEntry.objects.exists()
    assert _balance(tenant) == 0


@pytest.mark.django_db
def test_unattributable_event_is_stored_failed_without_money(client, stripe_settings):
    event = stripe_event(
        "charge.refunded",
        {
            "id": "ch_x",
            "amount_refunded": 100,
            "currency": "usd",
            "customer": "cus_nobody",
            "metadata": {},
        },
    )
    assert _post(client, event).status_code == 200
    stored = StripeEvent.objects.get()
    assert stored.status == StripeEventStatus.FAILED and "no organization" in stored.detail
    assert not LedgerEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_duplicate_storm_over_http_is_credited_once(
    live_url, make_tenant, stripe_settings, monkeypatch
):
    tenant = make_tenant()
    topup = _start_topup(tenant, monkeypatch)
    event = stripe_event(
        "checkout.session.completed", _session(topup, payment_status="paid", pi="pi_s")
    )
    other = stripe_event(
        "checkout.session.async_payment_succeeded",
        _session(topup, payment_status="paid", pi="pi_s"),
    )
    statuses: list[int] = []
    gate = threading.Barrier(16)

    def deliver(n: int) -> None:
        body, header = signed(event if n % 2 else other)
        gate.wait()
        with httpx.Client(base_url=live_url, timeout=30) as http:
            for _ in range(3):
                r = http.post(
                    URL,
                    content=body,
                    headers={"Stripe-Signature": header, "Content-Type": "application/json"},
                )
                statuses.append(r.status_code)

    threads = [threading.Thread(target=deliver, args=(n,)) for n in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    credited = LedgerEntry.objects.filter(kind=EntryKind.TOPUP).count()
    print(
        f"\n[webhooks] duplicate storm deliveries={len(statuses)} "
        f"statuses={sorted(set(statuses))} events_stored={StripeEvent.objects.count()} "
        f"topup_entries={credited} balance={_balance(tenant)}"
    )
    assert statuses == [200] * 48
    assert StripeEvent.objects.count() == 2
    assert credited == 1 and _balance(tenant) == 20 * USD


@pytest.mark.django_db
def test_dispute_on_an_auto_recharge_charge_in_any_order(
    client, make_tenant, stripe_settings, django_capture_on_commit_callbacks
):
    """The charge is real (localstripe); the dispute events are hand-made and signed."""
    tenant = make_tenant()
    arm_auto_recharge(tenant)
    assert auto_recharge_wallet(wallet_id=tenant.org.wallet.pk) == "charged"
    entry = LedgerEntry.objects.get(kind=EntryKind.AUTO_RECHARGE)
    intent = stripe_gateway.client().v1.payment_intents.retrieve(entry.external_ref)
    charge_id = (
        intent.latest_charge if isinstance(intent.latest_charge, str) else intent.latest_charge.id
    )

    def dispute(dispute_id: str, type_: str, status: str, **more: str) -> dict:
        obj = {"id": dispute_id, "object": "dispute", "amount": 400, "currency": "usd",
               "charge": charge_id, "status": status, **more}  # fmt: skip
        return stripe_event(type_, obj)

    for n, order in enumerate([("created", "won"), ("won", "created"), ("created", "lost")]):
        dispute_id = f"dp_{n}"
        events = {
            "created": dispute(
                dispute_id, "charge.dispute.created", "needs_response", reason="fraudulent"
            ),
            "won": dispute(dispute_id, "charge.dispute.closed", "won"),
            "lost": dispute(dispute_id, "charge.dispute.closed", "lost"),
        }
        for name in (*order, order[0]):
            assert _post(client, events[name]).status_code == 200
    # two won (net 0), one lost (-$4)
    assert _balance(tenant) == 10 * USD - 4 * USD
    assert LedgerEntry.objects.filter(kind=EntryKind.DISPUTE).count() == 3
    assert LedgerEntry.objects.filter(kind=EntryKind.DISPUTE_WON).count() == 2
    # An auto-recharge webhook for the same PaymentIntent does not credit twice.
    pi_event = stripe_event(
        "payment_intent.succeeded",
        {
            "id": intent.id,
            "object": "payment_intent",
            "amount": 1000,
            "amount_received": 1000,
            "currency": "usd",
            "customer": tenant.org.wallet.stripe_customer_id,
            "metadata": {"infrai_kind": "auto_recharge", "organization_id": str(tenant.org.pk)},
        },
    )
    _post(client, pi_event)
    assert LedgerEntry.objects.filter(kind=EntryKind.AUTO_RECHARGE).count() == 1
    assert not audit_findings().drift


# --- events that would move money must carry a positive amount in USD -------------------------

_CHECKOUT_FAULTS = {
    "negative": {"amount_total": -2000},
    "zero": {"amount_total": 0},
    "missing": {"amount_total": None},
    "string": {"amount_total": "2000"},
    "float": {"amount_total": 2000.5},
    "eur": {"currency": "eur"},
    "no-currency": {"currency": None},
}


def _without_nones(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if v is not None}


def _assert_refused(response, caplog, *, balance, tenant, expected_balance) -> None:
    assert response.status_code == 200  # Stripe stops retrying
    stored = StripeEvent.objects.latest("received_at")
    assert stored.status == StripeEventStatus.REFUSED, stored.detail
    assert "nothing moved" in stored.detail
    assert any(
        r.levelname == "WARNING" and "refused" in r.getMessage()
        for r in caplog.records
        if r.name == "billing.services.webhooks"
    )
    assert balance(tenant) == expected_balance


@pytest.mark.django_db
@pytest.mark.parametrize("fault", list(_CHECKOUT_FAULTS))
@pytest.mark.parametrize(
    "event_type", ["checkout.session.completed", "checkout.session.async_payment_succeeded"]
)
def test_checkout_without_a_positive_usd_amount_credits_nothing(
    client, make_tenant, stripe_settings, monkeypatch, caplog, fault, event_type
):
    tenant = make_tenant()
    topup = _start_topup(tenant, monkeypatch)
    session = _without_nones(
        {**_session(topup, payment_status="paid", pi="pi_bad"), **_CHECKOUT_FAULTS[fault]}
    )
    response = _post(client, stripe_event(event_type, session))
    _assert_refused(response, caplog, balance=_balance, tenant=tenant, expected_balance=0)
    assert not LedgerEntry.objects.exists()
    topup.refresh_from_db()
    assert topup.status == "open"  # not marked paid either


def _paid_topup(client, tenant, monkeypatch) -> tuple[TopUp, str]:
    topup = _start_topup(tenant, monkeypatch)
    pi = f"pi_{secrets.token_hex(6)}"
    ok = _post(
        client,
        stripe_event("checkout.session.completed", _session(topup, payment_status="paid", pi=pi)),
    )
    assert ok.status_code == 200 and _balance(tenant) == 20 * USD
    return topup, pi


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fault",
    [
        {"amount_refunded": None},
        {"amount_refunded": -500},
        {"amount_refunded": 0},
        {"currency": "eur"},
        {"currency": None},
    ],
    ids=["missing", "negative", "zero", "eur", "no-currency"],
)
def test_refund_without_a_positive_usd_amount_debits_nothing(
    client, make_tenant, stripe_settings, monkeypatch, caplog, fault
):
    tenant = make_tenant()
    topup, pi = _paid_topup(client, tenant, monkeypatch)
    charge = _without_nones(
        {**_charge(topup, pi=pi, charge_id="ch_bad", refunded_cents=500), **fault}
    )
    response = _post(client, stripe_event("charge.refunded", charge))
    _assert_refused(response, caplog, balance=_balance, tenant=tenant, expected_balance=20 * USD)
    assert not LedgerEntry.objects.filter(kind=EntryKind.REFUND).exists()


def _dispute(pi: str, **fault) -> dict:
    return _without_nones(
        {
            "id": f"dp_{secrets.token_hex(4)}",
            "object": "dispute",
            "amount": 400,
            "currency": "usd",
            "charge": "ch_d",
            "payment_intent": pi,
            "status": "lost",
            "reason": "fraudulent",
            **fault,
        }
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fault",
    [{"amount": None}, {"amount": -400}, {"amount": "400"}, {"currency": "gbp"}],
    ids=["missing", "negative", "string", "gbp"],
)
@pytest.mark.parametrize("event_type", ["charge.dispute.created", "charge.dispute.closed"])
def test_dispute_without_a_positive_usd_amount_debits_nothing(
    client, make_tenant, stripe_settings, monkeypatch, caplog, fault, event_type
):
    tenant = make_tenant()
    _, pi = _paid_topup(client, tenant, monkeypatch)
    status = "needs_response" if event_type.endswith("created") else "won"
    response = _post(client, stripe_event(event_type, _dispute(pi, status=status, **fault)))
    _assert_refused(response, caplog, balance=_balance, tenant=tenant, expected_balance=20 * USD)
    assert not LedgerEntry.objects.filter(
        kind__in=[EntryKind.DISPUTE, EntryKind.DISPUTE_WON]
    ).exists()


@pytest.mark.django_db
def test_a_valid_dispute_still_debits(client, make_tenant, stripe_settings, monkeypatch):
    """The control for the refusals above: the same event with a good amount moves money."""
    tenant = make_tenant()
    _, pi = _paid_topup(client, tenant, monkeypatch)
    assert _post(client, stripe_event("charge.dispute.created", _dispute(pi))).status_code == 200
    assert _balance(tenant) == 20 * USD - 4 * USD


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fault",
    [{"amount_received": -1000}, {"amount_received": None, "amount": None}, {"currency": "eur"}],
    ids=["negative", "missing", "eur"],
)
def test_auto_recharge_payment_without_a_positive_usd_amount_credits_nothing(
    client, make_tenant, stripe_settings, caplog, fault
):
    tenant = make_tenant()
    intent = _without_nones(
        {
            "id": f"pi_{secrets.token_hex(6)}",
            "object": "payment_intent",
            "amount": 1000,
            "amount_received": 1000,
            "currency": "usd",
            "customer": "cus_none",
            "metadata": {"infrai_kind": "auto_recharge", "organization_id": str(tenant.org.pk)},
            **fault,
        }
    )
    response = _post(client, stripe_event("payment_intent.succeeded", intent))
    _assert_refused(response, caplog, balance=_balance, tenant=tenant, expected_balance=0)
    assert not LedgerEntry.objects.exists()
