"""infrai beside LiteLLM's proxy and the bare upstream, measured interleaved in one run.

    .venv/bin/python bench/compare.py                 # prints a markdown table
    .venv/bin/python bench/compare.py --write-doc     # … and puts it into docs/performance.md

What it does (everything on 127.0.0.1; every loop bounded in calls and seconds):

1. starts the fake upstream (``bench/upstream.py``) pinned to CPU 1, and pins this process (the
   load generator) to CPU 1 too;
2. prepares infrai on PostgreSQL database ``infrai_bench`` and Redis db 12 (``--database-url``,
   ``--redis-url``): migrate, a two-model catalog on the upstream, an org with credit and a key
   with high limits; serves it with ``python -m config.server`` (uvicorn, the production entry)
   pinned to CPU 0;
3. installs LiteLLM's proxy in a throwaway virtualenv (``/tmp/litellm-venv``, once:
   ``pip install 'litellm[proxy]'``; never in the project's dependencies) and serves it with one
   worker, defaults, no database (``LITELLM_LOCAL_MODEL_COST_MAP=True``, a non-default master
   key, ``DATABASE_URL`` removed from its environment), pinned to CPU 0;
4. installs Portkey's open-source gateway, a stateless Node relay (no keys, wallets or request
   log of its own), with npm into a throwaway directory (``/tmp/portkey-gateway``, once:
   ``npm install @portkey-ai/gateway``; never a project dependency) and serves it with
   ``node …/build/start-server.js --headless``, pinned to CPU 0; each call names the upstream
   in its headers (``x-portkey-provider: openai``, ``x-portkey-custom-host``). On Node 20 it
   relays non-streamed chat but answers streams and embeddings with a 500 (an undici
   "immutable" headers error in its response handling): those cells read "fails";
5. for ``--rounds`` rounds, for each workload, runs each target in turn (the order rotates per
   round so machine drift cancels): non-streamed chat at concurrency 1 and 16, 200-chunk
   streams at concurrency 1, embeddings (1,536 floats) at concurrency 1;
6. reports the median over rounds: calls/s, latency p50/p99 and the latency added over direct,
   time to first token, the serving process's CPU per call (user + system of the process and
   its children, all threads, from ``/proc``; for "direct" that is the upstream's own CPU),
   PostgreSQL's CPU per call (the backends connected to the bench database), RSS after load,
   and errors / incomplete streams.

PostgreSQL and Redis are shared services and run unpinned. The machine is shared too: run it
when the load average is low, and read the ratios, measured side by side, rather than the
absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.local import stop  # noqa: E402  (the repository's deploy/local.py)

PY = ROOT / ".venv/bin/python"
LITELLM_VENV = Path("/tmp/litellm-venv")
GRANIAN_PKGS = Path("/tmp/granian-pkgs")
PY_SPY = Path("/tmp/py-spy/bin/py-spy")  # where bench/hot_path.py installs it
PORTKEY_DIR = Path("/tmp/portkey-gateway")
PORTKEY_SERVER = PORTKEY_DIR / "node_modules/@portkey-ai/gateway/build/start-server.js"
# The peers infrai is compared with, in the order of the ratio columns.
PEERS = ("LiteLLM", "Portkey")
DOC = ROOT / "docs/performance.md"
GATEWAY_CPU = 0
LOAD_CPU = 1
MASTER_KEY = "sk-bench-master-key-0123456789"
STREAM_CHUNKS = 200
RUN_NONCE = os.urandom(4).hex()  # embeddings inputs never repeat across runs either
_CALLS = itertools.count()

UPSTREAM_MODELS = {"bench-model": "bench-up", "bench-idle": "bench-idle-up"}
EMBED_UPSTREAM = "bench-embed-up"


def _model(model_id: str, upstream: str, kind: str, price: dict[str, str]) -> dict[str, Any]:
    """One catalog model of ``kind`` (``chat`` or ``embeddings``) offered by the bench vendor."""
    chat = kind == "chat"
    return {
        "id": model_id,
        "display_name": model_id,
        "owned_by": "bench",
        "capabilities": [kind],
        "tasks": ["chat" if chat else "retrieval"],
        "context_window": 8192,
        **({"max_output_tokens": 1024} if chat else {"embedding_dimensions": 1536}),
        "quality_tier": 5,
        "created": "2025-01-01",
        "offerings": [
            {
                "vendor": "benchvendor",
                "upstream_model": upstream,
                "prices": [{"effective_from": "2025-01-01T00:00:00Z", "source": "bench", **price}],
            }
        ],
    }


def catalog(url: str) -> str:
    """The benchmarks' catalog document (JSON, which is YAML) for ``catalog load``: one vendor,
    the fake upstream at ``url``, with two chat models and one embedding model."""
    chat_price = {"input_per_mtok_usd": "1", "output_per_mtok_usd": "2"}
    vendor = {
        "name": "benchvendor",
        "display_name": "Bench",
        "adapter_kind": "openai",
        "base_url": url,
        "credentials_env": "",
        "region": "local",
        "enabled": True,
        "verified_models": [*UPSTREAM_MODELS.values(), EMBED_UPSTREAM],
    }
    models = [_model(m, up, "chat", chat_price) for m, up in UPSTREAM_MODELS.items()]
    models.append(
        _model("bench-embed", EMBED_UPSTREAM, "embeddings", {"input_per_mtok_usd": "0.02"})
    )
    return json.dumps({"vendors": [vendor], "models": models}, indent=2)


LITELLM_CONFIG = """
model_list:
  - model_name: bench-model
    litellm_params: {{model: openai/bench-up, api_base: "{url}", api_key: sk-upstream}}
  - model_name: bench-embed
    litellm_params: {{model: openai/bench-embed-up, api_base: "{url}", api_key: sk-upstream}}
