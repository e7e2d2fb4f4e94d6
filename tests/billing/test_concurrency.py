"""Concurrency on PostgreSQL: holds from several threads and processes, double settles.

Prints the figures (run with ``-s``): holds tried/succeeded, lowest balance and available
seen while the holds raced, and the drift between the wallet and its ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings
from django.db import connections

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from billing.selectors import ledger_sum
from billing.services import hold_settle
from tests.billing.attempts import HoldAttempts
from tests.billing.conftest import open_hold, postgres_only
from tests.live import shared_database_url

pytestmark = pytest.mark.django_db(transaction=True)

AMOUNT = 1_000_000  # 0.001 USD per hold
AFFORDABLE = 5
THREADS = 8
IN_PROCESS = 96
PROCESSES = 2
PER_PROCESS = 64
PROCESS_THREADS = 4


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
    postgres_only()
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
    drift = wallet.balance_nanos - ledger_sum(wallet_id=wallet_id)
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
    postgres_only()
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
    assert wallet.balance_nanos == ledger_sum(wallet_id=wallet.pk)
    assert sorted(results).count(AMOUNT) % 2 == 0
