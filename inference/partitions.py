"""Upkeep of the partitioned request log (``docs/deploy.md``, "The request log at scale").

The log (:class:`inference.models.RequestLog`) is a ``PARTITION BY RANGE (created_at)`` parent
with one partition a UTC month, ``inference_requestlog_pYYYYMM``, and a default partition that
catches any row outside them (so a write never fails for want of a partition: a beat that did
not run for months costs nothing but a fuller default partition). :func:`maintain`, run hourly
by beat, does a bounded amount of work each time:

1. :func:`create_ahead` — the current month and ``INFRAI_REQUEST_LOG_MONTHS_AHEAD`` more, and
   earlier months stranded in the default partition (beat was stopped when they began); a
   month whose rows already went to the default partition has them moved into its new
   partition in the same transaction.
2. :func:`drop_expired` — partitions whose whole month is older than the longest retention of
   any organization are dropped (``DROP TABLE``: no row-by-row delete, no vacuum debt).
3. :func:`prune_rows` — within kept partitions, the calls of organizations with a shorter
   retention are deleted and prompts past their (shorter) retention are cleared, at most
   ``INFRAI_REQUEST_LOG_RETENTION_BATCH`` rows a statement and
   ``INFRAI_REQUEST_LOG_RETENTION_BATCHES`` statements a run.

The daily usage rollups (:mod:`inference.rollups`) are not touched by any of this: usage
outlives the calls' rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Organization
from inference.models import RequestLog

log = logging.getLogger(__name__)

PARENT = RequestLog._meta.db_table
DEFAULT = f"{PARENT}_default"
_NAME = re.compile(rf"^{PARENT}_p(\d{{4}})(\d{{2}})$")


@dataclass(frozen=True, slots=True)
class Upkeep:
    """What one :func:`maintain` run did."""

    created: list[str]
    dropped: list[str]
    deleted_rows: int
    cleared_prompts: int


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def next_month(month: dt.date) -> dt.date:
    return (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def partition_name(month: dt.date) -> str:
    return f"{PARENT}_p{month:%Y%m}"


def _bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    lo = dt.datetime.combine(month, dt.time.min, tzinfo=dt.UTC)
    return lo, dt.datetime.combine(next_month(month), dt.time.min, tzinfo=dt.UTC)


def partitions() -> dict[dt.date, str]:
    """The monthly partitions there are: ``{first day of the month: table name}``."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [PARENT],
        )
        names = [r[0] for r in cur.fetchall()]
    out = {}
    for name in names:
        if m := _NAME.match(name):
            out[dt.date(int(m[1]), int(m[2]), 1)] = name
    return out


def create_ahead(*, today: dt.date, months_ahead: int, stranded: int = 2) -> list[str]:
    """Create the partitions of ``today``'s month and the ``months_ahead`` after it that are
    missing, and of up to ``stranded`` earlier months whose rows sit in the default partition
    (beat was not running when they began); returns their names. Rows of such a month already
    in the default partition are moved into the new partition in the same transaction (the
    table is built aside, filled, then attached: attaching checks the default partition holds
    none of its range), so a month is dropped whole once past retention, never deleted row by
    row."""
    have = partitions()
    wanted = _stranded_months(limit=stranded)
    month = month_start(today)
    for _ in range(months_ahead + 1):
        wanted.append(month)
        month = next_month(month)
    created = []
    for month in dict.fromkeys(wanted):
        if month not in have:
            _create(month)
            created.append(partition_name(month))
    return created


