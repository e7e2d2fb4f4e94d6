"""The request log at scale: usage reads over the log against the daily rollups, on 10 M rows.

In a scratch database of its own (``--database-url``, default ``infrai_bench_usage`` on the
machine's PostgreSQL; created, dropped at the end unless ``--keep``):

1. **Load.** Every migration is applied, then the request log is taken back to migration
   ``inference.0009`` (one plain table, as before partitioning) and ``--rows`` synthetic calls
   are written into it by ``INSERT … SELECT generate_series`` with its indexes dropped and
   rebuilt afterwards: four organizations (one with 60 % of the calls, one that logs prompts,
   one with a 60-day retention), three projects of two keys each per organization, eight
   models of five vendors, chat, responses and embeddings calls over the last 90 days in time
   order, 3 % failures, 5 % cache hits, streamed and reasoning calls, routing JSON on each row.
2. **Migration.** ``migrate inference 0010`` converts that table as it would in production:
   monthly partitions, the rows copied, the indexes rebuilt, the rollup trigger, the rollups
   summed from the log (the trigger never runs during the load: the migration's own backfill
   computes the rollups, as ``inference.rollups.rebuild`` would). Timed. Then
   ``VACUUM (ANALYZE)`` (autovacuum is off on this machine's PostgreSQL), the sizes of the log
   and the rollups, and a check that the rollups equal the log per organization and day.
3. **Reads**, for the big organization, each with ``INFRAI_USAGE_FROM_ROLLUPS`` off (before:
   aggregating the log) and on (after: the rollups), alternating, median of ``--runs`` after a
   warm-up: the dashboard's usage page (30 and 90 days) and request-log page, the usage CSV
   export, and the management API's ``/v1/organization/usage/completions`` (7 and 31 whole
   days and "the last 7 days" from an instant, ``group_by=model``). Real views, through
   Django's test client with a signed-in owner and an admin key; the two answers of each read
   are compared. ``EXPLAIN (ANALYZE, BUFFERS)`` of each read's slowest query gives the plans.
4. **The trigger's cost**: rows/s and PostgreSQL backend CPU a row (from ``/proc``) of the
   settlement's own log statement (``inference.settlement._LOG_INSERT``, one row a statement,
   blocks rolled back) with the rollup trigger and without it (``session_replication_role =
   replica``), alternating; ``rollups.rebuild`` of one and seven days.
5. **Upkeep** (``inference.partitions``): ``maintain()`` runs until the retention backlog
   (prompts past 30 days, the short-retention organization's calls past 60) is worked off, a
   run just after, ``VACUUM (ANALYZE)``, runs after it, a partition created ahead, the oldest month
   dropped.

    .venv/bin/python bench/usage_scale.py --rows 200000    # ~1 minute
    .venv/bin/python bench/usage_scale.py --write-doc      # 10 M rows, into docs/performance.md
    .venv/bin/python bench/usage_scale.py --keep           # … and leave the database

The full run (10 M rows; ~16 GB of disk at its peak, during the migration's copy) took 7 minutes
on the shared 2-core machine when it was quiet (2026-12-07, the run in docs/performance.md)
and up to 14 minutes while other engineers' tests ran: the load ~45 s, its indexes ~40 s, the
migration 85–170 s, the reads ~3 minutes (the "before" ones), the upkeep ~1 minute.

``--reuse`` measures a database kept by an earlier ``--keep`` run (steps 3–5, no load; its
upkeep step already deleted and dropped rows, so figures differ). Everything is on the
machine's own PostgreSQL, with its configuration as found (``shared_buffers`` 128 MB etc.):
the figures are that server's, on a machine shared with other work; compare the before and
after of one run, not runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T = TypeVar("T")
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/infrai_bench_usage"
SECTION = "## The request log at scale (`bench/usage_scale.py`)"
CHUNK = 500_000
DAYS = 90

# (name, vendor, share of calls, input / output nanos a token, embeddings, reasoning)
MODELS = [
    ("gpt-4o-mini", "openai", 0.30, 150, 600, False, False),
    ("gpt-4o", "openai", 0.12, 2_500, 10_000, False, False),
    ("claude-sonnet-4", "anthropic", 0.15, 3_000, 15_000, False, False),
    ("claude-3-5-haiku", "anthropic", 0.10, 800, 4_000, False, False),
    ("llama-3.3-70b", "groq", 0.10, 590, 790, False, False),
    ("mistral-small", "mistral", 0.06, 200, 600, False, False),
    ("o4-mini", "openai", 0.07, 1_100, 4_400, False, True),
    ("text-embedding-3-small", "openai", 0.10, 20, 0, True, False),
]
# (name, share of calls, logs prompts, own retention in days)
ORGANIZATIONS = [
    ("Bench Big", 0.60, False, None),
    ("Bench Prompts", 0.20, True, None),
    ("Bench Mid", 0.12, False, None),
    ("Bench Short", 0.08, False, 60),
]
PROJECTS, KEYS_PER_PROJECT = 3, 2
PROMPT = "Summarise the attached support ticket and propose a short, friendly reply. " * 4


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


# --- the scratch database ----------------------------------------------------------------------


def create_database(url: str, *, reuse: bool) -> bool:
    """Create the scratch database of ``url``; True when it was already there (``reuse``)."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_db(url, "postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and reuse:
            return True
        if exists:
            raise SystemExit(f"database {name} exists: drop it, or pass --reuse to measure it")
        conn.execute(f'CREATE DATABASE "{name}"')
    return False


