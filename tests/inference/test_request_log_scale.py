"""The request log at scale: request ids that carry their time, monthly partitions made ahead
and dropped past retention, per-organization retention of calls and prompts, and the daily
usage rollups — equal to ``GROUP BY`` over the log after real calls of every kind, and what
the usage pages and the management usage API read."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from typing import Any

import openai
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Organization
from billing.audit import audit_findings
from inference import partitions, request_ids, rollups, selectors, settlement
from inference.models import RequestLog, RequestStatus, UsageDaily, UsagePending, created_at_of
from management.selectors import usage_groups
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db(transaction=True)

_KEY = ("day", "organization_id", "project_id", "api_key_id", "model", "vendor", "endpoint")
_SUMS = (
    "requests",
    "errors",
    "cache_hits",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_nanos",
)


def _query(sql: str) -> dict[tuple[Any, ...], tuple[int, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql)
        return {tuple(r[: len(_KEY)]): tuple(int(v) for v in r[len(_KEY) :]) for r in cur}


def _log_groups() -> dict[tuple[Any, ...], tuple[int, ...]]:
    """``GROUP BY`` over the log itself, the figures the rollups must hold."""
    return _query(
        "SELECT (created_at AT TIME ZONE 'UTC')::date, organization_id, project_id, api_key_id,"
        " model, vendor, endpoint, count(*), count(*) FILTER (WHERE status <> 'ok'),"
        " count(*) FILTER (WHERE cache_hit), sum(input_tokens), sum(cached_input_tokens),"
        " sum(cache_write_tokens), sum(output_tokens), sum(reasoning_tokens), sum(cost_nanos)"
        " FROM inference_requestlog GROUP BY 1, 2, 3, 4, 5, 6, 7"
    )


def _rollup_groups(
    table: str = "inference_usage_daily_live",
) -> dict[tuple[Any, ...], tuple[int, ...]]:
    """What readers see (the rollups and their queue) summed per group, or ``table``'s rows
    alone; groups a replaced row emptied left out."""
    groups = _query(
        "SELECT day, organization_id, project_id, api_key_id, model, vendor, endpoint, "
        + ", ".join(f"sum({s})" for s in _SUMS)
        + f" FROM {table} GROUP BY 1, 2, 3, 4, 5, 6, 7"
    )
    return {k: v for k, v in groups.items() if any(v)}


def _settled(count: int) -> None:
    """Wait until ``count`` rows are in the log (an unheld failure is written off the response
    path)."""
    deadline = time.monotonic() + 10
    while RequestLog.objects.count() < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert RequestLog.objects.count() == count


def _write_sql(row: RequestLog) -> None:
    """The settlement's own log statement (``ON CONFLICT (request_id, created_at)``)."""
    with connection.cursor() as cur:
        cur.execute(settlement._LOG_INSERT, settlement._log_values(row))


def test_request_ids_carry_their_time_and_old_ids_none():
    before = timezone.now()
    rid = request_ids.new()
    assert rid.startswith("req_") and len(rid) == 28
    carried = request_ids.created_at(rid)
    assert carried is not None
    assert before - dt.timedelta(milliseconds=1) <= carried <= timezone.now()
    assert request_ids.created_at("req_" + "f" * 24) is None  # year ~10889: a random old id
    assert request_ids.created_at("req_test00000000000000000001") is None
    assert created_at_of(rid) == carried


