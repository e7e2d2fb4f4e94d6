"""Checkout top-up start (bounds, permissions), success/cancel pages, the staff adjustment."""

from __future__ import annotations

import pytest
from django.contrib.admin.sites import site

from accounts.models import Role, User
from accounts.services import membership_set
from billing import stripe_gateway
from billing.models import EntryKind, LedgerEntry, TopUp, Wallet
from tests.billing.conftest import USD

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkout_mock(monkeypatch):
    calls: list[dict] = []

    def create(**kw):
        calls.append(kw)
        return stripe_gateway.CheckoutSession(f"cs_test_{len(calls)}", "https://checkout.test/x")

    monkeypatch.setattr(stripe_gateway, "checkout_session_create", create)
    return calls


def test_topup_start_redirects_to_checkout_within_bounds(
    client, make_tenant, stripe_settings, checkout_mock
):
    tenant = make_tenant()
    user = User.objects.create_user("payer@example.com", "pw-123456789")
    membership_set(organization=tenant.org, user=user, role=Role.BILLING)
    client.force_login(user)
    url = f"/billing/topup/{tenant.org.slug}/start"
    response = client.post(url, {"amount_usd": "25.50"})
    assert response.status_code == 302 and response["Location"] == "https://checkout.test/x"
    assert checkout_mock[0]["amount_nanos"] == 25_500_000_000
    assert "{CHECKOUT_SESSION_ID}" in checkout_mock[0]["success_url"]
    assert TopUp.objects.get().status == "open"
    for bad in ("4.99", "1000.01", "10.001", "ten"):
        assert client.post(url, {"amount_usd": bad}).status_code == 400, bad
    assert Wallet.objects.get(organization=tenant.org).balance_nanos == 0
    assert client.get("/billing/topup/cancel").status_code == 200


def test_topup_start_requires_a_paying_role(client, make_tenant, stripe_settings, checkout_mock):
    tenant = make_tenant()
    user = User.objects.create_user("member@example.com", "pw-123456789")
    membership_set(organization=tenant.org, user=user, role=Role.MEMBER)
    client.force_login(user)
    assert (
        client.post(f"/billing/topup/{tenant.org.slug}/start", {"amount_usd": "10"}).status_code
        == 403
    )
    assert not checkout_mock


def test_staff_adjustment_adds_an_entry_and_balance_fields_are_read_only(admin_client, make_tenant):
    tenant = make_tenant(balance_nanos=5 * USD)
    wallet = Wallet.objects.get(organization=tenant.org)
    url = "/admin/billing/wallet/"
    form = admin_client.post(url, {"action": "adjust_balance", "_selected_action": [wallet.pk]})
    assert form.status_code == 200 and b"reason" in form.content
    token = form.context["form"].initial["token"]
    data = {
        "action": "adjust_balance",
        "_selected_action": [wallet.pk],
        "apply": "1",
        "amount_usd": "-1.25",
        "reason": "Goodwill correction for ticket #42",
        "token": token,
    }
    admin_client.post(url, data)
    admin_client.post(url, data)  # double submit: one entry
    entry = LedgerEntry.objects.get(kind=EntryKind.ADJUSTMENT)
    assert entry.amount_nanos == -1_250_000_000
    assert entry.description == "Goodwill correction for ticket #42"
    assert entry.created_by is not None and entry.created_by.is_staff
    wallet.refresh_from_db()
    assert wallet.balance_nanos == 3_750_000_000
    model_admin = site._registry[Wallet]
    assert {"balance_usd", "held_usd"} <= set(model_admin.readonly_fields)  # shown in USD
    assert {"balance_nanos", "held_nanos"} <= set(model_admin.exclude)  # never a form field
    admin_client.post(f"{url}{wallet.pk}/change/", {"balance_nanos": 10**15, "held_nanos": 0})
    wallet.refresh_from_db()
    assert wallet.balance_nanos == 3_750_000_000
    no_reason = {**data, "reason": "", "token": "other"}
    admin_client.post(url, no_reason)
    assert LedgerEntry.objects.filter(kind=EntryKind.ADJUSTMENT).count() == 1
