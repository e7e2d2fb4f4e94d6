"""The money audit at scale: the full audit against the windowed one the beat runs, on 5 M calls.

In a scratch database of its own (``--database-url``, default ``infrai_bench_audit`` on the
machine's PostgreSQL; created, every migration applied, dropped at the end unless ``--keep``):

1. **Load.** ``--wallets`` organizations, each with a project and a wallet, and ``--rows``
   calls: a year (``--days``) of history and, in the last day, a day at ``--per-day`` calls
   (1 M by default: the scale the project plans for), so that the audit's window holds what an
   hour of that traffic writes. Calls go to wallets by a skewed draw (a few big customers).
   Each call is what the request path leaves behind: a hold (settled; 1 % expired, half of
   those charged to a checkpoint), a ``usage`` ledger entry of its cost (none for the 5 % free
   calls; a zero ``hold_expired`` entry for an expiry without checkpoint), a request-log row
   of ~0.9 KB in its monthly partition; the last minute's calls are still in flight (open
   holds, no entry, no row yet). Every wallet starts with a top-up; each entry's
   ``balance_after_nanos`` is its wallet's running sum in id order (a window function), the
   wallets' balance and held amounts and the projects' month counters agree with them: the
   audit finds nothing. The tables' indexes are dropped for the ``INSERT … SELECT`` and built
   after it; ``session_replication_role = replica`` keeps the request log's rollup trigger and
   the foreign keys' checks out of the load (the ledger's append-only trigger only refuses
   updates and deletes); then ``VACUUM (ANALYZE)`` (autovacuum is off on this machine).
2. **The audit**, three ways alternating in one run, median of ``--runs``: *before* — the audit
   as the beat task ran it every 5 minutes until the windowed one, ``billing/audit.py`` of git
   ``--before-ref`` loaded aside (the whole books); *full* — ``audit_findings()`` now (the
   daily ``billing.audit_full``, ``manage.py billing_audit``); *windowed* —
   ``audit_findings(since=5 minutes ago)``, what ``billing.audit`` runs every 5 minutes now.
   Wall time, the PostgreSQL backends' CPU (``/proc``), each check's time; all three must find
   nothing. ``EXPLAIN (ANALYZE, BUFFERS)`` of the slowest queries gives their scans.
3. **Window sizes**: the windowed audit since 5 minutes, an hour and a day ago (beat stopped
   that long), to show its cost follows the writes since the previous audit, not the history.

    .venv/bin/python bench/audit_scale.py --rows 300000 --per-day 100000   # ~1 minute
    .venv/bin/python bench/audit_scale.py --write-doc        # 5 M calls, into docs/performance.md
    .venv/bin/python bench/audit_scale.py --keep             # … and leave the database
    .venv/bin/python bench/audit_scale.py --reuse            # measure a kept database, no load

Everything runs on the machine's own PostgreSQL as configured (``shared_buffers`` 128 MB etc.)
on a machine shared with other work: compare the modes of one run, not runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.usage_scale import (  # noqa: E402
    Backends,
    _ms,
    _plan_summary,
    constraints_and_indexes,
    create_database,
    drop_database,
    log,
    setup_django,
)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/infrai_bench_audit"
SCRIPT = "bench/audit_scale.py"
BEFORE_REF = "79d0f46"  # the last commit whose beat task audited the whole books
INTERVAL_MIN = 5  # billing.audit's beat period
SECTION = "## The money audit at scale (`bench/audit_scale.py`)"
USD = 1_000_000_000
IN_FLIGHT_S = 60  # the newest calls' holds are still open
DEAD_PROCESS = "bench:1:dead"  # the process of every expired hold: seen last before them all

ROUTING = (
    '{"mode": "auto", "prefer": "balanced", "task": "chat", "chosen": "gpt-4o-mini@openai", '
    '"why": "cheapest offering of the tier with capacity", "alternatives": [{"model": '
    '"claude-3-5-haiku", "vendor": "anthropic", "expected_cost_usd": "0.000412", '
    '"quality_tier": 2}, {"model": "mistral-small", "vendor": "mistral", '
    '"expected_cost_usd": "0.000388", "quality_tier": 2}], "excluded": []}'
)

# --- the load ----------------------------------------------------------------------------------


def make_wallets(count: int) -> None:
    """``count`` organizations, each with one project and an empty wallet (bulk: no hooks)."""
    from accounts.models import Organization, Project
    from billing.models import Wallet

    orgs = Organization.objects.bulk_create(
        Organization(name=f"Bench {n}", slug=f"bench-{n}") for n in range(count)
    )
    Project.objects.bulk_create(Project(organization=o, name="default") for o in orgs)
    Wallet.objects.bulk_create(Wallet(organization=o) for o in orgs)


# One row a call: when it arrived and settled, whose it was, what became of it and its money.
# outcome: settled (cost > 0), free (settled at 0: no entry), checkpoint (expired, charged to
# its checkpoint: a usage entry), expired (expired with nothing delivered: a zero hold_expired
# entry), open (in flight: an open hold, nothing else yet).
_CALLS = """
CREATE UNLOGGED TABLE bench_calls AS
SELECT c.i, c.ts, c.wallet_idx, c.outcome, c.cost, c.cost * 2 + 10000000 AS hold_nanos,
       CASE c.outcome WHEN 'checkpoint' THEN c.ts + interval '960 seconds'
                      WHEN 'expired' THEN c.ts + interval '960 seconds'
                      ELSE c.ts + c.latency END AS settled_at,
       'req_' || lpad(to_hex((extract(epoch FROM c.ts) * 1000)::bigint), 12, '0')
           || lpad(to_hex(c.i), 12, '0') AS request_id
