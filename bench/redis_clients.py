"""CPU per round trip of the hot path's Redis pipeline: ``infra.resp`` against well-kept clients
that pipeline and speak Cluster (issue 33), on one server and on a three-master cluster.

    .venv/bin/python bench/redis_clients.py               # prints a markdown table
    .venv/bin/python bench/redis_clients.py --write-doc   # … and puts it into docs/performance.md

The round trip is the rate-limit check's (``inference.limits.admit`` through
``infra.fastcache.get_raw_and_incr_many``): GET of the key's cache entry, then INCRBY and
EXPIRE NX of its request and token counters — five commands, one pipeline, keys under one
hash tag. Each client runs it ``--calls`` times one after another (c=1) and the same number
spread over 32 tasks (c=32: what a busy web process's loop carries), on uvloop; the figure is
``time.process_time()`` (every thread of the process: glide's Rust runtime included) per round
trip, the median of ``--passes`` passes whose client order alternates so that drift cancels.

coredis and valkey-glide are not dependencies: the script installs them once into
``--extra-path`` (default ``/tmp/redis-bench-pkgs``, ``pip install --target``; never into the
project) unless ``--no-install``; clients that do not import are left out of the table.
The single server is ``--redis-url`` (default: db 11 of the local Redis); the cluster is
started here (``tests.redis_cluster``: ``redis-server`` and ``redis-cli`` on the PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Call = Callable[[], Awaitable[Any]]
Factory = Callable[[str, str], Awaitable[tuple[Call, Callable[[], Awaitable[None]]]]]
TAG = "{k:bench}"
CACHED, REQUESTS, TOKENS = f"bench:apikey:{TAG}", f"bench:rl:{TAG}:r", f"bench:rl:{TAG}:t"
TTL_S = 65


def _hostport(url: str) -> tuple[str, int, int]:
    from infra import resp

    if resp.is_cluster_url(url):
        seed = resp.parse_cluster_url(url)[0]
        return seed.host, seed.port, 0
    address = resp.Address.parse(url)
    return address.host, address.port, address.db


# --- the clients ----------------------------------------------------------------------------------
async def ours(url: str, mode: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from infra import resp

    client = resp.ClusterClient(url) if mode == "cluster" else resp.Client(url)

    async def call() -> Any:
        return await client.execute(
            ("GET", CACHED),
            ("INCRBY", REQUESTS, 1),
            ("EXPIRE", REQUESTS, TTL_S, "NX"),
            ("INCRBY", TOKENS, 100),
            ("EXPIRE", TOKENS, TTL_S, "NX"),
        )

    return call, client.close


async def redis_py(url: str, mode: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import redis.asyncio
    import redis.asyncio.cluster

    host, port, db = _hostport(url)
    client: Any
    if mode == "cluster":
        client = redis.asyncio.cluster.RedisCluster(host=host, port=port, decode_responses=True)
    else:
        client = redis.asyncio.Redis(host=host, port=port, db=db, decode_responses=True)

    async def call() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.get(CACHED).incrby(REQUESTS, 1).expire(REQUESTS, TTL_S, nx=True)
        pipe.incrby(TOKENS, 100).expire(TOKENS, TTL_S, nx=True)
        return await pipe.execute()

    return call, client.aclose


async def coredis_client(url: str, mode: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import coredis
    from coredis.tokens import PureToken

    host, port, db = _hostport(url)
    client: Any = (
        coredis.RedisCluster(host=host, port=port, decode_responses=True)
        if mode == "cluster"
        else coredis.Redis(host=host, port=port, db=db, decode_responses=True)
    )
    entered = client.__aenter__()
    client = await entered

    async def call() -> Any:
        async with client.pipeline(transaction=False) as pipe:
            replies = [
                pipe.get(CACHED),
                pipe.incrby(REQUESTS, 1),
                pipe.expire(REQUESTS, TTL_S, PureToken.NX),
                pipe.incrby(TOKENS, 100),
                pipe.expire(TOKENS, TTL_S, PureToken.NX),
            ]
        return [await reply for reply in replies]

    async def close() -> None:
        await client.__aexit__(None, None, None)

    return call, close


async def glide_client(url: str, mode: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import glide

    host, port, db = _hostport(url)
    nodes = [glide.NodeAddress(host, port)]
    client: Any
    if mode == "cluster":
        client = await glide.GlideClusterClient.create(glide.GlideClusterClientConfiguration(nodes))
        make: Any = glide.ClusterBatch
    else:
        config = glide.GlideClientConfiguration(nodes, database_id=db)
        client = await glide.GlideClient.create(config)
        make = glide.Batch
    nx = glide.ExpireOptions.HasNoExpiry

    async def call() -> Any:
        batch = make(is_atomic=False).get(CACHED).incrby(REQUESTS, 1)
        batch.expire(REQUESTS, TTL_S, nx).incrby(TOKENS, 100).expire(TOKENS, TTL_S, nx)
        return await client.exec(batch, raise_on_error=True)

    return call, client.close


CLIENTS: dict[str, tuple[str, Factory]] = {
    "ours": ("`infra.resp` (hiredis parser)", ours),
    "redis-py": ("redis-py 8 asyncio + hiredis (`Redis` / `RedisCluster`)", redis_py),
    "coredis": ("coredis 6 (`Redis` / `RedisCluster`)", coredis_client),
    "glide": ("valkey-glide 2 (`GlideClient` / `GlideClusterClient`, Rust core)", glide_client),
}


# --- measuring ------------------------------------------------------------------------------------
async def cpu_per_call_us(call: Call, *, calls: int, concurrency: int) -> float:
    """µs of process CPU per round trip of ``calls`` round trips over ``concurrency`` tasks."""
    for _ in range(200):
        await call()
    each = calls // concurrency

    async def worker() -> None:
        for _ in range(each):
            await call()

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - started) / (each * concurrency) * 1e6


async def one(name: str, url: str, mode: str, calls: int) -> tuple[float, float]:
    call, close = await CLIENTS[name][1](url, mode)
    try:
        replies = list(await call())
        assert len(replies) == 5, replies
        return (
            await cpu_per_call_us(call, calls=calls, concurrency=1),
            await cpu_per_call_us(call, calls=calls, concurrency=32),
        )
    finally:
        await close()


EXTRA_PATH = Path("/tmp/redis-bench-pkgs")
PEERS = ("coredis", "valkey-glide")


def ensure_peers(target: Path) -> None:
    """The peer clients in ``target`` (installed there once, never into the project)."""
    if (target / "coredis").exists() and (target / "glide").exists():
        return
    print(f"installing {', '.join(PEERS)} into {target} (once) …", file=sys.stderr, flush=True)
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *PEERS],
        check=True,
        timeout=900,
    )


def available() -> list[str]:
    names = []
    for name, module in (("ours", "hiredis"), ("redis-py", "redis"), ("coredis", "coredis"),
                         ("glide", "glide")):  # fmt: skip
        try:
            __import__(module)
        except ImportError:
            print(f"skipping {name}: {module} does not import", file=sys.stderr)
            continue
        names.append(name)
    return names


def run(
    urls: dict[str, str], names: list[str], calls: int, passes: int
) -> dict[tuple[str, str], tuple[float, float]]:
    import uvloop

    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for n in range(passes):
        for mode, url in urls.items():
            for name in names if n % 2 == 0 else list(reversed(names)):
                figures = uvloop.run(one(name, url, mode, calls))
                print(f"pass {n + 1} {mode:8} {name:9} c=1 {figures[0]:7.1f} µs  "
                      f"c=32 {figures[1]:7.1f} µs", file=sys.stderr)  # fmt: skip
                results.setdefault((mode, name), []).append(figures)
    return {
        key: (statistics.median(f[0] for f in got), statistics.median(f[1] for f in got))
        for key, got in results.items()
    }


def table(figures: dict[tuple[str, str], tuple[float, float]], names: list[str]) -> str:
    lines = [
        "| client | one server c=1 | one server c=32 | cluster c=1 | cluster c=32 |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        single, cluster = figures.get(("single", name)), figures.get(("cluster", name))
        cells = [f"{v:.0f} µs" for pair in (single, cluster) if pair for v in pair]
        lines.append(f"| {CLIENTS[name][0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--extra-path", default=str(EXTRA_PATH))
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()
    if not args.no_install:
        ensure_peers(Path(args.extra_path))
    sys.path.append(args.extra_path)  # after the venv: its packages win
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    from tests.redis_cluster import redis_cluster

    names = available()
    with redis_cluster() as cluster:
        figures = run({"single": args.redis_url, "cluster": cluster.url}, names, args.calls,
                      args.passes)  # fmt: skip
    text = table(figures, names)
    print(text)
    if args.write_doc:
        from bench.compare import machine, write_doc

        block = f"{text}\n\n{machine()}, {args.calls} round trips a figure."
        write_doc(block, "bench/redis_clients.py", _place)


def _place(doc: str, block: str) -> str:
    """Where the table goes the first time: a section of its own at the end."""
    return (
        doc.rstrip("\n")
        + "\n\n## Redis clients (`bench/redis_clients.py`)\n\n"
        + "CPU per round trip of the rate-limit check's pipeline (GET + INCRBY/EXPIRE NX of two "
        + "counters, one hash tag), one client after another in interleaved passes; the median "
        + "of the passes. `infra.resp` is the hot path's own client (its docstring carries this "
        + "figure): it is kept because it costs a fraction of each library's CPU and speaks "
        + "Cluster itself.\n\n"
        + block
        + "\n"
    )


if __name__ == "__main__":
    main()