def drop_database(url: str) -> None:
    from django.db import connections

    for wrapper in connections.all():
        wrapper.close()
        if hasattr(wrapper, "close_pool"):
            wrapper.close_pool()
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_db(url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    log(f"dropped database {name}")


def setup_django(url: str, redis_url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["REDIS_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    import django

    django.setup()
    logging.getLogger("axes").setLevel(logging.WARNING)  # a line per force_login otherwise


# --- fixtures and the load ---------------------------------------------------------------------


@dataclass
class Fixtures:
    """The organizations of the load, the big one's owner and admin key."""

    org_ids: list[int]
    slugs: list[str]
    keys: list[list[tuple[int, int]]]  # per organization: (project id, key id)
    owner_id: int
    admin_key: str


def make_fixtures() -> Fixtures:
    from accounts.models import Organization, User
    from accounts.services import api_key_create, organization_create, project_create
    from management.services import admin_key_create

    owner = User.objects.create_user(email="bench-owner@example.com", password="x" * 16)
    User.objects.filter(pk=owner.pk).update(email_verified=True)
    org_ids, slugs, keys = [], [], []
    for name, _share, log_prompts, retention in ORGANIZATIONS:
        org = organization_create(name=name, owner=owner)
        Organization.objects.filter(pk=org.pk).update(
            log_prompts=log_prompts, request_log_retention_days=retention
        )
        org_keys = []
        for p in range(PROJECTS):
            project = project_create(organization=org, name=f"project {p + 1}")
            for k in range(KEYS_PER_PROJECT):
                key, _ = api_key_create(project=project, name=f"key {p + 1}.{k + 1}")
                org_keys.append((project.pk, key.pk))
        org_ids.append(org.pk)
        slugs.append(org.slug)
        keys.append(org_keys)
    _, raw = admin_key_create(
        organization=Organization.objects.get(pk=org_ids[0]), created_by=owner, name="bench"
    )
    return Fixtures(org_ids, slugs, keys, owner.pk, raw)


def existing_fixtures() -> Fixtures:
    """The fixtures of a kept database (``--reuse``); a new admin key for this run."""
    from accounts.models import ApiKey, Organization, User
    from management.services import admin_key_create

    owner = User.objects.get(email="bench-owner@example.com")
    orgs = [Organization.objects.get(name=name) for name, *_ in ORGANIZATIONS]
    keys = [
        list(ApiKey.objects.filter(organization=o).order_by("pk").values_list("project_id", "pk"))
        for o in orgs
    ]
    _, raw = admin_key_create(organization=orgs[0], created_by=owner, name="bench")
    return Fixtures([o.pk for o in orgs], [o.slug for o in orgs], keys, owner.pk, raw)


def _cuts(shares: list[float]) -> list[float]:
    """Lower bounds of buckets 1… for ``width_bucket(random(), cuts)`` (bucket 0 starts at 0)."""
    out, total = [], 0.0
    for share in shares[:-1]:
        total += share
        out.append(round(total, 6))
    return out


_INSERT = """
INSERT INTO inference_requestlog (
    request_id, organization_id, project_id, api_key_id, created_at, endpoint, requested_model,
    model, vendor, region, status, http_status, error_code, error_message, input_tokens,
    cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, usage_estimated,
    usage_source, cost_nanos, latency_ms, ttft_ms, stream, cache_hit, failovers, routing,
    ignored_params, prompt)
SELECT
    'req_' || lpad(to_hex((extract(epoch FROM g.ts) * 1000)::bigint), 12, '0')
        || lpad(to_hex(g.i), 12, '0'),
    k.organization_id, k.project_id, k.api_key_id, g.ts,
    CASE WHEN m.embeddings THEN 'embeddings' WHEN g.r_end < 0.75 THEN 'chat.completions'
         ELSE 'responses' END,
    CASE WHEN g.r_auto < 0.3 THEN 'auto' ELSE m.model END,
    m.model, m.vendor, 'us-east', s.status,
    CASE s.status WHEN 'ok' THEN 200 WHEN 'client_error' THEN 400 WHEN 'vendor_error' THEN 502
         ELSE 499 END,
    CASE s.status WHEN 'client_error' THEN 'invalid_request_error'
         WHEN 'vendor_error' THEN 'upstream_error'
         WHEN 'cancelled' THEN 'client_disconnected' ELSE '' END,
    CASE s.status WHEN 'client_error' THEN 'max_tokens is too large for this model.'
         WHEN 'vendor_error' THEN 'The vendor answered 502 three times.' ELSE '' END,
    t.input_tokens, t.cached_input_tokens, t.cache_write_tokens, t.output_tokens,
    CASE WHEN m.reasoning THEN t.output_tokens * 6 / 10 ELSE 0 END,
    false, 'vendor',
    CASE WHEN t.cache_hit THEN 0 ELSE
        t.input_tokens * m.in_nanos - t.cached_input_tokens * m.in_nanos / 2
        + t.output_tokens * m.out_nanos END,
    CASE WHEN t.cache_hit THEN 3 + (g.r_lat * 20)::int ELSE 200 + (g.r_lat * 3000)::int END,
    CASE WHEN t.stream THEN 80 + (g.r_lat * 400)::int END,
    t.stream, t.cache_hit,
    CASE WHEN s.status = 'vendor_error' THEN 2 WHEN g.r_lat > 0.99 THEN 1 ELSE 0 END,
    m.routing, '[]'::jsonb,
    CASE WHEN k.log_prompts AND g.r_prompt < 0.25 THEN %(prompt)s ELSE '' END
FROM (
    SELECT i, %(t0)s::timestamptz + (i::float8 / %(n)s) * interval '{days} days' AS ts,
           random() AS r_org, random() AS r_key, random() AS r_model, random() AS r_end,
           random() AS r_auto, random() AS r_status, random() AS r_cache, random() AS r_in,
           random() AS r_cached, random() AS r_out, random() AS r_lat, random() AS r_stream,
           random() AS r_prompt
    FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS i
    OFFSET 0  -- a fence: each random() evaluated once a row
) g
JOIN bench_keys k ON k.org_idx = width_bucket(g.r_org, %(org_cuts)s::float8[])
    AND k.k = floor(g.r_key * g.r_key * {keys})::int
JOIN bench_models m ON m.idx = width_bucket(g.r_model, %(model_cuts)s::float8[])
CROSS JOIN LATERAL (SELECT CASE WHEN g.r_status < 0.97 THEN 'ok'
    WHEN g.r_status < 0.985 THEN 'client_error' WHEN g.r_status < 0.995 THEN 'vendor_error'
    ELSE 'cancelled' END AS status) s
CROSS JOIN LATERAL (
    SELECT q.*, CASE WHEN m.caches AND g.r_cached < 0.4 THEN q.input_tokens / 2 ELSE 0 END
               AS cached_input_tokens,
           CASE WHEN m.vendor = 'anthropic' AND g.r_cached BETWEEN 0.4 AND 0.5
                THEN q.input_tokens * 3 / 10 ELSE 0 END AS cache_write_tokens
    FROM (SELECT
        CASE WHEN s.status = 'client_error' THEN 0 ELSE 40 + (g.r_in * g.r_in * 4000)::int END
            AS input_tokens,
        CASE WHEN s.status = 'client_error' OR m.embeddings THEN 0
             WHEN s.status = 'cancelled' THEN (g.r_out * 200)::int
             ELSE 10 + (g.r_out * 900)::int END AS output_tokens,
        s.status = 'ok' AND g.r_cache < 0.05 AND NOT m.embeddings AS cache_hit,
        g.r_stream < 0.5 AND NOT m.embeddings AS stream) q
) t
"""


def constraints_and_indexes(
    conn: psycopg.Connection, table: str = "inference_requestlog"
) -> tuple[list[tuple[str, str]], list[str]]:
    """``table``'s primary/unique constraints ``(name, definition)`` and its other indexes'
    ``CREATE INDEX`` statements (what a bulk load drops and builds again)."""
    constraints = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype IN ('p', 'u')",
        [table],
    ).fetchall()
    indexes = conn.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass "
        "AND indexrelid NOT IN (SELECT conindid FROM pg_constraint WHERE conrelid = %s::regclass)",
        [table, table],
    ).fetchall()
    return [(r[0], r[1]) for r in constraints], [r[0] for r in indexes]


def load(url: str, fx: Fixtures, rows: int, figures: dict[str, Any]) -> None:
    """``rows`` synthetic calls into the (unpartitioned) log; indexes dropped and rebuilt."""
    now = dt.datetime.now(dt.UTC)
    t0 = now - dt.timedelta(days=DAYS)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SELECT setseed(0.33)")
        constraints, indexes = constraints_and_indexes(conn)
        for name, _ in constraints:
            conn.execute(f'ALTER TABLE inference_requestlog DROP CONSTRAINT "{name}"')
        for sql in indexes:
            name = re.match(r"CREATE (?:UNIQUE )?INDEX (\S+)", sql)[1]  # type: ignore[index]
            conn.execute(f"DROP INDEX {name}")
        conn.execute(
            "CREATE TEMP TABLE bench_models (idx int PRIMARY KEY, model text, vendor text, "
            "in_nanos bigint, out_nanos bigint, embeddings bool, reasoning bool, caches bool, "
            "routing jsonb)"
        )
        for idx, (name, vendor, _share, in_nanos, out_nanos, emb, reasoning) in enumerate(MODELS):
            others = [m for m in MODELS if m[0] != name and m[5] == emb][:2]
            routing = {
                "mode": "auto",
                "prefer": "balanced",
                "task": "embeddings" if emb else "chat",
                "chosen": f"{name}@{vendor}",
                "why": "cheapest offering of the tier with capacity",
                "alternatives": [
                    {
                        "model": o[0],
                        "vendor": o[1],
                        "expected_cost_usd": "0.000412",
                        "quality_tier": 2,
                    }
                    for o in others
                ],
                "excluded": [],
            }
            conn.execute(
                "INSERT INTO bench_models VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    idx,
                    name,
                    vendor,
                    in_nanos,
                    out_nanos,
                    emb,
                    reasoning,
                    vendor in ("openai", "anthropic"),
                    Jsonb(routing),
                ],
            )
        conn.execute(
            "CREATE TEMP TABLE bench_keys (org_idx int, k int, organization_id bigint, "
            "project_id bigint, api_key_id bigint, log_prompts bool, PRIMARY KEY (org_idx, k))"
        )
        for o, org_id in enumerate(fx.org_ids):
            for k, (project_id, key_id) in enumerate(fx.keys[o]):
                conn.execute(
                    "INSERT INTO bench_keys VALUES (%s, %s, %s, %s, %s, %s)",
                    [o, k, org_id, project_id, key_id, ORGANIZATIONS[o][2]],
                )
        sql = _INSERT.format(days=DAYS, keys=PROJECTS * KEYS_PER_PROJECT)
        params = {
            "t0": t0,
            "n": rows,
            "prompt": PROMPT,
            "org_cuts": _cuts([o[1] for o in ORGANIZATIONS]),
            "model_cuts": _cuts([m[2] for m in MODELS]),
        }
        started = time.perf_counter()
        for lo in range(0, rows, CHUNK):
            hi = min(rows, lo + CHUNK)
            conn.execute(sql, {**params, "lo": lo, "hi": hi})  # type: ignore[call-overload]
            rate = hi / (time.perf_counter() - started)
            log(f"loaded {hi:,} rows ({rate:,.0f} rows/s)")
        figures["load_s"] = time.perf_counter() - started
        started = time.perf_counter()
        for name, definition in constraints:
            conn.execute(f'ALTER TABLE inference_requestlog ADD CONSTRAINT "{name}" {definition}')
        for index_sql in indexes:
            conn.execute(index_sql)
        figures["index_s"] = time.perf_counter() - started
        log(f"indexes rebuilt in {figures['index_s']:.0f} s")


