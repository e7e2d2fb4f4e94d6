"""Holds and settlement — the contract the request path uses for every billable call.

How a caller uses it (one call = one ``request_id``)::

    await ahold_open(organization_id=…, project_id=…, api_key_id=…, request_id=rid,
                     amount_nanos=worst_case, budget_nanos=ctx.monthly_budget_nanos)
    try:
        … call the vendor …
    finally:
        async with adb.connection() as conn:
            settled = await asettle(conn, request_id=rid, actual_nanos=cost_so_far)
        … pass settled.recharge_wallet_id to arequest_recharge (and low_balance_wallet_id to
          arequest_low_balance) when not None …

1. **Open before any vendor call** (:func:`hold_open`): it reserves the worst-case cost against
   the organization's available balance (balance − open holds), or raises
   :class:`~billing.errors.InsufficientFunds` (which limit, the amounts; the web layer answers
   it as a 402) with nothing written: then do not call the vendor and do not settle.
2. **Settle exactly once, in ``finally``** (:func:`hold_settle`) — on success, vendor error,
   client disconnect and cancellation: it charges ``min(actual, hold)`` and releases the hold.
   A second settle (even concurrent) changes nothing and returns the same amount.
3. **Renew while the call runs** (:func:`holds_renew`), well within ``ttl_s``, so that only the
   holds of dead processes expire.
4. **If the process dies**, the hold expires after ``ttl_s``: :func:`holds_expire` (Celery
   beat, every minute) releases it with a zero-amount ``hold_expired`` ledger entry. A settle
   that still arrives is *late*: it charges at most what the wallet has available then.

**Where each statement runs.** Each money operation is one SQL text here, with psycopg's named
placeholders (:data:`_OPEN`, :data:`_KEY_SPENT`, :data:`_REFUSAL`, :func:`_settle_sql`,
:data:`_SETTLED`, :data:`_RENEW`, :data:`_EXPIRE`), and each operation is a parameter builder,
one execution and a reading of its row. The execution is either

- **on the event loop** (:func:`ahold_open`, :func:`asettle`, :func:`aholds_renew`: the
  request path): asyncpg through :mod:`infra.adb`, prepared once per connection.
  Opening and settlement commit without waiting for the disk (``defer``:
  :data:`infra.adb.DEFER_FLUSH`), so a wallet row is locked only while a statement runs, and
  :func:`asettle` waits for the disk (:func:`infra.adb.flush`) before it returns: no answer
  leaves before its charge is durable; or
- **synchronous** (:func:`hold_open`, :func:`hold_settle`, :func:`holds_renew`,
  :func:`hold_expire`, :func:`holds_expire`: Celery tasks, admin actions, the management API
  and commands, :mod:`vectors.metering`, tests): Django's ``connection.cursor()``, inside the
  caller's transaction if there is one, with normal durability.

Every statement locks in one order — the hold row, the wallet, the project's month counter
(opening: the wallet, the counter, then its new hold row) — so none deadlocks another; each
re-checks the rows it locked against their latest committed version (READ COMMITTED), which
is what makes a settlement exactly-once. Amounts are integer nano-USD.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing.errors import FundsLimit, InsufficientFunds
from billing.models import Hold, HoldStatus, LedgerEntry, Process, ProjectSpend, Wallet
from billing.services.ledger import (
    LOW_BALANCE_DUE,
    LOW_BALANCE_TASK,
    auto_recharge_enqueue,
    auto_recharge_on_commit,
    low_balance_on_commit,
    task_enqueue,
)
from infra import adb, live

log = logging.getLogger(__name__)

WALLET = Wallet._meta.db_table
HOLD = Hold._meta.db_table
SPEND = ProjectSpend._meta.db_table
LEDGER = LedgerEntry._meta.db_table
PROCESS = Process._meta.db_table

LATE_DESCRIPTION = "usage (after hold expiry)"


class HoldExists(ValueError):
    """``hold_open`` was called twice with the same ``request_id``."""


class HoldNotFound(LookupError):
    """``hold_settle`` was called for a ``request_id`` that has no hold."""


_token: tuple[int, str, dt.datetime] | None = None


def process_token() -> str:
    """This process's name on its holds: host, pid and a random part (a pid is reused; a
    forked child gets a token of its own)."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        host = socket.gethostname()[:40]
        _token = (pid, f"{host}:{pid}:{secrets.token_hex(4)}", timezone.now())
    return _token[1]


