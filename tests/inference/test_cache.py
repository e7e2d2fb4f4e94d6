"""The exact cache beyond plain chat: coalescing of identical requests in flight, Responses,
and streamed deterministic calls (a hit is billed 0, logged, and shaped like a live answer)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from billing.models import EntryKind, LedgerEntry
from inference.models import RequestLog

pytestmark = pytest.mark.django_db(transaction=True)

DETERMINISTIC = {
    "model": "test-large",
    "messages": [{"role": "user", "content": "same question"}],
    "temperature": 0,
}


def _at_once(call: Callable[[], Any], *, times: int) -> list[Any]:
    """``call`` made from ``times`` threads started together: what each returned or raised."""
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(call())
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(times)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == times
    return results


def test_identical_requests_in_flight_reach_the_vendor_once(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].stall_s = 1.0
    client = client_for(issue_key(), timeout=30)
    answers = _at_once(lambda: client.chat.completions.create(**DETERMINISTIC), times=5)
    assert not [a for a in answers if isinstance(a, Exception)]
    assert len(fake_catalog["primary"].requests) == 1  # one vendor call for five callers
    assert {a.choices[0].message.content for a in answers} == {"Echo: same question"}
    paid = [a for a in answers if not a.infrai["cache"]]
    assert len(paid) == 1 and all(a.infrai["cost_nanos"] == 0 for a in answers if a not in paid)
    usage = LedgerEntry.objects.filter(kind=EntryKind.USAGE)
    assert [e.request_id for e in usage] == [paid[0].infrai["request_id"]]
    assert RequestLog.objects.filter(cache_hit=True).count() == 4


def test_a_failed_leader_lets_waiting_requests_call_for_themselves(
    issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].stall_s = 0.5
    fake_catalog["primary"].fail_statuses = [400]  # the first request is refused by the vendor
    client = client_for(issue_key(), timeout=30)
    results = _at_once(lambda: client.chat.completions.create(**DETERMINISTIC), times=3)
    assert sum(isinstance(r, Exception) for r in results) == 1
    assert len(fake_catalog["primary"].requests) >= 2


def test_deterministic_responses_are_cached(issue_key, client_for, fake_catalog):
    client = client_for(issue_key())
    first = client.responses.create(model="test-large", input="cache me", temperature=0)
    second = client.responses.create(model="test-large", input="cache me", temperature=0)
    assert first.output_text == second.output_text == "Echo: cache me"
    assert (first.infrai["cache"], second.infrai["cache"]) == (False, True)
    assert second.infrai["cost_nanos"] == 0
    assert len(fake_catalog["primary"].requests) == 1


@pytest.mark.usefixtures("gateway_catalog")
def test_embeddings_and_moderations_are_cached_per_organization(issue_key, client_for):
    client = client_for(issue_key())
    first = client.embeddings.create(model="test-embed", input=["same text"])
    second = client.embeddings.create(model="test-embed", input=["same text"])
    assert first.data[0].embedding == second.data[0].embedding
    assert (first.infrai["cache"], second.infrai["cache"]) == (False, True)
    assert second.infrai["cost_nanos"] == 0 and second.usage.prompt_tokens > 0
    other_org = client_for(issue_key(org="other"))
    third = other_org.embeddings.create(model="test-embed", input=["same text"])
    assert third.infrai["cache"] is False  # never another tenant's entry

    mod_a = client.moderations.create(input="I want to hug a puppy.")
    mod_b = client.moderations.create(input="I want to hug a puppy.")
    assert (mod_a.infrai["cache"], mod_b.infrai["cache"]) == (False, True)
    assert mod_a.results[0].flagged == mod_b.results[0].flagged
    usage = LedgerEntry.objects.filter(kind=EntryKind.USAGE).values_list("request_id", flat=True)
    paid = {first.infrai["request_id"], third.infrai["request_id"], mod_a.infrai["request_id"]}
    assert set(usage) <= paid
