"""The hot path's Redis on a real three-master Redis Cluster (``tests.redis_cluster``).

``infra.resp.ClusterClient`` routes each round trip to its slot's master, refuses a round trip
whose keys span slots, follows ``MOVED`` and ``ASK`` while a slot migrates; ``infra.fastcache``
(async and sync) works unchanged on it; the live app's calls write only cluster-safe keys (its
multi-key pipelines share one hash tag) and, while a master is killed and its replica takes
over under load, every call succeeds or fails with an OpenAI-shaped retryable error and the
money stays exact.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.db.models import Sum

from accounts import keys
from accounts.auth import cache_key
from accounts.models import ApiKey
from accounts.services import api_key_revoke
from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from infra import fastcache, resp
from tests.live import wait_for
from tests.redis_cluster import Cluster, redis_cluster

CHAT = {"model": "test-large", "messages": [{"role": "user", "content": "alpha beta gamma"}]}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Three masters, no replicas (shared by the tests of this module but the failover's)."""
    with redis_cluster() as running:
        yield running


@pytest.fixture
def on_cluster(cluster: Cluster, settings: Any) -> Iterator[Cluster]:
    """``infra.fastcache`` (and so the live app) on the cluster for this test."""
    settings.INFRAI_HOT_REDIS_URL = cluster.url
    fastcache.clear_sync()
    yield cluster


def _name(key: str) -> str:
    """The full Redis name of a :mod:`infra.fastcache` key."""
    return fastcache._prefix() + key


# --- the client ---------------------------------------------------------------------------------
def test_key_slots_are_redis_own_including_hash_tags(cluster):
    names = ["a", "user:1000", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "{k:ab}:r"]
    names += [_name(cache_key("0" * 64)), "x" * 300]
    ours = [resp.key_slot(n) for n in names]
    theirs = [int(cluster.cli(cluster.ports[0], "CLUSTER", "KEYSLOT", n)) for n in names]
    assert ours == theirs
    assert resp.key_slot("{k:ab}:r") == resp.key_slot("apikey:{k:ab}")


def test_round_trips_go_to_each_slots_master_and_every_master_serves_some(cluster):
    client = resp.ClusterClient(cluster.url)

    async def run() -> list[list[Any]]:
        await asyncio.gather(*(client.execute(("SET", f"spread:{n}", n)) for n in range(60)))
        return await asyncio.gather(*(client.execute(("GET", f"spread:{n}")) for n in range(60)))

    assert asyncio.run(run()) == [[str(n)] for n in range(60)]
    per_master = [int(cluster.cli(port, "DBSIZE")) for port in cluster.masters()]
    assert len(per_master) == 3 and all(count > 0 for count in per_master)


def test_a_round_trip_whose_keys_span_slots_is_refused_before_anything_is_sent(cluster):
    client = resp.ClusterClient(cluster.url)

    async def run() -> list[Any]:
        with pytest.raises(resp.CrossSlot, match="hash tag"):
            await client.execute(("INCRBY", "apart:1", 1), ("INCRBY", "apart:2", 1))
        assert await client.execute(("GET", "apart:1")) == [None]  # nothing was counted
        return await client.execute(("INCRBY", "{t}:1", 1), ("INCRBY", "{t}:2", 2))

    assert asyncio.run(run()) == [1, 2]


