"""The sizing figures of docs/deploy.md, measured on this machine.

    DATABASE_URL=postgres://…/infrai_o REDIS_URL=redis://…/11 .venv/bin/python deploy/measure.py

1. **Per call, in one process** (the app in this process, uvicorn in a thread): PostgreSQL
   statements and transactions, Redis round trips (commands and pipelines), counted at the
   client libraries over N sequential non-streamed chat calls.
2. **PostgreSQL alone** (``--db-clients 1,2,4``): processes that each repeat only the database
   work of a call — open the hold, then write the request-log row and settle it in one
   statement and wait for the disk, as :mod:`inference.settlement` does — each for its own
   organization, for S/2 seconds; calls/s and the CPU the PostgreSQL backends used (cores
   busy).
3. **The topology under load** (``scripts/cluster.sh`` without the GPU backend: nginx and two
   web processes): non-streamed chat calls at concurrency C for S seconds, to one web process
   directly and then through nginx to both; calls/s, latency, and the CPU each side spent per
   call, read from /proc: the web processes', and the PostgreSQL backends' serving this
   database (so the machine's other users are not counted).

The vendor is ``bench/upstream.py`` (a fake that costs almost nothing), so the figures are the
gateway's own cost. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from compare import catalog, cpu_seconds, pg_delta  # noqa: E402  (bench/compare.py)

from deploy.local import cluster, manage, production_env, stop  # noqa: E402

BODY = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}


def backend_pids(dsn: str, dbname: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def xact_commits(dsn: str, dbname: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (dbname,)
        ).fetchone()
    return int(row[0]) if row else 0


async def load(url: str, key: str, *, seconds: float, concurrency: int) -> list[float]:
    """Latencies (s) of the non-streamed calls completed in ``seconds`` at ``concurrency``."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"authorization": f"Bearer {key}"}
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=headers) as client:

        async def worker() -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                r = await client.post(url + "/v1/chat/completions", json=BODY)
                r.raise_for_status()
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def per_call_counts(env: dict[str, str], key: str, calls: int) -> dict[str, float]:
    """Statements, transactions and Redis round trips per call, counted in this process."""
    os.environ.update(env)
    import django

    django.setup()
    import asyncpg
    import redis

    from infra import resp

    counts = {"statements": 0, "redis": 0}

    def counting(cls: Any, name: str, counter: str) -> None:
        original = getattr(cls, name)
        if asyncio.iscoroutinefunction(original):

            async def wrapped_async(self: Any, *a: Any, **k: Any) -> Any:
                counts[counter] += 1
                return await original(self, *a, **k)

            setattr(cls, name, wrapped_async)
        else:

            def wrapped(self: Any, *a: Any, **k: Any) -> Any:
                counts[counter] += 1
                return original(self, *a, **k)

            setattr(cls, name, wrapped)

    counting(psycopg.Cursor, "execute", "statements")
    counting(psycopg.Cursor, "executemany", "statements")
    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        counting(asyncpg.Connection, name, "statements")  # infra.adb, the hot path's
    counting(redis.Redis, "execute_command", "redis")
    counting(redis.client.Pipeline, "execute", "redis")
    counting(resp.Connection, "execute", "redis")  # infra.fastcache, the hot path's

    from tests.live import uvicorn_server

    dsn, dbname = env["DATABASE_URL"], env["DATABASE_URL"].rsplit("/", 1)[1]
    with uvicorn_server() as url, httpx.Client(timeout=60) as client:
        auth = {"authorization": f"Bearer {key}"}
        for _ in range(5):  # warm: caches, catalog snapshot, pools
            client.post(url + "/v1/chat/completions", json=BODY, headers=auth).raise_for_status()
        time.sleep(1.0)
        counts.update(statements=0, redis=0)
        commits = xact_commits(dsn, dbname)
        for _ in range(calls):
            client.post(url + "/v1/chat/completions", json=BODY, headers=auth).raise_for_status()
        time.sleep(1.0)  # the last call's background pushes
        statements, round_trips = counts["statements"], counts["redis"]
        transactions = xact_commits(dsn, dbname) - commits - 1  # less the reading query's own
    return {
        "statements": statements / calls,
        "transactions": transactions / calls,
        "redis": round_trips / calls,
    }