def _stranded_months(*, limit: int) -> list[dt.date]:
    """The oldest ``limit`` months with rows in the default partition (normally none: it is
    empty while beat keeps partitions ahead)."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date "
            f"FROM {connection.ops.quote_name(DEFAULT)} ORDER BY 1 LIMIT %s",
            [limit],
        )
        return [row[0] for row in cur.fetchall()]


def _create(month: dt.date) -> None:
    name = connection.ops.quote_name(partition_name(month))
    parent, default = connection.ops.quote_name(PARENT), connection.ops.quote_name(DEFAULT)
    lo, hi = _bounds(month)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"SELECT EXISTS (SELECT 1 FROM {default} WHERE created_at >= %s AND created_at < %s)",
            [lo, hi],
        )
        if not cur.fetchone()[0]:
            cur.execute(
                f"CREATE TABLE {name} PARTITION OF {parent} FOR VALUES FROM (%s) TO (%s)",
                [lo, hi],
            )
            return
        # The moved rows are counted in the rollups already: neither the DELETE from the
        # default partition nor the INSERT into a table not yet attached fires the trigger.
        cur.execute(f"CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        cur.execute(
            f"WITH moved AS (DELETE FROM {default} WHERE created_at >= %s AND created_at < %s "
            f"RETURNING *) INSERT INTO {name} SELECT * FROM moved",
            [lo, hi],
        )
        cur.execute(
            f"ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [lo, hi]
        )
    log.info("request log partition %s created from rows of the default partition", name)


def _retentions() -> tuple[int, dict[int, int], int, dict[int, int]]:
    """(default days, {organization: own days}) for calls, then the same for prompts."""
    orgs = Organization.objects.filter(request_log_retention_days__isnull=False)
    log_days = {
        pk: int(days or 0) for pk, days in orgs.values_list("pk", "request_log_retention_days")
    }
    prompts = Organization.objects.filter(prompt_retention_days__isnull=False)
    prompt_days = {
        pk: int(days or 0) for pk, days in prompts.values_list("pk", "prompt_retention_days")
    }
    return (
        int(settings.INFRAI_REQUEST_LOG_RETENTION_DAYS),
        log_days,
        int(settings.INFRAI_PROMPT_RETENTION_DAYS),
        prompt_days,
    )


def drop_expired(*, now: dt.datetime, limit: int = 2) -> list[str]:
    """Drop up to ``limit`` monthly partitions (oldest first) whose whole month ended before
    the longest retention of any organization (the default included); returns their names.
    ``DROP TABLE`` takes a brief ACCESS EXCLUSIVE lock on the log."""
    default_days, own, _, _ = _retentions()
    keep = max([default_days, *own.values()])
    cutoff = now - dt.timedelta(days=keep)
    dropped: list[str] = []
    for month, name in sorted(partitions().items()):
        if len(dropped) >= limit or _bounds(month)[1] > cutoff:
            break
        with connection.cursor() as cur:
            cur.execute(f"DROP TABLE {connection.ops.quote_name(name)}")
        dropped.append(name)
        log.info("request log partition %s dropped (older than %s days)", name, keep)
    return dropped


def _batched(sql: str, params: list[Any], budget: list[int]) -> int:
    """Run the bounded statement ``sql`` (it affects at most one batch of rows) until it
    affects fewer than a batch or ``budget[0]`` statements are spent; returns the rows."""
    batch = int(settings.INFRAI_REQUEST_LOG_RETENTION_BATCH)
    done = 0
    while budget[0] > 0:
        budget[0] -= 1
        with connection.cursor() as cur:
            cur.execute(sql, [*params, batch])
            done += cur.rowcount
            if cur.rowcount < batch:
                break
    return done


_DELETE = (
    f"DELETE FROM {PARENT} WHERE (id, created_at) IN (SELECT id, created_at FROM {PARENT} "
    "WHERE {where} LIMIT %s)"
)
_CLEAR = (
    f"UPDATE {PARENT} SET prompt = '' WHERE (id, created_at) IN (SELECT id, created_at "
    f"FROM {PARENT} WHERE prompt <> '' AND {{where}} LIMIT %s)"
)


def prune_rows(*, now: dt.datetime) -> tuple[int, int]:
    """Delete calls past their organization's retention and clear prompts past theirs, in
    bounded batches (see the module's docstring); returns (rows deleted, prompts cleared).
    Rows past the longest retention are left to :func:`drop_expired` unless they sit in the
    default partition. Clearing a prompt fires no rollup trigger (no usage column changes)."""
    default_days, own, prompt_default, own_prompts = _retentions()
    budget = [int(settings.INFRAI_REQUEST_LOG_RETENTION_BATCHES)]
    deleted = cleared = 0
    for organization_id, days in own.items():
        deleted += _batched(
            _DELETE.format(where="organization_id = %s AND created_at < %s"),
            [organization_id, now - dt.timedelta(days=days)],
            budget,
        )
    others = list(own)
    deleted += _batched(
        _DELETE.format(where="created_at < %s AND NOT (organization_id = ANY(%s))"),
        [now - dt.timedelta(days=default_days), others],
        budget,
    )
    for organization_id, days in own_prompts.items():
        cleared += _batched(
            _CLEAR.format(where="organization_id = %s AND created_at < %s"),
            [organization_id, now - dt.timedelta(days=days)],
            budget,
        )
    cleared += _batched(
        _CLEAR.format(where="created_at < %s AND NOT (organization_id = ANY(%s))"),
        [now - dt.timedelta(days=prompt_default), list(own_prompts)],
        budget,
    )
    return deleted, cleared


def maintain(*, now: dt.datetime | None = None) -> Upkeep:
    """One bounded round of upkeep (the module's docstring): partitions ahead, expired ones
    dropped, rows and prompts past retention deleted / cleared."""
    now = now or timezone.now()
    created = create_ahead(
        today=now.astimezone(dt.UTC).date(),
        months_ahead=int(settings.INFRAI_REQUEST_LOG_MONTHS_AHEAD),
    )
    dropped = drop_expired(now=now)
    deleted, cleared = prune_rows(now=now)
    return Upkeep(created, dropped, deleted, cleared)
