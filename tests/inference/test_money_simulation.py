"""A seeded, deterministic simulation: many tenants, calls, vendor faults and disconnects.

Each step picks (from a fixed seed) an organization, streamed or not, a vendor fault and how
the client behaves, runs the call against the live app, waits until the server has settled,
then checks the money invariants: every wallet equals its ledger (and the ``balance_after``
chain), no hold is open, every hold resolved once with its request-log row, every charge has
its request, and money in (credits) equals money out (usage) plus what the wallets hold.
It prints the steps run and the violations found (must be 0).
"""

from __future__ import annotations

import random
from collections import Counter

import httpx
import pytest
from django.db.models import Sum

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from inference.models import RequestLog
from tests.live import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SEED = 20261130
STEPS = 48
FAULTS = ["", "", "usage_negative", "usage_garbage", "error_string_chunk", "array_chunk", "no_done"]
CLIENTS = ["read_all", "read_all", "leave_early", "leave_late"]


def _violations() -> list[str]:
    found = list(audit_findings().findings)
    if Hold.objects.filter(status=HoldStatus.OPEN).exists():
        found.append("open holds")
    logged = set(RequestLog.objects.values_list("request_id", flat=True))
    for rid in Hold.objects.values_list("request_id", flat=True):
        if rid not in logged:
            found.append(f"hold {rid} has no request log")
    usage = LedgerEntry.objects.filter(kind=EntryKind.USAGE)
    for entry in usage:
        cost = RequestLog.objects.filter(request_id=entry.request_id).values_list(
            "cost_nanos", flat=True
        )
        if list(cost) != [-entry.amount_nanos]:
            found.append(f"usage entry {entry.request_id} does not match its request")
    credits = LedgerEntry.objects.exclude(kind=EntryKind.USAGE).aggregate(s=Sum("amount_nanos"))
    spent = usage.aggregate(s=Sum("amount_nanos"))
    held_now = Wallet.objects.aggregate(s=Sum("balance_nanos"))
    if (credits["s"] or 0) + (spent["s"] or 0) != (held_now["s"] or 0):
        found.append("money in != money out + balances")
    return found


def test_seeded_simulation_keeps_every_invariant(issue_key, api_base, fake_catalog):
    rng = random.Random(SEED)
    keys = [issue_key(org=f"sim{i}", credit_usd=c) for i, c in enumerate(["5", "0.0005", "0.02"])]
    outcomes: Counter[str] = Counter()
    violations: list[str] = []
    for step in range(STEPS):
        key = rng.choice(keys)
        stream = rng.random() < 0.6
        fault = rng.choice(FAULTS)
        client = rng.choice(CLIENTS) if stream else "read_all"
        for vendor in ("primary", "backup"):
            fake_catalog[vendor].fault = fault
            fake_catalog[vendor].chunk_delay_s = 0.01
        body = {
            "model": "test-large",
            "messages": [
                {"role": "user", "content": f"step {step} " + "word " * rng.randint(1, 9)}
            ],
            "stream": stream,
            "max_tokens": rng.choice([20, 200, 2000]),
        }
        headers = {"authorization": f"Bearer {key}"}
        with httpx.stream(
            "POST", api_base + "/chat/completions", json=body, headers=headers, timeout=30
        ) as r:
            outcomes[str(r.status_code)] += 1
            seen = 0
            stop_at = {"leave_early": 1, "leave_late": 4}.get(client)
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if stop_at is not None and seen >= stop_at:
                    outcomes["left"] += 1
                    break
        wait_for(lambda: not Hold.objects.filter(status=HoldStatus.OPEN).exists())
        violations += [f"step {step}: {v}" for v in _violations()]
    print(
        f"\nsimulation seed={SEED}: {STEPS} steps, outcomes {dict(outcomes)}, "
        f"violations {len(violations)}"
    )
    assert violations == []
    assert outcomes["200"] > 0 and outcomes["402"] > 0  # both paths were exercised
