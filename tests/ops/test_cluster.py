"""The production topology (``scripts/cluster.sh``) on loopback ports, driven through nginx with
the official OpenAI SDK.

nginx (deploy/nginx) → two ``python -m config.server`` web processes (deploy/systemd units'
ExecStart), a Celery worker and beat on Redis, this test's PostgreSQL database, and the GPU
backend as a separate node that requires its token. The test proves: chat streamed and not,
embeddings served by the GPU node, a 402, a revocation seen by both web processes, per-key rate
limits and wallet holds that hold across both, a WebSocket live update through nginx, static
files served by nginx, the metrics of both processes summed — then SIGTERM to one web process
mid-stream: the other keeps serving and the stopped one's calls are settled (books clean).

About a minute and a half on the shared 2-core machine (most of it the processes' start).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from websockets.sync.client import connect as ws_connect

from accounts.keys import hash_key
from accounts.models import ApiKey, Organization, Role
from accounts.services import (
    api_key_cache_forget,
    api_key_revoke,
    membership_set,
    user_create,
    user_mark_email_verified,
)
from billing.audit import audit_findings
from billing.models import Hold, HoldStatus
from catalog.documents import SEED_PATH, catalog_load
from inference.models import RequestLog
from tests.inference.test_money_faults import assert_settled_once
from tests.live import pid_alive, shared_database_url, wait_for
from tests.ops.conftest import moved, parse_metrics, total

ROOT = Path(__file__).resolve().parents[2]
SECRET = "cluster-test-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
PEPPER = "cluster-test-pepper-0123456789abcdefghijklmnopqrstuvwxyz"
METRICS_TOKEN = "cluster-metrics-token"
GPU_TOKEN = "cluster-gpu-token-0123456789"
WORDS = " ".join(f"w{i}" for i in range(30))
HI = [{"role": "user", "content": "hello there"}]

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
]


@dataclass
class Cluster:
    proc: subprocess.Popen[bytes]
    base: int
    dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.base}"

    def web(self, i: int) -> str:
        return f"http://127.0.0.1:{self.base + i}"

    def pid(self, name: str) -> int:
        return int((self.dir / "pids" / f"{name}.pid").read_text())

    def sdk(self, key: str, url: str | None = None, retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(base_url=(url or self.url) + "/v1", api_key=key, max_retries=retries)

    def scrape(self, i: int = 2) -> dict[Any, float]:
        auth = {"authorization": f"Bearer {METRICS_TOKEN}"}
        r = httpx.get(self.web(i) + "/metrics", headers=auth, timeout=10)
        assert r.status_code == 200, r.text
        return parse_metrics(r.text)

    def logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text()[-3000:]}" for p in sorted((self.dir / "logs").glob("*"))
        )


def _free_base() -> int:
    """A port P with P, P+1, P+2 and P+50 free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + 50 > 65000:
            continue
        try:
            for offset in (1, 2, 50):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port block")


