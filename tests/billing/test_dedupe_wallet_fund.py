"""wallet_fund: what issue_key and test tenants do — open the wallet, credit it once if anything."""

from __future__ import annotations

import pytest

from accounts.models import Organization
from billing.audit import audit_findings
from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services.wallet import wallet_fund

pytestmark = pytest.mark.django_db

ONE_USD = 1_000_000_000


def test_nothing_to_fund_opens_the_wallet_and_writes_no_entry():
    org = Organization.objects.create(name="Bare", slug="bare")  # no hook: no wallet yet
    wallet_fund(organization=org, amount_nanos=0, idempotency_key="fund:bare")
    assert Wallet.objects.get(organization=org).balance_nanos == 0
    assert not LedgerEntry.objects.filter(wallet__organization=org).exists()


def test_an_amount_is_one_credit_entry_once_per_key():
    org = Organization.objects.create(name="Funded", slug="funded")
    for _ in range(2):
        wallet_fund(
            organization=org, amount_nanos=ONE_USD, idempotency_key="fund:funded", description="hi"
        )
    entry = LedgerEntry.objects.get(wallet__organization=org)
    assert (entry.kind, entry.amount_nanos, entry.description) == (EntryKind.CREDIT, ONE_USD, "hi")
    assert Wallet.objects.get(organization=org).balance_nanos == ONE_USD
    assert audit_findings().money == []
