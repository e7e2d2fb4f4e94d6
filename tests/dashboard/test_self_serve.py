"""Self-serve billing pages: starter credit at verification, the "add credit" step, the
auto-recharge form's rules and the card page."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from accounts.models import Membership, Role, User
from billing import stripe_gateway
from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services import wallet_credit
from billing.stripe_gateway import CheckoutSession

pytestmark = pytest.mark.django_db


def _fund(org, nanos: int) -> None:
    wallet_credit(organization=org, amount_nanos=nanos, kind=EntryKind.TOPUP, idempotency_key="f")


def test_verifying_the_address_grants_the_starter_credit_and_the_first_call_step_follows(client):
    client.post(
        "/signup/",
        {"email": "new@example.com", "password": "a long passphrase", "organization_name": "New"},
    )
    user = User.objects.get(email="new@example.com")
    org = Membership.objects.get(user=user).organization
    assert Wallet.objects.get(organization=org).balance_nanos == 0  # wallet exists, no credit yet
    link = re.search(r"https?://\S+/verify/\S+/", mail.outbox[0].body)
    assert link is not None
    client.get(link.group(0))
    entry = LedgerEntry.objects.get(wallet__organization=org)
    assert (entry.kind, entry.amount_nanos) == (EntryKind.STARTER_CREDIT, 500_000_000)
    client.get(link.group(0))  # the link again grants nothing more
    assert LedgerEntry.objects.filter(wallet__organization=org).count() == 1
    page = client.get(f"/o/{org.slug}/start/").content.decode()
    assert 'data-step="credit"' in page and "The balance covers your first calls" in page


def test_getting_started_and_overview_show_add_credit_when_the_balance_cannot_cover_a_call(
    member_client,
):
    client, _, org = member_client(Role.OWNER)
    start = client.get(f"/o/{org.slug}/start/").content.decode()
    step = start.split('data-testid="step-credit"', 1)[1].split("</li>", 1)[0]
    assert "cannot cover a call" in step and f"/o/{org.slug}/wallet/" in step
    member, _, _ = member_client(Role.MEMBER, org=org)
    step = member.get(f"/o/{org.slug}/start/").content.decode().split('step-credit"', 1)[1]
    assert "Ask an owner" in step.split("</li>", 1)[0]
    _fund(org, 1_000_000_000)
    start = client.get(f"/o/{org.slug}/start/").content.decode()
    assert "cannot cover a call" not in start


def test_auto_recharge_is_disabled_with_a_reason_until_a_card_is_saved(member_client, settings):
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    client, _, org = member_client(Role.BILLING)
    page = client.get(f"/o/{org.slug}/wallet/").content.decode()
    form = page.split('data-testid="recharge-form"', 1)[1].split("</form>", 1)[0]
    assert "<fieldset" in form and " disabled" in form.split("<fieldset", 1)[1].split(">", 1)[0]
    assert "none is saved yet" in form
    # Posted anyway (a stale page): refused, and the typed values come back.
    response = client.post(
        f"/o/{org.slug}/wallet/auto-recharge/",
        {"enabled": "on", "threshold_usd": "7.50", "amount_usd": "30"},
    )
    assert response.status_code == 400
    text = response.content.decode()
    assert 'value="7.50"' in text and 'value="30"' in text and "none is saved yet" in text
    assert not Wallet.objects.get(organization=org).auto_recharge_enabled


def test_with_a_saved_card_the_form_is_active_and_an_invalid_amount_keeps_what_was_typed(
    member_client, monkeypatch
):
    client, _, org = member_client(Role.OWNER)
    Wallet.objects.filter(organization=org).update(auto_recharge_payment_method_id="pm_saved")
    page = client.get(f"/o/{org.slug}/wallet/").content.decode()
    form = page.split('data-testid="recharge-form"', 1)[1].split("</form>", 1)[0]
    assert " disabled" not in form.split("<fieldset", 1)[1].split(">", 1)[0]
    response = client.post(
        f"/o/{org.slug}/wallet/auto-recharge/",
        {"enabled": "on", "threshold_usd": "5", "amount_usd": "0.5"},
    )
    assert response.status_code == 400 and 'value="0.5"' in response.content.decode()
    monkeypatch.setattr(stripe_gateway, "customer_create", lambda **kw: "cus_1")
    monkeypatch.setattr(stripe_gateway, "payment_method_attach", lambda **kw: "pm_saved")
    response = client.post(
        f"/o/{org.slug}/wallet/auto-recharge/",
        {"enabled": "on", "threshold_usd": "5", "amount_usd": "20"},
    )
    assert response.status_code == 302
    wallet = Wallet.objects.get(organization=org)
    assert wallet.auto_recharge_enabled and wallet.auto_recharge_amount_nanos == 20_000_000_000


def test_card_page_replaces_via_checkout_in_setup_mode_and_removes(
    member_client, settings, monkeypatch
):
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    client, _, org = member_client(Role.ADMIN)
    assert 'data-testid="no-card"' in client.get(f"/o/{org.slug}/wallet/card/").content.decode()
    seen = {}
    monkeypatch.setattr(stripe_gateway, "customer_create", lambda **kw: "cus_1")

    def setup_session(**kw):
        seen.update(kw)
        return CheckoutSession("cs_setup", "https://checkout.test/setup")

    monkeypatch.setattr(stripe_gateway, "checkout_setup_session_create", setup_session)
    response = client.post(f"/o/{org.slug}/wallet/card/replace/")
    assert response["Location"] == "https://checkout.test/setup"
    assert seen["success_url"].endswith(f"/o/{org.slug}/wallet/card/?setup=saved")
    Wallet.objects.filter(organization=org).update(
        auto_recharge_payment_method_id="pm_1", auto_recharge_enabled=True
    )
    monkeypatch.setattr(stripe_gateway, "payment_method_label", lambda **kw: "visa •••• 4242")
    assert "visa •••• 4242" in client.get(f"/o/{org.slug}/wallet/card/").content.decode()
    detached = []
    monkeypatch.setattr(stripe_gateway, "payment_method_detach", lambda **kw: detached.append(kw))
    client.post(f"/o/{org.slug}/wallet/card/remove/")
    wallet = Wallet.objects.get(organization=org)
    assert detached == [{"payment_method_id": "pm_1"}]
    assert (wallet.auto_recharge_payment_method_id, wallet.auto_recharge_enabled) == ("", False)


def test_a_member_cannot_reach_the_card_page(member_client):
    client, _, org = member_client(Role.MEMBER)
    assert client.get(f"/o/{org.slug}/wallet/card/").status_code == 403
    assert client.post(f"/o/{org.slug}/wallet/card/remove/").status_code == 403
