"""The production topology on two hosts (``tests.hosts``: network namespaces on a bridge),
driven through nginx with the official OpenAI SDK.

- in the root namespace, on the bridge's address: a PostgreSQL primary and its streaming
  replica (``tests.pg_pair``), a three-master Redis Cluster (the hot path), a plain Redis
  (Django's cache, the channel layer, Celery's broker) and the fake vendors;
- in each host's namespace (``scripts/cluster.sh``, ``CLUSTER_ROLE=host``): two web processes on
  the host's address and a Celery worker; beat on host 1 only;
- nginx (``CLUSTER_ROLE=nginx``) in the root namespace on 127.0.0.1, in front of the four web
  processes.

This process is the operator: its ORM points at the pair's primary and its hot-path Redis at
the cluster, so it issues and revokes keys as ``manage.py`` would. Steps that must land on a
given host talk to that host's web process at its address (the root namespace reaches it over
the bridge); the rest go through nginx. The test proves: both hosts ready on the primary with
the replica in use, both workers answering on the shared broker, no route out of a namespace;
a revocation refused at once on every web process of both hosts; a key's requests-per-minute
limit counted across hosts; a wallet hold opened on host 1 seen by host 2 (402), then released;
SIGTERM to host 1's web processes mid-stream: its streams end with ``server_shutting_down``,
billed for what they delivered, host 2's streams complete, calls through nginx during the drain
are all answered; every hold settled, ``manage.py billing_audit`` (on host 2, against the
primary) finds nothing and each wallet's balance is the sum of its ledger.

30–95 s on the shared 2-core machine, by how busy it is (most of it starting the servers and
the seven Python processes).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from celery import Celery
from django.core.management import call_command
from django.db import connections
from django.db.models import Sum

from accounts.keys import hash_key
from accounts.models import ApiKey
from accounts.services import api_key_cache_forget, api_key_revoke
from billing.models import Hold, HoldStatus, LedgerEntry, Wallet
from config.services import free_port
from tests.fakes.vendors import FakeVendor
from tests.hosts import Host, Network, ip, network, redis_server
from tests.inference.conftest import fake_catalog_load
from tests.inference.test_money_faults import assert_settled_once
from tests.live import pid_alive, wait_for
from tests.ops.test_cluster import HI, METRICS_TOKEN, PEPPER, SECRET, Stream
from tests.pg_pair import DATABASE, PgPair, pg_pair
from tests.redis_cluster import Cluster, redis_cluster

ROOT = Path(__file__).resolve().parents[2]
WEB_BASE = 8100  # in each namespace: web processes on 8101, 8102 (namespaces share no ports)
WEB_PROCESSES = 2
ANTHROPIC_KEY = "sk-ant-two-hosts"

pytestmark = [pytest.mark.cluster]


@dataclass
class Topology:
    net: Network
    pair: PgPair
    cluster: Cluster
    redis_url: str
    fakes: dict[str, FakeVendor]
    dir: Path
    nginx_url: str = ""
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # by host name

    def webs(self, host: Host) -> list[str]:
        """The base URLs of ``host``'s web processes."""
        return [f"http://{host.address}:{WEB_BASE + i}" for i in range(1, WEB_PROCESSES + 1)]

    def web_pids(self, host: Host) -> list[int]:
        pids = self.dir / host.name / "cluster" / "pids"
        return [int((pids / f"web{i}.pid").read_text()) for i in range(1, WEB_PROCESSES + 1)]

    def sdk(self, key: str, url: str | None = None, retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=(url or self.nginx_url) + "/v1", api_key=key, max_retries=retries
        )

    def logs(self) -> str:
        return "\n".join(
            f"== {p.relative_to(self.dir)}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.dir.glob("*/cluster/logs/*"))
        )


@contextlib.contextmanager
def _orm_on(pair: PgPair, blocker: Any) -> Iterator[None]:
    """This process's ORM (the ``default`` alias, in every thread) on the pair's primary for
    the block; the suite's own database again after it."""
    conn = connections["default"]
    fields = ("HOST", "PORT", "NAME", "USER", "PASSWORD")
    saved = {k: conn.settings_dict[k] for k in fields}

    def drop_connections() -> None:
        conn.close()
        if conn.alias in conn._connection_pools:  # a pool is per alias, not per settings
            conn.close_pool()

    with blocker.unblock():
        drop_connections()
        primary = {"HOST": pair.primary.host, "PORT": pair.primary.port, "NAME": DATABASE}
        conn.settings_dict.update(primary, USER="postgres", PASSWORD="")
        try:
            yield
        finally:
            drop_connections()
            conn.settings_dict.update(saved)


def _started(proc: subprocess.Popen[bytes], what: str, topology: Topology) -> str:
    """The URLs of ``proc``'s "cluster ready:" line (fails the test when it exits first)."""
    assert proc.stdout is not None
    lines: list[str] = []
    while line := proc.stdout.readline().decode():
        lines.append(line)
        if line.startswith("cluster ready:"):
            return line.removeprefix("cluster ready:").strip()
    pytest.fail(f"{what} did not start:\n" + "".join(lines) + topology.logs())


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each (cluster.sh drains and stops its processes), SIGKILL after 60 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def topology(
    tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Topology]:
    # Keys made here must be valid in the hosts' processes.
    settings.SECRET_KEY, settings.INFRAI_KEY_PEPPER = SECRET, PEPPER
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", ANTHROPIC_KEY)
    with contextlib.ExitStack() as stack:
        net = stack.enter_context(network(2))
        fakes = {
            "primary": FakeVendor(models=["up-large", "up-small", "up-quirky"], host=net.address),
            "backup": FakeVendor(models=["up-large"], host=net.address),
            "anthro": FakeVendor(models=["claude-fake"], host=net.address),
        }
        for fake in fakes.values():
            stack.enter_context(fake)
        redis_url = stack.enter_context(redis_server(net.address))
        cluster = stack.enter_context(redis_cluster(host=net.address))
        pair = stack.enter_context(pg_pair(tmp_path / "pg", host=net.address, redis_url=redis_url))
        t = Topology(net, pair, cluster, redis_url, fakes, tmp_path)
        stack.enter_context(_orm_on(pair, django_db_blocker))
        settings.INFRAI_HOT_REDIS_URL = cluster.url
        fake_catalog_load(fakes)

        nginx_port = free_port()
        t.nginx_url = f"http://127.0.0.1:{nginx_port}"
        hosts: list[subprocess.Popen[bytes]] = []
        stack.callback(_stop, hosts)
        for n, host in enumerate(net.hosts, 1):
            t.env[host.name] = _host_env(t, host, beat=n == 1)
            hosts.append(
                _cluster_sh(host.command(["bash", "scripts/cluster.sh"]), t.env[host.name])
            )
        upstreams = [
            _started(proc, host.name, t).split()
            for proc, host in zip(hosts, net.hosts, strict=True)
        ]
        assert upstreams == [t.webs(h) for h in net.hosts]
        (tmp_path / "static").mkdir()
        # Interleaved (h1 web 1, h2 web 1, h1 web 2, …): nginx tries two processes per request,
        # so with one host down the second try is on the other host.
        interleaved = [
            u.removeprefix("http://") for urls in zip(*upstreams, strict=True) for u in urls
        ]
        nginx_env = {
            **os.environ,
            "CLUSTER_ROLE": "nginx",
            "UPSTREAMS": " ".join(interleaved),
            "BASE_PORT": str(nginx_port),
            "CLUSTER_DIR": str(tmp_path / "nginx"),
            "STATIC_ROOT": str(tmp_path / "static"),
            "CLUSTER_COLLECTSTATIC": "0",
        }
        nginx = _cluster_sh(["bash", "scripts/cluster.sh"], nginx_env)
        stack.callback(_stop, [nginx])
        assert _started(nginx, "nginx", t) == t.nginx_url
        yield t


def _host_env(t: Topology, host: Host, *, beat: bool) -> dict[str, str]:
    """The environment of one host's processes: production settings with test secrets, the
    shared servers on the bridge's address."""
    folder = t.dir / host.name
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "DATABASE_URL": t.pair.primary.url,
        "DATABASE_REPLICA_URL": t.pair.replica.url,
        "REDIS_URL": t.redis_url,
        "INFRAI_HOT_REDIS_URL": t.cluster.url,
        "DJANGO_SECRET_KEY": SECRET,
        "INFRAI_KEY_PEPPER": PEPPER,
        "DJANGO_ALLOWED_HOSTS": ",".join(
            ["127.0.0.1", "localhost", *(h.address for h in t.net.hosts)]
        ),
        # nginx runs on another host: uvicorn trusts its X-Forwarded-For.
        "FORWARDED_ALLOW_IPS": t.net.address,
        "STRIPE_SECRET_KEY": "sk_test_two_hosts",
        "STRIPE_WEBHOOK_SECRET": "whsec_two_hosts",
        "INFRAI_METRICS_TOKEN": METRICS_TOKEN,
        "INFRAI_PUBLIC_BASE_URL": t.nginx_url + "/v1",
        "INFRAI_DRAIN_S": "1",
        "INFRAI_DATA_DIR": str(folder / "data"),
        "INFRAI_JOURNAL_DIR": str(folder / "journal"),
        "CLUSTER_ROLE": "host",
        "CLUSTER_HOSTNAME": host.name,
        "CLUSTER_BEAT": "1" if beat else "0",
        "CLUSTER_DIR": str(folder / "cluster"),
        "BIND_ADDRESS": host.address,
        "BASE_PORT": str(WEB_BASE),
        "WEB_PROCESSES": str(WEB_PROCESSES),
    }


def _cluster_sh(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _issue(org: str, credit: str = "5") -> str:
    out = io.StringIO()
    call_command("issue_key", org=org, project="default", credit_usd=credit, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def _chat(client: openai.OpenAI, model: str = "test-small") -> Any:
    return client.chat.completions.create(model=model, messages=HI, max_tokens=5)


def _replica_ok(url: str) -> dict[str, Any] | None:
    """``/readyz`` of the web process at ``url`` once its replica check is ``ok``, else None."""
    ready: dict[str, Any] = httpx.get(url + "/readyz", timeout=10).json()
    return ready if ready["checks"].get("replica") == "ok" else None


def _away_from_a_minute_boundary(margin_s: float = 10.0) -> None:
    """Rate limits count in fixed one-minute windows (inference.limits): start a counted
    sequence with at least ``margin_s`` left in the current one."""
    left = 60 - time.time() % 60
    if left < margin_s:
        time.sleep(left + 0.2)


def test_two_hosts_share_keys_limits_and_money_and_survive_one_host_stopping(
    topology: Topology,
) -> None:
    t = topology
    h1, h2 = t.net.hosts
    webs = [*t.webs(h1), *t.webs(h2)]

    # --- the topology: only the bridge's subnet is routed in a namespace; both hosts ready on
    # the primary with the replica in use; both workers answer on the shared broker
    for host in (h1, h2):  # no default route: nothing but the bridge's subnet
        routes = ip("-n", host.name, "-4", "route").splitlines()
        assert [r.split()[0] for r in routes] == [str(t.net.subnet)], routes
    for url in webs:
        # The replica check reads "lagging" for a moment after a write that follows an idle
        # spell (infra.db_router.ReplicaState): the replica is reached and caught up soon.
        ready = wait_for(lambda url=url: _replica_ok(url), seconds=30)
        assert ready["status"] == "ready", ready
    workers = {f"worker@{h.name}" for h in (h1, h2)}
    control = Celery(broker=t.redis_url).control

    def answering() -> set[str]:
        return {name for reply in control.ping(timeout=1, limit=len(workers)) for name in reply}

    wait_for(lambda: workers <= answering(), seconds=60)
    assert not (t.dir / h2.name / "cluster" / "pids" / "beat.pid").exists()  # beat: host 1 only

    key = _issue("acme")
    answer = t.sdk(key).chat.completions.create(model="test-large", messages=HI, max_tokens=20)
    assert answer.choices[0].message.content == "Echo: hello there"
    chunks = list(t.sdk(key).chat.completions.create(model="test-large", messages=HI, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "Echo: hello there"

    # --- a revocation is seen at once by every web process of both hosts
    revoked = _issue("acme")
    for url in webs:  # each process reads the key, and remembers it (a metered call)
        t.sdk(revoked, url).models.list()
        _chat(t.sdk(revoked, url))
    api_key_revoke(api_key=ApiKey.objects.get(key_hash=hash_key(revoked)))
    for url in webs:
        with pytest.raises(openai.AuthenticationError):
            _chat(t.sdk(revoked, url))
        with pytest.raises(openai.AuthenticationError):
            t.sdk(revoked, url).models.list()

    # --- a key's requests per minute are counted across hosts
    limited = _issue("acme")
    ApiKey.objects.filter(key_hash=hash_key(limited)).update(requests_per_minute=3)
    api_key_cache_forget(key_hash=hash_key(limited))
    _away_from_a_minute_boundary()
    for url in (t.webs(h1)[0], t.webs(h2)[0], t.webs(h1)[1]):
        _chat(t.sdk(limited, url))
    with pytest.raises(openai.RateLimitError):
        _chat(t.sdk(limited, t.webs(h2)[1]))

    # --- a hold opened on host 1 is seen on host 2: room for one worst case only
    t.fakes["primary"].chunk_delay_s = 0.2
    tight = _issue("tight", credit="0.003")  # one 1000-token hold ($0.002) fits, not two
    holder = Stream(t.sdk(tight, t.webs(h1)[0]), max_tokens=1000)
    holder.start()
    wait_for(lambda: len(holder.chunks) >= 2)
    with pytest.raises(openai.APIStatusError) as second:
        t.sdk(tight, t.webs(h2)[0]).chat.completions.create(
            model="test-large", messages=HI, max_tokens=1000
        )
    assert second.value.status_code == 402
    t.fakes["primary"].chunk_delay_s = 0  # the rest of the stream at once
    holder.join(30)
    assert holder.error is None
    t.sdk(tight, t.webs(h2)[0]).chat.completions.create(
        model="test-large", messages=HI, max_tokens=1000
    )

    # --- SIGTERM to host 1's web processes mid-stream: host 2 keeps serving, all is settled
    t.fakes["primary"].chunk_delay_s = 0.2
    streams = {url: Stream(t.sdk(key, url)) for url in webs}  # one on each web process
    for s in streams.values():
        s.start()
    wait_for(lambda: all(len(s.chunks) >= 3 for s in streams.values()))
    stopped = t.web_pids(h1)
    for pid in stopped:
        os.kill(pid, signal.SIGTERM)
    # Through nginx while host 1 drains: its closed sockets send nginx to host 2; a kept-alive
    # connection to a draining process gets a 503 that the SDK retries.
    during = t.sdk(key, retries=2)
    for _ in range(4):
        assert _chat(during, "test-large").choices[0].message.content
    for url in t.webs(h1):
        streams[url].join(60)
    t.fakes["primary"].chunk_delay_s = 0  # host 1's streams are over: host 2's finish at once
    for url in t.webs(h2):
        streams[url].join(60)
    wait_for(lambda: not any(pid_alive(pid) for pid in stopped), seconds=60)
    for url, s in streams.items():
        on_h1 = url in t.webs(h1)
        assert (getattr(s.error, "code", None) if on_h1 else s.error) == (
            "server_shutting_down" if on_h1 else None
        ), (url, s.error)
        log = assert_settled_once(s.request_id)
        assert log.cost_nanos > 0  # what each delivered was billed
        assert log.error_code == ("server_shutting_down" if on_h1 else "")
    assert all(pid_alive(pid) for pid in t.web_pids(h2))
    assert httpx.get(t.nginx_url + "/readyz", timeout=10).status_code == 200
    assert _chat(t.sdk(key, t.webs(h2)[1])).choices[0].message.content

    # --- the books: no hold open, billing_audit on host 2 finds nothing, wallets = ledger sums
    wait_for(lambda: not Hold.objects.filter(status=HoldStatus.OPEN).exists())
    audit = subprocess.run(
        h2.command([sys.executable, "manage.py", "billing_audit"]),
        cwd=ROOT,
        env=t.env[h2.name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "drift=0" in audit.stdout and "open_holds=0" in audit.stdout, audit.stdout
    for wallet in Wallet.objects.all():
        ledger = LedgerEntry.objects.filter(wallet=wallet).aggregate(total=Sum("amount_nanos"))
        assert wallet.balance_nanos == (ledger["total"] or 0)