def test_rollups_equal_the_log_after_a_mix_of_calls(issue_key, client_for, fake_catalog, api_base):
    primary, backup = fake_catalog["primary"], fake_catalog["backup"]
    client = client_for(issue_key())
    first = client.responses.create(model="test-large", input="cache me", temperature=0)
    hit = client.responses.create(model="test-large", input="cache me", temperature=0)
    assert (first.infrai["cache"], hit.infrai["cache"]) == (False, True)
    primary.fault, primary.reasoning_tokens = "usage_reasoning", 7
    primary.cache_reads, primary.cache_writes_5m = 4, 3
    # Long enough for the fake's 4 cache reads and 3 writes to be a plausible part of it.
    hello = [{"role": "user", "content": "hello, twelve words of a prompt that a cache holds"}]
    client.chat.completions.create(model="test-large", messages=hello)
    stream = client.chat.completions.create(
        model="test-large", messages=hello, stream=True, stream_options={"include_usage": True}
    )
    assert list(stream)
    primary.fail_statuses = [500] * 3
    backup.fail_statuses = [500] * 3
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="test-large", messages=hello)
    with pytest.raises(openai.NotFoundError):  # refused before any hold: logged off the path
        client.chat.completions.create(model="no-such-model", messages=hello)
    _settled(6)

    # Written twice by the settlement's statement: still one row, counted once.
    again = RequestLog.objects.filter(status=RequestStatus.OK, cache_hit=False).first()
    assert again is not None
    _write_sql(again)
    # The sweeper's abandoned row, then the late settlement of the same call replacing it.
    rid = request_ids.new()
    org_id = again.organization_id
    late = RequestLog(
        request_id=rid,
        created_at=created_at_of(rid),
        organization_id=org_id,
        endpoint="unknown",
        status=RequestStatus.ABANDONED,
        http_status=0,
        error_code="settlement_lost",
        cost_nanos=500,
    )
    late.save()
    real = RequestLog(
        request_id=rid,
        created_at=created_at_of(rid),
        organization_id=org_id,
        endpoint="chat.completions",
        model="test-large",
        vendor="primary",
        status=RequestStatus.OK,
        http_status=200,
        input_tokens=11,
        cached_input_tokens=5,
        cache_write_tokens=2,
        output_tokens=13,
        reasoning_tokens=3,
        cost_nanos=900,
    )
    _write_sql(real)
    # An ORM writer updating its row (storage metering's update_or_create).
    RequestLog.objects.update_or_create(
        request_id="vst_rollup", defaults={"organization_id": org_id, "cost_nanos": 10,
                                            "endpoint": "vector.storage", "status": "ok",
                                            "http_status": 200},
    )  # fmt: skip
    RequestLog.objects.update_or_create(request_id="vst_rollup", defaults={"cost_nanos": 25})

    assert RequestLog.objects.count() == 8
    assert RequestLog.objects.get(request_id=rid).status == RequestStatus.OK
    log = _log_groups()
    assert _rollup_groups() == log
    # The calls only queued their figures; the drain moves them, each counted once.
    assert not UsageDaily.objects.exists()
    queued = UsagePending.objects.count()
    assert queued >= 8
    assert rollups.drain(batch=3) == queued
    assert not UsagePending.objects.exists()
    assert _rollup_groups("inference_usage_daily") == log == _rollup_groups()
    assert rollups.drain() == 0
    totals = Counter()
    for figures in log.values():
        totals.update(dict(zip(_SUMS, figures, strict=True)))
    assert totals["requests"] == 8 and totals["errors"] == 2
    assert totals["reasoning_tokens"] >= 3 + 7 and totals["cached_input_tokens"] >= 5 + 4
    assert totals["cache_hits"] == 1
    assert totals["cache_write_tokens"] >= 2 + 3
    # The real calls are settled; the two rows written by hand here have no ledger entry, and
    # the audit says so of exactly them.
    findings = audit_findings().findings
    assert {f.check for f in findings} == {"log_without_entry"}
    assert sorted(f.detail.split()[1].rstrip(":") for f in findings) == sorted([rid, "vst_rollup"])


def test_usage_pages_and_the_management_api_read_rollups_and_agree_with_the_log(settings):
    org = Organization.objects.create(name="Roll", slug="roll")
    now = timezone.now()
    today = now.astimezone(dt.UTC).date()
    for n, days_ago in enumerate((0, 0, 1, 3, 3, 3)):
        request_log_row(
            organization_id=org.pk,
            created_at=now - dt.timedelta(days=days_ago, minutes=n),
            model="m-a" if n % 2 else "m-b",
            project_id=n % 2 or None,
            input_tokens=100 + n,
            cached_input_tokens=10 + n,
            cache_write_tokens=n,
            output_tokens=50 + n,
            reasoning_tokens=5 + n,
            cost_nanos=1_000 * (n + 1),
            status=RequestStatus.OK if n else RequestStatus.VENDOR_ERROR,
        )
    start, end = today - dt.timedelta(days=6), today
    lo, hi = selectors.day_bounds(start, end)

    def read() -> tuple[Any, ...]:
        return (
            selectors.usage_totals(organization_id=org.pk, start=lo, end=hi),
            selectors.usage_by_day(organization_id=org.pk, start=start, end=end),
            selectors.usage_by(organization_id=org.pk, dimension="model", start=lo, end=hi),
            selectors.usage_by_day_split(
                organization_id=org.pk, dimension="model", start=start, end=end,
                named=[("m-a", "m-a")],
            ),
            usage_groups(organization_id=org.pk, start=lo, end=hi, width="1d",
                         group_by=["model", "project_id"]),
            # The request-log page's filter drop-downs: a month of a busy organization's calls
            # scanned for two DISTINCTs before (bench/usage_scale.py).
            selectors.log_filter_choices(organization_id=org.pk, start=lo, end=hi),
        )  # fmt: skip

    with CaptureQueriesContext(connection) as rollup_queries:
        from_rollups = read()
    sql = " ".join(q["sql"] for q in rollup_queries.captured_queries)
    assert "inference_usage_daily" in sql and "inference_requestlog" not in sql
    settings.INFRAI_USAGE_FROM_ROLLUPS = False
    with CaptureQueriesContext(connection) as log_queries:
        from_log = read()
    assert "inference_usage_daily" not in " ".join(q["sql"] for q in log_queries.captured_queries)
    assert from_rollups == from_log
    totals = from_rollups[0]
    assert (totals.requests, totals.reasoning_tokens, totals.cache_write_tokens) == (6, 45, 15)
    assert totals.cached_input_tokens == sum(10 + n for n in range(6))
    assert from_rollups[-1] == {"models": ["m-a", "m-b"], "vendors": ["openai"]}


