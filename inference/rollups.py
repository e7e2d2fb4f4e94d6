"""The daily usage rollups: the request log summed per group, kept off the call's path.

The trigger on the request log (migrations 0010 and 0012) appends each row's figures to a
queue, :class:`inference.models.UsagePending`, in the statement that writes the row; nothing
another call writes is touched there. :func:`drain` moves the queue into one row a group,
:class:`inference.models.UsageDaily`; readers read both through the view
:class:`inference.models.UsageDailyLive`, so what they sum equals ``GROUP BY`` over the log
however late the drain runs. The queue only has to stay short enough to read quickly: beat
drains it every ``INFRAI_USAGE_DRAIN_S`` seconds (a few thousand rows at a thousand calls a
second).

Why a queue: the trigger used to upsert the group's row in the call itself, and concurrent
settlements of one key and model took turns on it. Measured apart (migration 0012's docstring):
16 writers of one group's log rows, 3,700 rows/s with the upsert, 6,000 with the append, 8,000
with no trigger; at concurrency 1 the trigger's statements cost 51 µs a call before and 22 µs
after (``bench/hot_path.py``).
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection, transaction

from inference.models import RequestLog

_DRAIN = "SELECT inference_usage_drain(%s)"
_ALL = 2**31 - 1


def drain(*, batch: int | None = None, rounds: int = 50) -> int:
    """Move queued usage into the rollups, ``batch`` rows (default ``INFRAI_USAGE_DRAIN_BATCH``)
    a transaction, until the queue is empty or ``rounds`` transactions ran; returns how many
    queued rows moved.

    Each round is one statement (``inference_usage_drain``): the rows it takes are deleted from
    the queue and added to their groups in one transaction, so a row counts once whatever
    fails. Drains running at once take different rows (``SKIP LOCKED``)."""
    size = int(batch or settings.INFRAI_USAGE_DRAIN_BATCH)
    moved = 0
    with connection.cursor() as cur:
        for _ in range(rounds):
            cur.execute(_DRAIN, [size])
            (n,) = cur.fetchone() or (0,)
            moved += int(n)
            if n < size:
                break
    return moved


def queued(*, limit: int = 1_000_000) -> int:
    """How many rows wait in the queue, counted up to ``limit`` (a stalled drain must not make
    the count itself a long scan): ``/metrics``' ``infrai_usage_queue_rows``."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM (SELECT 1 FROM inference_usage_pending LIMIT %s) q", [limit]
        )
        (n,) = cur.fetchone() or (0,)
    return int(n)


# The rollups of a range of days, recomputed from the log (the same figures the trigger queues).
_REBUILD = f"""
INSERT INTO inference_usage_daily (
    day, organization_id, project_id, api_key_id, model, vendor, endpoint,
    requests, errors, cache_hits, input_tokens, cached_input_tokens, cache_write_tokens,
    output_tokens, reasoning_tokens, cost_nanos)
SELECT (created_at AT TIME ZONE 'UTC')::date, organization_id, project_id, api_key_id, model,
       vendor, endpoint,
       count(*), count(*) FILTER (WHERE status <> 'ok'), count(*) FILTER (WHERE cache_hit),
       sum(input_tokens), sum(cached_input_tokens), sum(cache_write_tokens),
       sum(output_tokens), sum(reasoning_tokens), sum(cost_nanos)
FROM {RequestLog._meta.db_table} WHERE created_at >= %s AND created_at < %s
GROUP BY 1, 2, 3, 4, 5, 6, 7
"""


def rebuild(*, start: dt.date, end: dt.date) -> int:
    """Replace the rollups of the UTC days ``start``…``end`` (inclusive) by sums over the log;
    returns the rollup rows written. For repair and bulk loads (rows copied in with the trigger
    disabled): only days whose log rows are all still there (no retention deletes) and that
    no call writes to meanwhile give the right figures; one transaction, the whole queue
    drained first (its rows of those days are in the sums)."""
    lo = dt.datetime.combine(start, dt.time.min, tzinfo=dt.UTC)
    hi = dt.datetime.combine(end + dt.timedelta(days=1), dt.time.min, tzinfo=dt.UTC)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_DRAIN, [_ALL])
        cur.execute("DELETE FROM inference_usage_daily WHERE day >= %s AND day <= %s", [start, end])
        cur.execute(_REBUILD, [lo, hi])
        return int(cur.rowcount)