FROM (
    SELECT g.i, g.ts,
           least(floor(g.r_wallet * g.r_wallet * g.r_wallet * %(wallets)s)::int,
                 %(wallets)s - 1) AS wallet_idx,
           CASE WHEN g.ts > %(now)s::timestamptz - interval '{in_flight} seconds' THEN 'open'
                WHEN g.r_out < 0.005 THEN 'checkpoint' WHEN g.r_out < 0.01 THEN 'expired'
                WHEN g.r_out < 0.06 THEN 'free' ELSE 'settled' END AS outcome,
           1000 + floor(g.r_cost * g.r_cost * 2000000)::bigint AS cost,
           (0.2 + g.r_lat * g.r_lat * 30) * interval '1 second' AS latency
    FROM (
        SELECT i,
               CASE WHEN i < %(old)s
                    THEN %(t0)s::timestamptz + (i::float8 / %(old)s) * %(old_span)s::interval
                    ELSE %(t1)s::timestamptz
                         + ((i - %(old)s)::float8 / %(new)s) * %(new_span)s::interval END AS ts,
               random() AS r_wallet, random() AS r_out, random() AS r_cost, random() AS r_lat
        FROM generate_series(0, %(rows)s - 1) AS i
        OFFSET 0  -- a fence: each random() evaluated once a row
    ) g
) c
"""

_ENTRIES = """
CREATE UNLOGGED TABLE bench_entries AS
SELECT %(wallets)s + row_number() OVER (ORDER BY settled_at, i) AS id, i, wallet_idx,
       outcome, request_id, settled_at,
       CASE outcome WHEN 'settled' THEN -cost WHEN 'checkpoint' THEN -(cost / 2) ELSE 0 END
           AS amount
FROM bench_calls WHERE outcome IN ('settled', 'checkpoint', 'expired')
"""

_TOPUPS = """
INSERT INTO billing_ledgerentry (id, wallet_id, kind, amount_nanos, balance_after_nanos,
    idempotency_key, request_id, external_ref, description, created_at)
SELECT w.idx + 1, w.id, 'topup', t.amount, t.amount, 'bench-topup:' || w.id, '', '',
       'bench top-up', %(t0)s::timestamptz - interval '1 day'
FROM bench_wallets w
JOIN (SELECT wallet_idx, -sum(amount) + 100 * {usd}::bigint AS amount FROM bench_entries
      GROUP BY wallet_idx
      UNION ALL
      SELECT idx, 100 * {usd}::bigint FROM bench_wallets
      WHERE idx NOT IN (SELECT DISTINCT wallet_idx FROM bench_entries)) t
  ON t.wallet_idx = w.idx