def _prepare(env: dict[str, str], tmp: Path, upstream_port: int) -> str:
    """Migrate, load the bench catalog (only its vendor enabled), issue an unlimited key."""
    manage(env, "migrate", "--noinput", "-v", "0")
    (tmp / "catalog.yaml").write_text(catalog(f"http://127.0.0.1:{upstream_port}/v1"))
    manage(env, "catalog", "load", str(tmp / "catalog.yaml"))
    manage(
        env,
        "shell",
        "-c",
        "from catalog.models import Vendor; Vendor.objects.exclude(name='benchvendor')"
        ".update(enabled=False)",
    )
    key = manage(
        env,
        "issue_key",
        "--org",
        f"measure-{os.getpid()}",
        "--project",
        "m",
        "--credit-usd",
        "1000",
    ).stdout.splitlines()[-1]
    manage(
        env,
        "shell",
        "-c",
        "from accounts.models import ApiKey; "
        "ApiKey.objects.update(requests_per_minute=10**6, tokens_per_minute=10**9)",
    )

    return key


def db_worker(slug: str, seconds: float) -> None:
    """Repeat a call's database work for ``seconds`` (the request path's own functions, on an
    event loop as the web process runs them); print how many calls were done."""
    import secrets

    import django

    django.setup()
    from accounts.models import Organization, Project
    from billing.services import ahold_open
    from inference.models import RequestLog, RequestStatus
    from inference.settlement import _record_and_settle

    org = Organization.objects.get(slug=slug)
    project = Project.objects.filter(organization=org).first()
    project_id = project.pk if project else None

    async def run() -> int:
        done, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            request_id = "req_" + secrets.token_hex(12)
            await ahold_open(
                organization_id=org.pk,
                project_id=project_id,
                api_key_id=None,
                request_id=request_id,
                amount_nanos=50_000,
            )
            row = RequestLog(
                request_id=request_id,
                organization_id=org.pk,
                project_id=project_id,
                endpoint="chat.completions",
                requested_model="bench-model",
                model="bench-model",
                vendor="benchvendor",
                status=RequestStatus.OK,
                http_status=200,
                input_tokens=9,
                output_tokens=16,
                cost_nanos=41,
                latency_ms=5,
            )
            await _record_and_settle(row, True, 41)
            done += 1
        return done

    print(asyncio.run(run()))


