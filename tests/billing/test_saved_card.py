"""The saved card: Checkout saves it, the webhook stores it, replacing or removing it."""

from __future__ import annotations

import secrets

import pytest

from billing import stripe_gateway
from billing.models import LedgerEntry, StripeEvent, StripeEventStatus, Wallet
from billing.services import cards
from billing.services.recharge import auto_recharge_configure
from billing.services.topups import customer_ensure
from tests.billing.conftest import USD, signed, stripe_event

pytestmark = pytest.mark.django_db
URL = "/billing/stripe/webhook"


def _post(client, event):
    body, header = signed(event)
    return client.post(
        URL, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )


def test_checkout_asks_stripe_to_save_the_card_for_off_session_use(
    make_tenant, stripe_settings, monkeypatch
):
    sent = {}

    class Sessions:
        def create(self, params):
            sent.update(params)
            return type("S", (), {"id": "cs_test_1", "url": "https://checkout.test/1"})()

    fake = type("C", (), {})()
    fake.v1 = type("V", (), {"checkout": type("K", (), {"sessions": Sessions()})()})()
    monkeypatch.setattr(stripe_gateway, "client", lambda: fake)
    stripe_gateway.checkout_session_create(
        customer_id="cus_1",
        organization_id=1,
        amount_nanos=10 * USD,
        success_url="http://t/s",
        cancel_url="http://t/c",
    )
    assert sent["payment_intent_data"]["setup_future_usage"] == "off_session"
    assert sent["mode"] == "payment"


def test_the_top_up_payment_stores_its_card_and_auto_recharge_can_then_be_switched_on(
    client, make_tenant, stripe_settings
):
    tenant = make_tenant()
    customer = customer_ensure(organization=tenant.org)
    pm = stripe_gateway.client().v1.payment_methods.create(
        params={
            "type": "card",
            "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2040, "cvc": "123"},
        }
    )
    intent = {
        "id": f"pi_{secrets.token_hex(6)}",
        "object": "payment_intent",
        "amount": 2000,
        "amount_received": 2000,
        "currency": "usd",
        "customer": customer,
        "payment_method": pm.id,
        "setup_future_usage": "off_session",
        "metadata": {"organization_id": str(tenant.org.pk), "infrai_kind": "topup"},
    }
    assert _post(client, stripe_event("payment_intent.succeeded", intent)).status_code == 200
    wallet = Wallet.objects.get(organization=tenant.org)
    assert wallet.auto_recharge_payment_method_id == pm.id
    assert not LedgerEntry.objects.filter(wallet=wallet).exists()  # money comes from checkout
    assert StripeEvent.objects.get().status == StripeEventStatus.PROCESSED
    configured = auto_recharge_configure(
        organization=tenant.org,
        payment_method_id=wallet.auto_recharge_payment_method_id,
        threshold_nanos=5 * USD,
        amount_nanos=10 * USD,
    )
    assert configured.auto_recharge_enabled
    assert "4242" in cards.card_label(organization=tenant.org)


def test_a_top_up_that_did_not_save_its_card_stores_nothing(client, make_tenant, stripe_settings):
    tenant = make_tenant()
    intent = {
        "id": "pi_nosave",
        "object": "payment_intent",
        "amount": 2000,
        "currency": "usd",
        "payment_method": "pm_x",
        "metadata": {"organization_id": str(tenant.org.pk), "infrai_kind": "topup"},
    }
    _post(client, stripe_event("payment_intent.succeeded", intent))
    assert Wallet.objects.get(organization=tenant.org).auto_recharge_payment_method_id == ""
    assert StripeEvent.objects.get().status == StripeEventStatus.IGNORED


def test_a_setup_session_replaces_the_card_and_removing_it_turns_auto_recharge_off(
    client, make_tenant, stripe_settings
):
    tenant = make_tenant()
    customer = customer_ensure(organization=tenant.org)
    Wallet.objects.filter(organization=tenant.org).update(
        auto_recharge_payment_method_id="pm_old", auto_recharge_enabled=True
    )
    pm = stripe_gateway.client().v1.payment_methods.create(
        params={
            "type": "card",
            "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2040, "cvc": "123"},
        }
    )
    stripe_gateway.payment_method_attach(customer_id=customer, payment_method_id=pm.id)
    setup = {
        "id": "seti_1",
        "object": "setup_intent",
        "customer": customer,
        "payment_method": pm.id,
        "metadata": {"organization_id": str(tenant.org.pk), "infrai_kind": "card_setup"},
    }
    assert _post(client, stripe_event("setup_intent.succeeded", setup)).status_code == 200
    assert Wallet.objects.get(organization=tenant.org).auto_recharge_payment_method_id == pm.id
    assert cards.card_remove(organization=tenant.org) is True
    wallet = Wallet.objects.get(organization=tenant.org)
    assert (wallet.auto_recharge_payment_method_id, wallet.auto_recharge_enabled) == ("", False)
    assert cards.card_remove(organization=tenant.org) is False
