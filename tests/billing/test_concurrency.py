"""Concurrency on PostgreSQL: holds from several threads and processes, double settles (open
and late), settles and expiries racing for one hold.

Prints the figures (run with ``-s``): holds tried/succeeded, lowest balance and available
seen while the holds raced, and the drift between the wallet and its ledger.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.db.models import Sum
from django.utils import timezone

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from billing.services import Settled, asettle, hold_settle, holds_expire
from billing.services.holds import hold_expire
from infra import adb
from tests.billing.attempts import HoldAttempts
from tests.billing.conftest import open_hold
from tests.live import shared_database_url

pytestmark = pytest.mark.django_db(transaction=True)

AMOUNT = 1_000_000  # 0.001 USD per hold
AFFORDABLE = 5
THREADS = 8
IN_PROCESS = 96
PROCESSES = 2
PER_PROCESS = 64
PROCESS_THREADS = 4


def _ledger_sum(*, wallet_id: int) -> int:
    """The sum of a wallet's ledger entries (what its balance must equal)."""
    total = LedgerEntry.objects.filter(wallet_id=wallet_id).aggregate(s=Sum("amount_nanos"))["s"]
    return int(total or 0)


def _spawn(tenant, prefix: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DATABASE_URL": shared_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
    }
    args = [tenant.org.pk, tenant.project.pk, tenant.key.pk, prefix, PER_PROCESS]
    args += [PROCESS_THREADS, AMOUNT]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.billing.hold_worker", *map(str, args)],
        env=env,
        cwd=settings.BASE_DIR,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


class _Monitor(threading.Thread):
    """Samples the wallet while the holds race: the lowest balance and available seen."""

    def __init__(self, wallet_id: int) -> None:
        super().__init__(daemon=True)
        self.wallet_id = wallet_id
        self.stop = threading.Event()
        self.lowest_balance: int | None = None
        self.lowest_available: int | None = None
        self.samples = 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                balance, held = Wallet.objects.values_list("balance_nanos", "held_nanos").get(
                    pk=self.wallet_id
                )
                self.samples += 1
                self.lowest_balance = min(balance, self.lowest_balance or balance)
                avail = balance - held
                self.lowest_available = (
                    avail if self.lowest_available is None else min(avail, self.lowest_available)
                )
                time.sleep(0.002)
        finally:
            connections.close_all()