def month_start(now: dt.datetime) -> dt.date:
    """The first day of ``now``'s UTC month (the unit of project budgets)."""
    return now.astimezone(dt.UTC).date().replace(day=1)


def _fetchrow(sql: str, params: Mapping[str, Any]) -> Any:
    """Synchronous callers: ``sql``'s first row, on Django's connection (and transaction)."""
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


_compiled = functools.cache(adb.Statement.compile)


async def _afetchrow(conn: asyncpg.Connection, sql: str, params: Mapping[str, Any]) -> Any:
    """The event loop: ``sql`` on ``conn`` (:mod:`infra.adb`); its first row."""
    return await adb.fetchrow(conn, _compiled(sql), params)


def _usd(expr: str) -> str:
    """SQL: the nano-USD ``expr`` (≥ 0) in USD as :func:`money.usd.nanos_to_usd_str` writes it."""
    return f"trim_scale(({expr})::numeric(38, 9) / 1000000000)::text"


# A money statement's wallet update (alias wl) re-arms auto-recharge when the new balance is at
# or above the threshold (the rule of ledger.wallet_apply); RETURNING (new values) says whether
# a recharge became due.
_REARMED = "wl.auto_recharge_armed OR wl.balance_nanos + ({}) >= wl.auto_recharge_threshold_nanos"
_RECHARGE_DUE = (
    "(wl.auto_recharge_enabled AND wl.auto_recharge_armed"
    " AND wl.balance_nanos < wl.auto_recharge_threshold_nanos) AS recharge_due"
)
_LEDGER_COLUMNS = (
    "wallet_id, kind, amount_nanos, balance_after_nanos, idempotency_key, project_id,"
    " api_key_id, request_id, external_ref, description, created_at"
)

# --- open -------------------------------------------------------------------------------------

# Both conditional writes lock their row and re-check its latest committed version (UPDATE
# re-evaluation, ON CONFLICT DO UPDATE), so concurrent holds are serialized per wallet and per
# project. When the budget refuses, no hold row is inserted but the wallet reservation stands:
# the transaction around it rolls it back. The casts are for asyncpg, which types parameters.
_OPEN = f"""
WITH {adb.DEFER_FLUSH}, w AS (
    UPDATE {WALLET}
       SET held_nanos = held_nanos + %(amount)s::bigint, updated_at = %(now)s::timestamptz
     WHERE organization_id = %(org)s::bigint AND balance_nanos - held_nanos >= %(amount)s::bigint
    RETURNING id
), s AS (
    INSERT INTO {SPEND} (project_id, month, used_nanos, held_nanos)
    SELECT %(project)s::bigint, %(month)s::date, 0, %(amount)s::bigint
      FROM w  -- reading w locks the wallet row first
     WHERE %(project)s::bigint IS NOT NULL
       AND (%(budget)s::bigint IS NULL OR %(amount)s::bigint <= %(budget)s::bigint)
    ON CONFLICT (project_id, month) DO UPDATE
       SET held_nanos = {SPEND}.held_nanos + EXCLUDED.held_nanos
     WHERE %(budget)s::bigint IS NULL
        OR {SPEND}.used_nanos + {SPEND}.held_nanos + EXCLUDED.held_nanos <= %(budget)s::bigint
    RETURNING 1
)
INSERT INTO {HOLD} (wallet_id, project_id, api_key_id, request_id, amount_nanos, status,
                    month, created_at, expires_at, process)
SELECT w.id, %(project)s::bigint, %(key)s::bigint, %(rid)s::varchar, %(amount)s::bigint, 'open',
       %(month)s::date, %(now)s::timestamptz, %(expires)s::timestamptz, %(process)s::varchar
  FROM w, {adb.DEFER_FLUSH_NAME}
 WHERE %(project)s::bigint IS NULL OR EXISTS (SELECT 1 FROM s)
RETURNING id
"""
_KEY_SPENT = f"""
SELECT CAST(COALESCE(SUM(CASE WHEN status = 'open' THEN amount_nanos
                              ELSE COALESCE(captured_nanos, 0) END), 0) AS BIGINT)
  FROM {HOLD} WHERE api_key_id = %(key)s::bigint AND month = %(month)s::date
"""
_REFUSAL = f"""
SELECT (SELECT GREATEST(balance_nanos - held_nanos, 0) FROM {WALLET}
         WHERE organization_id = %(org)s::bigint),
       (SELECT used_nanos + held_nanos FROM {SPEND}
         WHERE project_id = %(project)s::bigint AND month = %(month)s::date)
"""


