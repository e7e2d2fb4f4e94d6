"""Where one non-streamed chat call's CPU goes: the web process by code object (perf) and by
component (py-spy), and PostgreSQL by statement, with and without the request log's usage
rollup trigger.

    .venv/bin/python bench/hot_path.py                         # ~4 minutes; prints the tables
    .venv/bin/python bench/hot_path.py --write-doc             # … and puts them in performance.md
    .venv/bin/python bench/hot_path.py --calls 1000 --pairs 1  # quick

What it does (everything on 127.0.0.1; the fake upstream, the catalog, the keys and the pinning
of ``bench/compare.py``):

1. starts a PostgreSQL 15 and a Redis of its own (``--services private``, the default):
   ``initdb`` into a temporary directory as the ``postgres`` user, the shared service's settings
   (autovacuum off, fsync on, 128 MB of shared buffers) plus ``pg_stat_statements`` (nested
   statements, planning) and ``track_functions``, which the shared service does not preload;
   both pinned to the load generator's CPU, so that nothing the gateway wakes takes the
   gateway's core while it is sampled. ``--services shared`` uses ``--database-url`` and
   ``--redis-url`` instead (no statement table);
2. serves infrai as production does (``python -m config.server``: uvicorn) pinned to CPU 0,
   warms it up, and measures the web process's and PostgreSQL backends' CPU per call over
   ``--calls`` non-streamed chat calls at concurrency 16 (``/proc``, no profiler attached);
3. the same batch under ``py-spy record --format raw`` (installed into ``/tmp/py-spy``, never
   the project; ``--native`` by default, which pauses the process per sample), and again under
   ``perf record -e cpu-clock`` when ``perf`` is installed. perf samples CPU time, kernel
   included, by shared object: its kernel share is the system calls' cost. py-spy gives the
   user-space time to components: each sample goes to the component of the innermost frame
   one of :data:`RULES` matches (asyncpg under the settlement counts as asyncpg, the
   settlement's own Python as settlement); samples in a system call are left out (py-spy's
   pauses land on them far more often than their CPU time);
4. **PostgreSQL**: ``--pairs`` pairs of batches at concurrency 16 with the rollup trigger
   (``inference_usage_daily_insert``, migration inference 0010, which since 0012 appends to
   the rollups' queue rather than updating them: ``inference.rollups``) enabled and disabled
   in turn
   (on, off, off, on, …), the backends' CPU per call from ``/proc``; then one batch at
   concurrency 1 with the trigger on and one with it off under ``pg_stat_statements``
   (at c=1 no call waits for another's row lock, so a statement's time is its own work).

The trigger is disabled only in the bench's own database, and enabled again before the end.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import (  # bench/ is not a package: found through sys.path above
    LOAD_CPU,
    PY,
    Postgres,
    Result,
    Target,
    Workload,
    free_port,
    machine,
    pinned,
    run_batch,
    start_infrai,
    start_upstream,
    stop,
    write_doc,
)

PY_SPY_DIR = Path("/tmp/py-spy")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
TRIGGER = "inference_usage_daily_insert"
CHAT = Workload("chat c=16", "/chat/completions", False, 16, 2000)
RATE_HZ = 250  # py-spy's samples per second

# (component, regex on a frame: "function (file:line)" for Python, "function (file.c:line)" or
# "function (library.so)" for C). A sample goes to the component of its innermost frame that a
# rule matches; a C system call at the top of the stack is counted apart (the kernel's work on
# the socket, loopback TCP included). The event loop's and asyncio's own frames count only where
# nothing more specific matched (a sample inside a task step belongs to the task's code).
RULES: list[tuple[str, str]] = [
    ("logging", r"[(/]logging/"),
    ("JSON (orjson, json, infra.jsonio)", r"orjson|[(/]json/|_json\.c|infra/jsonio\.py"),
    (
        "asyncpg: the money statements (client side)",
        r"[(/]asyncpg/|infra/adb\.py|\((?:protocol|pgproto|recordobj)\.c|billing/services/",
    ),
    (
        "vendor HTTP client (aiohttp)",
        r"[(/](?:aiohttp|yarl|multidict|propcache)/|inference/vendors/"
        r"|\((?:_http_parser|_http_writer|_helpers_c|_multidict|_find_header|url_parser)\.c",
    ),
    (
        "Redis round trip (infra.resp, limits)",
        r"infra/resp\.py|infra/fastcache\.py|inference/limits\.py|hiredis|\((?:read|reader)\.c",
    ),
    ("metrics and tracing", r"infra/observability/|[(/]prometheus_client/|[(/]opentelemetry/"),
    ("key authentication", r"accounts/|[(/]hmac\.py|_hashopenssl|libcrypto"),
    ("request-log row, settlement", r"inference/settlement\.py|inference/usage\.py"),
    ("tokens (counting, estimates)", r"inference/tokens\.py|[(/]tiktoken"),
    ("validation", r"inference/validation\.py|inference/chat/validat"),
    (
        "routing, catalog, the call's stages",
        r"[(/]catalog/|inference/chat/|inference/stages\.py|inference/call\.py",
    ),
    ("rendering the answer", r"inference/render\.py|inference/relay\.py"),
    ("our HTTP layer (inference.http)", r"inference/http\.py|inference/request_ids\.py"),
    ("endpoint handler", r"inference/endpoints/"),
    ("Django (models, settings, timezone)", r"[(/]django/"),
    (
        "HTTP server (uvicorn, httptools, config.timeouts)",
        r"[(/]uvicorn/|config/timeouts\.py|\((?:parser|llhttp|api|http)\.c",
    ),
]
FALLBACK: list[tuple[str, str]] = [
    ("asyncio: tasks, futures, timers (Python and C)", r"[(/]asyncio/|_asynciomodule"),
    (
        "event loop (uvloop, libuv)",
        r"\((?:loop|core|loop-watcher|stream|linux|timer|handle)\.c"
        r"|queue\.h|[(/]uvloop/|run_forever|Runner\.run",
    ),
]
SYSCALL = re.compile(
    r"^(?:write|writev|send|sendmsg|sendto|read|readv|recv|recvfrom|recvmsg|getpid|getrandom"
    r"|epoll_ctl|close|accept4?|connect|clock_gettime) \("
)
LOOP_ROOT = re.compile(r"^Runner\.run \(asyncio/runners\.py")
_RULES = [(name, re.compile(rx)) for name, rx in RULES]
_FALLBACK = [(name, re.compile(rx)) for name, rx in FALLBACK]
# A thread that only waits (thread-pool workers, the psycopg pool's, the loop in epoll_wait).
IDLE = re.compile(
    r"PyThread_acquire_lock_timed|\bepoll_p?wait \(|Condition\.wait|Event\.wait"
    r"|_queue_SimpleQueue_get|\(concurrent/futures/thread\.py|\(threading\.py:\d+\)$"
)


def ensure_py_spy() -> Path:
    exe = PY_SPY_DIR / "bin/py-spy"
    if not exe.exists():
        print(f"installing py-spy into {PY_SPY_DIR} (once) …", file=sys.stderr, flush=True)
        subprocess.run(
            [str(PY), "-m", "pip", "install", "-q", "--target", str(PY_SPY_DIR), "py-spy"],
            check=True,
            timeout=600,
        )
    return exe


# --- PostgreSQL and Redis of the bench's own ---------------------------------------------


class PrivateServices:
    """A PostgreSQL 15 and a Redis of the bench's own in a temporary directory, both pinned to
    the load generator's CPU: nothing the gateway calls runs on its core, so a sample of the
    gateway in a system call is the gateway's time, not a server it woke that took its core.
    PostgreSQL has the shared service's settings (autovacuum off, fsync on, 128 MB of shared
    buffers) plus ``pg_stat_statements`` with nested statements and PL functions tracked."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/infrai_hot_path"
        self.redis_port = free_port()
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.redis: subprocess.Popen[bytes] | None = None

    def _as_postgres(self, *argv: str) -> list[str]:
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            return ["runuser", "-u", "postgres", "--", *argv]
        return list(argv)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                              "-A", "trust", "--no-sync"),
            check=True, capture_output=True,
        )  # fmt: skip
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root}"
            " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
            " -c pg_stat_statements.max=1000 -c pg_stat_statements.track_planning=on"
            " -c track_functions=pl -c autovacuum=off"
            " -c shared_buffers=128MB -c max_connections=100"
        )
        subprocess.run(
            pinned(LOAD_CPU, self._as_postgres(
                str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
                "-l", str(self.root / "postgres.log"), "-w", "start")),
            check=True, capture_output=True,
        )  # fmt: skip
        base = self.url.rsplit("/", 1)[0]
        subprocess.run(["psql", f"{base}/postgres", "-qc", "create database infrai_hot_path"],
                       check=True, capture_output=True)  # fmt: skip
        psql(self.url, "create extension pg_stat_statements")
        self.redis = subprocess.Popen(
            pinned(LOAD_CPU, ["redis-server", "--port", str(self.redis_port), "--bind",
                              "127.0.0.1", "--save", "", "--appendonly", "no"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(50):
            if subprocess.run(["redis-cli", "-u", self.redis_url, "ping"],
                              capture_output=True).returncode == 0:  # fmt: skip
                break
            time.sleep(0.1)

    def stop(self) -> None:
        if self.redis is not None:
            stop(self.redis)
        subprocess.run(
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"),
            capture_output=True,
        )


def psql(url: str, sql: str) -> str:
    out = subprocess.run(["psql", url, "-XAtqc", sql], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"psql: {out.stderr.strip()}")
    return out.stdout


# --- the web process ------------------------------------------------------------------------


async def batch(
    target: Target, calls: int, *, concurrency: int = 16, measure: bool = True
) -> Result:
    work = dataclasses.replace(CHAT, concurrency=concurrency, name=f"chat c={concurrency}")
    connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=2)
    async with aiohttp.ClientSession(connector=connector) as session:
        return await run_batch(session, target, work, calls=calls, deadline_s=120, measure=measure)


def component(frames: list[str]) -> str:
    for rules in (_RULES, _FALLBACK):
        for frame in reversed(frames):
            name = next((name for name, rx in rules if rx.search(frame)), None)
            if name is not None:
                return name
    return "other"


def classify(stacks: Path) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """(samples per component, samples per innermost Python frame, samples in all) of a
    py-spy raw file; idle threads' samples and samples in a system call are left out (the
    kernel's share comes from perf: py-spy's pauses land on system calls far more often than
    their CPU time — 21 ``getpid`` a call, ~10 µs by ``strace``, took 7% of its samples)."""
    components: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if "(" in f]  # not py-spy's process/thread entries
        if not frames or any(IDLE.search(f) for f in frames[-3:]) or SYSCALL.match(frames[-1]):
            continue
        # What runs the loop (uvicorn's Server.run, asyncio.Runner) is not the work it runs.
        roots = [i for i, f in enumerate(frames) if LOOP_ROOT.match(f)]
        work = frames[roots[-1] + 1 :] if roots else frames
        n = int(count)
        total += n
        python = [f for f in work if ".py:" in f]
        leaves[python[-1] if python else "(no Python frame: the event loop's C code)"] += n
        components[component(work)] += n
    return components, leaves, total


def profile(target: Target, pid: int, calls: int, out: Path, *, native: bool) -> Result:
    exe = ensure_py_spy()
    spy = subprocess.Popen(
        # Native stacks need the process paused for each sample (py-spy's default);
        # without them it is read while it runs.
        pinned(LOAD_CPU, [str(exe), "record", "--format", "raw", "-r", str(RATE_HZ),
                          *(["--native"] if native else ["--nonblocking"]),
                          "-o", str(out), "--pid", str(pid)]),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    time.sleep(1.0)  # attached
    result = asyncio.run(batch(target, calls))  # measured: result.cpu_s is under the profiler
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
    if not out.exists():
        raise SystemExit(
            f"py-spy wrote nothing: {spy.stderr.read().decode() if spy.stderr else ''}"
        )
    return result


def perf_split(target: Target, pid: int, calls: int, out: Path) -> tuple[
    dict[str, float], dict[str, float]
]:  # fmt: skip
    """``perf record -e cpu-clock`` of the web process over a batch: (share of its CPU per
    shared object, share per kernel function), both of all samples. cpu-clock samples CPU time
    (a thread waiting for the core or in the kernel waiting is not sampled), so these shares
    need no correction; Python's own frames are one shared object (libpython) here. Both are
    shares of all samples."""
    perf = shutil.which("perf")
    if perf is None:
        return {}, {}
    rec = subprocess.Popen(
        pinned(LOAD_CPU, [perf, "record", "-e", "cpu-clock", "-F", "997", "-o", str(out),
                          "-p", str(pid)]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)
    asyncio.run(batch(target, calls, measure=False))
    rec.send_signal(signal.SIGINT)
    rec.wait(timeout=60)

    def shares(*sort: str) -> dict[str, float]:
        report = subprocess.run(
            [perf, "report", "-i", str(out), "--stdio", "--percent-limit", "0.3", *sort],
            # (a later --percent-limit wins)
            capture_output=True, text=True,
        ).stdout  # fmt: skip
        found: dict[str, float] = {}
        for line in report.splitlines():
            match = re.match(r"\s+([\d.]+)%\s+(.+?)\s*$", line)
            if match:
                found[match[2]] = float(match[1]) / 100
        return found

    kernel = shares("--sort", "sym", "--dsos", "[kernel.kallsyms]", "--percent-limit", "0.05")
    return shares("--sort", "dso"), {sym.removeprefix("[k] "): v for sym, v in kernel.items()}


# --- PostgreSQL -----------------------------------------------------------------------------


@dataclass
class PgBatch:
    trigger: bool
    calls: int
    pg_ms: float  # the backends' CPU per call
    web_ms: float  # the web process's CPU per call


@dataclass
class Tally:
    """A statement's or function's counts over one batch, and the calls the batch made."""

    count: int = 0
    plan_ms: float = 0.0
    exec_ms: float = 0.0
    calls: int = 0
    text: str = ""

    @property
    def per_1000_calls(self) -> int:
        return round(self.count * 1000 / max(self.calls, 1))

    def us_per_call(self, ms: float) -> float:
        return ms * 1000 / max(self.calls, 1)


STATEMENTS = """
select calls, total_plan_time, total_exec_time, toplevel, queryid,
       regexp_replace(query, '\\s+', ' ', 'g')
from pg_stat_statements
where dbid = (select oid from pg_database where datname = current_database())
"""
FUNCTIONS = "select funcname, calls, self_time from pg_stat_user_functions"


def per_call_ms(seconds: float | None, calls: int) -> float:
    return seconds * 1000 / calls if seconds is not None and calls else float("nan")


def set_trigger(url: str, on: bool) -> None:
    psql(url, f"alter table inference_requestlog {'enable' if on else 'disable'} trigger {TRIGGER}")


def pg_batches(target: Target, url: str, calls: int, pairs: int) -> list[PgBatch]:
    """Batches at concurrency 16 with the trigger on and off in turn (on, off, off, on, …)."""
    found: list[PgBatch] = []
    try:
        for on in ([True, False, False, True] * pairs)[: 2 * pairs]:
            set_trigger(url, on)
            r = asyncio.run(batch(target, calls))
            found.append(PgBatch(on, r.calls, per_call_ms(r.pg_cpu_s, r.calls), r.cpu_ms))
            print(f"trigger {'on ' if on else 'off'}: {r.calls} calls, {r.rate:.0f}/s, PostgreSQL "
                  f"{found[-1].pg_ms:.3f} ms/call, web {found[-1].web_ms:.3f} ms/call"
                  + (f", {r.errors} errors: {r.first_error}" if r.errors else ""),
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        set_trigger(url, True)
    return found


Statements = dict[tuple[bool, str], Tally]  # (top level, query id): its tally


def statement_costs(
    target: Target, url: str, calls: int
) -> tuple[dict[bool, Statements], dict[str, Tally]]:
    """``pg_stat_statements`` over a batch at concurrency 1 (no call waits for another's row
    lock, so a statement's time is its own work), with the trigger on and then off; and the PL
    functions' own time in the first."""
    by_trigger: dict[bool, Statements] = {}
    functions: dict[str, Tally] = {}
    try:
        for on in (True, False):
            set_trigger(url, on)
            psql(url, "select pg_stat_statements_reset(); select pg_stat_reset()")
            r = asyncio.run(batch(target, calls, concurrency=1))
            time.sleep(1.2)  # backends report their function statistics at most once a second
            found = by_trigger[on] = {}
            for row in psql(url, STATEMENTS).splitlines():
                count, plan_ms, exec_ms, top, queryid, query = row.split("|", 5)
                found[(top == "t", queryid)] = Tally(
                    int(count), float(plan_ms), float(exec_ms), r.calls, query
                )
            if on:
                for row in psql(url, FUNCTIONS).splitlines():
                    name, count, self_ms = row.split("|")
                    functions[name] = Tally(int(count), 0.0, float(self_ms), r.calls)
    finally:
        set_trigger(url, True)
    return by_trigger, functions


# --- report ---------------------------------------------------------------------------------


def _short(query: str, width: int = 110) -> str:
    query = query.replace("|", "\\|")
    return query if len(query) <= width else query[: width - 1] + "…"


def report(
    cpu_ms: float,
    pg_ms: float,
    profiled: Result,
    classified: tuple[collections.Counter[str], collections.Counter[str], int],
    perf: tuple[dict[str, float], dict[str, float]],
    batches: list[PgBatch],
    statements: dict[bool, Statements],
    functions: dict[str, Tally],
    args: argparse.Namespace,
) -> str:
    components, leaves, total = classified
    dsos, kernel = perf
    in_kernel = dsos.get("[kernel.kallsyms]", 0.0)
    user_ms = cpu_ms * (1 - in_kernel)
    expected = profiled.cpu_s * RATE_HZ
    lines = [
        f"Run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC on {machine()}; load "
        f"average {os.getloadavg()[0]:.2f} at the end; {args.calls} non-streamed chat calls at "
        f"concurrency 16 per batch; PostgreSQL and Redis {args.services}.",
        "",
        f"Web process (uvicorn, `python -m config.server`): **{cpu_ms:.2f} ms** of CPU per call "
        f"and PostgreSQL **{pg_ms:.2f} ms** (its backends), measured without a profiler.",
    ]
    if dsos:
        lines += [
            "",
            "Where the web process's CPU goes by code object (`perf record -e cpu-clock`: CPU "
            "time only, kernel included; Python's interpreter and every pure-Python module are "
            "`libpython`):",
            "",
            "| shared object | share | µs per call |",
            "|---|---:|---:|",
        ]
        for dso, share in sorted(dsos.items(), key=lambda kv: -kv[1]):
            lines.append(f"| `{dso}` | {share:.1%} | {share * cpu_ms * 1000:.0f} |")
        if kernel:
            lines += ["", "| kernel function (of all samples) | share | µs per call |"]
            lines.append("|---|---:|---:|")
            for sym, share in sorted(kernel.items(), key=lambda kv: -kv[1])[:10]:
                lines.append(f"| `{sym}` | {share:.1%} | {share * cpu_ms * 1000:.0f} |")
    lines += [
        "",
        f"The user-space CPU ({user_ms * 1000:.0f} µs per call{' after perf' if dsos else ''}) "
        f"by component (py-spy, {RATE_HZ} Hz{', native frames' if args.native else ''}, the "
        f"innermost frame a rule of `bench/hot_path.py` matches; {total:,} samples of running "
        f"threads outside system calls, against {expected:,.0f} that the batch's CPU time "
        "would give — more where the process was ready but waited for its core):",
        "",
        "| component | share | µs per call |",
        "|---|---:|---:|",
    ]
    if dsos:
        lines.append(
            f"| kernel (system calls: sockets on loopback, getpid …; from perf) | "
            f"{in_kernel:.1%} of all | {in_kernel * cpu_ms * 1000:.0f} |"
        )
    for name, n in components.most_common():
        lines.append(f"| {name} | {n / total:.1%} | {n / total * user_ms * 1000:.0f} |")
    lines += ["", "| innermost Python frame | share |", "|---|---:|"]
    for frame, n in leaves.most_common(15):
        lines.append(f"| `{_short(frame, 90)}` | {n / total:.1%} |")
    on = [b for b in batches if b.trigger]
    off = [b for b in batches if not b.trigger]
    if on and off:
        med_on = statistics.median(b.pg_ms for b in on)
        med_off = statistics.median(b.pg_ms for b in off)
        lines += [
            "",
            "| PostgreSQL CPU per call (backends of the bench database) | trigger on | trigger off "
            "| the trigger |",
            "|---|---:|---:|---:|",
            f"| median of {len(on)} batches each, order alternating | {med_on:.3f} ms "
            f"| {med_off:.3f} ms | {med_on - med_off:+.3f} ms "
            f"({(med_on - med_off) / med_off:+.0%}) |",
            "| each batch | "
            + ", ".join(f"{b.pg_ms:.3f}" for b in on)
            + " | "
            + ", ".join(f"{b.pg_ms:.3f}" for b in off)
            + " | |",
        ]
    on_stmts, off_stmts = statements.get(True, {}), statements.get(False, {})
    if on_stmts:
        lines += [
            "",
            "Statements per call at concurrency 1 (`pg_stat_statements`, planning + execution, "
            "wall time inside PostgreSQL, which at c=1 is its own work; a top-level statement "
            "includes what runs nested in it — the trigger inside the settlement's insert):",
            "",
            "| statement | level | per 1,000 calls | plan + exec µs per call, trigger on "
            "| … trigger off |",
            "|---|---|---:|---:|---:|",
        ]
        rows = sorted(on_stmts.items(), key=lambda kv: -(kv[1].plan_ms + kv[1].exec_ms))
        for key, t in rows:
            total_us = t.us_per_call(t.plan_ms + t.exec_ms)
            if t.per_1000_calls < 50 and total_us < 2:  # once-per-batch chatter
                continue
            off = off_stmts.get(key)
            off_us = f"{off.us_per_call(off.plan_ms + off.exec_ms):.1f}" if off else "–"
            plan = f" (plan {t.us_per_call(t.plan_ms):.1f})" if t.plan_ms >= 0.05 * t.calls else ""
            lines.append(
                f"| `{_short(t.text)}` | {'top' if key[0] else 'nested'} | {t.per_1000_calls:,} "
                f"| {total_us:.1f}{plan} | {off_us} |"
            )
        total = {
            on: sum(t.us_per_call(t.plan_ms + t.exec_ms) for (top, _), t in st.items() if top)
            for on, st in statements.items()
        }
        lines.append(
            f"| all top-level statements | | | {total.get(True, float('nan')):.1f} "
            f"| {total.get(False, float('nan')):.1f} |"
        )
    if functions:
        lines += [
            "",
            "| function (`track_functions = pl`, trigger on) | self µs per function call |",
            "|---|---:|",
        ]
        for name, t in sorted(functions.items(), key=lambda kv: -kv[1].exec_ms):
            lines.append(f"| `{name}` | {t.exec_ms * 1000 / max(t.count, 1):.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per batch")
    parser.add_argument("--pairs", type=int, default=3, help="trigger on/off pairs of batches")
    parser.add_argument("--services", choices=("private", "shared"), default="private")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/infrai_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--stacks", help="keep py-spy's raw stacks in this file")
    parser.add_argument(
        "--native",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="C frames too (uvloop, asyncpg, system calls): --no-native to leave them out",
    )
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {LOAD_CPU})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="infrai-hot-path-"))
    tmp.chmod(0o755)  # the private PostgreSQL runs as the postgres user below it
    procs: list[subprocess.Popen[bytes]] = []
    private = PrivateServices(tmp / "services") if args.services == "private" else None
    try:
        if private is not None:
            private.start()
        url = private.url if private is not None else args.database_url
        redis_url = private.redis_url if private is not None else args.redis_url
        upstream_proc, upstream = start_upstream(tmp)
        procs.append(upstream_proc)
        proc, target = start_infrai(tmp, upstream, url, redis_url)
        procs.append(proc)
        asyncio.run(batch(target, max(args.calls // 4, 200), measure=False))  # warm-up
        Postgres(url).settle()
        plain = asyncio.run(batch(target, args.calls))
        pg_ms = per_call_ms(plain.pg_cpu_s, plain.calls)
        print(f"web {plain.cpu_ms:.3f} ms/call, PostgreSQL {pg_ms:.3f} ms/call, "
              f"{plain.rate:.0f}/s", file=sys.stderr, flush=True)  # fmt: skip
        stacks = Path(args.stacks) if args.stacks else tmp / "stacks.txt"
        profiled = profile(target, proc.pid, args.calls, stacks, native=args.native)
        classified = classify(stacks)
        dsos, kernel = perf_split(target, proc.pid, args.calls, tmp / "perf.data")
        batches = pg_batches(target, url, args.calls, args.pairs)
        statements, functions = (
            statement_costs(target, url, max(args.calls // 4, 200))
            if private is not None
            else ({}, {})
        )
    finally:
        for p in reversed(procs):
            stop(p)
        if private is not None:
            private.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(
        plain.cpu_ms, pg_ms, profiled, classified, (dsos, kernel), batches, statements,
        functions, args,
    )  # fmt: skip
    print(text)
    if args.write_doc:
        write_doc(text, "bench/hot_path.py", lambda doc, block: doc + "\n" + block + "\n")


if __name__ == "__main__":
    main()