def test_holds_from_threads_and_processes_never_overspend(make_tenant):
    tenant = make_tenant(balance_nanos=AFFORDABLE * AMOUNT)
    wallet_id = Wallet.objects.get(organization=tenant.org).pk
    procs = [_spawn(tenant, f"p{n}") for n in range(PROCESSES)]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

    holds = HoldAttempts(**tenant.hold_owner(), amount_nanos=AMOUNT)
    gate = threading.Barrier(THREADS + 1)

    def work(t: int) -> None:
        gate.wait()
        holds.run(f"t-{i}" for i in range(t, IN_PROCESS, THREADS))

    monitor = _Monitor(wallet_id)
    monitor.start()
    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for proc in procs:  # release the other processes and our threads together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    gate.wait()
    for th in threads:
        th.join()
    ok, refused, errors = list(holds.ok), len(holds.refused), list(holds.errors)
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        result = json.loads(out.strip().splitlines()[-1])
        # Every process really raced: it accounted for each of its attempts.
        assert len(result["ok"]) + result["refused"] + len(result["errors"]) == PER_PROCESS
        ok += result["ok"]
        refused += result["refused"]
        errors += result["errors"]
    tried = IN_PROCESS + PROCESSES * PER_PROCESS
    wallet = Wallet.objects.get(pk=wallet_id)
    print(
        f"\n[holds] tried={tried} succeeded={len(ok)} refused={refused} errors={len(errors)} "
        f"(threads={THREADS} in-process + {PROCESSES} processes x {PROCESS_THREADS} threads) "
        f"lowest_balance_seen={monitor.lowest_balance} "
        f"lowest_available_seen={monitor.lowest_available} samples={monitor.samples}"
    )
    assert not errors
    assert len(ok) == AFFORDABLE and refused == tried - AFFORDABLE
    assert wallet.held_nanos == AFFORDABLE * AMOUNT
    # The holds the callers were told are open are exactly the open rows: no refused call left a
    # hold behind and no successful one lost its row.
    open_rids = Hold.objects.filter(status=HoldStatus.OPEN).values_list("request_id", flat=True)
    assert sorted(open_rids) == sorted(ok)
    assert Hold.objects.count() == AFFORDABLE

    # Settle every successful hold from two threads at once: one debit each.
    charged: list[int] = []
    lock = threading.Lock()
    settle_gate = threading.Barrier(2 * len(ok))

    def settle(rid: str) -> None:
        try:
            settle_gate.wait()
            value = hold_settle(request_id=rid, actual_nanos=AMOUNT)
            with lock:
                charged.append(value)
        finally:
            connections.close_all()

    settlers = [threading.Thread(target=settle, args=(rid,)) for rid in ok for _ in range(2)]
    for th in settlers:
        th.start()
    for th in settlers:
        th.join()
    monitor.stop.set()
    monitor.join()
    wallet.refresh_from_db()
    drift = wallet.balance_nanos - _ledger_sum(wallet_id=wallet_id)
    usage = LedgerEntry.objects.filter(wallet_id=wallet_id, kind=EntryKind.USAGE).count()
    print(
        f"[settle] double settles={len(ok)} pairs usage_entries={usage} "
        f"final_balance={wallet.balance_nanos} held={wallet.held_nanos} drift={drift} "
        f"lowest_balance_seen={monitor.lowest_balance} "
        f"lowest_available_seen={monitor.lowest_available}"
    )
    assert charged == [AMOUNT] * (2 * len(ok))
    assert usage == AFFORDABLE
    assert (wallet.balance_nanos, wallet.held_nanos) == (0, 0)
    assert drift == 0
    assert monitor.lowest_available is not None and monitor.lowest_available >= 0
    assert monitor.lowest_balance is not None and monitor.lowest_balance >= 0
    assert not audit_findings().money


def test_concurrent_double_settle_is_one_debit(make_tenant):
    tenant = make_tenant(balance_nanos=100 * AMOUNT)
    rids = [f"ds-{i}" for i in range(20)]
    for rid in rids:
        open_hold(tenant, rid, 3 * AMOUNT, api_key_id=None)
    results: list[int] = []
    gate = threading.Barrier(2 * len(rids))

    def settle(rid: str, actual: int) -> None:
        try:
            gate.wait()
            results.append(hold_settle(request_id=rid, actual_nanos=actual))
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=settle, args=(rid, actual))
        for rid in rids
        for actual in (AMOUNT, 2 * AMOUNT)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wallet = Wallet.objects.get(organization=tenant.org)
    entries = LedgerEntry.objects.filter(wallet=wallet, kind=EntryKind.USAGE)
    assert entries.count() == len(rids)
    # Both callers of a pair got the amount the winner charged.
    for rid in rids:
        charged = -entries.get(request_id=rid).amount_nanos
        assert charged in (AMOUNT, 2 * AMOUNT)
    assert wallet.held_nanos == 0
    assert wallet.balance_nanos == _ledger_sum(wallet_id=wallet.pk)
    assert sorted(results).count(AMOUNT) % 2 == 0


def _expired(tenant, rids: list[str], amount: int) -> None:
    for rid in rids:
        open_hold(tenant, rid, amount, ttl_s=1)
    assert holds_expire(now=timezone.now() + dt.timedelta(seconds=5)) == len(rids)