class _Refused(Exception):
    pass


def _opening(defer: bool, *hold: Any, key_budget: int | None, ttl_s: int) -> dict[str, Any]:
    """The parameters of :data:`_OPEN`, :data:`_KEY_SPENT` and :data:`_REFUSAL`; ``hold`` is
    organization, project, key, request id, amount, project budget."""
    p = dict(zip(("org", "project", "key", "rid", "amount", "budget"), hold, strict=True))
    if p["amount"] < 0:
        raise ValueError("amount_nanos must be >= 0")
    now = p["now"] = timezone.now()
    p.update(expires=now + dt.timedelta(seconds=ttl_s), month=month_start(now), defer=defer)
    p["process"] = process_token()
    p["key_budget"] = key_budget if p["key"] is not None else None
    return p


def _key_budget_check(p: Mapping[str, Any], row: Any) -> None:
    """Refuse the hold just written if the key's month (``row``: :data:`_KEY_SPENT`) now
    exceeds its budget.

    :data:`_KEY_SPENT` must run in the transaction that opened the hold, *after* it: that
    statement locked the organization's wallet row until commit, and every hold of this key is
    on that wallet, so concurrent holds of the key are serialized here. It is a new statement,
    so under READ COMMITTED it sees every hold committed before the lock was granted (a sum in
    the opening statement itself would read that statement's older snapshot and could let two
    holds pass together). The sum counts this hold (same transaction): settled holds at what
    they charged, open ones at their amount, expired ones at nothing. Raises
    :class:`~billing.errors.InsufficientFunds` (``KEY_BUDGET``); the caller's transaction then
    rolls the hold back.
    """
    spent, budget = int(row[0]), int(p["key_budget"])
    if spent > budget:
        raise InsufficientFunds(
            limit=FundsLimit.KEY_BUDGET,
            needed_nanos=p["amount"],
            available_nanos=max(budget - (spent - p["amount"]), 0),
            budget_nanos=budget,
        )


def _refusal(p: Mapping[str, Any], row: Any) -> InsufficientFunds:
    """Which limit refused the hold (``row``: :data:`_REFUSAL`, read after the rollback)."""
    avail, amount, budget = int(row[0] or 0), p["amount"], p["budget"]
    if avail >= amount and budget is not None:
        return InsufficientFunds(
            limit=FundsLimit.PROJECT_BUDGET,
            needed_nanos=amount,
            available_nanos=min(avail, max(budget - int(row[1] or 0), 0)),
            budget_nanos=budget,
        )
    return InsufficientFunds(limit=FundsLimit.WALLET, needed_nanos=amount, available_nanos=avail)


def hold_open(
    *,
    organization_id: int,
    project_id: int | None,
    api_key_id: int | None,
    request_id: str,
    amount_nanos: int,
    budget_nanos: int | None = None,
    key_budget_nanos: int | None = None,
    ttl_s: int = 900,
) -> None:
    """Reserve ``amount_nanos`` (the call's worst-case cost) for ``request_id``, expiring after
    ``ttl_s`` unless renewed. One durable transaction: the reservation, the project budget and
    the hold row are one statement; a key budget (``key_budget_nanos``) costs one more.

    - Returns ``None``: the hold is open. **You must settle it** on every exit path.
    - :class:`~billing.errors.InsufficientFunds` with ``limit``
      :attr:`~billing.errors.FundsLimit.WALLET`: the wallet cannot cover ``amount_nanos`` (or
      the organization has no wallet); ``exc.available_nanos`` is the wallet's available
      balance, to say which ``max_tokens`` would fit. The web layer answers it as a 402
      (:func:`inference.errors.api_error`).
    - ``PROJECT_BUDGET``: month-to-date usage + open holds + ``amount_nanos`` would exceed
      ``budget_nanos``; ``available_nanos`` is the smaller of the wallet's available balance
      and what is left of the budget.
    - ``KEY_BUDGET``: the key's holds this UTC month (settled ones at what they charged, open
      ones at their amount) + ``amount_nanos`` would exceed ``key_budget_nanos``;
      ``available_nanos`` is what is left of it.
    - :class:`HoldExists`: ``request_id`` was used before (a programming error).

    On every refusal nothing was written. ``None`` budgets mean none.
    """
    hold = (organization_id, project_id, api_key_id, request_id, amount_nanos, budget_nanos)
    p = _opening(False, *hold, key_budget=key_budget_nanos, ttl_s=ttl_s)
    try:
        with transaction.atomic(durable=True):
            if _fetchrow(_OPEN, p) is None:
                raise _Refused
            if p["key_budget"] is not None:
                _key_budget_check(p, _fetchrow(_KEY_SPENT, p))
    except _Refused:
        raise _refusal(p, _fetchrow(_REFUSAL, p)) from None
    except IntegrityError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != "23505":  # unique: the request id
            raise
        raise HoldExists(f"a hold for request {request_id} already exists") from exc


