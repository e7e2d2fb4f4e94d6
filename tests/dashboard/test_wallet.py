"""The wallet page, ledger pages and the monthly statement (CSV and PDF)."""

from __future__ import annotations

import csv
import io

import pytest
from django.utils import timezone

from accounts.models import Role
from billing import stripe_gateway
from billing.models import EntryKind, TopUp
from billing.services import wallet_credit
from billing.stripe_gateway import CheckoutSession
from dashboard import selectors
from dashboard.forms import TopUpForm

pytestmark = pytest.mark.django_db(transaction=True)


def _credit(org, nanos: int, key: str, kind: EntryKind = EntryKind.TOPUP) -> None:
    wallet_credit(
        organization=org, amount_nanos=nanos, kind=kind, idempotency_key=key, description=key
    )


def test_wallet_shows_balance_and_ledger_with_older_pages(member_client):
    client, _, org = member_client(Role.BILLING)
    for i in range(30):
        _credit(org, 1_000_000_000, f"topup-{i}")
    first = client.get(f"/o/{org.slug}/wallet/").content.decode()
    assert "$30.00" in first
    assert "topup-29" in first and "topup-0<" not in first
    older = first.split('href="?before=', 1)[1].split('"', 1)[0]
    second = client.get(f"/o/{org.slug}/wallet/?before={older}").content.decode()
    assert "topup-0<" in second and "topup-29" not in second


def test_statement_csv_has_opening_lines_usage_per_day_and_closing(make_org, member_client):
    client, _, org = member_client(Role.OWNER)
    _credit(org, 10_000_000_000, "topup-a")
    _credit(org, -1_500, "use-1", EntryKind.USAGE)
    _credit(org, -500, "use-2", EntryKind.USAGE)
    month = selectors.statement(organization=org, month=timezone.now().date()).month
    response = client.get(f"/o/{org.slug}/wallet/statement/?month={month:%Y-%m}&format=csv")
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["date", "kind", "description", "amount_usd"]
    assert rows[1][1:] == ["Opening balance", "", "0"]
    kinds = [(r[1], r[3]) for r in rows[2:-1]]
    assert ("Top-up", "10") in kinds
    assert ("Usage", "-0.000002") in kinds  # two calls summed into one line for the day
    assert rows[-1][1:] == ["Closing balance", "", "9.999998"]


def test_statement_pdf_is_a_pdf(member_client):
    client, _, org = member_client(Role.ADMIN)
    _credit(org, 2_000_000_000, "topup-pdf")
    response = client.get(
        f"/o/{org.slug}/wallet/statement/?month={timezone.now().date():%Y-%m}&format=pdf"
    )
    assert response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF")


def test_topup_form_validates_the_amount_within_billings_bounds(settings):
    settings.INFRAI_TOPUP_MIN_USD, settings.INFRAI_TOPUP_MAX_USD = 5, 1000
    form = TopUpForm({"amount": "custom", "custom_usd": "1"})
    assert not form.is_valid()
    assert form.errors["custom_usd"] == ["Choose an amount between $5 and $1,000."]
    form = TopUpForm({"amount": "custom"})
    assert not form.is_valid()
    assert form.errors["custom_usd"] == ["Enter the amount you want to add."]
    form = TopUpForm({"amount": "custom", "custom_usd": "12.50"})
    assert form.is_valid() and form.cleaned_data["amount_nanos"] == 12_500_000_000
    assert TopUpForm({"amount": "25"}).is_valid()


@pytest.fixture
def fake_checkout(monkeypatch, settings):
    """Stripe Checkout faked at billing's one Stripe module (localstripe has no Checkout)."""
    settings.STRIPE_SECRET_KEY = "sk_test_dashboard"
    created: list[int] = []

    def checkout_session_create(*, amount_nanos: int, **_: object) -> CheckoutSession:
        created.append(amount_nanos)
        return CheckoutSession(id=f"cs_test_{len(created)}", url="https://checkout.stripe.test/pay")

    monkeypatch.setattr(stripe_gateway, "customer_create", lambda **_: "cus_test")
    monkeypatch.setattr(stripe_gateway, "checkout_session_create", checkout_session_create)
    return created


def test_topup_redirects_to_checkout_for_the_chosen_amount(member_client, fake_checkout):
    client, _, org = member_client(Role.BILLING)
    response = client.post(f"/o/{org.slug}/wallet/topup/", {"amount": "custom", "custom_usd": "42"})
    assert response.status_code == 302
    assert response["Location"] == "https://checkout.stripe.test/pay"
    assert fake_checkout == [42_000_000_000]
    assert TopUp.objects.get(wallet__organization=org).amount_nanos == 42_000_000_000
    # Nothing is credited by starting a Checkout: only the webhook credits.
    assert "$0.00" in client.get(f"/o/{org.slug}/wallet/").content.decode()


def test_topup_when_stripe_fails_says_so_and_charges_nothing(member_client, monkeypatch, settings):
    settings.STRIPE_SECRET_KEY = "sk_test_dashboard"

    def down(**_: object) -> str:
        raise stripe_gateway.StripeFailure("connection refused")

    monkeypatch.setattr(stripe_gateway, "customer_create", down)
    client, _, org = member_client(Role.OWNER)
    response = client.post(f"/o/{org.slug}/wallet/topup/", {"amount": "10"}, follow=True)
    assert "Payments are unavailable right now" in response.content.decode()
    assert not TopUp.objects.exists()