def migrate_to_partitions(figures: dict[str, Any]) -> None:
    """``migrate inference 0010`` on the loaded plain table (timed), then the rest."""
    from django.core.management import call_command

    started = time.perf_counter()
    call_command("migrate", "inference", "0010", verbosity=0)
    figures["migrate_s"] = time.perf_counter() - started
    log(f"migration 0010 in {figures['migrate_s']:.0f} s")
    call_command("migrate", verbosity=0)


# --- the reads ---------------------------------------------------------------------------------


@dataclass
class Read:
    """One measured read: a label and the GET it makes."""

    label: str
    path: str
    params: dict[str, Any]
    api: bool = False
    before_s: list[float] = field(default_factory=list)
    after_s: list[float] = field(default_factory=list)
    before_cpu_s: list[float] = field(default_factory=list)  # PostgreSQL backends' CPU
    after_cpu_s: list[float] = field(default_factory=list)
    same: bool | None = None
    plans: dict[str, str] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)


def reads(fx: Fixtures) -> list[Read]:
    from django.urls import reverse

    today = dt.datetime.now(dt.UTC).date()
    now = int(time.time())

    def midnight(days_ago: int) -> int:
        return int(
            dt.datetime.combine(
                today - dt.timedelta(days=days_ago), dt.time.min, tzinfo=dt.UTC
            ).timestamp()
        )

    slug = {"slug": fx.slugs[0]}
    usage = reverse("dashboard:usage", kwargs=slug)
    api = "/v1/organization/usage/completions"
    by_model = {"bucket_width": "1d", "group_by": "model"}
    days90 = {"start": (today - dt.timedelta(days=DAYS - 1)).isoformat(), "end": today.isoformat()}
    return [
        Read("Dashboard usage page, 30 days (default)", usage, {}),
        Read("Dashboard usage page, 90 days", usage, days90),
        Read(
            "Dashboard request log page, 30 days", reverse("dashboard:request_log", kwargs=slug), {}
        ),
        Read(
            "Usage CSV export by model, 30 days",
            reverse("dashboard:usage_export", kwargs=slug),
            {"by": "model"},
        ),
        Read(
            "Usage CSV export by day, 90 days",
            reverse("dashboard:usage_export", kwargs=slug),
            {"by": "day", **days90},
        ),
        Read(
            "API usage, 7 whole days, group_by=model",
            api,
            {**by_model, "start_time": midnight(6), "limit": 7},
            api=True,
        ),
        Read(
            "API usage, 31 whole days, group_by=model",
            api,
            {**by_model, "start_time": midnight(30), "limit": 31},
            api=True,
        ),
        Read(
            "API usage, now − 7 days (partial first day), group_by=model",
            api,
            {**by_model, "start_time": now - 7 * 86400, "limit": 8},
            api=True,
        ),
    ]