async def ahold_open(
    *,
    organization_id: int,
    project_id: int | None,
    api_key_id: int | None,
    request_id: str,
    amount_nanos: int,
    budget_nanos: int | None = None,
    key_budget_nanos: int | None = None,
    ttl_s: int = 900,
) -> None:
    """:func:`hold_open` on the event loop, same contract; the hold commits without waiting for
    the disk.

    What a hold guards — that concurrent calls never reserve more than the wallet has — rests
    on the commit being visible, which it is at once. Durability follows with the call's
    settlement, which waits for the disk (:func:`asettle`) and so flushes the hold before it.
    Only a PostgreSQL crash within the flush delay (well under a second) can forget a hold, and
    its reservation with it; the call in flight cannot settle against that database anyway.
    Without budgets only the wallet can refuse, and then nothing is written: the statement is
    its own transaction (no BEGIN/COMMIT round trips).
    """
    hold = (organization_id, project_id, api_key_id, request_id, amount_nanos, budget_nanos)
    p = _opening(True, *hold, key_budget=key_budget_nanos, ttl_s=ttl_s)
    budgeted = p["budget"] is not None or p["key_budget"] is not None
    try:
        async with adb.transaction() if budgeted else adb.connection() as conn:
            if await _afetchrow(conn, _OPEN, p) is None:
                raise _Refused
            if p["key_budget"] is not None:
                _key_budget_check(p, await _afetchrow(conn, _KEY_SPENT, p))
    except _Refused:
        async with adb.connection() as conn:
            raise _refusal(p, await _afetchrow(conn, _REFUSAL, p)) from None
    except adb.UniqueViolation as exc:
        raise HoldExists(f"a hold for request {request_id} already exists") from exc


# --- settle -----------------------------------------------------------------------------------


@functools.cache
def _settle_sql(before: str | None = None) -> str:
    """The settlement of an open *or expired* hold as ONE statement; ``before`` (data-modifying
    SQL with named parameters, e.g. the request-log INSERT) runs in it whether or not a hold
    matched. No row when nothing was claimable.

    ``prev`` locks the hold row and re-checks it, so of two concurrent settlements only the
    first claims it (the second waits, then finds it settled); ``c`` then locks the wallet and
    reads its latest version before the hold, the wallet and the counter are written. An open
    hold releases its reservation; an expired one was released by its expiry, so it is charged
    at most what is available, ``max(balance − held, 0)``, and the rest noted in the entry.
    """
    first = f"pre AS ({before}), " if before else ""
    note = (
        f"'hold had expired: $' || {_usd('c.owed - c.charged')} || ' of $' || {_usd('c.owed')}"
        f" || ' uncollected ($' || {_usd('c.charged')} || ' available)'"
    )
    return f"""
WITH {adb.DEFER_FLUSH}, {first}prev AS MATERIALIZED (
    SELECT id, wallet_id, project_id, api_key_id, amount_nanos, month, status = 'expired' AS late,
           LEAST(%(actual)s::bigint, amount_nanos) AS owed
      FROM {HOLD}
     WHERE request_id = %(rid)s::varchar AND status IN ('open', 'expired')
       AND captured_nanos IS NULL
       FOR UPDATE
), c AS MATERIALIZED (
    SELECT prev.*, CASE WHEN prev.late THEN 0 ELSE prev.amount_nanos END AS released,
           CASE WHEN prev.late
                THEN LEAST(prev.owed, GREATEST(wl.balance_nanos - wl.held_nanos, 0))
                ELSE prev.owed END AS charged
      FROM prev JOIN {WALLET} AS wl ON wl.id = prev.wallet_id
       FOR UPDATE OF wl
), h AS (
    UPDATE {HOLD} AS ho
       SET status = 'settled', captured_nanos = c.charged, closed_at = %(now)s::timestamptz
      FROM c WHERE ho.id = c.id
), w AS (
    UPDATE {WALLET} AS wl
       SET balance_nanos = wl.balance_nanos - c.charged, held_nanos = wl.held_nanos - c.released,
           auto_recharge_armed = {_REARMED.format("-c.charged")}, updated_at = %(now)s::timestamptz
      FROM c WHERE wl.id = c.wallet_id
    RETURNING wl.id, wl.balance_nanos, {_RECHARGE_DUE},
              {LOW_BALANCE_DUE.format(delta="-c.charged", wl="wl")}
), s AS (
    UPDATE {SPEND} AS sp
       SET held_nanos = sp.held_nanos - c.released, used_nanos = sp.used_nanos + c.charged
      FROM c, w  -- reading w first keeps the lock order: wallet, then the counter
     WHERE sp.project_id = c.project_id AND sp.month = c.month
), l AS (
    INSERT INTO {LEDGER} ({_LEDGER_COLUMNS})
    SELECT w.id, 'usage', -c.charged, w.balance_nanos, 'usage:' || %(rid)s::varchar,
           c.project_id, c.api_key_id, %(rid)s::varchar, '',
           CASE WHEN NOT c.late THEN %(desc)s::varchar
                WHEN c.charged = c.owed THEN %(late_desc)s::varchar
                ELSE left(%(late_desc)s::varchar, 253 - length({note})) || '; ' || {note} END,
           %(now)s::timestamptz
      FROM c, w
     WHERE c.charged > 0 OR c.owed > c.charged  -- a late one that collected nothing: 0 entry
)
SELECT c.charged, w.id, w.recharge_due, w.low_balance_due FROM c, w, {adb.DEFER_FLUSH_NAME}
"""