general_settings:
  master_key: {master}
"""


# --- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    children = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (dead ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes], headers: dict) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited with {proc.returncode}")
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status < 500:
                    return
        except Exception:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {timeout_s} s")


def pinned(cpu: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *argv] if shutil.which("taskset") else argv


class Postgres:
    """CPU of the PostgreSQL backends connected to one database (None when not readable)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = url.rsplit("/", 1)[1]

    def backends(self) -> list[int]:
        out = subprocess.run(
            [
                "psql",
                self.url.rsplit("/", 1)[0] + "/postgres",
                "-Atc",
                f"select pid from pg_stat_activity where datname = '{self.name}'",
            ],
            capture_output=True,
            text=True,
        )
        return [int(x) for x in out.stdout.split()] if out.returncode == 0 else []

    def snapshot(self) -> dict[int, float]:
        return {pid: cpu_seconds([pid]) for pid in self.backends()}

    def settle(self) -> None:
        """VACUUM ANALYZE the database, so that statistics are in place and autovacuum does
        not pick the measured batches to catch up on the warm-up's writes."""
        subprocess.run(["psql", self.url, "-qc", "VACUUM ANALYZE"], capture_output=True)


def pg_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


# --- targets --------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    base: str  # .../v1
    headers: dict[str, str]
    chat_model: str
    embed_model: str
    pids: Callable[[], list[int]]
    postgres: Postgres | None = None
    # infrai: the keys of further organizations, each with its own wallet (Workload.tenants).
    tenant_headers: list[dict[str, str]] = field(default_factory=list)

    def headers_for(self, call: int, tenants: int) -> dict[str, str]:
        """The headers of the ``call``-th call of a workload spread over ``tenants``
        organizations (round robin); targets without tenants send their one key."""
        keys = [self.headers, *self.tenant_headers][:tenants]
        return keys[call % len(keys)]


def start_upstream(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        pinned(LOAD_CPU, [str(PY), str(ROOT / "bench/upstream.py"), "--port", str(port)]),
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "upstream.log").open("w"),
    )
    wait_http(f"http://127.0.0.1:{port}/v1/models", 20, proc, {})
    return proc, f"http://127.0.0.1:{port}/v1"


def manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [str(PY), "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout


def start_infrai(
    tmp: Path, upstream: str, database_url: str, redis_url: str, *, asgi: str = "uvicorn"
) -> tuple[subprocess.Popen[bytes], Target]:
    """infrai on a fresh database and Redis db, served by ``asgi``: ``uvicorn`` (the
    production entry, ``python -m config.server``), ``starlette`` (the same server and routes on
    Starlette's HTTP layer, ``bench/starlette_v1.py``: measured, never served), ``daphne``
    (Channels' server) or ``granian`` (Granian from :data:`GRANIAN_PKGS`, one worker, uvloop,
    serving ``config.asgi`` through ``bench/granian_asgi.py``: measured, never served)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "false",
        "INFRAI_DATA_DIR": str(tmp),
        "LOG_LEVEL": "WARNING",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
    }
    server, _, name = database_url.rpartition("/")
    subprocess.run(
        ["psql", f"{server}/postgres", "-qc", f"create database {name}"], capture_output=True
    )
    subprocess.run(["redis-cli", "-u", redis_url, "flushdb"], capture_output=True, check=True)
    manage(env, "migrate", "--noinput", "-v", "0")
    (tmp / "catalog.yaml").write_text(catalog(upstream))
    manage(env, "catalog", "load", str(tmp / "catalog.yaml"))
    keys = manage(
        env,
        "shell",
        "-c",
        "import io; from django.core.management import call_command\n"
        f"for t in range({TENANTS}):\n"
        "    out = io.StringIO()\n"
        f"    call_command('issue_key', org=f'bench-{os.getpid()}-{{t}}', project='bench',"
        " credit_usd='100000', stdout=out)\n"
        "    print(out.getvalue().strip().splitlines()[-1])",
    ).split()
    keys = [word for word in keys if word.startswith("ifr_")]  # not the shell's own chatter
    key = keys[0]
    manage(
        env,
        "shell",
        "-c",
        "from accounts.models import ApiKey; "
        "ApiKey.objects.update(requests_per_minute=10**7, tokens_per_minute=2**31 - 1)",
    )
    port = free_port()
    argv = {
        "uvicorn": [str(PY), "-m", "config.server", "--host", "127.0.0.1", "--port", str(port)],
        "starlette": [str(PY), str(ROOT / "bench/starlette_v1.py"), "--host", "127.0.0.1",
                      "--port", str(port)],
        "daphne": [str(PY.parent / "daphne"), "-b", "127.0.0.1", "-p", str(port), "-v", "0",
                   "config.asgi:application"],
        # The production server's choices where Granian has them: uvloop, no access log, the
        # same header timeout; one worker process (Granian's main process only supervises it).
        "granian": [str(PY), "-m", "granian", "--interface", "asgi", "--loop", "uvloop",
                    "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
                    "--log-level", "warning", "--no-access-log",
                    "--http1-header-read-timeout", "10000", "bench.granian_asgi:application"],
    }[asgi]  # fmt: skip
    if asgi == "granian":
        env["PYTHONPATH"] = os.pathsep.join((str(ensure_granian()), str(ROOT)))
    proc = subprocess.Popen(
        pinned(GATEWAY_CPU, argv),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "infrai.log").open("w"),
        start_new_session=True,
    )
    headers = {"authorization": f"Bearer {key}"}
    base = f"http://127.0.0.1:{port}/v1"
    wait_http(base + "/models", 60, proc, headers)
    label = "infrai" if asgi in ("uvicorn", "starlette") else f"infrai ({asgi})"
    target = Target(
        label, base, headers, "bench-model", "bench-embed", lambda: tree(proc.pid),
        Postgres(database_url), [{"authorization": f"Bearer {k}"} for k in keys[1:]],
    )  # fmt: skip
    return proc, target


def ensure_granian(spec: str = "granian") -> Path:
    """Granian installed into :data:`GRANIAN_PKGS` (once, without dependencies: its one,
    click, is in the project's environment already); a bench-only install."""
    if not (GRANIAN_PKGS / "granian").is_dir():
        print(f"installing {spec} into {GRANIAN_PKGS} (once) …", file=sys.stderr, flush=True)
        subprocess.run(
            [str(PY), "-m", "pip", "install", "-q", "--no-deps", "--target", str(GRANIAN_PKGS),
             spec],
            check=True,
            timeout=900,
        )  # fmt: skip
    return GRANIAN_PKGS


def ensure_litellm(spec: str) -> Path:
    exe = LITELLM_VENV / "bin/litellm"
    if not exe.exists():
        print(f"installing {spec} into {LITELLM_VENV} (once) …", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run(
            [str(LITELLM_VENV / "bin/pip"), "install", "-q", spec], check=True, timeout=900
        )
    return exe


def start_litellm(tmp: Path, upstream: str, exe: Path) -> tuple[subprocess.Popen[bytes], Target]:
    (tmp / "litellm.yaml").write_text(LITELLM_CONFIG.format(url=upstream, master=MASTER_KEY))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_MODE="PRODUCTION")
    port = free_port()
    proc = subprocess.Popen(
        pinned(
            GATEWAY_CPU,
            [
                str(exe),
                "--config",
                str(tmp / "litellm.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
        ),
        cwd=tmp,
        env=env,
        stdout=(tmp / "litellm.out").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    headers = {"authorization": f"Bearer {MASTER_KEY}"}
    base = f"http://127.0.0.1:{port}/v1"
    wait_http(base + "/models", 180, proc, headers)
    target = Target("LiteLLM", base, headers, "bench-model", "bench-embed", lambda: tree(proc.pid))
    return proc, target


def ensure_portkey(spec: str) -> Path:
    """Portkey's gateway from npm in :data:`PORTKEY_DIR` (installed once); its server script."""
    if not PORTKEY_SERVER.exists():
        if not shutil.which("npm"):
            raise SystemExit("Portkey's gateway needs node and npm (or pass --portkey '')")
        print(f"installing {spec} into {PORTKEY_DIR} (once) …", file=sys.stderr, flush=True)
        PORTKEY_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(PORTKEY_DIR), "--no-audit", "--no-fund", spec],
            check=True,
            timeout=900,
            stdout=subprocess.DEVNULL,
        )
    return PORTKEY_SERVER


def start_portkey(tmp: Path, upstream: str, script: Path) -> tuple[subprocess.Popen[bytes], Target]:
    """Portkey's gateway relaying to ``upstream`` (``…/v1``): a stateless Node process; the
    provider and its base URL travel in every call's headers, the key goes to the upstream."""
    port = free_port()
    proc = subprocess.Popen(
        pinned(GATEWAY_CPU, ["node", str(script), f"--port={port}", "--headless"]),
        cwd=tmp,
        env={k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
        stdout=(tmp / "portkey.out").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    headers = {
        "authorization": "Bearer sk-upstream",
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": upstream,
    }
    base = f"http://127.0.0.1:{port}/v1"
    # It serves no /v1/models of its own: ready is when a relayed call comes back.
    wait_http_post(base + "/chat/completions", 60, proc, headers, "bench-up")
    target = Target("Portkey", base, headers, "bench-up", "bench-embed-up", lambda: tree(proc.pid))
    return proc, target


def wait_http_post(
    url: str, timeout_s: float, proc: subprocess.Popen[bytes], headers: dict, model: str
) -> None:
    """Wait until a one-message chat ``POST`` to ``url`` answers 200."""
    import urllib.request

    body = json.dumps(
        {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "ready?"}]}
    ).encode()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited with {proc.returncode}")
        try:
            req = urllib.request.Request(
                url, data=body, headers={**headers, "content-type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not relay a call within {timeout_s} s")


def portkey_version() -> str:
    try:
        package = PORTKEY_SERVER.parent.parent / "package.json"
        node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout
        return f"{json.loads(package.read_text())['version']} on Node {node.strip().lstrip('v')}"
    except (OSError, ValueError, KeyError):
        return ""


# --- load -----------------------------------------------------------------------------------


@dataclass
class Result:
    calls: int = 0
    errors: int = 0
    incomplete: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    pg_cpu_s: float | None = None
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def pct(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s * 1000 / self.calls if self.calls else float("nan")


@dataclass(frozen=True)
class Workload:
    name: str
    path: str
    stream: bool
    concurrency: int
    calls: int
    embed: bool = False
    # Organizations (wallets) the calls are spread over: one organization's holds and
    # settlements take turns on its wallet row.
    tenants: int = 1

    def body(self, target: Target, call: int) -> bytes:
        """The ``call``-th request body. Embeddings inputs differ per call (``call`` is unique
        in the run), so that no target can answer them from a cache: infrai caches identical
        deterministic requests, and every target must reach the upstream."""
        if self.embed:
            text = f"hello bench {RUN_NONCE} {call}"
            return json.dumps({"model": target.embed_model, "input": text}).encode()
        body: dict[str, Any] = {
            "model": target.chat_model,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": STREAM_CHUNKS if self.stream else 16,
        }
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return json.dumps(body).encode()


async def run_batch(
    session: aiohttp.ClientSession,
    target: Target,
    work: Workload,
    *,
    calls: int,
    deadline_s: float,
    measure: bool,
) -> Result:
    url = target.base + work.path
    fixed = None if work.embed else work.body(target, 0)
    headers = [
        {**target.headers_for(i, work.tenants), "content-type": "application/json"}
        for i in range(work.tenants)
    ]
    result = Result()
    pids = target.pids() if measure else []
    pg_before = target.postgres.snapshot() if measure and target.postgres else None
    cpu_before = cpu_seconds(pids)
    started = time.perf_counter()
    stop_at = started + deadline_s
    remaining = calls

    sent = 0

    async def one() -> None:
        nonlocal sent
        t0 = time.perf_counter()
        sent += 1
        try:
            body = fixed if fixed is not None else work.body(target, next(_CALLS))
            async with session.post(url, data=body, headers=headers[sent % len(headers)]) as resp:
                if resp.status != 200:
                    text = await resp.text()
                    result.errors += 1
                    result.first_error = result.first_error or f"{resp.status} {text[:200]}"
                    return
                if work.stream:
                    events = 0
                    done = False
                    first = None
                    tail = b""
                    async for data in resp.content.iter_any():
                        if first is None and b"data: {" in tail + data:
                            first = time.perf_counter()
                        events += data.count(b"data: {")
                        tail = data[-8:]
                        if b"[DONE]" in data:
                            done = True
                    if first is not None:
                        result.ttfts.append(first - t0)
                    if not done or events < STREAM_CHUNKS:
                        result.incomplete += 1
                else:
                    await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            result.errors += 1
            result.first_error = result.first_error or repr(exc)
            return
        result.latencies.append(time.perf_counter() - t0)
        result.calls += 1

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0 and time.perf_counter() < stop_at:
            remaining -= 1
            await one()

    await asyncio.gather(*(worker() for _ in range(work.concurrency)))
    result.seconds = time.perf_counter() - started
    if measure:
        # Work the server finishes after answering (request log, settlement) counts too.
        await asyncio.sleep(0.05)
        result.cpu_s = cpu_seconds(pids) - cpu_before
        if target.postgres is not None and pg_before is not None:
            result.pg_cpu_s = pg_delta(pg_before, target.postgres.snapshot())
    return result


# --- report ---------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def fmt(value: float, digits: int = 1, unit: str = "") -> str:
    if value != value:
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}{unit}"
    return f"{value:,.{digits}f}{unit}"


def table(results: dict[tuple[str, str], list[Result]], rss: dict[str, float], names: list[str]):
    def m(target: str, work: str, fn: Callable[[Result], float]) -> float:
        return med([fn(r) for r in results.get((target, work), [])])

    direct_p50 = {w: m("direct", w, lambda r: r.pct(r.latencies, 0.5)) for w in WORKNAMES}
    direct_ttft = m("direct", "stream c=1", lambda r: r.pct(r.ttfts, 0.5))
    rows: list[tuple[str, list[str], str]] = []

    def ratio(a: float, b: float, invert: bool = False) -> str:
        if a != a or b != b or not a or not b:
            return ""
        return f"{(b / a if invert else a / b):.1f}×"

    def failed(n: str, works: tuple[str, ...]) -> bool:
        """Whether ``n`` answered none of the calls of one of ``works`` in any round."""
        return any(
            (rs := results.get((n, w))) and all(r.calls == 0 and r.errors for r in rs)
            for w in works
        )

    peers = [p for p in PEERS if p in names]

    def row(
        label: str,
        cell: Callable[[str], tuple[float, str]],
        invert: bool = False,
        works: tuple[str, ...] = (),
    ) -> None:
        """A row of ``cell(target)``: (the figure infrai and its peers are compared on, the
        text); "fails" for a target that answered none of the calls of one of ``works``."""
        cells = {n: (float("nan"), "fails") if failed(n, works) else cell(n) for n in names}
        better = [ratio(cells.get("infrai", (0, ""))[0], cells[peer][0], invert) for peer in peers]
        rows.append((label, [cells[n][1] for n in names], better))

    def chat_c1(n: str) -> tuple[float, str]:
        rate = m(n, "chat c=1", lambda r: r.rate)
        p50 = m(n, "chat c=1", lambda r: r.pct(r.latencies, 0.5))
        p99 = m(n, "chat c=1", lambda r: r.pct(r.latencies, 0.99))
        if n == "direct":
            return rate, f"{fmt(rate, 0)} · p50 {fmt(p50, 2)} ms · p99 {fmt(p99, 2)} ms"
        added = p50 - direct_p50["chat c=1"]
        return rate, f"{fmt(rate, 0)} · +{fmt(added, 2)} ms · p99 {fmt(p99, 2)} ms"

    def chat_c16(n: str) -> tuple[float, str]:
        rate = m(n, "chat c=16", lambda r: r.rate)
        p50 = m(n, "chat c=16", lambda r: r.pct(r.latencies, 0.5))
        return rate, f"{fmt(rate, 0)} · p50 {fmt(p50, 1)} ms"

    def chat_tenants(n: str) -> tuple[float, str]:
        work = f"chat c=16 x{TENANTS}"
        rate = m(n, work, lambda r: r.rate)
        p50 = m(n, work, lambda r: r.pct(r.latencies, 0.5))
        cpu = m(n, work, lambda r: r.cpu_ms)
        return rate, f"{fmt(rate, 0)} · p50 {fmt(p50, 1)} ms · CPU {fmt(cpu, 2)} ms"

    def chat_cpu(n: str) -> tuple[float, str]:
        c1 = m(n, "chat c=1", lambda r: r.cpu_ms)
        c16 = m(n, "chat c=16", lambda r: r.cpu_ms)
        return c16, f"{fmt(c1, 2)} · {fmt(c16, 2)} ms"

    def postgres(n: str) -> tuple[float, str]:
        if n != "infrai":
            return float("nan"), "–"

        def per_call(work: str) -> float:
            return m(
                n,
                work,
                lambda r: (
                    (r.pg_cpu_s or 0) * 1000 / r.calls
                    if r.calls and r.pg_cpu_s is not None
                    else float("nan")
                ),
            )

        works = ("chat c=1", "chat c=16", f"chat c=16 x{TENANTS}")
        return float("nan"), " · ".join(fmt(per_call(w), 2) for w in works) + " ms"

    def stream(n: str) -> tuple[float, str]:
        cpu = m(n, "stream c=1", lambda r: r.cpu_ms)
        ttft = m(n, "stream c=1", lambda r: r.pct(r.ttfts, 0.5))
        total = m(n, "stream c=1", lambda r: r.pct(r.latencies, 0.5))
        per_chunk = cpu * 1000 / STREAM_CHUNKS
        # What each chunk adds: the stream's CPU beyond a whole non-streamed call (auth,
        # limits, routing, hold, settlement), spread over its chunks.
        beyond = (cpu - m(n, "chat c=1", lambda r: r.cpu_ms)) * 1000 / STREAM_CHUNKS
        if n == "direct":
            return cpu, (
                f"{fmt(cpu, 2)} ms ({fmt(per_chunk, 1)} µs/chunk) · TTFT {fmt(ttft, 2)} ms"
                f" · whole {fmt(total, 1)} ms"
            )
        return cpu, (
            f"{fmt(cpu, 1)} ms ({fmt(per_chunk, 0)} µs/chunk; {fmt(beyond, 0)} µs/chunk"
            f" beyond a call) · +{fmt(ttft - direct_ttft, 2)} ms · whole {fmt(total, 1)} ms"
        )

    def embeddings(n: str) -> tuple[float, str]:
        cpu = m(n, "embeddings c=1", lambda r: r.cpu_ms)
        p50 = m(n, "embeddings c=1", lambda r: r.pct(r.latencies, 0.5))
        if n == "direct":
            return cpu, f"{fmt(cpu, 2)} ms · p50 {fmt(p50, 2)} ms"
        return cpu, f"{fmt(cpu, 2)} ms · +{fmt(p50 - direct_p50['embeddings c=1'], 2)} ms"

    def memory(n: str) -> tuple[float, str]:
        return rss.get(n, 0), f"{fmt(rss.get(n, float('nan')), 0)} MB"

    tenants = f"chat c=16 x{TENANTS}"
    row("non-streamed chat, c=1: calls/s · added p50 · p99", chat_c1, works=("chat c=1",))
    row("non-streamed chat, c=16: calls/s · p50", chat_c16, works=("chat c=16",))
    row(
        f"non-streamed chat, c=16 over {TENANTS} organizations (infrai: a wallet each):"
        " calls/s · p50 · server CPU per call",
        chat_tenants,
        works=(tenants,),
    )
    row(
        "server CPU per non-streamed call, c=1 · c=16",
        chat_cpu,
        invert=True,
        works=("chat c=1", "chat c=16"),
    )
    row(
        f"PostgreSQL CPU per non-streamed call, c=1 · c=16 · c=16 over {TENANTS} organizations",
        postgres,
    )
    row(
        f"{STREAM_CHUNKS}-chunk stream, c=1: CPU per stream (per chunk; per chunk beyond a"
        " non-streamed call) · added TTFT p50 · whole stream p50",
        stream,
        invert=True,
        works=("stream c=1",),
    )
    row(
        "embeddings (1,536 floats), c=1: CPU per call · added p50",
        embeddings,
        invert=True,
        works=("embeddings c=1",),
    )
    row("RSS after load", memory, invert=True)

    head = "| workload | " + " | ".join(names) + "".join(f" | infrai vs {p}" for p in peers) + " |"
    lines = [head, "|---|" + "---:|" * (len(names) + len(peers))]
    for label, values, better in rows:
        lines.append(f"| {label} | " + " | ".join([*values, *better]) + " |")
    problems = []
    for (n, w), rs in sorted(results.items()):
        errors = sum(r.errors for r in rs)
        incomplete = sum(r.incomplete for r in rs)
        if errors or incomplete:
            first = next((r.first_error for r in rs if r.first_error), "")
            problems.append(
                f"- {n} / {w}: {errors} errors, {incomplete} incomplete streams {first}"
            )
    return "\n".join(lines), problems


TENANTS = 16
WORKNAMES = ["chat c=1", "chat c=16", f"chat c=16 x{TENANTS}", "stream c=1", "embeddings c=1"]


def workloads(scale: float) -> list[Workload]:
    def n(x: int) -> int:
        return max(int(x * scale), 5)

    return [
        Workload("chat c=1", "/chat/completions", False, 1, n(400)),
        Workload("chat c=16", "/chat/completions", False, 16, n(800)),
        Workload(f"chat c=16 x{TENANTS}", "/chat/completions", False, 16, n(800), tenants=TENANTS),
        Workload("stream c=1", "/chat/completions", True, 1, n(60)),
        Workload("embeddings c=1", "/embeddings", False, 1, n(300), embed=True),
    ]


async def bench(targets: list[Target], args: argparse.Namespace) -> tuple[dict, list[str]]:
    results: dict[tuple[str, str], list[Result]] = {}
    works = workloads(args.scale)
    # Below uvicorn's 5 s keep-alive: a connection idle while other targets ran is not reused
    # just as the server closes it.
    connector = aiohttp.TCPConnector(limit=64, limit_per_host=64, keepalive_timeout=2)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for t in targets:  # warm-up: connections, caches, lazy imports
            for w in works:
                await run_batch(
                    session, t, w, calls=max(w.calls // 10, 16), deadline_s=30, measure=False
                )
            if t.postgres is not None:
                t.postgres.settle()
        for rnd in range(args.rounds):
            for w in works:
                order = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]
                for t in order:
                    r = await run_batch(
                        session, t, w, calls=w.calls, deadline_s=args.deadline, measure=True
                    )
                    results.setdefault((t.name, w.name), []).append(r)
                    print(
                        f"round {rnd + 1} {w.name:<15} {t.name:<8} {r.rate:8.0f}/s "
                        f"p50 {r.pct(r.latencies, 0.5):7.2f} ms  cpu {r.cpu_ms:6.2f} ms/call"
                        + (
                            f"  pg {r.pg_cpu_s * 1000 / max(r.calls, 1):.2f} ms"
                            if r.pg_cpu_s is not None
                            else ""
                        )
                        + (f"  errors {r.errors}" if r.errors else ""),
                        file=sys.stderr,
                        flush=True,
                    )
    return results, [t.name for t in targets]


def machine() -> str:
    """Cores, CPU model, kernel and Python of this machine, for the report's header."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return (
        f"{os.cpu_count()} × {cpu}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def at_the_end(title: str, what: str, script: str) -> Callable[[str, str], str]:
    """A ``place`` for :func:`write_doc`: a new section ``title`` at the end of the document,
    saying ``what`` the script measures and how to run it again, then the block."""

    def place(doc: str, block: str) -> str:
        return (
            doc.rstrip("\n")
            + f"\n\n{title}\n\n{what}. Reproduce with `.venv/bin/python {script} --write-doc`, "
            + "which replaces the block below.\n\n"
            + block
            + "\n"
        )

    return place


def write_doc(text: str, script: str, place: Callable[[str, str], str]) -> None:
    """Put ``text`` between ``script``'s two marker comments in docs/performance.md, in place of
    what they held; a document without them yet gets them where ``place(doc, block)`` puts
    them."""
    start, end = f"<!-- {script}: start -->", f"<!-- {script}: end -->"
    doc = DOC.read_text()
    block = f"{start}\n{text}\n{end}"
    if start in doc:
        doc = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        doc = place(doc, block)
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every call count")
    parser.add_argument("--deadline", type=float, default=40.0, help="seconds per batch at most")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/infrai_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--litellm", default="litellm[proxy]", help="pip spec ('' to skip)")
    parser.add_argument("--portkey", default="@portkey-ai/gateway", help="npm spec ('' to skip)")
    parser.add_argument("--no-infrai", action="store_true")
    parser.add_argument(
        "--asgi",
        default="uvicorn",
        choices=("uvicorn", "starlette", "granian"),
        help="infrai's HTTP layer or server (starlette, granian: measured, never served)",
    )
    parser.add_argument(
        "--write-doc", action="store_true", help="put the table in docs/performance.md"
    )
    parser.add_argument("--profile", help="py-spy raw stacks of infrai to this file (needs py-spy)")
    args = parser.parse_args()
    for url in (args.database_url, args.redis_url):
        if "127.0.0.1" not in url and "localhost" not in url:
            raise SystemExit(f"{url}: the benchmark only targets 127.0.0.1")

    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        os.sched_setaffinity(0, {LOAD_CPU})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on SIGTERM too
    tmp = Path(tempfile.mkdtemp(prefix="infrai-compare-"))
    procs: list[subprocess.Popen[bytes]] = []
    profiler: subprocess.Popen[bytes] | None = None
    try:
        upstream_proc, upstream = start_upstream(tmp)
        procs.append(upstream_proc)
        targets = [
            Target(
                "direct", upstream, {}, "bench-up", "bench-embed-up", lambda: [upstream_proc.pid]
            )
        ]
        if not args.no_infrai:
            proc, target = start_infrai(
                tmp, upstream, args.database_url, args.redis_url, asgi=args.asgi
            )
            target.name = "infrai"  # whichever server: the column the peers are compared with
            procs.append(proc)
            targets.append(target)
            if args.profile:
                py_spy = shutil.which("py-spy") or next(
                    (str(x) for x in (PY_SPY, LITELLM_VENV / "bin/py-spy") if x.exists()),
                    "py-spy",
                )
                profiler = subprocess.Popen(
                    pinned(
                        LOAD_CPU,
                        [
                            py_spy,
                            "record",
                            "--format",
                            "raw",
                            "-r",
                            "200",
                            "-o",
                            args.profile,
                            "--pid",
                            str(proc.pid),
                        ],
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp / "py-spy.log").open("w"),
                )
        if args.litellm:
            exe = ensure_litellm(args.litellm)
            proc, target = start_litellm(tmp, upstream, exe)
            procs.append(proc)
            targets.append(target)
        if args.portkey:
            proc, target = start_portkey(tmp, upstream, ensure_portkey(args.portkey))
            procs.append(proc)
            targets.append(target)
        started = time.time()
        results, names = asyncio.run(bench(targets, args))
        rss = {t.name: rss_mb(t.pids()) for t in targets if t.name != "direct"}
    finally:
        if profiler is not None:
            stop(profiler, sig=signal.SIGINT)
        for proc in reversed(procs):
            stop(proc)
    text, problems = table(results, rss, names)
    load = os.getloadavg()[0]
    stamp = datetime.datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M")
    litellm_version = ""
    if args.litellm:
        out = subprocess.run(
            [
                str(LITELLM_VENV / "bin/python"),
                "-c",
                "import importlib.metadata as m; print(m.version('litellm'))",
            ],
            capture_output=True,
            text=True,
        )
        litellm_version = out.stdout.strip()
    header = (
        f"Run {stamp} UTC on {machine()}; load average {load:.2f} at the end; "
        f"median of {args.rounds} interleaved rounds, scale {args.scale}"
        + (f"; LiteLLM {litellm_version}" if litellm_version else "")
        + (f"; Portkey's gateway {portkey_version()}" if args.portkey else "")
        + (f"; infrai served by {args.asgi}" if args.asgi != "uvicorn" else "")
        + ". Server CPU for *direct* is the fake upstream's own."
    )
    text = header + "\n\n" + text
    if problems:
        text += "\n\nErrors:\n" + "\n".join(problems)
    print(text)
    if args.write_doc:
        write_doc(
            text,
            "bench/compare.py",
            lambda doc, block: doc.replace("\n## gpu-backend", f"\n{block}\n\n## gpu-backend", 1),
        )


if __name__ == "__main__":
    main()
