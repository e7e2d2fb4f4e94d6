"""The starter credit: a new organization of a verified owner gets it once, as its own entry."""

from __future__ import annotations

import pytest

from accounts.models import User
from accounts.services import organization_create
from billing.audit import audit_findings
from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services.starter import starter_credit_on_verified

pytestmark = pytest.mark.django_db

HALF_USD = 500_000_000


def _user(email: str = "new@example.com", *, verified: bool) -> User:
    return User.objects.create_user(
        email=email, password="pw-long-enough-1", email_verified=verified
    )


def _balance(org) -> int:
    return Wallet.objects.get(organization=org).balance_nanos


def test_the_wallet_exists_as_soon_as_the_organization_does():
    org = organization_create(name="No owner")
    assert Wallet.objects.filter(organization=org, balance_nanos=0).exists()
    assert not LedgerEntry.objects.exists()


def test_a_verified_owner_s_new_organization_gets_the_default_starter_credit_once():
    owner = _user(verified=True)
    org = organization_create(name="Acme", owner=owner)
    entry = LedgerEntry.objects.get(wallet__organization=org)
    assert (entry.kind, entry.amount_nanos, entry.balance_after_nanos) == (
        EntryKind.STARTER_CREDIT,
        HALF_USD,
        HALF_USD,
    )
    # A second organization of the same address gets nothing more; neither does a re-check.
    second = organization_create(name="Acme two", owner=owner)
    assert starter_credit_on_verified(user=owner) is None
    assert (_balance(org), _balance(second)) == (HALF_USD, 0)
    assert audit_findings().findings == []


def test_an_unverified_owner_gets_the_credit_only_after_verifying():
    owner = _user(verified=False)
    org = organization_create(name="Later", owner=owner)
    assert _balance(org) == 0
    assert starter_credit_on_verified(user=owner) is None  # still unverified
    owner.email_verified = True
    owner.save(update_fields=["email_verified"])
    entry = starter_credit_on_verified(user=owner)
    assert entry is not None and entry.kind == EntryKind.STARTER_CREDIT
    assert starter_credit_on_verified(user=owner) is None
    assert _balance(org) == HALF_USD


def test_a_new_account_with_the_same_address_gets_no_second_credit():
    first = _user("repeat@example.com", verified=True)
    organization_create(name="One", owner=first)
    first.memberships.all().delete()
    first.delete()
    other = _user("Repeat@example.com", verified=True)
    org = organization_create(name="Two", owner=other)
    assert _balance(org) == 0


def test_the_amount_is_a_setting_and_zero_turns_it_off(settings):
    settings.INFRAI_STARTER_CREDIT_USD = "0"
    org = organization_create(name="Off", owner=_user(verified=True))
    assert _balance(org) == 0
    settings.INFRAI_STARTER_CREDIT_USD = "1.25"
    org = organization_create(name="On", owner=_user("b@example.com", verified=True))
    assert _balance(org) == 1_250_000_000