# After a settlement that claimed nothing: a new statement, so it sees the one that won.
_SETTLED = f"SELECT captured_nanos FROM {HOLD} WHERE request_id = %(rid)s::varchar"


@dataclass(frozen=True, slots=True)
class Settled:
    """What :func:`asettle` did: the nano-USD charged, the wallet whose auto-recharge became
    due (``None`` when none did) and the wallet whose low-balance alert became due (pass it to
    :func:`arequest_low_balance`; ``None`` when none did)."""

    charged: int
    recharge_wallet_id: int | None
    low_balance_wallet_id: int | None = None


def _settle_params(
    request_id: str, actual_nanos: int, description: str, defer: bool
) -> dict[str, Any]:
    if actual_nanos < 0:
        raise ValueError("actual_nanos must be >= 0")
    return {
        "rid": request_id,
        "actual": actual_nanos,
        "desc": description[:255],
        "late_desc": (description or LATE_DESCRIPTION)[:255],
        "now": timezone.now(),
        "defer": defer,
    }


def _settled(row: Any) -> Settled | None:
    if row is None:
        return None
    wallet_id = int(row[1])
    return Settled(int(row[0]), wallet_id if row[2] else None, wallet_id if row[3] else None)


def _charged_before(request_id: str, row: Any) -> int:
    """What an earlier settlement charged (``row``: :data:`_SETTLED`)."""
    if row is None:
        raise HoldNotFound(f"no hold for request {request_id}")
    return int(row[0] or 0)


def hold_settle(*, request_id: str, actual_nanos: int, description: str = "") -> int:
    """Charge ``min(actual_nanos, hold)`` and release the hold; returns the nano-USD charged.

    One statement, all or nothing: the hold, the wallet, the project's counter and one
    ``usage`` ledger entry (key ``usage:<request_id>``, with project, key, request id and
    ``description``). ``actual_nanos == 0`` writes **no** entry (the balance did not change).
    Exactly once: a second call — sequential or concurrent — writes nothing and returns what
    the first charged. Raises :class:`HoldNotFound` when ``request_id`` never had a hold.

    - **In autocommit** the statement is its own transaction.
    - **Inside the caller's** ``transaction.atomic()`` it joins that transaction, so e.g. the
      request-log row and the settlement commit together — and roll back together: then the
      hold is still open and the caller must settle again. Until the caller commits, a
      concurrent settle of the same hold waits on the hold row, then finds it closed.

    A hold the sweeper already expired is settled *late*: charged ``min(actual, hold)`` but
    never more than the wallet has available then (its reservation was released and may have
    been spent); the uncollected rest is noted in the entry's description (written even when
    nothing could be collected) and the hold's ``captured_nanos`` is what was charged. A due
    auto-recharge is queued on commit.
    """
    params = _settle_params(request_id, actual_nanos, description, defer=False)
    settled = _settled(_fetchrow(_settle_sql(), params))
    if settled is None:
        return _charged_before(request_id, _fetchrow(_SETTLED, params))
    if settled.recharge_wallet_id is not None:
        auto_recharge_on_commit(wallet_id=settled.recharge_wallet_id)
    if settled.low_balance_wallet_id is not None:
        low_balance_on_commit(wallet_id=settled.low_balance_wallet_id)
    return settled.charged


