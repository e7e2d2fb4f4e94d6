"""Two measurements beside ``bench/compare.py``: memory per idle open stream, and the ASGI
servers that could carry the same app.

- **Idle streams**: one infrai web process (uvicorn, pinned to one core) opens ``--streams``
  concurrent streams to a vendor that sends a first chunk and then nothing
  (``bench/upstream.py``'s ``bench-idle-up``); the process's RSS before and with every stream
  open, divided by the streams, is the memory one idle stream costs (its hold, its vendor
  connection, its client connection, its task).
- **uvicorn vs daphne vs Granian**: the same database, catalog and key served by uvicorn
  (``python -m config.server``, production), daphne and Granian (a Rust HTTP server; one
  worker, uvloop, ``bench/granian_asgi.py``: ``config.asgi`` with the production server's
  start-up, installed for the bench only into ``/tmp/granian-pkgs``), each pinned to CPU 0 in
  turn; non-streamed chat at concurrency 1 and 16 and 200-chunk streams at concurrency 1,
  interleaved (the order rotates per round), CPU per call and calls/s, median over rounds.
  ``--granian ''`` leaves Granian out.

    .venv/bin/python bench/servers.py                # ~3 minutes; prints both tables
    .venv/bin/python bench/servers.py --write-doc    # … and replaces them in docs/performance.md
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import (  # bench/ is not a package: found through sys.path above
    GRANIAN_PKGS,
    STREAM_CHUNKS,
    Result,
    Target,
    Workload,
    ensure_granian,
    machine,
    rss_mb,
    run_batch,
    start_infrai,
    start_upstream,
    stop,
    write_doc,
)

# (target name, the table's label), in the table's order.
SERVERS = (
    ("infrai", "uvicorn (`python -m config.server`)"),
    ("infrai (daphne)", "daphne"),
    ("infrai (granian)", "Granian (`bench/granian_asgi.py`)"),
)
WORKS = ("chat c=1", "chat c=16", "stream c=1")


async def idle_streams(target: Target, count: int) -> tuple[float, float, int]:
    """(RSS before in MB, RSS with ``count`` idle streams open in MB, streams that opened)."""
    body = (
        b'{"model":"bench-idle","stream":true,"max_tokens":4,'
        b'"messages":[{"role":"user","content":"idle"}]}'
    )
    headers = {**target.headers, "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=count + 8)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # Warm-up: a few whole streams first, so one-time costs (lazy imports, the tokenizer's
        # tables, pools) are not counted as the idle streams' memory.
        warm = body.replace(b'"bench-idle"', b'"bench-model"')
        for _ in range(8):
            async with session.post(
                target.base + "/chat/completions", data=warm, headers=headers
            ) as resp:
                await resp.read()
        await asyncio.sleep(1.0)
        before = rss_mb(target.pids())
        opened = 0
        responses: list[aiohttp.ClientResponse] = []
        gate = asyncio.Semaphore(64)  # open them at a bounded pace

        async def open_one() -> None:
            nonlocal opened
            async with gate:
                resp = await session.post(target.base + "/chat/completions", data=body,
                                          headers=headers)  # fmt: skip
                responses.append(resp)
                if resp.status == 200 and b"data: {" in await resp.content.readuntil(b"\n\n"):
                    opened += 1

        await asyncio.gather(*(open_one() for _ in range(count)))
        await asyncio.sleep(2.0)
        during = rss_mb(target.pids())
        for resp in responses:
            resp.close()
    return before, during, opened


async def servers(targets: list[Target], scale: float, rounds: int) -> dict[str, list[Result]]:
    works = [
        Workload("chat c=1", "/chat/completions", False, 1, max(int(300 * scale), 20)),
        Workload("chat c=16", "/chat/completions", False, 16, max(int(600 * scale), 40)),
        Workload("stream c=1", "/chat/completions", True, 1, max(int(60 * scale), 10)),
    ]
    results: dict[str, list[Result]] = {}
    connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=2)
    async with aiohttp.ClientSession(connector=connector) as session:
        for t in targets:
            for w in works:
                await run_batch(session, t, w, calls=w.calls // 5, deadline_s=30, measure=False)
        for rnd in range(rounds):
            for w in works:
                order = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]
                for t in order:
                    r = await run_batch(session, t, w, calls=w.calls, deadline_s=40, measure=True)
                    results.setdefault(f"{t.name}|{w.name}", []).append(r)
                    print(f"round {rnd + 1} {w.name:<10} {t.name:<18} {r.rate:7.0f}/s "
                          f"cpu {r.cpu_ms:6.2f} ms/call"
                          + (f"  errors {r.errors}" if r.errors else "")
                          + (f"  incomplete {r.incomplete}" if r.incomplete else ""),
                          file=sys.stderr, flush=True)  # fmt: skip
    return results


def _median(results: list[Result], attr: str) -> float:
    values = sorted(getattr(r, attr) for r in results)
    if not values:
        return float("nan")
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def report(
    idle: tuple[float, float, int],
    count: int,
    results: dict[str, list[Result]],
    rounds: int,
    versions: str,
) -> str:
    before, during, opened = idle
    per_stream_kb = (during - before) * 1024 / max(opened, 1)
    lines = [
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {machine()}; "
        f"load average {os.getloadavg()[0]:.2f} at the end; median of {rounds} interleaved "
        f"rounds; {versions}.",
        "",
        "| idle open streams (one uvicorn process) | opened | RSS before | RSS with all open "
        "| per stream |",
        "|---|---:|---:|---:|---:|",
        f"| {count} | {opened} | {before:.0f} MB | {during:.0f} MB | {per_stream_kb:.1f} KB |",
        "",
        "| server | chat c=1: calls/s · CPU per call | chat c=16: calls/s · CPU per call "
        f"| {STREAM_CHUNKS}-chunk stream c=1: streams/s · CPU per stream | CPU per call "
        "÷ uvicorn's (c=1 · c=16 · stream) |",
        "|---|---:|---:|---:|---:|",
    ]
    base = {w: _median(results.get(f"infrai|{w}", []), "cpu_ms") for w in WORKS}
    for name, label in SERVERS:
        if not any(f"{name}|{w}" in results for w in WORKS):
            continue
        cells, ratios = [], []
        for work in WORKS:
            rs = results.get(f"{name}|{work}", [])
            if rs and all(r.calls == 0 for r in rs):
                cells.append("fails")
                ratios.append("–")
                continue
            cpu = _median(rs, "cpu_ms")
            cells.append(f"{_median(rs, 'rate'):,.0f} · {cpu:.2f} ms")
            ratios.append(f"{cpu / base[work]:.2f}×" if base[work] else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " | " + " · ".join(ratios) + " |")
    problems = [
        f"- {key.replace('|', ' / ')}: {sum(r.errors for r in rs)} errors, "
        f"{sum(r.incomplete for r in rs)} incomplete streams "
        + next((r.first_error for r in rs if r.first_error), "")
        for key, rs in sorted(results.items())
        if any(r.errors or r.incomplete for r in rs)
    ]
    if problems:
        lines += ["", "Errors:", *problems]
    return "\n".join(lines)


def granian_version() -> str:
    try:
        meta = next(GRANIAN_PKGS.glob("granian-*.dist-info"))
    except StopIteration:
        return ""
    return meta.name.removeprefix("granian-").removesuffix(".dist-info")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/infrai_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/8")
    parser.add_argument(
        "--granian", default="granian", help="pip spec for /tmp/granian-pkgs ('' to skip)"
    )
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()
    procs = []
    with tempfile.TemporaryDirectory(prefix="infrai-bench-") as name:
        tmp = Path(name)
        try:
            upstream_proc, upstream = start_upstream(tmp)
            procs.append(upstream_proc)
            proc, uvicorn_target = start_infrai(tmp, upstream, args.database_url, args.redis_url)
            procs.append(proc)
            idle = asyncio.run(idle_streams(uvicorn_target, args.streams))
            stop(proc)
            procs.remove(proc)
            time.sleep(1.0)
            proc, uvicorn_target = start_infrai(tmp, upstream, args.database_url, args.redis_url)
            procs.append(proc)
            dproc, daphne_target = start_infrai(
                tmp, upstream, args.database_url, args.redis_url, asgi="daphne"
            )
            procs.append(dproc)
            targets = [uvicorn_target, daphne_target]
            if args.granian:
                ensure_granian(args.granian)
                gproc, granian_target = start_infrai(
                    tmp, upstream, args.database_url, args.redis_url, asgi="granian"
                )
                procs.append(gproc)
                targets.append(granian_target)
            results = asyncio.run(servers(targets, args.scale, args.rounds))
        finally:
            for p in reversed(procs):
                stop(p)
    version = importlib.metadata.version
    versions = f"uvicorn {version('uvicorn')}, daphne {version('daphne')}"
    if args.granian:
        versions += f", Granian {granian_version()}"
    text = report(idle, args.streams, results, args.rounds, versions)
    print(text)
    if args.write_doc:
        write_doc(
            text,
            "bench/servers.py",
            lambda doc, block: (
                f"{doc}\n### Idle streams and the ASGI server (`bench/servers.py`)\n\n{block}\n"
            ),
        )


if __name__ == "__main__":
    main()
