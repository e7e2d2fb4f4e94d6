"""Receipts on the wallet page: one per payment, a PDF per receipt, tenancy-checked; and the
low-balance e-mail threshold form."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Role, User
from accounts.services import membership_set, organization_create
from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services.wallet import wallet_credit
from tests.dashboard.test_statement_escaping import _pdf_text

pytestmark = pytest.mark.django_db
USD = 1_000_000_000


def _org(name: str, role: Role = Role.OWNER) -> tuple[object, Client]:
    user = User.objects.create_user(
        email=f"{name.lower()}@example.com", password="x" * 12, email_verified=True
    )
    org = organization_create(name=name)
    membership_set(organization=org, user=user, role=role)
    client = Client()
    client.force_login(user)
    return org, client


def _paid(org, ref: str, amount: int, kind: EntryKind = EntryKind.TOPUP) -> LedgerEntry:
    return wallet_credit(
        organization=org, amount_nanos=amount, kind=kind, idempotency_key=f"checkout:{ref}"
    )


def test_each_payment_has_a_receipt_pdf_on_the_wallet_page():
    org, client = _org("Payer", Role.BILLING)
    topup = _paid(org, "pi_one", 25 * USD)
    recharge = _paid(org, "pi_two", 10 * USD, EntryKind.AUTO_RECHARGE)
    wallet_credit(  # not a payment: no receipt
        organization=org, amount_nanos=USD, kind=EntryKind.CREDIT, idempotency_key="promo"
    )
    page = client.get(f"/o/{org.slug}/wallet/").content.decode()
    assert f"INF-{topup.pk:08d}" in page and f"INF-{recharge.pk:08d}" in page
    assert page.count("(PDF)</a>") == 2
    response = client.get(f"/o/{org.slug}/wallet/receipts/{topup.pk}/")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    number = f"INF-{topup.pk:08d}"
    assert response["Content-Disposition"] == f'attachment; filename="infrai-receipt-{number}.pdf"'
    text = _pdf_text(response.content)
    for shown in (number.encode(), b"Payer", b"25", b"Stripe Checkout"):
        assert shown in text


def test_another_organizations_receipt_and_a_non_payment_are_404():
    org, client = _org("Mine")
    other, _ = _org("Theirs")
    theirs = _paid(other, "pi_theirs", 5 * USD)
    promo = wallet_credit(
        organization=org, amount_nanos=USD, kind=EntryKind.CREDIT, idempotency_key="p"
    )
    assert client.get(f"/o/{org.slug}/wallet/receipts/{theirs.pk}/").status_code == 404
    assert client.get(f"/o/{org.slug}/wallet/receipts/{promo.pk}/").status_code == 404
    assert client.get(f"/o/{other.slug}/wallet/receipts/{theirs.pk}/").status_code == 404
    member_org, member = _org("Members", Role.MEMBER)
    paid = _paid(member_org, "pi_m", 5 * USD)
    assert member.get(f"/o/{member_org.slug}/wallet/receipts/{paid.pk}/").status_code == 403


def test_the_low_balance_threshold_is_set_on_the_wallet_page():
    org, client = _org("Alerted")
    page = client.get(f"/o/{org.slug}/wallet/").content.decode()
    assert "E-mail when the available balance falls below (USD)" in page
    assert 'value="1.00"' in page or 'value="1"' in page  # the default, $1
    assert (
        client.post(f"/o/{org.slug}/wallet/low-balance/", {"threshold_usd": "12.5"}).status_code
        == 302
    )
    wallet = Wallet.objects.get(organization=org)
    assert (wallet.low_balance_threshold_nanos, wallet.low_balance_armed) == (12_500_000_000, True)
    refused = client.post(f"/o/{org.slug}/wallet/low-balance/", {"threshold_usd": "-1"})
    assert refused.status_code == 400
    assert Wallet.objects.get(organization=org).low_balance_threshold_nanos == 12_500_000_000