@pytest.fixture
def cluster(
    fake_catalog: Any, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    # Keys and sessions made here must be valid in the cluster's processes.
    settings.SECRET_KEY, settings.INFRAI_KEY_PEPPER = SECRET, PEPPER
    seed = yaml.safe_load(SEED_PATH.read_text())
    gpu = next(v for v in seed["vendors"] if v["name"] == "infrai-gpu")
    gpu = {
        **gpu,
        "credentials_env": "INFRAI_GPU_BACKEND_TOKEN",
        "verified_models": ["all-MiniLM-L6-v2"],
    }
    minilm = next(m for m in seed["models"] if m["id"] == "all-MiniLM-L6-v2")
    monkeypatch.setenv("INFRAI_GPU_BACKEND_TOKEN", GPU_TOKEN)
    catalog_load({"vendors": [gpu], "models": [minilm]})

    base = _free_base()
    env = {
        **os.environ,
        "DATABASE_URL": shared_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "DJANGO_SECRET_KEY": SECRET,
        "INFRAI_KEY_PEPPER": PEPPER,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STRIPE_SECRET_KEY": "sk_test_cluster",
        "STRIPE_WEBHOOK_SECRET": "whsec_cluster",
        "INFRAI_METRICS_TOKEN": METRICS_TOKEN,
        "INFRAI_GPU_BACKEND_TOKEN": GPU_TOKEN,
        "INFRAI_DRAIN_S": "1",
        "INFRAI_DATA_DIR": str(tmp_path / "data"),
        "BASE_PORT": str(base),
        "CLUSTER_DIR": str(tmp_path / "cluster"),
        "CLUSTER_MIGRATE": "0",
        "GPU_MODELS": "all-MiniLM-L6-v2",
    }
    proc = subprocess.Popen(
        ["bash", "scripts/cluster.sh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    c = Cluster(proc, base, tmp_path / "cluster")
    try:
        _wait_ready(c)
        yield c
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_ready(c: Cluster) -> None:
    assert c.proc.stdout is not None
    deadline = time.monotonic() + 240
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = c.proc.stdout.readline().decode()
        if not line and c.proc.poll() is not None:
            break
        lines.append(line)
        if line.startswith("cluster ready:"):
            return
    pytest.fail("the cluster did not start:\n" + "".join(lines) + c.logs())


def _key(issue_key: Callable[..., str], org: str, credit: str = "5") -> str:
    return issue_key(org=org, credit_usd=credit)


class Stream(threading.Thread):
    """One streamed chat call through the SDK, read chunk by chunk in a thread."""

    def __init__(self, client: openai.OpenAI, max_tokens: int | None = None) -> None:
        super().__init__(daemon=True)
        self.client, self.max_tokens = client, max_tokens
        self.chunks: list[Any] = []
        self.request_id = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        extra = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        try:
            with self.client.chat.completions.with_streaming_response.create(
                model="test-large",
                messages=[{"role": "user", "content": WORDS}],
                stream=True,
                **extra,
            ) as response:
                self.request_id = response.headers["x-request-id"]
                for chunk in response.parse():
                    self.chunks.append(chunk)
        except BaseException as exc:  # the SDK raises on the error event
            self.error = exc


def test_the_topology_serves_through_nginx_and_survives_a_web_process_stopping(
    cluster: Cluster, fake_catalog: Any, issue_key: Callable[..., str]
) -> None:
    c = cluster
    key = _key(issue_key, "acme")
    client = c.sdk(key)

    # --- chat streamed and not, embeddings on the GPU node, a 402; metrics of both processes
    before = c.scrape()
    answer = client.chat.completions.create(model="test-large", messages=HI, max_tokens=20)
    assert answer.choices[0].message.content == "Echo: hello there"
    chunks = list(client.chat.completions.create(model="test-large", messages=HI, stream=True))
    assert (
        "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        == "Echo: hello there"
    )
    vectors = client.embeddings.create(
        model="all-MiniLM-L6-v2", input=["a GPU node", "with a token"]
    )
    assert [len(v.embedding) for v in vectors.data] == [384, 384]
    with pytest.raises(openai.APIStatusError) as refused:
        c.sdk(_key(issue_key, "broke", credit="0")).chat.completions.create(
            model="test-large", messages=HI, max_tokens=20
        )
    assert refused.value.status_code == 402
    assert refused.value.code == "insufficient_quota"
    rows = wait_for(lambda: (r := list(RequestLog.objects.all())) and len(r) == 4 and r)
    after = c.scrape()
    assert {r.vendor for r in rows} == {"primary", "infrai-gpu", ""}
    outcomes = Counter((r.endpoint, r.model, r.vendor, r.status, str(r.http_status)) for r in rows)
    for (endpoint, model, vendor, status, http_status), n in outcomes.items():
        labels = dict(endpoint=endpoint, model=model, vendor=vendor, status=status)
        assert moved(before, after, "infrai_calls_total", **labels, http_status=http_status) == n
    assert total(after, "infrai_calls_total") - total(before, "infrai_calls_total") == 4
    embedded = next(r for r in rows if r.vendor == "infrai-gpu")
    assert (
        moved(
            before,
            after,
            "infrai_tokens_total",
            model="all-MiniLM-L6-v2",
            vendor="infrai-gpu",
            direction="input",
        )
        == embedded.input_tokens
        > 0
    )
    chat_cost = sum(r.cost_nanos for r in rows if r.vendor == "primary")
    assert (
        moved(before, after, "infrai_cost_nanos_total", model="test-large", vendor="primary")
        == chat_cost
    )
    assert after[("infrai_gpu_backend_up", frozenset())] == 1
    # The node's own numbers (batch size, queue depth, tokens/s …) come through the gateway.
    assert total(after, "infrai_gpu_backend_model_ready", model="all-MiniLM-L6-v2") == 1
    depth = ("infrai_gpu_backend_queue_depth", frozenset({("model", "all-MiniLM-L6-v2")}))
    assert after[depth] == 0
    assert ("infrai_open_holds", frozenset()) in after

    # --- static files come from nginx; /metrics is not exposed through it
    assert httpx.get(c.url + "/static/admin/css/base.css").status_code == 200
    assert httpx.get(c.url + "/metrics").status_code == 404

    # --- a revocation is seen at once by both web processes
    revoked = _key(issue_key, "acme")
    for i in (1, 2):  # each process caches the key, and remembers it (a metered call)
        c.sdk(revoked, c.web(i)).models.list()
        c.sdk(revoked, c.web(i)).chat.completions.create(
            model="test-small", messages=HI, max_tokens=5
        )
    api_key_revoke(api_key=ApiKey.objects.get(key_hash=hash_key(revoked)))
    for i in (1, 2):
        with pytest.raises(openai.AuthenticationError):
            c.sdk(revoked, c.web(i)).chat.completions.create(
                model="test-small", messages=HI, max_tokens=5
            )
        with pytest.raises(openai.AuthenticationError):
            c.sdk(revoked, c.web(i)).models.list()

    # --- per-key rate limits count across both processes
    limited = _key(issue_key, "acme")
    ApiKey.objects.filter(key_hash=hash_key(limited)).update(requests_per_minute=3)
    api_key_cache_forget(key_hash=hash_key(limited))
    for i in (1, 2, 1):
        c.sdk(limited, c.web(i)).chat.completions.create(
            model="test-small", messages=HI, max_tokens=5
        )
    with pytest.raises(openai.RateLimitError):
        c.sdk(limited, c.web(2)).chat.completions.create(
            model="test-small", messages=HI, max_tokens=5
        )

    # --- a hold opened by one process is seen by the other: room for one worst case only
    fake_catalog["primary"].chunk_delay_s = 0.2
    tight = _key(issue_key, "tight", credit="0.003")  # one 1000-token hold ($0.002) fits, not two
    holder = Stream(c.sdk(tight, c.web(1)), max_tokens=1000)
    holder.start()
    wait_for(lambda: len(holder.chunks) >= 2)
    with pytest.raises(openai.APIStatusError) as second:
        c.sdk(tight, c.web(2)).chat.completions.create(
            model="test-large", messages=HI, max_tokens=1000
        )
    assert second.value.status_code == 402
    holder.join(30)
    assert holder.error is None
    c.sdk(tight, c.web(2)).chat.completions.create(model="test-large", messages=HI, max_tokens=1000)

    # --- the dashboard's live socket through nginx gets the call as it is recorded
    org = Organization.objects.get(slug="acme")
    user = user_create(email="ops@example.com", password="a long enough password 123")
    user = user_mark_email_verified(user=user)
    membership_set(organization=org, user=user, role=Role.OWNER)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    ws_url = f"ws://127.0.0.1:{c.base}/ws/o/{org.slug}/live/"
    headers = {"Cookie": f"sessionid={session.session_key}", "Origin": c.url}
    with ws_connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
        raw = client.chat.completions.with_raw_response.create(
            model="test-large", messages=HI, max_tokens=5
        )
        request_id = raw.headers["x-request-id"]
        deadline = time.monotonic() + 15
        seen: list[Any] = []
        while time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=deadline - time.monotonic()))
            seen.append(message)
            if message.get("request_id") == request_id:
                break
        assert any(m.get("request_id") == request_id for m in seen), seen

    # --- SIGTERM one web process mid-stream: the other keeps serving, every call is settled
    fake_catalog["primary"].chunk_delay_s = 0.3
    streams = [Stream(c.sdk(key)) for _ in range(3)]  # nginx alternates: both processes get one
    for s in streams:
        s.start()
    wait_for(lambda: all(len(s.chunks) >= 3 for s in streams))
    web1 = c.pid("web1")
    os.kill(web1, signal.SIGTERM)
    # A call reaching web1 while it drains (an idle kept-alive connection) gets a 503 that the
    # SDK retries; the rest go to web2 at once (web1's listening socket is closed).
    during = c.sdk(key, retries=2)
    for _ in range(4):
        done = during.chat.completions.create(model="test-large", messages=HI, max_tokens=5)
        assert done.choices[0].message.content
    for s in streams:
        s.join(60)
    wait_for(lambda: not pid_alive(web1), seconds=60)
    ended = [s for s in streams if s.error is not None]
    finished = [s for s in streams if s.error is None]
    assert ended and finished, [(s.request_id, s.error) for s in streams]
    for s in ended:
        assert getattr(s.error, "code", None) == "server_shutting_down"
    for s in streams:
        log = assert_settled_once(s.request_id)
        assert log.cost_nanos > 0  # what each delivered was billed
        assert log.error_code == ("server_shutting_down" if s in ended else "")
    assert c.proc.poll() is None  # the topology still runs with one web process
    assert httpx.get(c.url + "/readyz").status_code == 200
    wait_for(lambda: not Hold.objects.filter(status=HoldStatus.OPEN).exists())
    assert audit_findings().findings == []