def db_only(env: dict[str, str], dsn: str, dbname: str, clients: int, seconds: float) -> str:
    """Calls/s of ``clients`` processes doing only a call's database work, and PostgreSQL's CPU."""
    slugs = []
    for i in range(clients):
        slug = f"measure-db-{os.getpid()}-{clients}-{i}"
        manage(env, "issue_key", "--org", slug, "--project", "m", "--credit-usd", "1000")
        slugs.append(slug)
    procs = [
        subprocess.Popen(
            [sys.executable, "deploy/measure.py", "--db-worker", slug, str(seconds)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for slug in slugs
    ]
    # Backends come and go with the client processes: sample them until the clients exit.
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    while any(p.poll() is None for p in procs):
        for pid in backend_pids(dsn, dbname):
            cpu = cpu_seconds([pid])
            first.setdefault(pid, cpu)
            last[pid] = cpu
        time.sleep(0.25)
    outputs = [p.communicate()[0] for p in procs]
    pg = sum(last[p] - first[p] for p in last)
    calls = sum(int(o.strip().splitlines()[-1]) for o in outputs)
    return (
        f"{calls / seconds:.0f} calls/s; PostgreSQL backends busy {pg / seconds:.2f} cores, "
        f"{pg * 1000 / max(calls, 1):.2f} ms CPU/call"
    )


def _measure(
    args: argparse.Namespace, env: dict[str, str], tmp: Path, upstream_port: int
) -> list[tuple[str, str]]:
    """The table's rows: the PostgreSQL-only phase, the topology under load, the per-call
    counts (the fake vendor already listening on ``upstream_port``)."""
    dsn = env["DATABASE_URL"]
    dbname = dsn.rsplit("/", 1)[1]
    key = _prepare(env, tmp, upstream_port)
    rows = [
        (
            f"PostgreSQL alone, {n} client process(es)",
            db_only(env, dsn, dbname, n, args.seconds / 2),
        )
        for n in [int(x) for x in args.db_clients.split(",") if x]
    ]
    with cluster(env, args.base_port, tmp / "cluster", NO_GPU="1"):
        pids = {
            name: int((tmp / "cluster" / "pids" / f"{name}.pid").read_text())
            for name in ("web1", "web2", "nginx")
        }
        nginx_url = f"http://127.0.0.1:{args.base_port}"
        web1_url = f"http://127.0.0.1:{args.base_port + 1}"
        for label, url, webs in (
            ("one web process (direct)", web1_url, ["web1"]),
            ("two web processes behind nginx", nginx_url, ["web1", "web2"]),
        ):
            asyncio.run(load(url, key, seconds=3, concurrency=args.concurrency))  # warm
            web_pids = [pids[w] for w in webs]
            backends = {p: cpu_seconds([p]) for p in backend_pids(dsn, dbname)}
            web_cpu = cpu_seconds(web_pids)
            started = time.monotonic()
            latencies = asyncio.run(
                load(url, key, seconds=args.seconds, concurrency=args.concurrency)
            )
            elapsed = time.monotonic() - started
            web_ms = (cpu_seconds(web_pids) - web_cpu) * 1000 / len(latencies)
            pg_now = {p: cpu_seconds([p]) for p in backend_pids(dsn, dbname)}
            pg_ms = pg_delta(backends, pg_now) * 1000 / len(latencies)
            q = statistics.quantiles(latencies, n=100)
            rows.append(
                (
                    label,
                    f"{len(latencies) / elapsed:.0f} calls/s; p50 {q[49] * 1000:.0f} ms, "
                    f"p99 {q[98] * 1000:.0f} ms; web CPU {web_ms:.1f} ms/call; "
                    f"PostgreSQL backend CPU {pg_ms:.2f} ms/call",
                )
            )
    counts = per_call_counts(env, key, args.calls)
    rows.append(
        (
            "per call (in-process count)",
            f"{counts['statements']:.1f} PostgreSQL statements in "
            f"{counts['transactions']:.1f} transactions; "
            f"{counts['redis']:.1f} Redis round trips",
        )
    )
    return rows


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--db-worker":
        db_worker(sys.argv[2], float(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200, help="calls for the per-call counts")
    parser.add_argument("--base-port", type=int, default=18200)
    parser.add_argument("--db-clients", default="1,2,4", help="PostgreSQL-only phase ('' skips)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="infrai-measure-"))
    env = production_env(tmp, LOG_LEVEL="WARNING")
    upstream_port = args.base_port + 90
    upstream = subprocess.Popen(
        [sys.executable, "bench/upstream.py", "--port", str(upstream_port)], cwd=ROOT
    )
    try:
        rows = _measure(args, env, tmp, upstream_port)
    finally:
        stop(upstream)
    with open("/proc/loadavg") as f:
        load_avg = " ".join(f.read().split()[:3])
    print(
        f"\nmeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores, load average {load_avg} at the end\n"
    )
    print("| what | figure |\n|---|---|")
    for label, figure in rows:
        print(f"| {label} | {figure} |")


if __name__ == "__main__":
    main()
