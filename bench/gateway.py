"""CPU the gateway spends per /v1 call, against a bare Django async view on the same server.

Starts a fake OpenAI-compatible vendor (tests/fakes) and daphne serving the real app, declares
the vendor in the catalog, then sends N calls at concurrency C to

- ``GET /healthz`` (a bare async Django view: the floor),
- ``GET /v1/models`` (key authentication and the catalog snapshot: the consumer's own cost),
- ``POST /v1/chat/completions`` non-streamed and streamed (the whole path: auth, validation,
  rate limit, routing, hold, vendor call, settle, request log),

and reads the daphne process's CPU time (user + system, /proc) around each batch. Prints ms of
server CPU per call and the ratio to the floor. Uses PostgreSQL/Redis when DATABASE_URL /
REDIS_URL are set (as production does), else SQLite in a temp dir.

    .venv/bin/python bench/gateway.py --calls 300 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.vendors import FakeVendor  # noqa: E402
from tests.live import free_port, wait_http  # noqa: E402

CATALOG = """
vendors:
  - {{name: benchvendor, display_name: Bench, adapter_kind: openai, base_url: "{url}",
     credentials_env: "", region: local, enabled: true, verified_models: [bench-up]}}
models:
  - id: bench-model
    display_name: bench-model
    owned_by: bench
    capabilities: [chat]
    tasks: [chat]
    context_window: 8192
    max_output_tokens: 1024
    quality_tier: 5
    created: 2025-01-01
    offerings:
      - vendor: benchvendor
        upstream_model: bench-up
        prices:
          - {{effective_from: "2025-01-01T00:00:00Z", source: bench, input_per_mtok_usd: "1",
             output_per_mtok_usd: "2"}}
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


async def batch(
    url: str, *, calls: int, concurrency: int, method: str, json: dict | None, key: str
) -> None:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=headers) as client:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                r = await client.request(method, url, json=json)
                r.raise_for_status()
                await r.aread()

        await asyncio.gather(*(one() for _ in range(calls)))


def measure(
    pid: int,
    url: str,
    *,
    calls: int,
    concurrency: int,
    method: str = "GET",
    json: dict | None = None,
    key: str = "",
) -> float:
    """Server CPU milliseconds per call."""
    asyncio.run(
        batch(
            url,
            calls=max(calls // 10, 5),
            concurrency=concurrency,
            method=method,
            json=json,
            key=key,
        )
    )
    before = cpu_seconds(pid)
    asyncio.run(batch(url, calls=calls, concurrency=concurrency, method=method, json=json, key=key))
    return (cpu_seconds(pid) - before) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--profile", help="write py-spy raw stacks of the server here (pip install py-spy)"
    )
    args = parser.parse_args()

    vendor = FakeVendor(models=["bench-up"]).start()
    tmp = Path(tempfile.mkdtemp(prefix="infrai-bench-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "false",
        "INFRAI_DATA_DIR": str(tmp),
        "LOG_LEVEL": "WARNING",
    }
    env.setdefault("DATABASE_URL", f"sqlite:///{tmp / 'bench.sqlite3'}")
    if env["DATABASE_URL"].startswith("postgres"):
        name = env["DATABASE_URL"].rsplit("/", 1)[1]
        subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", name], capture_output=True)
    manage(env, "migrate", "--noinput", "-v", "0")
    (tmp / "catalog.yaml").write_text(CATALOG.format(url=vendor.url))
    manage(env, "catalog", "load", str(tmp / "catalog.yaml"))
    key = (
        manage(
            env,
            "issue_key",
            "--org",
            f"bench-{os.getpid()}",
            "--project",
            "bench",
            "--credit-usd",
            "1000",
        )
        .strip()
        .splitlines()[-1]
    )
    manage(
        env,
        "shell",
        "-c",
        "from accounts.models import ApiKey; "
        "ApiKey.objects.update(requests_per_minute=10**6, tokens_per_minute=10**9)",
    )
    port = free_port()
    prefix = (
        [
            str(ROOT / ".venv/bin/py-spy"),
            "record",
            "--format",
            "raw",
            "-o",
            args.profile,
            "-r",
            "250",
            "--",
        ]
        if args.profile
        else []
    )
    server = subprocess.Popen(
        [
            *prefix,
            str(ROOT / ".venv/bin/daphne"),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "daphne.log").open("w"),
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz")
        chat = {
            "model": "bench-model",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 16,
        }
        floor = measure(
            server.pid, base + "/healthz", calls=args.calls, concurrency=args.concurrency
        )
        models = measure(
            server.pid, base + "/v1/models", calls=args.calls, concurrency=args.concurrency, key=key
        )
        plain = measure(
            server.pid,
            base + "/v1/chat/completions",
            calls=args.calls,
            concurrency=args.concurrency,
            method="POST",
            json=chat,
            key=key,
        )
        streamed = measure(
            server.pid,
            base + "/v1/chat/completions",
            calls=args.calls,
            concurrency=args.concurrency,
            method="POST",
            json={**chat, "stream": True},
            key=key,
        )
    finally:
        server.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
        server.wait(30)
        vendor.stop()
    db = "PostgreSQL" if env["DATABASE_URL"].startswith("postgres") else "SQLite"
    cache = "Redis" if env.get("REDIS_URL") else "in-memory"
    print(
        f"server CPU per call, daphne, {db} + {cache}, "
        f"{args.calls} calls at concurrency {args.concurrency}"
    )
    print(f"{'path':<40}{'ms CPU/call':>12}{'× floor':>10}")
    for name, value in (
        ("GET /healthz (bare async Django view)", floor),
        ("GET /v1/models (auth + catalog)", models),
        ("POST /v1/chat/completions", plain),
        ("POST /v1/chat/completions stream=true", streamed),
    ):
        print(f"{name:<40}{value:>12.2f}{value / floor:>10.1f}")


if __name__ == "__main__":
    main()