"""

_LEDGER = """
INSERT INTO billing_ledgerentry (id, wallet_id, kind, amount_nanos, balance_after_nanos,
    idempotency_key, project_id, request_id, external_ref, description, created_at)
SELECT e.id, w.id, CASE WHEN e.outcome = 'expired' THEN 'hold_expired' ELSE 'usage' END,
       e.amount,
       t.amount_nanos + sum(e.amount) OVER (PARTITION BY e.wallet_idx ORDER BY e.id),
       CASE WHEN e.outcome = 'expired' THEN 'hold_expired:' ELSE 'usage:' END || e.request_id,
       w.project_id, e.request_id, '',
       CASE e.outcome WHEN 'settled' THEN 'chat.completions gpt-4o-mini'
            WHEN 'checkpoint' THEN 'usage to the last checkpoint (its process stopped)'
            ELSE 'Hold released after expiry' END,
       e.settled_at
FROM bench_entries e
JOIN bench_wallets w ON w.idx = e.wallet_idx
JOIN billing_ledgerentry t ON t.id = w.idx + 1
ORDER BY e.id  -- written in id order, as settlements write them
"""

_HOLDS = """
INSERT INTO billing_hold (id, wallet_id, project_id, api_key_id, request_id, amount_nanos,
    captured_nanos, status, month, created_at, expires_at, closed_at, process, delivered_nanos)
SELECT c.i + 1, w.id, w.project_id, NULL, c.request_id, c.hold_nanos,
       CASE c.outcome WHEN 'settled' THEN c.cost WHEN 'free' THEN 0
            WHEN 'checkpoint' THEN c.cost / 2 END,
       CASE c.outcome WHEN 'open' THEN 'open' WHEN 'checkpoint' THEN 'expired'
            WHEN 'expired' THEN 'expired' ELSE 'settled' END,
       date_trunc('month', c.ts AT TIME ZONE 'UTC')::date, c.ts,
       CASE WHEN c.outcome = 'open' THEN %(now)s::timestamptz + interval '900 seconds'
            ELSE c.ts + interval '900 seconds' END,
       CASE WHEN c.outcome <> 'open' THEN c.settled_at END,
       CASE WHEN c.outcome IN ('checkpoint', 'expired') THEN %(dead)s ELSE '' END,
       CASE WHEN c.outcome = 'checkpoint' THEN c.cost / 2 ELSE 0 END
FROM bench_calls c JOIN bench_wallets w ON w.idx = c.wallet_idx
ORDER BY c.i  -- written in the order the calls arrived
"""

_LOG = """
INSERT INTO inference_requestlog (id, request_id, organization_id, project_id, api_key_id,
    created_at, endpoint, requested_model, model, vendor, region, status, http_status,
    error_code, error_message, input_tokens, cached_input_tokens, cache_write_tokens,
    output_tokens, reasoning_tokens, usage_estimated, usage_source, cost_nanos, latency_ms,
    ttft_ms, stream, cache_hit, failovers, routing, ignored_params, prompt)
SELECT row_number() OVER (ORDER BY c.settled_at, c.i), c.request_id, w.organization_id,
       w.project_id, NULL, c.ts,
       'chat.completions', 'auto', 'gpt-4o-mini', 'openai', 'us-east',
       CASE WHEN c.outcome IN ('checkpoint', 'expired') THEN 'abandoned' ELSE 'ok' END,
       CASE WHEN c.outcome IN ('checkpoint', 'expired') THEN 0 ELSE 200 END,
       CASE WHEN c.outcome IN ('checkpoint', 'expired') THEN 'process_died' ELSE '' END, '',
       40 + c.cost / 1000, 0, 0, 10 + c.cost / 3000, 0, false, 'vendor',
       CASE c.outcome WHEN 'settled' THEN c.cost WHEN 'checkpoint' THEN c.cost / 2 ELSE 0 END,
       (extract(epoch FROM c.settled_at - c.ts) * 1000)::int,
       CASE WHEN c.i %% 2 = 0 THEN 120 END, c.i %% 2 = 0, c.outcome = 'free', 0,
       %(routing)s::jsonb, '[]'::jsonb, ''