async def asettle(
    conn: asyncpg.Connection,
    *,
    request_id: str,
    actual_nanos: int,
    description: str = "",
    before: tuple[str, dict[str, Any]] | None = None,
) -> Settled | None:
    """:func:`hold_settle`'s statement on ``conn`` (the event loop), in autocommit, open and
    late holds alike. It returns once the settlement is on disk, like a synchronous commit,
    but the wallet row is locked only while the statement runs, not while PostgreSQL flushes
    (:func:`infra.adb.flush`): calls of one organization do not queue behind each other's
    disk writes.

    ``before`` is the caller's own write, ``(sql, params)`` with named parameters (e.g. the
    request-log row): it runs inside the same statement, whether or not a hold matched, so
    both commit together or neither does (if it fails, the hold is as it was).

    ``None`` when nothing was claimable: already settled (by an earlier or a concurrent call)
    or never opened. Otherwise pass ``recharge_wallet_id`` to :func:`arequest_recharge`.
    """
    params = _settle_params(request_id, actual_nanos, description, defer=True)
    if before is not None:
        params.update(before[1])
    row = await _afetchrow(conn, _settle_sql(before[0] if before else None), params)
    try:
        await adb.flush(conn)
    except Exception as exc:
        if not adb.lost(exc):
            raise
        # Committed and visible; only the wait failed (the database is going away). Report
        # what was done (settling again would find the hold closed).
        log.warning("settlement of %s committed, its flush failed: %r", request_id, exc)
    return _settled(row)


async def arequest_recharge(wallet_id: int) -> None:
    """Ask the worker to consider an auto-recharge of ``wallet_id`` (after the settlement that
    made it due has committed; the worker re-checks the wallet under its lock)."""
    await sync_to_async(auto_recharge_enqueue, thread_sensitive=False)(wallet_id)


async def arequest_low_balance(wallet_id: int) -> None:
    """Ask the worker for ``wallet_id``'s low-balance e-mail (after the settlement that made it
    due has committed; the worker sends it only if it wins the crossing,
    :func:`billing.services.notify.low_balance_claim`)."""
    await sync_to_async(task_enqueue, thread_sensitive=False)(LOW_BALANCE_TASK, wallet_id)


# --- renewal ----------------------------------------------------------------------------------

# The checkpoint (``delivered``: what each call had delivered, priced) only ever grows.
_RENEW = f"""
WITH r AS (
    UPDATE {HOLD} AS ho
       SET expires_at = %(expires)s::timestamptz,
           delivered_nanos = GREATEST(ho.delivered_nanos, LEAST(d.delivered, ho.amount_nanos))
      FROM unnest(%(rids)s::varchar[], %(delivered)s::bigint[]) AS d(rid, delivered)
     WHERE ho.request_id = d.rid AND ho.status = 'open'
    RETURNING 1
)
SELECT count(*) FROM r
"""


def _renew_params(
    request_ids: list[str], ttl_s: int, delivered: list[int] | None
) -> dict[str, Any] | None:
    if ttl_s <= 0:
        raise ValueError("ttl_s must be > 0")
    if not request_ids:
        return None
    checkpoints = [0] * len(request_ids) if delivered is None else list(delivered)
    if len(checkpoints) != len(request_ids) or min(checkpoints) < 0:
        raise ValueError("delivered needs one amount >= 0 per request id")
    expires = timezone.now() + dt.timedelta(seconds=ttl_s)
    return {"rids": list(request_ids), "delivered": checkpoints, "expires": expires}


def holds_renew(*, request_ids: list[str], ttl_s: int, delivered: list[int] | None = None) -> int:
    """Push the expiry of the holds of ``request_ids`` that are still open to now + ``ttl_s``
    (one ``UPDATE``); returns how many. A process relaying a call renews its hold well within
    ``ttl_s``, so the sweeper only expires the holds of processes that died. Settled or expired
    holds are left alone (a renewal never reopens a hold).

    ``delivered`` (nano-USD, one per request id) is each call's checkpoint: what it had
    delivered so far, priced. An expiry charges it (capped at the hold), so a process killed
    mid-stream is billed to its last checkpoint, not $0; a checkpoint never decreases.
    """
    params = _renew_params(request_ids, ttl_s, delivered)
    return 0 if params is None else int(_fetchrow(_RENEW, params)[0])