def test_a_partial_first_day_comes_from_the_log_and_whole_days_from_rollups():
    org = Organization.objects.create(name="Edge", slug="edge")
    day = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    for hour in (1, 5, 30):  # two calls on the first day, one on the next
        request_log_row(organization_id=org.pk, created_at=day + dt.timedelta(hours=hour))
    start = day + dt.timedelta(hours=3)  # after the first call
    with CaptureQueriesContext(connection) as queries:
        groups = usage_groups(
            organization_id=org.pk, start=start, end=day + dt.timedelta(days=2), width="1d",
            group_by=[],
        )  # fmt: skip
    assert [(g.bucket_start, g.requests) for g in groups] == [
        (day, 1),
        (day + dt.timedelta(days=1), 1),
    ]
    tables = [q["sql"] for q in queries.captured_queries]
    assert any("inference_requestlog" in q for q in tables)
    assert any("inference_usage_daily" in q for q in tables)
    # The filter drop-downs of a range that is not whole days: from the log alone.
    with CaptureQueriesContext(connection) as queries:
        choices = selectors.log_filter_choices(
            organization_id=org.pk, start=start, end=day + dt.timedelta(days=2)
        )
    assert choices == {"models": ["gpt-4o-mini"], "vendors": ["openai"]}
    assert all("inference_usage_daily" not in q["sql"] for q in queries.captured_queries)


def _partition_of(request_id: str) -> str:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tableoid::regclass::text FROM inference_requestlog WHERE request_id = %s",
            [request_id],
        )
        return cur.fetchone()[0]