_VOLATILE = re.compile(rb'(csrfmiddlewaretoken" value="|nonce="|csrf_token" content=")[^"]*')


def _plan_summary(plan: list[str]) -> str:
    """The scan nodes of an ``EXPLAIN`` text, partitions folded: ``Seq Scan on …_p* ×4``."""
    scans: Counter[str] = Counter()
    for line in plan:
        m = re.search(
            r"((?:Parallel )?(?:Seq|Index Only|Index|Bitmap Heap|Bitmap Index) Scan)"
            r"(?: Backward)?(?: using (\S+))?(?: on (\S+))?",
            line,
        )
        if m:
            what = m[1] + (f" using {m[2]}" if m[2] else "") + (f" on {m[3]}" if m[3] else "")
            scans[re.sub(r"_p\d{6}", "_p*", re.sub(r"p\d{6}_", "p*_", what))] += 1
    return "; ".join(f"{k} ×{n}" if n > 1 else k for k, n in scans.items())


class Backends:
    """The CPU used so far by the PostgreSQL backends of one database (``/proc``; this machine's
    PostgreSQL), but for the one asking: steadier than wall time where other work competes for
    the cores. Parallel workers live only during their query and are not counted: a floor for
    reads with parallel plans (the "before" ones, mostly)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.name = urlsplit(url).path.lstrip("/")

    def cpu_s(self) -> float:
        pids = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [self.name],
        ).fetchall()
        total = 0.0
        for (pid,) in pids:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += _cpu_s(pid)
        return total


def measure_reads(url: str, fx: Fixtures, runs: int) -> list[Read]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, override_settings

    from accounts.models import User

    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(pk=fx.owner_id))
    backends = Backends(url)
    auth = {"Authorization": f"Bearer {fx.admin_key}"}
    out = reads(fx)

    def get(read: Read) -> bytes:
        response = client.get(read.path, read.params, headers=auth if read.api else None)
        assert response.status_code == 200, (read.label, response.status_code)
        return response.content

    for read in out:
        bodies = {}
        for mode, on in (("before", False), ("after", True)):
            with override_settings(INFRAI_USAGE_FROM_ROLLUPS=on):
                bodies[mode] = _VOLATILE.sub(rb"\1", get(read))  # warm-up, the answer kept
        read.same = bodies["before"] == bodies["after"]
        for n in range(runs):
            order = (("before", False), ("after", True))
            for mode, on in order if n % 2 == 0 else order[::-1]:
                with override_settings(INFRAI_USAGE_FROM_ROLLUPS=on):
                    cpu, started = backends.cpu_s(), time.perf_counter()
                    get(read)
                    wall, cpu = time.perf_counter() - started, backends.cpu_s() - cpu
                before = mode == "before"
                (read.before_s if before else read.after_s).append(wall)
                (read.before_cpu_s if before else read.after_cpu_s).append(cpu)
        for mode, on in (("before", False), ("after", True)):
            with (
                override_settings(INFRAI_USAGE_FROM_ROLLUPS=on),
                CaptureQueriesContext(connection) as captured,
            ):
                get(read)
            read.queries[mode] = len(captured.captured_queries)
            by_time = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))
            for q in by_time[:3]:
                log(f"  {mode} {float(q['time']) * 1000:7.1f} ms {q['sql'][:150]}")
            usage = [
                q for q in by_time if re.search(r"inference_(requestlog|usage_daily)", q["sql"])
            ]
            read.plans[mode] = explain(url, usage[0]["sql"])
        log(
            f"{read.label}: before {statistics.median(read.before_s) * 1000:,.0f} ms, "
            f"after {statistics.median(read.after_s) * 1000:,.0f} ms, same answer: {read.same}"
        )
        for mode in ("before", "after"):
            log(f"  {mode} plan: {read.plans[mode]}")
    return out


def explain(url: str, sql: str) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``sql`` summarised: its scans and execution time."""
    with psycopg.connect(url, autocommit=True) as conn:
        plan = [r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()]
    ms = next((line.split(":")[1].strip() for line in plan if "Execution Time" in line), "?")
    return f"{_plan_summary(plan)} ({ms})"