FROM bench_calls c JOIN bench_wallets w ON w.idx = c.wallet_idx
WHERE c.outcome <> 'open'
ORDER BY c.settled_at  -- written as the calls end (their created_at is when they arrived)
"""

_WALLETS = """
UPDATE billing_wallet AS wl
   SET balance_nanos = t.balance, held_nanos = coalesce(o.held, 0)
  FROM bench_wallets w
  JOIN (SELECT wallet_id, sum(amount_nanos) AS balance FROM billing_ledgerentry
        GROUP BY wallet_id) t ON t.wallet_id = w.id
  LEFT JOIN (SELECT wallet_idx, sum(hold_nanos) AS held FROM bench_calls
             WHERE outcome = 'open' GROUP BY wallet_idx) o ON o.wallet_idx = w.idx
 WHERE wl.id = w.id
"""

_SPEND = """
INSERT INTO billing_projectspend (project_id, month, used_nanos, held_nanos)
SELECT project_id, month,
       coalesce(sum(captured_nanos), 0),
       coalesce(sum(amount_nanos) FILTER (WHERE status = 'open'), 0)
FROM billing_hold GROUP BY project_id, month
"""

TABLES = ("billing_ledgerentry", "billing_hold", "inference_requestlog")


def load(url: str, args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """The calls of ``args`` into the ledger, the holds and the request log (see the module's
    docstring); timed."""
    from django.conf import settings

    from inference import partitions

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    new = min(args.per_day, args.rows // 2)
    old = args.rows - new
    t1 = now - dt.timedelta(days=1)
    t0 = t1 - dt.timedelta(days=args.days - 1)
    figures.update(rows=args.rows, wallets=args.wallets, days=args.days, per_day=new, now=now)
    make_wallets(args.wallets)
    partitions.create_ahead(
        today=t0.date(),
        months_ahead=(now.year - t0.year) * 12
        + now.month
        - t0.month
        + int(settings.INFRAI_REQUEST_LOG_MONTHS_AHEAD),
    )
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SET work_mem = '256MB'")
        conn.execute("SET session_replication_role = replica")
        conn.execute("SELECT setseed(0.42)")
        dropped = {}
        for table in TABLES:
            constraints, indexes = constraints_and_indexes(conn, table)
            dropped[table] = (constraints, indexes)
            for name, _ in constraints:
                conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            for sql in indexes:
                name = re.match(r"CREATE (?:UNIQUE )?INDEX (\S+)", sql)[1]  # type: ignore[index]
                conn.execute(f"DROP INDEX {name}")
        conn.execute(
            "CREATE TEMP TABLE bench_wallets AS SELECT row_number() OVER (ORDER BY w.id) - 1 "
            "AS idx, w.id, w.organization_id, p.id AS project_id FROM billing_wallet w "
            "JOIN accounts_project p ON p.organization_id = w.organization_id"
        )
        params = {
            "wallets": args.wallets,
            "rows": args.rows,
            "old": max(old, 1),
            "new": max(new, 1),
            "t0": t0,
            "t1": t1,
            "now": now,
            "old_span": dt.timedelta(days=args.days - 1),
            "new_span": dt.timedelta(days=1),
            "dead": DEAD_PROCESS,
            "routing": ROUTING,
        }
        steps = [
            ("calls", _CALLS.format(in_flight=IN_FLIGHT_S)),
            ("entries", _ENTRIES),
            ("top-ups", _TOPUPS.format(usd=USD)),
            ("ledger", _LEDGER),
            ("holds", _HOLDS),
            ("request log", _LOG),
            ("wallets", _WALLETS),
            ("project spend", _SPEND),
        ]
        for label, sql in steps:
            step = time.perf_counter()
            cur = conn.execute(sql, params)  # type: ignore[call-overload]
            log(f"{label}: {cur.rowcount:,} rows in {time.perf_counter() - step:.0f} s")
        conn.execute(
            "INSERT INTO billing_process (token, host, pid, started_at, seen_at) "
            "VALUES (%s, 'bench', 1, %s, %s)",
            [DEAD_PROCESS, t0 - dt.timedelta(days=2), t0 - dt.timedelta(days=1)],
        )
        for table, seq_of in (
            ("billing_ledgerentry", "billing_ledgerentry"),
            ("billing_hold", "billing_hold"),
            ("inference_requestlog", "inference_requestlog"),
        ):
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{seq_of}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
        conn.execute("DROP TABLE bench_entries")
        conn.execute("DROP TABLE bench_calls")
        figures["load_s"] = time.perf_counter() - started
        step = time.perf_counter()
        for table, (constraints, indexes) in dropped.items():
            for name, definition in constraints:
                conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
            for sql in indexes:
                conn.execute(sql)
        figures["index_s"] = time.perf_counter() - step
        log(f"loaded in {figures['load_s']:.0f} s, indexes built in {figures['index_s']:.0f} s")


def sizes(url: str, figures: dict[str, Any]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute("VACUUM (ANALYZE)")  # what autovacuum would have done (off on this machine)
        figures["analyze_s"] = time.perf_counter() - started
        for key, sql in (
            ("entries", "SELECT count(*) FROM billing_ledgerentry"),
            ("holds", "SELECT count(*) FROM billing_hold"),
            ("log_rows", "SELECT count(*) FROM inference_requestlog"),
            ("wallets", "SELECT count(*) FROM billing_wallet"),
            ("ledger_bytes", "SELECT pg_total_relation_size('billing_ledgerentry')"),
            ("hold_bytes", "SELECT pg_total_relation_size('billing_hold')"),
            (
                "log_bytes",
                "SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree('inference_requestlog')",
            ),
            (
                "partitions",
                "SELECT count(*) FILTER (WHERE isleaf) "
                "FROM pg_partition_tree('inference_requestlog')",
            ),
        ):
            figures[key] = conn.execute(sql).fetchone()[0]  # type: ignore[index]
        for name in ("server_version", "shared_buffers", "work_mem"):
            figures[name] = conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
    log(
        f"{figures['entries']:,} entries, {figures['holds']:,} holds, {figures['log_rows']:,} "
        f"log rows in {figures['partitions']} partitions; VACUUM (ANALYZE) "
        f"{figures['analyze_s']:.0f} s"
    )


# --- the audit ---------------------------------------------------------------------------------

# The rows of the table: a label, the step(s) of billing.audit's report it sums, and the step
# of the audit before (its functions, timed by wrapping them; see before_audit).
STEPS = [
    ("window, counts", ["window and counts"], "counts"),
    ("balance, held, newest_entry", ["balance, held, newest_entry"], "_wallets"),
    ("chain", ["chain"], "_chain"),
    ("spend", ["spend"], "_spend"),
    ("stuck_hold, capture", ["stuck_hold", "capture"], "_holds"),
    ("expired_alive", ["expired_alive"], "_expired_alive"),
    (
        "entry_without_log, negative_cost, log_without_entry",
        ["entry_without_log, negative_cost, log_without_entry"],
        "_request_logs",
    ),
    ("journal", ["journal"], "_journals"),
]


def before_audit(ref: str) -> Callable[[], tuple[Any, dict[str, float]]]:
    """``audit_findings`` of ``billing/audit.py`` as of git ``ref`` (the audit beat ran every 5
    minutes before the windowed one), loaded as a module of its own; returns a function that
    runs it and gives its report and the seconds of each of its steps."""
    source = subprocess.run(
        ["git", "show", f"{ref}:billing/audit.py"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    module = types.ModuleType("billing_audit_before")
    sys.modules[module.__name__] = module  # for its dataclasses
    exec(compile(source, f"billing/audit.py@{ref}", "exec"), module.__dict__)
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            started = time.perf_counter()
            fn(*args)
            timings[name] = time.perf_counter() - started

        return run

    for _, _, name in STEPS[1:]:
        setattr(module, name, timed(name, getattr(module, name)))

    def audit() -> tuple[Any, dict[str, float]]:
        timings.clear()
        started = time.perf_counter()
        report = module.audit_findings()
        steps = dict(timings)
        steps["counts"] = time.perf_counter() - started - sum(timings.values())
        return report, steps

    return audit


def explain(url: str, sql: str, *, jit: bool) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``sql`` summarised: its scans and execution time
    (``jit`` as the audit ran it: a window turns it off)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET jit = {'on' if jit else 'off'}")
        plan = [r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()]
    ms = next((line.split(":")[1].strip() for line in plan if "Execution Time" in line), "?")
    return f"{_plan_summary(plan)} ({ms})"


def measure(
    url: str, before_ref: str, runs: int, windows_min: list[float], figures: dict[str, Any]
) -> None:
    """Time the audit before, the full audit and the windowed one, alternating (the module's
    docstring)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from billing.audit import audit_findings
    from billing.models import Hold

    backends = Backends(url)
    before = before_audit(before_ref)
    # The windows end at the newest call (the load's "now"), not at the clock: a kept database
    # measured later (--reuse) has the same windows.
    newest = Hold.objects.order_by("-pk").values_list("created_at", flat=True).first()
    assert newest is not None

    def new(since_min: float | None) -> Callable[[], tuple[Any, dict[str, float]]]:
        def run() -> tuple[Any, dict[str, float]]:
            since = None
            if since_min is not None:
                since = newest - dt.timedelta(minutes=since_min)
            report = audit_findings(since=since)
            steps = {label: sum(report.timings_s[k] for k in keys) for label, keys, _ in STEPS}
            return report, steps

        return run

    modes = {"before": before, "full": new(None), "window": new(INTERVAL_MIN)}
    samples: dict[str, list[tuple[float, float, dict[str, float]]]] = {m: [] for m in modes}
    for mode, audit in modes.items():  # a warm-up of each; all must find nothing
        report, _ = audit()
        assert report.drift == [], (mode, report.drift[:5])
        if mode == "window":
            figures["window"] = str(report.window)
            figures["window_entries"] = report.entries
    order = list(modes.items())
    for n in range(runs):
        for mode, audit in order[n % 3 :] + order[: n % 3]:
            cpu, started = backends.cpu_s(), time.perf_counter()
            _, steps = audit()
            wall, cpu = time.perf_counter() - started, backends.cpu_s() - cpu
            samples[mode].append((wall, cpu, steps))
            log(f"{mode}: {wall * 1000:,.0f} ms ({cpu * 1000:,.0f} ms PostgreSQL CPU)")
    for mode, rows in samples.items():
        figures[f"{mode}_s"] = statistics.median(r[0] for r in rows)
        figures[f"{mode}_cpu_s"] = statistics.median(r[1] for r in rows)
        figures[f"{mode}_steps"] = {s: statistics.median(r[2][s] for r in rows) for s in rows[0][2]}
    for mode, audit in modes.items():
        with CaptureQueriesContext(connection) as captured:
            audit()
        figures[f"{mode}_queries"] = len(captured.captured_queries)
        plans = []
        for q in sorted(captured.captured_queries, key=lambda q: -float(q["time"]))[:3]:
            plans.append((float(q["time"]), explain(url, q["sql"], jit=mode != "window")))
            log(f"  {mode} {float(q['time']) * 1000:8.1f} ms {q['sql'][:160]}")
            log(f"    {plans[-1][1]}")
        figures[f"{mode}_plans"] = plans
    anchors(newest - dt.timedelta(minutes=INTERVAL_MIN), runs, figures)
    figures["windows"] = []
    for minutes in windows_min:
        walls, cpus = [], []
        for _ in range(runs):
            cpu, started = backends.cpu_s(), time.perf_counter()
            report, _ = new(minutes)()
            walls.append(time.perf_counter() - started)
            cpus.append(backends.cpu_s() - cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        figures["windows"].append((minutes, wall, cpu, report.entries))
        log(f"since {minutes:g} minutes: {wall * 1000:,.0f} ms, {report.entries:,} entries")


def anchors(since: dt.datetime, runs: int, figures: dict[str, Any]) -> None:
    """What finding the window's first ids costs (``billing.audit._last_id_before``: the
    primary key read backwards), against what the same boundary costs without it and without
    an index on ``created_at`` (the question whether the ledger needs one)."""
    from django.db import connection

    from billing.audit import WINDOW_SLACK, _last_id_before, window_margin
    from billing.models import Hold, LedgerEntry

    def timed(fn: Callable[[], Any]) -> float:
        walls = []
        for _ in range(max(runs, 3)):
            started = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - started)
        return statistics.median(walls)

    entries_since, rows_since = since - WINDOW_SLACK, since - window_margin()
    figures["anchor_entry_s"] = timed(lambda: _last_id_before(LedgerEntry, entries_since))
    figures["anchor_hold_s"] = timed(lambda: _last_id_before(Hold, rows_since))

    def scan() -> None:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT min(id) FROM billing_ledgerentry WHERE created_at >= %s", [entries_since]
            )

    figures["created_at_scan_s"] = timed(scan)
    log(
        f"anchors: ledger {figures['anchor_entry_s'] * 1000:.1f} ms, holds "
        f"{figures['anchor_hold_s'] * 1000:.1f} ms; the ledger's created_at scanned "
        f"{figures['created_at_scan_s'] * 1000:,.0f} ms"
    )


