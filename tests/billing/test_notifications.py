"""Billing's e-mails (Django's locmem outbox, real PostgreSQL): one low-balance e-mail per
threshold crossing — also when settlements race — a failed auto-recharge, a receipt per
payment; none carries a secret."""

from __future__ import annotations

import threading

import pytest
from django.core import mail
from django.db import connections

from accounts.models import Role, User
from accounts.services import membership_set
from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services import hold_settle
from billing.services.notify import low_balance_notify, low_balance_threshold_set
from billing.services.wallet import wallet_credit
from tests.billing.conftest import USD, arm_auto_recharge, open_hold, stripe_event
from tests.billing.test_webhooks import _post, _session, _start_topup


def _people(tenant) -> dict[str, User]:
    """An owner, a billing member, a member and an unverified owner of ``tenant``."""
    out = {}
    for name, role, verified in [
        ("owner", Role.OWNER, True),
        ("billing", Role.BILLING, True),
        ("member", Role.MEMBER, True),
        ("unverified", Role.OWNER, False),
    ]:
        user = User.objects.create_user(
            email=f"{name}-{tenant.org.pk}@example.com", password="x" * 12, email_verified=verified
        )
        membership_set(organization=tenant.org, user=user, role=role)
        out[name] = user
    return out


def _spend(tenant, rid: str, amount: int) -> None:
    open_hold(tenant, rid, amount, api_key_id=None)
    hold_settle(request_id=rid, actual_nanos=amount)


def _low(outbox) -> list:
    return [m for m in outbox if m.subject.startswith("Low balance")]


@pytest.mark.django_db
def test_one_low_balance_email_per_crossing_to_owners_and_billing(
    make_tenant, django_capture_on_commit_callbacks
):
    tenant = make_tenant(balance_nanos=3 * USD)
    people = _people(tenant)
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r1", USD)  # 3 → 2: above the default threshold of $1
    assert _low(mail.outbox) == []
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r2", 3 * USD // 2)  # 2 → 0.5: crosses
        _spend(tenant, "r3", USD // 10)  # still below: no second e-mail
    (message,) = _low(mail.outbox)
    assert sorted(message.to) == sorted([people["owner"].email, people["billing"].email])
    assert "$0.4" in message.subject and "$1" in message.body
    assert f"/o/{tenant.org.slug}/wallet/" in message.body
    assert not Wallet.objects.get(organization=tenant.org).low_balance_armed

    # A credit that stays below does not re-arm; one that goes back above does.
    with django_capture_on_commit_callbacks(execute=True):
        wallet_credit(
            organization=tenant.org,
            amount_nanos=USD // 10,
            kind=EntryKind.CREDIT,
            idempotency_key="c1",
        )
        _spend(tenant, "r4", USD // 10)
    assert len(_low(mail.outbox)) == 1
    with django_capture_on_commit_callbacks(execute=True):
        wallet_credit(
            organization=tenant.org,
            amount_nanos=2 * USD,
            kind=EntryKind.CREDIT,
            idempotency_key="c2",
        )
    assert Wallet.objects.get(organization=tenant.org).low_balance_armed
    assert len(_low(mail.outbox)) == 1  # a credit never says "low balance"
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r5", 2 * USD)  # second crossing
    assert len(_low(mail.outbox)) == 2


@pytest.mark.django_db
def test_threshold_is_per_organization_and_zero_turns_it_off(
    make_tenant, django_capture_on_commit_callbacks
):
    tenant = make_tenant(balance_nanos=10 * USD)
    _people(tenant)
    low_balance_threshold_set(organization_id=tenant.org.pk, threshold_nanos=8 * USD)
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r1", 3 * USD)  # 10 → 7 < 8
    assert len(_low(mail.outbox)) == 1
    low_balance_threshold_set(organization_id=tenant.org.pk, threshold_nanos=0)
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r2", 3 * USD)
    assert len(_low(mail.outbox)) == 1
    with pytest.raises(ValueError):
        low_balance_threshold_set(organization_id=tenant.org.pk, threshold_nanos=-1)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_settlements_crossing_send_one_email(make_tenant):
    """Two settlements commit at the same moment, each leaving the wallet below the threshold:
    both ask for the e-mail (autocommit: on_commit runs at once, the eager task in the
    thread), one claim wins."""
    tenant = make_tenant(balance_nanos=2 * USD)
    _people(tenant)
    open_hold(tenant, "a", USD // 2 + 1, api_key_id=None)
    open_hold(tenant, "b", USD // 2 + 1, api_key_id=None)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def settle(rid: str) -> None:
        try:
            barrier.wait()
            hold_settle(request_id=rid, actual_nanos=USD // 2 + 1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=settle, args=(rid,)) for rid in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Wallet.objects.get(organization=tenant.org).balance_nanos < USD
    assert len(_low(mail.outbox)) == 1


@pytest.mark.django_db(transaction=True)
def test_racing_claims_of_one_crossing_send_one_email(make_tenant):
    tenant = make_tenant(balance_nanos=USD // 2)
    _people(tenant)
    wallet = Wallet.objects.get(organization=tenant.org)
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def claim() -> None:
        try:
            barrier.wait()
            won.append(low_balance_notify(wallet_id=wallet.pk))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
    assert len(_low(mail.outbox)) == 1


@pytest.mark.django_db
def test_a_declined_auto_recharge_is_mailed_once(
    make_tenant, stripe_settings, django_capture_on_commit_callbacks
):
    tenant = make_tenant(balance_nanos=6 * USD)
    people = _people(tenant)
    arm_auto_recharge(tenant, payment_method_id="pm_card_chargeCustomerFail")
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r1", 2 * USD)
        _spend(tenant, "r2", USD // 10)
    (failed,) = [m for m in mail.outbox if m.subject.startswith("Auto-recharge failed")]
    assert sorted(failed.to) == sorted([people["owner"].email, people["billing"].email])
    assert "$10" in failed.body and "declined" in failed.body.lower()
    assert "pm_card" not in failed.body and "cus_" not in failed.body


@pytest.mark.django_db
def test_each_checkout_payment_gets_one_receipt_with_its_pdf(
    make_tenant, stripe_settings, client, monkeypatch, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    people = _people(tenant)
    topup = _start_topup(tenant, monkeypatch, amount_nanos=20 * USD)
    session = _session(topup, payment_status="paid", pi="pi_receipt_1")
    with django_capture_on_commit_callbacks(execute=True):
        paid = _post(client, stripe_event("checkout.session.completed", session))
        # The same payment again (another event for the session): no second receipt.
        again = _post(client, stripe_event("checkout.session.async_payment_succeeded", session))
    assert (paid.status_code, again.status_code) == (200, 200)
    receipts = [m for m in mail.outbox if m.subject.startswith("Receipt ")]
    assert len(receipts) == 1
    (receipt,) = receipts
    entry = LedgerEntry.objects.get(kind=EntryKind.TOPUP, wallet__organization=tenant.org)
    number = f"INF-{entry.pk:08d}"
    assert number in receipt.subject and "$20" in receipt.subject
    assert sorted(receipt.to) == sorted([people["owner"].email, people["billing"].email])
    assert "pi_receipt_1" in receipt.body and tenant.org.name in receipt.body
    (name, content, mimetype) = receipt.attachments[0]
    assert name == f"infrai-receipt-{number}.pdf" and mimetype == "application/pdf"
    assert content.startswith(b"%PDF")
    for secret in ("sk_test", "whsec", "cus_"):
        assert secret not in receipt.body