async def aholds_renew(
    *, request_ids: list[str], ttl_s: int, delivered: list[int] | None = None
) -> int:
    """:func:`holds_renew` on the event loop, same contract."""
    if (params := _renew_params(request_ids, ttl_s, delivered)) is None:
        return 0
    async with adb.connection() as conn:
        return int((await _afetchrow(conn, _RENEW, params))[0])


# This process is alive: its renewer says so on every tick (:func:`aprocess_seen`).
_SEEN = f"""
INSERT INTO {PROCESS} (token, host, pid, started_at, seen_at)
VALUES (%(token)s::varchar, %(host)s::varchar, %(pid)s::integer, %(started)s::timestamptz,
        %(now)s::timestamptz)
ON CONFLICT (token) DO UPDATE SET seen_at = EXCLUDED.seen_at
"""


def _seen_params() -> dict[str, Any]:
    token = process_token()
    assert _token is not None
    return {
        "token": token,
        "host": token.rsplit(":", 2)[0],
        "pid": _token[0],
        "started": _token[2],
        "now": timezone.now(),
    }


def process_seen() -> None:
    """Record that this process is alive now (see :class:`billing.models.Process`)."""
    _fetchrow(_SEEN + " RETURNING 1", _seen_params())


async def aprocess_seen() -> None:
    """:func:`process_seen` on the event loop."""
    async with adb.connection() as conn:
        await _afetchrow(conn, _SEEN + " RETURNING 1", _seen_params())


# --- expiry -----------------------------------------------------------------------------------

# Hold → expired: its counter and wallet reservation released, and its last checkpoint
# (``delivered_nanos``, within the hold) charged as a ``usage`` entry — or, with no checkpoint,
# the zero-amount ``hold_expired`` entry that shows the release (lock order: hold, wallet,
# counter). ``captured_nanos`` stays NULL without a checkpoint, so a settlement that still
# arrives is taken late (:func:`_settle_sql`); a charged checkpoint is final.
_EXPIRE = f"""
WITH h AS (
    UPDATE {HOLD} SET status = 'expired', closed_at = %(now)s::timestamptz,
           captured_nanos = NULLIF(LEAST(delivered_nanos, amount_nanos), 0)
     WHERE id = %(id)s::bigint AND status = 'open'
    RETURNING wallet_id, project_id, api_key_id, amount_nanos, month, request_id,
              COALESCE(captured_nanos, 0) AS charged
), w AS (
    UPDATE {WALLET} AS wl
       SET balance_nanos = wl.balance_nanos - h.charged,
           held_nanos = wl.held_nanos - h.amount_nanos,
           auto_recharge_armed = {_REARMED.format("-h.charged")}, updated_at = %(now)s::timestamptz
      FROM h WHERE wl.id = h.wallet_id
    RETURNING wl.id, wl.organization_id, wl.balance_nanos, {_RECHARGE_DUE},
              {LOW_BALANCE_DUE.format(delta="-h.charged", wl="wl")}
), s AS (
    UPDATE {SPEND} AS sp
       SET held_nanos = sp.held_nanos - h.amount_nanos, used_nanos = sp.used_nanos + h.charged
      FROM h, w WHERE sp.project_id = h.project_id AND sp.month = h.month
), l AS (
    INSERT INTO {LEDGER} ({_LEDGER_COLUMNS})
    SELECT w.id, CASE WHEN h.charged > 0 THEN 'usage' ELSE 'hold_expired' END, -h.charged,
           w.balance_nanos,
           CASE WHEN h.charged > 0 THEN 'usage:' ELSE 'hold_expired:' END || h.request_id,
           h.project_id, h.api_key_id, h.request_id, '',
           CASE WHEN h.charged > 0
                THEN 'usage to the last checkpoint (its process stopped); hold of $'
                     || {_usd("h.amount_nanos")} || ' released after expiry'
                ELSE 'Hold of $' || {_usd("h.amount_nanos")} || ' released after expiry' END,
           %(now)s::timestamptz
      FROM h, w
)
SELECT w.id, w.organization_id, w.recharge_due, w.low_balance_due FROM h, w
"""