def test_a_slot_migrating_is_followed_through_ask_and_then_moved(cluster):
    """Mid-migration a key not yet on the importing node is answered there after ASKING (in
    the same pipeline as a key still on the old owner); once the slot has moved, the stale map
    is corrected by MOVED. Replies are the right ones throughout."""
    client = resp.ClusterClient(cluster.url)
    slot = resp.key_slot("{mig}")
    source = cluster.master_of(slot)
    target = next(port for port in cluster.masters() if port != source)
    ids = {port: cluster.cli(port, "CLUSTER", "MYID").strip() for port in cluster.masters()}

    async def pipeline() -> list[Any]:
        return await client.execute(("GET", "{mig}:old"), ("INCRBY", "{mig}:new", 5))

    async def run() -> list[list[Any]]:
        await client.execute(("SET", "{mig}:old", "v"))
        cluster.cli(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", ids[source])
        cluster.cli(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", ids[target])
        during = [await pipeline(), await pipeline()]  # :new lives on the target (ASK)
        cluster.cli(
            source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "KEYS", "{mig}:old"
        )
        for port in cluster.masters():
            cluster.cli(port, "CLUSTER", "SETSLOT", str(slot), "NODE", ids[target])
        return [*during, await pipeline()]  # the map still says source: MOVED

    assert asyncio.run(run()) == [["v", 5], ["v", 10], ["v", 15]]
    assert cluster.master_of(slot) == target
    assert int(cluster.cli(target, "CLUSTER", "COUNTKEYSINSLOT", str(slot))) == 2


def test_a_refused_connection_is_retried_only_after_a_backoff():
    from tests.live import free_port

    client = resp.Client(f"redis://127.0.0.1:{free_port()}/0")

    async def run() -> tuple[str, str]:
        with pytest.raises(resp.Unreachable) as first:
            await client.execute(("PING",))
        with pytest.raises(resp.Unreachable) as second:  # no attempt: the backoff runs
            await client.execute(("PING",))
        return str(first.value), str(second.value)

    first, second = asyncio.run(run())
    assert "ConnectionRefusedError" in first and "next attempt in" not in first
    assert "next attempt in" in second
    assert [resp.backoff_s(n) <= resp.BACKOFF_CAP_S for n in (1, 5, 50)] == [True] * 3


# --- the store on the cluster -----------------------------------------------------------------
def test_the_store_async_and_sync_works_across_slots(on_cluster):
    names = [f"many:{n}" for n in range(40)]

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        for n, key in enumerate(names):
            await fastcache.set(key, {"n": n}, 30)
        found = await fastcache.get_many([*names, "many:absent"])
        await fastcache.delete_many(names[:20])
        return found, await fastcache.get_many(names)

    found, left = asyncio.run(run())
    assert found == {key: {"n": n} for n, key in enumerate(names)}
    assert left == {key: {"n": n + 20} for n, key in enumerate(names[20:])}
    fastcache.set_sync("sync:a", [1, 2], None)  # redis-py's cluster client, the same keys
    assert fastcache.get_sync("sync:a") == [1, 2] and fastcache.get_sync("many:39") == {"n": 39}
    assert fastcache.add_sync("sync:a", 0, 30) is False
    fastcache.clear_sync()  # every master's keys
    pattern = _name("*")
    assert all(
        not on_cluster.cli(p, "--scan", "--pattern", pattern).split() for p in on_cluster.ports
    )


def test_counters_of_different_slots_in_one_pipeline_are_refused(on_cluster):
    with pytest.raises(resp.CrossSlot):
        asyncio.run(fastcache.get_raw_and_incr_many("a", [("b", 1)], 30))


# --- the live app on the cluster --------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_hot_path_writes_only_cluster_safe_keys(
    on_cluster, issue_key, client_for, fake_catalog, monkeypatch
):
    """Chat (plain and streamed), a stored Response, a rate-limited key and a revocation
    through the live app: every multi-key round trip shares one slot (the client would refuse
    it otherwise), the rate-limit check is one such pipeline with the key's cache entry, no node
    answered CROSSSLOT, and the keys are spread over the masters."""
    seen: list[list[str]] = []
    real_slot_of = resp.slot_of

    def recording(commands: Any) -> int | None:
        seen.append([str(k) for c in commands for k in resp.command_keys(c)])
        return real_slot_of(commands)

    monkeypatch.setattr(resp, "slot_of", recording)
    errors_before = on_cluster.error_counts()
    raw = issue_key()
    client = client_for(raw)
    assert client.chat.completions.create(**CHAT).choices[0].message.content
    assert list(client.chat.completions.create(**CHAT, stream=True))
    assert client.responses.create(model="test-large", input="hello", store=True).id
    ApiKey.objects.filter(key_hash=keys.hash_key(raw)).update(requests_per_minute=3)
    fastcache.delete_sync(cache_key(keys.hash_key(raw)))  # as an edit of the key does
    with pytest.raises(openai.RateLimitError):
        for _ in range(4):
            client.chat.completions.create(**CHAT)
    api_key_revoke(api_key=ApiKey.objects.get(key_hash=keys.hash_key(raw)))
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(**CHAT)

    multi = [names for names in seen if len(set(names)) > 1]
    assert all(len({resp.key_slot(n) for n in names}) == 1 for names in multi)
    tag = "{k:" + keys.hash_key(raw) + "}"
    entry = _name(cache_key(keys.hash_key(raw)))
    assert any(entry in names and any(":rl:" + tag in n for n in names) for names in multi)
    assert on_cluster.error_counts().get("CROSSSLOT", 0) == errors_before.get("CROSSSLOT", 0)
    per_master = [int(on_cluster.cli(port, "DBSIZE")) for port in on_cluster.masters()]
    assert sum(1 for count in per_master if count) >= 2


# --- a master's failover under load -----------------------------------------------------------
@pytest.fixture
def replicated() -> Iterator[Cluster]:
    """Three masters with a replica each (this test kills a master)."""
    with redis_cluster(replicas=True) as running:
        yield running


@pytest.mark.django_db(transaction=True)
def test_a_master_failing_over_under_load_keeps_every_answer_shaped_and_the_money_exact(
    replicated, settings, issue_key, client_for, fake_catalog
):
    settings.INFRAI_HOT_REDIS_URL = replicated.url
    raw = issue_key(credit_usd="50")
    ApiKey.objects.update(requests_per_minute=1_000_000)  # the load is not rate-limited
    victim = replicated.master_of(resp.key_slot(_name(cache_key(keys.hash_key(raw)))))
    outcomes: list[str] = []
    stop = threading.Event()

    def load() -> None:
        client = client_for(raw, timeout=30)
        while not stop.is_set():
            try:
                client.chat.completions.create(**CHAT)
                outcomes.append("ok")
            except openai.APIStatusError as exc:  # an OpenAI-shaped error body, or the test fails
                body = exc.response.json()["error"]
                outcomes.append(f"{exc.status_code}:{body['code']}")

    workers = [threading.Thread(target=load) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        wait_for(lambda: outcomes.count("ok") >= 10)
        replicated.kill(victim)  # its replica takes over after the node timeout
        wait_for(lambda: victim not in replicated.masters() and len(replicated.masters()) == 3)
        replicated.wait_ok()
        served = outcomes.count("ok")
        wait_for(lambda: outcomes.count("ok") >= served + 10)  # served again after the failover
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)

    # The failover was under load (calls refused meanwhile), and every refusal a retryable 503.
    assert set(outcomes) == {"ok", "503:service_unavailable"}, set(outcomes)
    wait_for(lambda: not Hold.objects.filter(status=HoldStatus.OPEN).exists())
    assert audit_findings().findings == []
    for wallet in Wallet.objects.all():
        ledger = LedgerEntry.objects.filter(wallet=wallet).aggregate(total=Sum("amount_nanos"))
        assert wallet.balance_nanos == (ledger["total"] or 0)
    charged = LedgerEntry.objects.filter(kind=EntryKind.USAGE).count()
    assert charged == outcomes.count("ok")  # each answered call charged once, no refusal charged
