"""An API key's monthly budget, enforced in the hold under the wallet row lock (PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from accounts.services import api_key_create
from billing.errors import FundsLimit, InsufficientFunds
from billing.models import Hold, HoldStatus, Wallet
from billing.services import ahold_open, hold_settle
from infra import adb
from tests.billing.attempts import HoldAttempts
from tests.billing.conftest import USD, open_hold

pytestmark = pytest.mark.django_db(transaction=True)

AMOUNT = 1_000_000  # 0.001 USD per hold
THREADS = 8
PER_THREAD = 12


def _open(tenant, key_id: int, rid: str, amount: int, key_budget: int | None) -> None:
    open_hold(tenant, rid, amount, api_key_id=key_id, key_budget_nanos=key_budget)


def test_concurrent_holds_on_one_key_never_exceed_its_budget(make_tenant):
    tenant = make_tenant(balance_nanos=USD)  # the wallet could pay for every hold
    budget = 5 * AMOUNT
    holds = HoldAttempts(**tenant.hold_owner(), amount_nanos=AMOUNT, key_budget_nanos=budget)
    gate = threading.Barrier(THREADS)

    def work(t: int) -> None:
        gate.wait()
        holds.run(f"kb-{t}-{i}" for i in range(PER_THREAD))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not holds.errors
    assert len(holds.ok) == 5
    assert holds.refused == [FundsLimit.KEY_BUDGET] * (THREADS * PER_THREAD - 5)
    open_rids = set(
        Hold.objects.filter(api_key=tenant.key, status=HoldStatus.OPEN).values_list(
            "request_id", flat=True
        )
    )
    assert open_rids == set(holds.ok)
    assert Wallet.objects.get(organization=tenant.org).held_nanos == budget


def test_concurrent_async_holds_on_one_key_never_exceed_its_budget(make_tenant):
    """The request path's own opening (``ahold_open`` on the event loop's pool) under load."""
    tenant = make_tenant(balance_nanos=USD)
    budget = 7 * AMOUNT

    async def race() -> list[BaseException | None]:
        try:
            return await asyncio.gather(
                *(
                    ahold_open(
                        **tenant.hold_owner(),
                        request_id=f"akb-{n}",
                        amount_nanos=AMOUNT,
                        key_budget_nanos=budget,
                    )
                    for n in range(48)
                ),
                return_exceptions=True,
            )
        finally:
            await adb.close()

    results = asyncio.run(race())
    refused = [r for r in results if isinstance(r, InsufficientFunds)]
    assert len(refused) == 48 - 7
    assert {r.limit for r in refused} == {FundsLimit.KEY_BUDGET}
    assert [r for r in results if r is not None and not isinstance(r, InsufficientFunds)] == []
    assert Hold.objects.filter(api_key=tenant.key, status=HoldStatus.OPEN).count() == 7
    assert Wallet.objects.get(organization=tenant.org).held_nanos == budget


def test_settled_holds_count_at_what_they_charged(make_tenant):
    tenant = make_tenant(balance_nanos=USD)
    budget = 3 * AMOUNT
    _open(tenant, tenant.key.pk, "a", 2 * AMOUNT, budget)
    with pytest.raises(InsufficientFunds) as refused:
        _open(tenant, tenant.key.pk, "b", 2 * AMOUNT, budget)
    assert refused.value.limit is FundsLimit.KEY_BUDGET and refused.value.budget_nanos == budget
    assert refused.value.available_nanos == AMOUNT
    assert not Hold.objects.filter(request_id="b").exists()
    assert hold_settle(request_id="a", actual_nanos=AMOUNT // 2) == AMOUNT // 2
    _open(tenant, tenant.key.pk, "b", 2 * AMOUNT, budget)  # 0.5 spent + 2 held <= 3
    with pytest.raises(InsufficientFunds) as again:
        _open(tenant, tenant.key.pk, "c", AMOUNT, budget)
    assert again.value.available_nanos == AMOUNT // 2


def test_a_key_over_budget_leaves_the_other_keys_of_the_org_working(make_tenant):
    tenant = make_tenant(balance_nanos=USD)
    other, _ = api_key_create(project=tenant.project)
    _open(tenant, tenant.key.pk, "x1", AMOUNT, AMOUNT)
    with pytest.raises(InsufficientFunds):
        _open(tenant, tenant.key.pk, "x2", AMOUNT, AMOUNT)
    _open(tenant, other.pk, "y1", 10 * AMOUNT, None)
    _open(tenant, other.pk, "y2", 10 * AMOUNT, 20 * AMOUNT)
    assert Hold.objects.filter(api_key=other, status=HoldStatus.OPEN).count() == 2