def test_concurrent_late_settles_of_one_expired_hold_settle_once(make_tenant):
    """Two settles of each expired hold at once, from threads (Django's cursor) and on the
    event loop (``asettle``): each hold is charged once, both callers of a pair see that one
    charge, and the expiry's release is not released again."""
    tenant = make_tenant(balance_nanos=100 * AMOUNT)
    threaded, looped = [f"lt-{i}" for i in range(10)], [f"ll-{i}" for i in range(10)]
    _expired(tenant, threaded + looped, 3 * AMOUNT)
    results: list[int] = []
    gate = threading.Barrier(2 * len(threaded))

    def settle(rid: str) -> None:
        try:
            gate.wait()
            results.append(hold_settle(request_id=rid, actual_nanos=2 * AMOUNT))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=settle, args=(rid,)) for rid in threaded for _ in "ab"]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [2 * AMOUNT] * (2 * len(threaded))

    async def on_loop(rid: str) -> Settled | None:
        async with adb.connection() as conn:
            return await asettle(conn, request_id=rid, actual_nanos=2 * AMOUNT)

    async def race() -> list[Settled | None]:
        try:
            return await asyncio.gather(*(on_loop(rid) for rid in looped for _ in "ab"))
        finally:
            await adb.close()

    settled = asyncio.run(race())
    for pair in zip(settled[::2], settled[1::2], strict=True):
        assert sorted(s is None for s in pair) == [False, True]  # one claims it, one finds none
        assert next(s for s in pair if s is not None).charged == 2 * AMOUNT
    wallet = Wallet.objects.get(organization=tenant.org)
    usage = LedgerEntry.objects.filter(wallet=wallet, kind=EntryKind.USAGE)
    assert usage.count() == 20 and all(e.amount_nanos == -2 * AMOUNT for e in usage)
    assert (wallet.balance_nanos, wallet.held_nanos) == (60 * AMOUNT, 0)
    assert not Hold.objects.exclude(status=HoldStatus.SETTLED).exists()
    assert not audit_findings().money


def _wait_for_a_lock_wait() -> None:
    deadline = time.monotonic() + 10
    with connections["default"].cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cur.fetchone()[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the settle never waited on the hold row")


def test_a_settle_waiting_on_the_expiry_of_its_hold_settles_it_late(make_tenant):
    """READ COMMITTED re-check: the settle started while the sweeper held the hold row; once
    the expiry commits, the settle sees an expired hold and the wallet as the expiry left it
    (its statement's snapshot still had the reservation): charged from what is available now,
    and the reservation the expiry released is not released twice."""
    tenant = make_tenant(balance_nanos=10 * AMOUNT)
    open_hold(tenant, "race", 4 * AMOUNT)
    open_hold(tenant, "other", 6 * AMOUNT)  # nothing available until the expiry
    outcome: list[int] = []

    def settle() -> None:
        try:
            outcome.append(hold_settle(request_id="race", actual_nanos=3 * AMOUNT))
        finally:
            connections.close_all()

    settler = threading.Thread(target=settle)
    with transaction.atomic():
        assert hold_expire(hold_id=Hold.objects.get(request_id="race").pk)
        settler.start()
        _wait_for_a_lock_wait()
    settler.join()
    assert outcome == [3 * AMOUNT]  # 4 available once the expiry committed
    usage = LedgerEntry.objects.get(request_id="race", kind=EntryKind.USAGE)
    assert usage.description == "usage (after hold expiry)"
    wallet = Wallet.objects.get(organization=tenant.org)
    assert (wallet.balance_nanos, wallet.held_nanos) == (7 * AMOUNT, 6 * AMOUNT)
    assert not audit_findings().money


def test_an_expiry_waiting_on_a_settle_of_its_hold_releases_nothing(make_tenant):
    tenant = make_tenant(balance_nanos=10 * AMOUNT)
    open_hold(tenant, "race", 4 * AMOUNT)
    expired: list[bool] = []

    def expire(hold_id: int) -> None:
        try:
            expired.append(hold_expire(hold_id=hold_id))
        finally:
            connections.close_all()

    sweeper = threading.Thread(target=expire, args=(Hold.objects.get(request_id="race").pk,))
    with transaction.atomic():
        assert hold_settle(request_id="race", actual_nanos=AMOUNT) == AMOUNT
        sweeper.start()
        _wait_for_a_lock_wait()
    sweeper.join()
    assert expired == [False]
    assert not LedgerEntry.objects.filter(kind=EntryKind.HOLD_EXPIRED).exists()
    wallet = Wallet.objects.get(organization=tenant.org)
    assert (wallet.balance_nanos, wallet.held_nanos) == (9 * AMOUNT, 0)
    assert not audit_findings().money