def test_partitions_are_made_ahead_rows_leave_the_default_partition_and_old_months_drop(
    settings,
):
    now = timezone.now()
    month = partitions.month_start(now.astimezone(dt.UTC).date())
    assert month in partitions.partitions()  # the migration made this month and two ahead
    row = request_log_row(organization_id=1, created_at=dt.datetime(2025, 3, 9, tzinfo=dt.UTC))
    assert _partition_of(row.request_id) == partitions.DEFAULT
    rollup_before = _rollup_groups()
    assert rollup_before

    created = partitions.create_ahead(today=dt.date(2025, 3, 20), months_ahead=1)
    assert created == ["inference_requestlog_p202503", "inference_requestlog_p202504"]
    assert _partition_of(row.request_id) == "inference_requestlog_p202503"
    assert _rollup_groups() == rollup_before
    assert partitions.create_ahead(today=dt.date(2025, 3, 20), months_ahead=1) == []

    settings.INFRAI_REQUEST_LOG_RETENTION_DAYS = 30
    Organization.objects.create(name="Long", slug="long", request_log_retention_days=45)
    at = dt.datetime(2025, 6, 10, tzinfo=dt.UTC)  # 45 days before: Apr 26
    assert partitions.drop_expired(now=at) == ["inference_requestlog_p202503"]
    assert not RequestLog.objects.filter(pk=row.pk).exists()
    assert _rollup_groups() == rollup_before  # kept
    later = partitions.maintain(now=dt.datetime(2025, 7, 1, tzinfo=dt.UTC))
    assert later.dropped == ["inference_requestlog_p202504"]
    assert month in partitions.partitions()

    # Beat stopped for months: the rows of the months it missed left the default partition
    # for partitions of their own at its next run, so they are dropped whole later.
    settings.INFRAI_REQUEST_LOG_RETENTION_DAYS = 4000  # nothing dropped in this part
    missed = [
        request_log_row(organization_id=1, created_at=dt.datetime(2025, m, 9, tzinfo=dt.UTC))
        for m in (10, 11)
    ]
    assert {_partition_of(r.request_id) for r in missed} == {partitions.DEFAULT}
    back = partitions.maintain(now=dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    assert back.created[:2] == ["inference_requestlog_p202510", "inference_requestlog_p202511"]
    assert [_partition_of(r.request_id) for r in missed] == back.created[:2]


def test_retention_deletes_calls_and_clears_prompts_per_organization_in_bounded_batches(
    settings,
):
    settings.INFRAI_REQUEST_LOG_RETENTION_DAYS = 400
    settings.INFRAI_PROMPT_RETENTION_DAYS = 30
    settings.INFRAI_REQUEST_LOG_RETENTION_BATCH = 2
    settings.INFRAI_REQUEST_LOG_RETENTION_BATCHES = 2
    now = timezone.now()
    short = Organization.objects.create(name="S", slug="s", request_log_retention_days=10)
    plain = Organization.objects.create(name="P", slug="p")
    terse = Organization.objects.create(name="T", slug="t", prompt_retention_days=1)

    def row(org: Organization, days: int, prompt: str = "") -> RequestLog:
        return request_log_row(
            organization_id=org.pk, created_at=now - dt.timedelta(days=days), prompt=prompt
        )

    old_short = [row(short, 20) for _ in range(5)]
    fresh_short = row(short, 1, "kept")
    plain_recent, plain_old = row(plain, 20, "recent"), row(plain, 40, "old")
    terse_row = row(terse, 2, "gone")
    usage_before = _rollup_groups()
    assert sum(v[0] for v in usage_before.values()) == 9

    # Two statements of two rows this run: four of the five old calls go, nothing else yet.
    assert partitions.prune_rows(now=now) == (4, 0)
    settings.INFRAI_REQUEST_LOG_RETENTION_BATCHES = 20
    assert partitions.prune_rows(now=now) == (1, 2)
    assert not RequestLog.objects.filter(pk__in=[r.pk for r in old_short]).exists()
    prompts = dict(RequestLog.objects.values_list("pk", "prompt"))
    assert prompts == {
        fresh_short.pk: "kept",
        plain_recent.pk: "recent",
        plain_old.pk: "",
        terse_row.pk: "",
    }
    assert _rollup_groups() == usage_before


def test_drains_racing_settlements_move_every_queued_row_once():
    """Writers of log rows and two drains at once (``SKIP LOCKED`` hands each drain other
    rows): when all is done the queue is empty and the rollups alone equal the log; while it
    runs a reader sees the log's sums at every committed moment (never a row twice or none)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)
            finally:
                connections.close_all()

        return run

    def write(org: int) -> None:
        for n in range(40):
            request_log_row(organization_id=org, model=f"m-{n % 3}", cost_nanos=7 + n)

    def keep_draining() -> None:
        while not stop.is_set():
            rollups.drain(batch=5, rounds=3)

    seen: list[tuple[Any, Any]] = []

    def keep_reading() -> None:
        while not stop.is_set():
            with transaction.atomic(), connection.cursor() as cur:  # one snapshot for both reads
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("SELECT count(*), sum(cost_nanos) FROM inference_requestlog")
                log_figures = cur.fetchone()
                cur.execute("SELECT sum(requests), sum(cost_nanos) FROM inference_usage_daily_live")
                seen.append((log_figures, cur.fetchone()))

    drains = [threading.Thread(target=guarded(keep_draining)) for _ in range(2)]
    drains.append(threading.Thread(target=guarded(keep_reading)))
    writers = [threading.Thread(target=guarded(lambda o=o: write(o))) for o in (1, 2, 3)]
    for t in drains + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in drains:
        t.join()
    assert not errors
    assert len(seen) > 3
    assert all(log_figures == usage for log_figures, usage in seen if log_figures[0])
    rollups.drain()
    assert not UsagePending.objects.exists()
    log = _log_groups()
    assert sum(v[0] for v in log.values()) == 120
    assert _rollup_groups("inference_usage_daily") == log
    assert UsageDaily.objects.count() == len(log)  # one row a group


def test_rebuild_replaces_days_from_the_log_with_the_queue_drained():
    day = timezone.now().astimezone(dt.UTC).date()
    for _ in range(3):
        request_log_row(organization_id=1)
    with connection.cursor() as cur:  # a bulk load: rows copied with the trigger off
        cur.execute("SET session_replication_role = replica")
        try:
            request_log_row(organization_id=1, cost_nanos=5)
        finally:
            cur.execute("SET session_replication_role = DEFAULT")
    assert sum(v[0] for v in _rollup_groups().values()) == 3
    assert rollups.rebuild(start=day, end=day) == 1
    assert not UsagePending.objects.exists()
    assert _rollup_groups() == _log_groups() == _rollup_groups("inference_usage_daily")


def test_beat_drains_the_usage_queue_every_few_seconds(settings):
    from inference.tasks import BEAT_SCHEDULE, drain_usage_task

    entry = BEAT_SCHEDULE["inference.drain_usage"]
    assert entry["task"] == drain_usage_task.name
    assert entry["schedule"] == float(settings.INFRAI_USAGE_DRAIN_S) <= 10
    request_log_row(organization_id=1)
    assert drain_usage_task() == 1
    assert UsageDaily.objects.get().requests == 1