# --- the report --------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:,.0f}×" if b > 0 else "—"


def report(figures: dict[str, Any], took_s: float) -> str:
    from bench.compare import machine
    from billing.audit import WINDOW_SLACK, window_margin

    before, full, window = (figures[f"{m}_steps"] for m in ("before", "full", "window"))
    lines = [
        f"{figures['entries']:,} ledger entries, {figures['holds']:,} holds and "
        f"{figures['log_rows']:,} request-log rows ({figures['partitions']} partitions) of "
        f"{figures['wallets']:,} wallets: a year of calls and, in its last day, "
        f"{figures['per_day']:,}. Before: the audit as beat ran it every 5 minutes (git "
        f"`{figures['before_ref']}`: the whole books). Full: `audit_findings()` now (the "
        "daily `billing.audit_full`, `manage.py billing_audit`). Windowed: "
        "`audit_findings(since=5 minutes ago)`, what `billing.audit` runs every 5 minutes now "
        f"— ledger entries from {(INTERVAL_MIN + WINDOW_SLACK.total_seconds() / 60):.0f} "
        f"minutes back ({figures['window_entries']:,} here), holds and request-log rows from "
        f"{(INTERVAL_MIN + window_margin().total_seconds() / 60):.0f}. The three alternate in "
        f"one run, median of {figures['runs']}; all find nothing.",
        "",
        "| check(s) | before | full | windowed | before ÷ windowed |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, _, old in STEPS:
        b, f, w = before.get(old, 0.0), full[label], window[label]
        lines.append(f"| {label} | {_ms(b)} | {_ms(f)} | {_ms(w)} | {_ratio(b, w)} |")
    lines += [
        f"| **the whole audit** (wall) | **{_ms(figures['before_s'])}** | "
        f"**{_ms(figures['full_s'])}** | **{_ms(figures['window_s'])}** | "
        f"**{_ratio(figures['before_s'], figures['window_s'])}** |",
        f"| PostgreSQL backend CPU | {_ms(figures['before_cpu_s'])} | "
        f"{_ms(figures['full_cpu_s'])} | {_ms(figures['window_cpu_s'])} | "
        f"{_ratio(figures['before_cpu_s'], figures['window_cpu_s'])} |",
        f"| queries | {figures['before_queries']} | {figures['full_queries']} | "
        f"{figures['window_queries']} | |",
        "",
        f"The window of one run: {figures['window']}.",
        "",
        "The slowest queries of each (`EXPLAIN (ANALYZE, BUFFERS)`, run again: its own "
        "figure in brackets):",
        "",
    ]
    for mode, name in (("before", "before"), ("full", "full"), ("window", "windowed")):
        for took, plan in figures[f"{mode}_plans"]:
            lines.append(f"- {name}, {_ms(took)}: {plan}")
    lines += [
        "",
        "The window's first ids, read backwards from the newest on each table's primary key: "
        f"{_ms(figures['anchor_entry_s'])} for the ledger, {_ms(figures['anchor_hold_s'])} for "
        "the holds; the same boundary of the ledger without it (no index on `created_at`, a "
        f"scan): {_ms(figures['created_at_scan_s'])}.",
        "",
        "The windowed audit's cost follows the writes since the previous audit, not the "
        "history (the previous audit that long ago: beat stopped for an hour, a day):",
        "",
        "| since | ledger entries read | wall | PostgreSQL CPU |",
        "|---|---:|---:|---:|",
    ]
    for minutes, wall, cpu, entries in figures["windows"]:
        lines.append(f"| {minutes:g} minutes | {entries:,} | {_ms(wall)} | {_ms(cpu)} |")
    gib = 2**30
    lines += [
        "",
        f"Sizes with indexes: ledger {figures['ledger_bytes'] / gib:.2f} GiB, holds "
        f"{figures['hold_bytes'] / gib:.2f} GiB, request log {figures['log_bytes'] / gib:.2f} "
        "GiB."
        + (
            f" Load {figures['load_s']:.0f} s, indexes {figures['index_s']:.0f} s, "
            f"`VACUUM (ANALYZE)` {figures['analyze_s']:.0f} s."
            if "load_s" in figures
            else ""
        ),
        "",
        f"{machine()}; PostgreSQL {figures['server_version']} as configured on this machine "
        f"(shared_buffers {figures['shared_buffers']}, work_mem {figures['work_mem']}), "
        "**shared with other engineers' work**: absolute figures are noisy, the ratios of one "
        f"run are the result. The whole run took {took_s / 60:.0f} minutes.",
    ]
    return "\n".join(lines)


def write_doc(text: str) -> None:
    from bench.compare import at_the_end
    from bench.compare import write_doc as put

    what = (
        "What the windowed money audit buys (`billing/audit.py`'s docstring, "
        '`docs/billing.md` "The audit")'
    )
    put(text, SCRIPT, at_the_end(SECTION, what, SCRIPT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="calls")
    parser.add_argument("--wallets", type=int, default=2000)
    parser.add_argument("--days", type=int, default=365, help="of history")
    parser.add_argument("--per-day", type=int, default=1_000_000, help="calls in the last day")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each mode")
    parser.add_argument(
        "--windows",
        default="5,60,1440",
        help="windowed audits to time: minutes since the previous audit (comma-separated)",
    )
    parser.add_argument(
        "--before-ref", default=BEFORE_REF, help="git ref of the audit to compare with"
    )
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--keep", action="store_true", help="leave the scratch database")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database, no load")
    parser.add_argument("--write-doc", action="store_true", help="into docs/performance.md")
    args = parser.parse_args()
    for url in (args.database_url, args.redis_url):
        if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"{url}: the benchmark only targets 127.0.0.1")
    started = time.perf_counter()
    reused = create_database(args.database_url, reuse=args.reuse)
    setup_django(args.database_url, args.redis_url)
    figures: dict[str, Any] = {"runs": args.runs}
    try:
        from django.core.management import call_command

        if not reused:
            call_command("migrate", verbosity=0)
            load(args.database_url, args, figures)
        else:
            from billing.models import Wallet

            figures.update(per_day=args.per_day)
            figures["wallets"] = Wallet.objects.count()
        sizes(args.database_url, figures)
        figures["before_ref"] = args.before_ref
        windows = [float(m) for m in args.windows.split(",") if m]
        measure(args.database_url, args.before_ref, args.runs, windows, figures)
        text = report(figures, time.perf_counter() - started)
        print(text)
        if args.write_doc:
            write_doc(text)
            log("docs/performance.md updated")
    finally:
        if args.keep:
            log(f"kept {args.database_url}")
        else:
            drop_database(args.database_url)


if __name__ == "__main__":
    main()