def hold_expire(*, hold_id: int) -> bool:
    """Release one expired open hold, charging its last checkpoint: a ``usage`` entry of that
    amount (key ``usage:<request_id>``) or, when nothing was checkpointed, a zero-amount
    ``hold_expired`` entry (key ``hold_expired:<request_id>``), with the hold's request id,
    project and key; the organization's open dashboards are told. One statement (its own
    transaction in autocommit); False when the hold was no longer open (settled meanwhile)."""
    row = _fetchrow(_EXPIRE, {"id": hold_id, "now": timezone.now()})
    if row is None:
        return False
    wallet_id, organization_id, recharge_due, low_balance_due = row
    if recharge_due:
        auto_recharge_on_commit(wallet_id=wallet_id)
    if low_balance_due:
        low_balance_on_commit(wallet_id=wallet_id)
    live.announce_wallet_change_on_commit(organization_id)
    return True


def holds_expire(*, now: dt.datetime | None = None, limit: int = 1000) -> int:
    """Release every open hold whose ``expires_at`` has passed; returns how many."""
    cutoff = now or timezone.now()
    ids = list(
        Hold.objects.filter(status=HoldStatus.OPEN, expires_at__lt=cutoff)
        .order_by("expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(hold_expire(hold_id=pk) for pk in ids)


# --- carve: part of an open hold becomes a hold of its own ------------------------------------

# One statement: the parent hold (locked first, as every money statement locks a hold first)
# gives up ``amount`` and a new open hold of that amount is written for ``rid`` on the same
# wallet, project, key and month. The wallet's ``held_nanos`` and the project's counter are
# untouched — the money was reserved already — so nothing else is locked.
_CARVE = f"""
WITH p AS (
    UPDATE {HOLD}
       SET amount_nanos = amount_nanos - %(amount)s::bigint
     WHERE request_id = %(parent)s::varchar AND status = 'open'
       AND amount_nanos >= %(amount)s::bigint
    RETURNING wallet_id, project_id, api_key_id, month
)
INSERT INTO {HOLD} (wallet_id, project_id, api_key_id, request_id, amount_nanos, status,
                    month, created_at, expires_at, process)
SELECT p.wallet_id, p.project_id, p.api_key_id, %(rid)s::varchar, %(amount)s::bigint, 'open',
       p.month, %(now)s::timestamptz, %(expires)s::timestamptz, %(process)s::varchar
  FROM p
RETURNING id
"""
_CARVE_LEFT = f"""
SELECT CASE WHEN status = 'open' THEN amount_nanos ELSE 0 END FROM {HOLD}
 WHERE request_id = %(parent)s::varchar
"""


async def ahold_carve(
    *, parent_request_id: str, request_id: str, amount_nanos: int, ttl_s: int = 900
) -> None:
    """Move ``amount_nanos`` of the open hold of ``parent_request_id`` (a reservation made
    for many calls, e.g. a batch's) into a new open hold of ``request_id``, in one statement.

    The wallet's available balance does not change (the money stays reserved, now under two
    holds), so no other call can take it in between. The new hold is exactly like one
    :func:`ahold_open` opens — same wallet, project, key and month as its parent, expiring
    after ``ttl_s`` unless renewed — and **must be settled** like one (:func:`asettle`); the
    parent keeps the rest, which its own settlement releases.

    - Returns ``None``: the hold of ``request_id`` is open.
    - :class:`~billing.errors.InsufficientFunds` (``WALLET``; ``available_nanos``: what the
      parent has left, 0 when it is closed or unknown): the parent cannot give ``amount_nanos``;
      nothing was written.
    - :class:`HoldExists`: ``request_id`` was used before.
    """
    if amount_nanos < 0:
        raise ValueError("amount_nanos must be >= 0")
    now = timezone.now()
    p = {
        "parent": parent_request_id,
        "rid": request_id,
        "amount": amount_nanos,
        "now": now,
        "expires": now + dt.timedelta(seconds=ttl_s),
        "process": process_token(),
    }
    try:
        async with adb.connection() as conn:
            if await _afetchrow(conn, _CARVE, p) is not None:
                return
            row = await _afetchrow(conn, _CARVE_LEFT, p)
    except adb.UniqueViolation as exc:
        raise HoldExists(f"a hold for request {request_id} already exists") from exc
    raise InsufficientFunds(
        limit=FundsLimit.WALLET,
        needed_nanos=amount_nanos,
        available_nanos=int(row[0] or 0) if row is not None else 0,
    )
