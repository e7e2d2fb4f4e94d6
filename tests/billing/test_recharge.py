"""Auto-recharge against localstripe: charged once per threshold crossing, declines recorded."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services import hold_settle
from billing.services.recharge import auto_recharge_wallet
from billing.tasks import auto_recharge_sweep
from tests.billing.conftest import USD, arm_auto_recharge, open_hold


def _spend(tenant, rid: str, amount: int) -> None:
    open_hold(tenant, rid, amount, api_key_id=None)
    hold_settle(request_id=rid, actual_nanos=amount)


def _wallet(tenant) -> Wallet:
    return Wallet.objects.get(organization=tenant.org)


@pytest.mark.django_db
def test_falling_below_threshold_charges_once_per_crossing(
    make_tenant, stripe_settings, django_capture_on_commit_callbacks
):
    tenant = make_tenant(balance_nanos=6 * USD)
    arm_auto_recharge(tenant)
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r1", 2 * USD)  # 6 → 4: crosses, the settle queues the recharge
    assert _wallet(tenant).balance_nanos == 14 * USD
    assert auto_recharge_wallet(wallet_id=_wallet(tenant).pk) == "not_due"
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r2", 8 * USD)  # 14 → 6: above threshold, nothing
        _spend(tenant, "r3", 3 * USD)  # 6 → 3: second crossing
    wallet = _wallet(tenant)
    entries = LedgerEntry.objects.filter(wallet=wallet, kind=EntryKind.AUTO_RECHARGE)
    assert entries.count() == 2 and wallet.balance_nanos == 13 * USD
    assert wallet.auto_recharge_attempts == 2 and wallet.auto_recharge_last_error == ""
    assert all(e.external_ref.startswith("pi_") for e in entries)


@pytest.mark.django_db
def test_decline_is_recorded_and_not_retried_until_the_next_crossing(
    make_tenant, stripe_settings, django_capture_on_commit_callbacks
):
    tenant = make_tenant(balance_nanos=6 * USD)
    arm_auto_recharge(tenant, payment_method_id="pm_card_chargeCustomerFail")
    with django_capture_on_commit_callbacks(execute=True):
        _spend(tenant, "r1", 2 * USD)
    wallet = _wallet(tenant)
    assert wallet.balance_nanos == 4 * USD
    assert "card_declined" in wallet.auto_recharge_last_error
    assert not wallet.auto_recharge_armed
    assert auto_recharge_wallet(wallet_id=wallet.pk) == "not_due"
    assert auto_recharge_sweep() == 0
    assert not LedgerEntry.objects.filter(kind=EntryKind.AUTO_RECHARGE).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_triggers_charge_once(make_tenant, stripe_settings):
    tenant = make_tenant(balance_nanos=USD)
    arm_auto_recharge(tenant)
    outcomes: list[str] = []
    gate = threading.Barrier(6)

    def trigger() -> None:
        try:
            gate.wait()
            outcomes.append(auto_recharge_wallet(wallet_id=_wallet(tenant).pk))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=trigger) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outcomes) == ["charged"] + ["not_due"] * 5
    assert _wallet(tenant).balance_nanos == 11 * USD