# --- sizes, equality, the trigger --------------------------------------------------------------


def sizes(url: str, figures: dict[str, Any]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        # What autovacuum would have done by now (it is off on this machine's PostgreSQL): hint
        # bits and the visibility map set, statistics gathered.
        conn.execute("VACUUM (ANALYZE)")
        figures["analyze_s"] = time.perf_counter() - started
        figures["log_bytes"], figures["log_heap_bytes"], figures["partitions"] = conn.execute(
            "SELECT sum(pg_total_relation_size(relid)), sum(pg_table_size(relid)), "
            "count(*) FILTER (WHERE isleaf) FROM pg_partition_tree('inference_requestlog')"
        ).fetchone()  # type: ignore[misc]
        figures["log_rows"] = conn.execute("SELECT count(*) FROM inference_requestlog").fetchone()[
            0
        ]  # type: ignore[index]
        figures["rollup_bytes"], figures["rollup_rows"] = conn.execute(
            "SELECT pg_total_relation_size('inference_usage_daily'), count(*) "
            "FROM inference_usage_daily"
        ).fetchone()  # type: ignore[misc]
        log_days = conn.execute(
            "SELECT organization_id, (created_at AT TIME ZONE 'UTC')::date, count(*), "
            "sum(input_tokens + output_tokens), sum(cost_nanos) FROM inference_requestlog "
            "GROUP BY 1, 2"
        ).fetchall()
        rollup_days = conn.execute(
            "SELECT organization_id, day, sum(requests), sum(input_tokens + output_tokens), "
            "sum(cost_nanos) FROM inference_usage_daily_live GROUP BY 1, 2 HAVING sum(requests) > 0"
        ).fetchall()
    figures["rollups_equal"] = sorted(log_days) == sorted(rollup_days)
    log(
        f"log {figures['log_rows']:,} rows, {figures['log_bytes'] / 2**30:.2f} GiB; rollups "
        f"{figures['rollup_rows']:,} rows, {figures['rollup_bytes'] / 2**20:.1f} MiB; "
        f"equal per organization and day: {figures['rollups_equal']}"
    )


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` of this machine has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def trigger_cost(fx: Fixtures, statements: int, rounds: int, figures: dict[str, Any]) -> None:
    """Rows/s and backend CPU a row of the settlement's log INSERT with and without the rollup
    trigger."""
    import random

    from django.db import connection, transaction

    from inference import partitions, request_ids, rollups, settlement
    from inference.models import RequestLog, RequestStatus, created_at_of

    rng = random.Random(7)

    def row() -> RequestLog:
        rid = request_ids.new()
        project_id, key_id = rng.choice(fx.keys[0])
        model, vendor = rng.choice(MODELS[:7])[:2]
        return RequestLog(
            request_id=rid,
            created_at=created_at_of(rid),
            organization_id=fx.org_ids[0],
            project_id=project_id,
            api_key_id=key_id,
            endpoint="chat.completions",
            requested_model=model,
            model=model,
            vendor=vendor,
            region="us-east",
            status=RequestStatus.OK,
            http_status=200,
            input_tokens=rng.randint(40, 4000),
            output_tokens=rng.randint(10, 900),
            cost_nanos=rng.randint(10_000, 9_000_000),
            latency_ms=800,
            routing={"mode": "auto", "chosen": f"{model}@{vendor}"},
        )

    month = dt.datetime.now(dt.UTC).date().replace(day=1)  # where the rows go
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
    # Per mode: [statements, wall seconds, backend CPU seconds]. Short blocks, alternating, so
    # the load of the shared machine falls on both alike; the backend's CPU (/proc) is the
    # steadier figure where other work competes for the cores.
    spent = {True: [0, 0.0, 0.0], False: [0, 0.0, 0.0]}
    for n in range(rounds):
        for with_trigger in (True, False) if n % 2 == 0 else (False, True):
            # Each block is rolled back, leaving dead row versions behind (the rollups' hot
            # rows most): each starts clean.
            with connection.cursor() as cur:
                cur.execute("VACUUM inference_usage_daily")
                cur.execute(f"VACUUM {partitions.partition_name(month)}")
            values = [settlement._log_values(row()) for _ in range(statements)]
            with transaction.atomic(), connection.cursor() as cur:
                if not with_trigger:
                    cur.execute("SET LOCAL session_replication_role = replica")
                cpu, started = _cpu_s(backend), time.perf_counter()
                for v in values:
                    cur.execute(settlement._LOG_INSERT, v)
                wall = time.perf_counter() - started
                cpu = _cpu_s(backend) - cpu
                transaction.set_rollback(True)
            total = spent[with_trigger]
            total[0] += statements
            total[1] += wall
            total[2] += cpu
    for on, name in ((True, "with"), (False, "without")):
        count, wall, cpu = spent[on]
        figures[f"insert_{name}"] = count / wall
        figures[f"insert_{name}_cpu_us"] = cpu / count * 1e6
    log(
        f"settlement INSERT: {figures['insert_with']:,.0f} rows/s and "
        f"{figures['insert_with_cpu_us']:.0f} µs backend CPU a row with the trigger, "
        f"{figures['insert_without']:,.0f} rows/s and {figures['insert_without_cpu_us']:.0f} µs "
        "without"
    )
    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    for days in (1, 7):
        started = time.perf_counter()
        written = rollups.rebuild(start=yesterday - dt.timedelta(days=days - 1), end=yesterday)
        figures[f"rebuild_{days}_s"] = time.perf_counter() - started
        figures[f"rebuild_{days}_rows"] = written
        log(
            f"rollups.rebuild of {days} day(s): {written} rollup rows in "
            f"{figures[f'rebuild_{days}_s']:.2f} s"
        )


# --- upkeep ------------------------------------------------------------------------------------


def _timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """``fn()``, its wall time and the CPU time of Django's PostgreSQL backend meanwhile."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = int(cur.fetchone()[0])
    cpu, started = _cpu_s(pid), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started, _cpu_s(pid) - cpu


def upkeep(url: str, figures: dict[str, Any]) -> None:
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext, override_settings

    from accounts.models import Organization
    from inference import partitions

    batch = int(settings.INFRAI_REQUEST_LOG_RETENTION_BATCH)
    runs = []  # (wall s, backend CPU s, rows deleted, prompts cleared)
    for _ in range(40):  # the backlog: until a run has less than one batch to do
        done, wall, cpu = _timed(partitions.maintain)
        runs.append((wall, cpu, done.deleted_rows, done.cleared_prompts))
        log(
            f"maintain(): {wall:.2f} s ({cpu:.2f} s CPU), {done.deleted_rows:,} rows deleted, "
            f"{done.cleared_prompts:,} prompts cleared, created {done.created}"
        )
        if done.deleted_rows + done.cleared_prompts < batch:
            break
    figures["maintain_runs"] = runs
    # What is left is the trickle of calls crossing their retention as the clock moves (this
    # data has a call every ~0.8 s). The backlog's dead rows are still in the indexes and the
    # planner's statistics still count the rows it removed, until autovacuum's VACUUM and
    # ANALYZE (off on this machine's PostgreSQL: done here by hand).
    _, *figures["maintain_dead"] = _timed(partitions.maintain)
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) inference_requestlog")
        figures["vacuum_s"] = time.perf_counter() - started
    with CaptureQueriesContext(connection) as captured:
        idle = [_timed(partitions.maintain)[1:] for _ in range(5)]
    figures["maintain_idle"] = [statistics.median(x[i] for x in idle) for i in (0, 1)]
    for q in sorted(captured.captured_queries, key=lambda q: -float(q["time"]))[:3]:
        log(f"  idle maintain() {float(q['time']) * 1000:7.1f} ms {q['sql'][:150]}")
    log(
        f"maintain() after the backlog: {figures['maintain_dead']}; VACUUM (ANALYZE) "
        f"{figures['vacuum_s']:.0f} s; then {figures['maintain_idle']}"
    )
    ahead = int(settings.INFRAI_REQUEST_LOG_MONTHS_AHEAD) + 1
    started = time.perf_counter()
    created = partitions.create_ahead(today=dt.datetime.now(dt.UTC).date(), months_ahead=ahead)
    figures["create_s"], figures["created"] = time.perf_counter() - started, created
    log(f"create_ahead: {created} in {figures['create_s'] * 1000:.0f} ms")
    oldest, name = min(partitions.partitions().items())
    end = dt.datetime.combine(partitions.next_month(oldest), dt.time.min, tzinfo=dt.UTC)
    keep = (dt.datetime.now(dt.UTC) - end).days
    with psycopg.connect(url, autocommit=True) as conn:
        figures["dropped_rows"], figures["dropped_bytes"] = conn.execute(
            f"SELECT count(*), pg_total_relation_size('{name}') FROM {name}"
        ).fetchone()  # type: ignore[misc]
    Organization.objects.filter(request_log_retention_days__gt=keep).update(
        request_log_retention_days=keep
    )
    with override_settings(INFRAI_REQUEST_LOG_RETENTION_DAYS=keep):
        started = time.perf_counter()
        dropped = partitions.drop_expired(now=dt.datetime.now(dt.UTC))
        figures["drop_s"], figures["dropped"] = time.perf_counter() - started, dropped
    log(
        f"drop_expired (retention {keep} days): {dropped}, {figures['dropped_rows']:,} rows, "
        f"in {figures['drop_s'] * 1000:.0f} ms"
    )


# --- the report --------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def report(rows: int, figures: dict[str, Any], measured: list[Read], took_s: float) -> str:
    lines = [
        f"{rows:,} calls over {DAYS} days, four organizations; the big one "
        f"({ORGANIZATIONS[0][1]:.0%} of the calls) reads. Median of {figures['runs']} runs of "
        "each, before (`INFRAI_USAGE_FROM_ROLLUPS=false`: aggregating the log) and after (`true`: "
        "the daily rollups) alternating in one run; whole requests through Django's test "
        "client (view, queries, template).",
        "",
        "| read | before | after | before ÷ after | PostgreSQL CPU before / after | same answer |",
        "|---|---:|---:|---:|---:|:-:|",
    ]
    for r in measured:
        before, after = statistics.median(r.before_s), statistics.median(r.after_s)
        cpu = f"{_ms(statistics.median(r.before_cpu_s))} / {_ms(statistics.median(r.after_cpu_s))}"
        same = "yes" if r.same else "**no**"
        lines.append(
            f"| {r.label} | {_ms(before)} | {_ms(after)} | {before / after:,.1f}× | {cpu} "
            f"| {same} |"
        )
    lines += [
        "",
        "PostgreSQL CPU: of this database's backends, from `/proc` (steadier than wall time on "
        "a busy machine); parallel workers are not counted, so the figures of parallel plans "
        '(most of the "before" ones) are floors.',
    ]
    lines += ["", "Queries and the scans of each read's slowest query (`EXPLAIN ANALYZE`):", ""]
    for r in measured:
        lines.append(
            f"- {r.label}: before {r.queries['before']} queries, "
            f"{r.plans['before']}; after {r.queries['after']} queries, "
            f"{r.plans['after']}"
        )
    gib = 2**30
    lines += [
        "",
        "| the data | |",
        "|---|---:|",
        f"| request log: rows / partitions | {figures['log_rows']:,} / {figures['partitions']} |",
        f"| request log: size with indexes (heap and TOAST alone) | "
        f"{figures['log_bytes'] / gib:.2f} GiB ({figures['log_heap_bytes'] / gib:.2f} GiB) |",
        f"| rollups: rows / size with indexes | {figures['rollup_rows']:,} / "
        f"{figures['rollup_bytes'] / 2**20:.1f} MiB |",
        f"| rollups equal the log per organization and day | "
        f"{'yes' if figures.get('rollups_equal') else '**no**'} |",
    ]
    if "load_s" in figures:
        per_m = 1e6 / rows
        lines += [
            f"| load into the unpartitioned log (0009), indexes dropped | "
            f"{figures['load_s']:.0f} s ({rows / figures['load_s']:,.0f} rows/s) |",
            f"| its indexes rebuilt | {figures['index_s']:.0f} s |",
            f"| **migration 0010** (partition, copy, indexes, trigger, rollups) | "
            f"**{figures['migrate_s']:.0f} s, {figures['migrate_s'] * per_m:.0f} s per million "
            f"rows** |",
            f"| `VACUUM (ANALYZE)` after it | {figures['analyze_s']:.0f} s |",
        ]
    if "insert_with" in figures:
        w, wo = figures["insert_with"], figures["insert_without"]
        cw, cwo = figures["insert_with_cpu_us"], figures["insert_without_cpu_us"]
        lines += [
            f"| settlement's log INSERT (one row a statement, one client), with / without the "
            f"rollup trigger | {w:,.0f} / {wo:,.0f} rows/s; PostgreSQL backend CPU {cw:,.0f} / "
            f"{cwo:,.0f} µs a row (+{cw - cwo:,.0f} µs) |",
            f"| `rollups.rebuild`, 1 day / 7 days | {_ms(figures['rebuild_1_s'])} / "
            f"{_ms(figures['rebuild_7_s'])} |",
        ]
    if "maintain_runs" in figures:
        runs = figures["maintain_runs"]
        deleted, cleared = sum(r[2] for r in runs), sum(r[3] for r in runs)
        median = statistics.median(r[0] for r in runs)
        slowest = max(runs)
        dead, idle = figures["maintain_dead"], figures["maintain_idle"]
        lines += [
            f"| `maintain()` working off a retention backlog ({deleted:,} calls past a 60-day "
            f"retention, {cleared:,} prompts past 30 days): {len(runs)} runs of ≤ "
            f"{max(r[2] + r[3] for r in runs):,} rows | {_ms(median)} a run (median), the "
            f"slowest {_ms(slowest[0])} ({_ms(slowest[1])} backend CPU) |",
            f"| `maintain()` just after, the backlog's dead rows not yet vacuumed | "
            f"{_ms(dead[0])} ({_ms(dead[1])} backend CPU) |",
            f"| `VACUUM (ANALYZE)` of the log then (autovacuum's work) | "
            f"{_ms(figures['vacuum_s'])} |",
            f"| `maintain()` after it (the hourly steady state; median of 5) | {_ms(idle[0])} "
            f"({_ms(idle[1])} backend CPU) |",
            f"| a partition created ahead (`create_ahead`) | {_ms(figures['create_s'])} |",
            f"| the oldest month dropped (`drop_expired`: "
            f"{figures['dropped_rows']:,} rows, {figures['dropped_bytes'] / gib:.2f} GiB) | "
            f"{_ms(figures['drop_s'])} |",
        ]
    from bench.compare import machine

    lines += [
        "",
        f"{machine()}; PostgreSQL {figures['pg_version']} as configured on this machine "
        f"(shared_buffers {figures['shared_buffers']}, work_mem {figures['work_mem']}), "
        f"**shared with other engineers' test runs**: absolute figures are noisy, the ratios "
        f"of one run are the result. The whole run took {took_s / 60:.0f} minutes.",
    ]
    return "\n".join(lines)


def write_doc(text: str) -> None:
    from bench.compare import at_the_end
    from bench.compare import write_doc as put

    what = (
        "What the request log's daily rollups and monthly partitions buy "
        '(`docs/deploy.md`, "The request log at scale")'
    )
    put(text, "bench/usage_scale.py", at_the_end(SECTION, what, "bench/usage_scale.py"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each read and mode")
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--keep", action="store_true", help="leave the scratch database")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database, no load")
    parser.add_argument("--insert-statements", type=int, default=1500, help="a block")
    parser.add_argument(
        "--skip", action="append", default=[], choices=["reads", "trigger", "upkeep"]
    )
    parser.add_argument("--write-doc", action="store_true", help="into docs/performance.md")
    args = parser.parse_args()
    for url in (args.database_url, args.redis_url):
        if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"{url}: the benchmark only targets 127.0.0.1")
    started = time.perf_counter()
    reused = create_database(args.database_url, reuse=args.reuse)
    setup_django(args.database_url, args.redis_url)
    figures: dict[str, Any] = {"runs": args.runs}
    measured: list[Read] = []
    try:
        from django.core.management import call_command

        if reused:
            fx = existing_fixtures()
            rows = None
        else:
            call_command("migrate", verbosity=0)
            call_command("migrate", "inference", "0009", verbosity=0)
            fx = make_fixtures()
            load(args.database_url, fx, args.rows, figures)
            migrate_to_partitions(figures)
            rows = args.rows
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            for name in ("server_version", "shared_buffers", "work_mem"):
                figures[{"server_version": "pg_version"}.get(name, name)] = conn.execute(
                    f"SHOW {name}"
                ).fetchone()[0]  # type: ignore[index]
        sizes(args.database_url, figures)
        rows = rows or figures["log_rows"]
        if "reads" not in args.skip:
            measured = measure_reads(args.database_url, fx, args.runs)
        if "trigger" not in args.skip:
            trigger_cost(fx, args.insert_statements, 10, figures)
        if "upkeep" not in args.skip:
            upkeep(args.database_url, figures)
        text = report(rows, figures, measured, time.perf_counter() - started)
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
