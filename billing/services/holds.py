"""Holds and settlement — the contract the request path uses for every billable call.

How a caller uses it (one call = one ``request_id``)::

    await ahold_open(organization_id=…, project_id=…, api_key_id=…, request_id=rid,
                     amount_nanos=worst_case, budget_nanos=ctx.monthly_budget_nanos)
    try:
        … call the vendor …
    finally:
        await ahold_settle(request_id=rid, actual_nanos=cost_so_far)

1. **Open before any vendor call.** :func:`hold_open` reserves ``amount_nanos`` (the worst-case
   cost: prompt estimate + max output, from :func:`money.pricing.cost_nanos`) against the
   organization's *available* balance (balance − open holds). It is atomic: the availability
   test and the reservation are one conditional ``UPDATE`` (on PostgreSQL one statement that
   also checks the project budget and inserts the hold), so concurrent calls can never
   together reserve more than is available.

   - Returns ``None``: the hold is open. **You must settle it** (step 2) on every exit path.
   - Raises :class:`~config.errors.InsufficientQuota` code ``insufficient_quota``: the wallet
     cannot cover ``amount_nanos`` (or the organization has no wallet). Nothing was written.
     Answer 402 as is (it carries ``x-should-retry: false``); do not call the vendor and do
     not settle. ``exc.available_nanos`` is the wallet's available balance (≥ 0), to say
     which ``max_tokens`` would fit.
   - Raises ``InsufficientQuota`` code ``project_budget_exceeded``: the project's monthly
     budget (month-to-date usage + its open holds + ``amount_nanos`` > ``budget_nanos``).
     Nothing was written; same handling. ``exc.available_nanos`` is the smaller of the
     wallet's available balance and what is left of the budget.
   - Raises ``InsufficientQuota`` code ``key_budget_exceeded``: the API key's monthly budget
     (``key_budget_nanos``; the key's holds this UTC month — settled ones at what they charged,
     open ones at their amount — plus ``amount_nanos`` would exceed it). Nothing was written;
     same handling. ``exc.available_nanos`` is what is left of the key's budget.
   - Raises :class:`HoldExists` if ``request_id`` was used before (a programming error).

2. **Settle exactly once, in ``finally``** — on success, vendor error, client disconnect and
   cancellation. :func:`hold_settle` debits ``min(actual_nanos, hold amount)`` as one
   ``usage`` ledger entry (idempotency key ``usage:<request_id>``, with project, key and
   request id) and releases the rest of the hold, all in one transaction. It returns the
   nano-USD charged. Calling it again (even concurrently) changes nothing and returns the same
   amount: the hold row's ``open → settled`` transition is the single arbiter.
   ``actual_nanos == 0`` closes the hold and writes **no** ledger entry (the balance did not
   change; the request log still has the call). ``actual_nanos`` above the hold is capped:
   the platform never charges more than it reserved.

   It works in autocommit (its own transaction: one statement on PostgreSQL) and **inside the
   caller's** ``transaction.atomic()``, where it joins that transaction — the way to write the
   request-log row and the settlement together::

       with transaction.atomic():
           RequestLog(...).save()
           hold_settle(request_id=rid, actual_nanos=cost)

   If the caller's block rolls back, so does the settlement: the hold is still open and must be
   settled again.

3. **Renew while the call runs.** A process relaying a long call calls :func:`holds_renew`
   (or :func:`aholds_renew`) for its live request ids well within ``ttl_s``; it pushes their
   ``expires_at`` to now + ``ttl_s`` so that only the holds of dead processes expire.

4. **If the process dies** between open and settle, the hold expires after ``ttl_s``:
   :func:`holds_expire` (Celery beat, every minute) releases it and writes a **zero-amount
   ``hold_expired`` ledger entry** (with the request id) so the release is visible in the
   wallet's history. A settle that still arrives later for such a hold charges
   ``min(actual, amount)`` but **never more than the wallet has available then**
   (``max(balance − held, 0)``): the released money may have been spent by other calls, and a
   late settlement must not overdraw. The uncollected remainder is written in the ``usage``
   entry's description (the entry is written even when nothing could be collected) and the
   hold's ``captured_nanos`` is what was charged.

Async callers use :func:`ahold_open` / :func:`ahold_settle` / :func:`aholds_renew` (same
contract). On PostgreSQL the request path opens and settles on the event loop
(:func:`ahold_open`, :func:`asettle`, over :mod:`config.adb`), committing without waiting for
the disk so that the wallet row is locked only while a statement runs; :func:`asettle` then
waits for the disk before it returns. Everything else runs the ORM in a worker thread, never on
the event loop. Amounts are integer nano-USD.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg
from asgiref.sync import sync_to_async
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.utils import timezone

from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, ProjectSpend, Wallet
from billing.services.ledger import (
    auto_recharge_enqueue,
    auto_recharge_on_commit,
    post_entry,
    wallet_apply,
)
from config import adb
from config.errors import InsufficientQuota
from money.usd import nanos_to_usd_str

log = logging.getLogger(__name__)

WALLET = Wallet._meta.db_table
HOLD = Hold._meta.db_table
SPEND = ProjectSpend._meta.db_table
LEDGER = LedgerEntry._meta.db_table

CODE_WALLET = "insufficient_quota"
CODE_BUDGET = "project_budget_exceeded"
CODE_KEY_BUDGET = "key_budget_exceeded"


class HoldExists(ValueError):
    """``hold_open`` was called twice with the same ``request_id``."""


class HoldNotFound(LookupError):
    """``hold_settle`` was called for a ``request_id`` that has no hold."""


def month_start(now: dt.datetime) -> dt.date:
    """The first day of ``now``'s UTC month (the unit of project budgets)."""
    return now.astimezone(dt.UTC).date().replace(day=1)


# --- open -------------------------------------------------------------------------------------


def _open_sql(*, defer_flush: bool) -> str:
    """The hold-opening statement; with ``defer_flush`` its commit does not wait for the disk
    (:data:`config.adb.DEFER_FLUSH`: the loop path, see :func:`ahold_open`)."""
    first, also = (f"{adb.DEFER_FLUSH}, ", f", {adb.DEFER_FLUSH_NAME}") if defer_flush else ("", "")
    return f"""
WITH {first}w AS (
    UPDATE {WALLET} SET held_nanos = held_nanos + %(amount)s::bigint, updated_at = %(now)s
     WHERE organization_id = %(org)s AND balance_nanos - held_nanos >= %(amount)s::bigint
    RETURNING id
), s AS (
    INSERT INTO {SPEND} (project_id, month, used_nanos, held_nanos)
    SELECT %(project)s::bigint, %(month)s::date, 0, %(amount)s::bigint
      FROM w  -- reading w locks the wallet row first: the same order as settlement (no deadlock)
     WHERE %(project)s::bigint IS NOT NULL
       AND (%(budget)s::bigint IS NULL OR %(amount)s::bigint <= %(budget)s::bigint)
    ON CONFLICT (project_id, month) DO UPDATE
       SET held_nanos = {SPEND}.held_nanos + EXCLUDED.held_nanos
     WHERE %(budget)s::bigint IS NULL
        OR {SPEND}.used_nanos + {SPEND}.held_nanos + EXCLUDED.held_nanos <= %(budget)s::bigint
    RETURNING 1
)
INSERT INTO {HOLD} (wallet_id, project_id, api_key_id, request_id, amount_nanos, status,
                    month, created_at, expires_at)
SELECT w.id, %(project)s::bigint, %(key)s::bigint, %(rid)s::varchar, %(amount)s::bigint, 'open',
       %(month)s::date, %(now)s::timestamptz, %(expires)s::timestamptz
  FROM w{also}
 WHERE %(project)s::bigint IS NULL OR EXISTS (SELECT 1 FROM s)
RETURNING id
"""


_OPEN_CTE = _open_sql(defer_flush=False)
# The same statement for the event loop (config.adb: asyncpg's positional parameters). The
# casts above are for asyncpg, which types each parameter when it prepares the statement.
_OPEN_ASYNC = adb.Statement.compile(_open_sql(defer_flush=True))


@dataclass(frozen=True, slots=True)
class _OpenParams:
    org: int
    project: int | None
    key: int | None
    rid: str
    amount: int
    budget: int | None
    month: dt.date
    now: dt.datetime
    expires: dt.datetime

    @classmethod
    def at(
        cls,
        now: dt.datetime,
        *,
        org: int,
        project: int | None,
        key: int | None,
        rid: str,
        amount: int,
        budget: int | None,
        ttl_s: int,
    ) -> _OpenParams:
        """The parameters of a hold opened at ``now`` that expires ``ttl_s`` later."""
        return cls(
            org=org,
            project=project,
            key=key,
            rid=rid,
            amount=amount,
            budget=budget,
            month=month_start(now),
            now=now,
            expires=now + dt.timedelta(seconds=ttl_s),
        )

    def values(self) -> dict[str, Any]:
        """The named parameters of :data:`_OPEN_CTE`."""
        return {name: getattr(self, name) for name in _OpenParams.__slots__}


def _open_one_statement(p: _OpenParams) -> bool:
    """PostgreSQL: wallet reservation, budget check and hold row in one statement.

    Both conditional writes lock their row and re-check it against the latest committed
    version (``UPDATE`` re-evaluation, ``ON CONFLICT DO UPDATE``), so concurrent holds are
    serialized per wallet and per project. If one of them refuses, no hold row is inserted
    and the caller rolls the transaction back (undoing the other).
    """
    with connection.cursor() as cur:
        cur.execute(_OPEN_CTE, p.values())
        return cur.fetchone() is not None


def _open_steps(p: _OpenParams) -> bool:
    """Any database: the same writes as :func:`_open_one_statement`, as up to three."""
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {WALLET} SET held_nanos = held_nanos + %s, updated_at = %s"
            " WHERE organization_id = %s AND balance_nanos - held_nanos >= %s RETURNING id",
            [p.amount, p.now, p.org, p.amount],
        )
        row = cur.fetchone()
        if row is None:
            return False
        if p.project is not None:
            budget = p.budget
            cur.execute(
                f"INSERT INTO {SPEND} (project_id, month, used_nanos, held_nanos)"
                " SELECT %s, %s, 0, %s WHERE %s IS NULL OR %s <= %s"
                " ON CONFLICT (project_id, month) DO UPDATE"
                f" SET held_nanos = {SPEND}.held_nanos + excluded.held_nanos"
                f" WHERE %s IS NULL OR {SPEND}.used_nanos + {SPEND}.held_nanos"
                " + excluded.held_nanos <= %s RETURNING 1",
                [p.project, p.month, p.amount, budget, p.amount, budget, budget, budget],
            )
            if cur.fetchone() is None:
                return False
    Hold.objects.create(
        wallet_id=row[0],
        project_id=p.project,
        api_key_id=p.key,
        request_id=p.rid,
        amount_nanos=p.amount,
        month=p.month,
        created_at=p.now,
        expires_at=p.expires,
    )
    return True


def _use_one_statement() -> bool:
    """Whether :func:`_open_one_statement` applies (PostgreSQL); tests patch it to compare."""
    return connection.vendor == "postgresql"


class _Refused(Exception):
    pass


# --- the API key's budget (only for keys that have one: no query otherwise) -------------------

_KEY_SPENT = f"""
SELECT CAST(COALESCE(SUM(CASE WHEN status = 'open' THEN amount_nanos
                              ELSE COALESCE(captured_nanos, 0) END), 0) AS BIGINT)
  FROM {HOLD}
 WHERE api_key_id = %s AND month = %s
"""
_KEY_SPENT_ASYNC = adb.Statement.compile(_KEY_SPENT)


def _key_budget_check(*, key_id: int, month: dt.date, amount_nanos: int, budget_nanos: int) -> None:
    """Refuse the hold just written if the key's month now exceeds ``budget_nanos``.

    Must run in the transaction that opened the hold, *after* it: that statement locked the
    organization's wallet row until commit, and every hold of this key is on that wallet, so
    concurrent holds of the key are serialized here. This is a new statement, so under READ
    COMMITTED it sees every hold committed before the lock was granted (a sum in the opening
    statement itself would read that statement's older snapshot and could let two holds pass
    together). The sum counts this hold (same transaction): settled holds at what they
    charged, open ones at their amount, expired ones at nothing. Raises ``InsufficientQuota``
    (``key_budget_exceeded``); the caller's ``atomic`` block then rolls the hold back.
    """
    with connection.cursor() as cur:
        cur.execute(_KEY_SPENT, [key_id, month])
        (spent,) = cur.fetchone()
    if spent > budget_nanos:
        raise _key_budget_refusal(spent=spent, amount_nanos=amount_nanos, budget_nanos=budget_nanos)


def _key_budget_refusal(*, spent: int, amount_nanos: int, budget_nanos: int) -> InsufficientQuota:
    """The 402 for a key whose month, this hold included, came to ``spent`` > its budget."""
    left = max(budget_nanos - (spent - amount_nanos), 0)
    return InsufficientQuota(
        "This request would exceed this API key's monthly budget of "
        f"${nanos_to_usd_str(budget_nanos)} (${nanos_to_usd_str(left)} left this month). "
        "Raise the key's budget or wait for the next month.",
        code=CODE_KEY_BUDGET,
        available_nanos=left,
    )


def _refusal(
    *,
    organization_id: int,
    project_id: int | None,
    month: dt.date,
    amount_nanos: int,
    budget_nanos: int | None,
) -> InsufficientQuota:
    """Which limit refused the hold (read after the rollback; only the error path pays it).

    The exception's ``available_nanos`` is what a hold could reserve right now: the wallet's
    available balance, or for a budget refusal the smaller of that and what is left of the
    project's monthly budget.
    """
    available = (
        Wallet.objects.filter(organization_id=organization_id)
        .values_list("balance_nanos", "held_nanos")
        .first()
    )
    avail = max(available[0] - available[1], 0) if available else 0
    if avail >= amount_nanos and budget_nanos is not None:
        spent = (
            ProjectSpend.objects.filter(project_id=project_id, month=month)
            .values_list("used_nanos", "held_nanos")
            .first()
            if project_id is not None
            else None
        )
        left = max(budget_nanos - (sum(spent) if spent else 0), 0)
        return InsufficientQuota(
            "This request would exceed the project's monthly budget of "
            f"${nanos_to_usd_str(budget_nanos)}. Raise the project's budget in the dashboard "
            "or wait for the next month.",
            code=CODE_BUDGET,
            available_nanos=min(avail, left),
        )
    return InsufficientQuota(
        "You exceeded your current quota: this request may cost up to "
        f"${nanos_to_usd_str(amount_nanos)} and your organization's available balance is "
        f"${nanos_to_usd_str(avail)}. Add credit in the dashboard to continue.",
        code=CODE_WALLET,
        available_nanos=avail,
    )


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
    """Reserve ``amount_nanos`` for ``request_id``; see the module docstring for the contract.

    Raises ``InsufficientQuota`` (``insufficient_quota`` / ``project_budget_exceeded`` /
    ``key_budget_exceeded``) with nothing written, or :class:`HoldExists`. ``budget_nanos`` is
    the project's monthly budget, ``key_budget_nanos`` the API key's (``None`` = no budget; a
    key budget costs one more query, only for keys that have one).
    """
    if amount_nanos < 0:
        raise ValueError("amount_nanos must be >= 0")
    params = _OpenParams.at(
        timezone.now(),
        org=organization_id,
        project=project_id,
        key=api_key_id,
        rid=request_id,
        amount=amount_nanos,
        budget=budget_nanos,
        ttl_s=ttl_s,
    )
    one = _use_one_statement()
    try:
        with transaction.atomic(durable=True):
            ok = _open_one_statement(params) if one else _open_steps(params)
            if not ok:
                raise _Refused
            if key_budget_nanos is not None and api_key_id is not None:
                _key_budget_check(
                    key_id=api_key_id,
                    month=params.month,
                    amount_nanos=amount_nanos,
                    budget_nanos=key_budget_nanos,
                )
    except _Refused:
        raise _refusal(
            organization_id=organization_id,
            project_id=project_id,
            month=params.month,
            amount_nanos=amount_nanos,
            budget_nanos=budget_nanos,
        ) from None
    except IntegrityError as exc:
        if Hold.objects.filter(request_id=request_id).exists():
            raise HoldExists(f"a hold for request {request_id} already exists") from exc
        raise


# --- settle -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Claimed:
    wallet_id: int
    project_id: int | None
    api_key_id: int | None
    amount_nanos: int
    captured_nanos: int
    month: dt.date


def _claim(*, request_id: str, actual_nanos: int, from_status: HoldStatus) -> _Claimed | None:
    """``from_status → settled`` on the hold in one conditional UPDATE (the exactly-once point)."""
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {HOLD} SET status = %s,"
            " captured_nanos = CASE WHEN %s < amount_nanos THEN %s ELSE amount_nanos END,"
            " closed_at = %s"
            " WHERE request_id = %s AND status = %s AND captured_nanos IS NULL"
            " RETURNING wallet_id, project_id, api_key_id, amount_nanos, captured_nanos, month",
            [
                HoldStatus.SETTLED,
                actual_nanos,
                actual_nanos,
                timezone.now(),
                request_id,
                from_status,
            ],
        )
        row = cur.fetchone()
    return None if row is None else _Claimed(*row)


def _settle_sql(*, pre: str | None = None, defer_flush: bool = False) -> str:
    """The open-hold settlement as one statement; ``pre`` (data-modifying SQL, named
    parameters) is written by the same statement, and ``defer_flush`` makes its commit not wait
    for the disk (:data:`config.adb.DEFER_FLUSH`; :func:`asettle` waits with
    :func:`config.adb.flush`)."""
    first = (f"{adb.DEFER_FLUSH}, " if defer_flush else "") + (f"pre AS ({pre}), " if pre else "")
    also = f", {adb.DEFER_FLUSH_NAME}" if defer_flush else ""
    return f"""
WITH {first}h AS (
    UPDATE {HOLD}
       SET status = 'settled', closed_at = %(now)s,
           captured_nanos = CASE WHEN %(actual)s::bigint < amount_nanos THEN %(actual)s::bigint
                                 ELSE amount_nanos END
     WHERE request_id = %(rid)s AND status = 'open' AND captured_nanos IS NULL
    RETURNING wallet_id, project_id, api_key_id, amount_nanos, captured_nanos, month
), w AS (
    UPDATE {WALLET} AS wl
       SET balance_nanos = wl.balance_nanos - h.captured_nanos,
           held_nanos = wl.held_nanos - h.amount_nanos,
           auto_recharge_armed = CASE
               WHEN wl.balance_nanos - h.captured_nanos >= wl.auto_recharge_threshold_nanos
               THEN TRUE ELSE wl.auto_recharge_armed END,
           updated_at = %(now)s
      FROM h
     WHERE wl.id = h.wallet_id
    RETURNING wl.id, wl.balance_nanos,
              (wl.auto_recharge_enabled AND wl.auto_recharge_armed
               AND wl.balance_nanos < wl.auto_recharge_threshold_nanos) AS recharge_due
), s AS (
    UPDATE {SPEND} AS sp
       SET held_nanos = sp.held_nanos - h.amount_nanos,
           used_nanos = sp.used_nanos + h.captured_nanos
      FROM h, w  -- reading w first keeps the lock order of hold_open: wallet, then spend
     WHERE sp.project_id = h.project_id AND sp.month = h.month
    RETURNING 1
), l AS (
    INSERT INTO {LEDGER} (wallet_id, kind, amount_nanos, balance_after_nanos, idempotency_key,
                          project_id, api_key_id, request_id, external_ref, description,
                          created_at)
    SELECT w.id, 'usage', -h.captured_nanos, w.balance_nanos, 'usage:' || %(rid)s::varchar,
           h.project_id, h.api_key_id, %(rid)s::varchar, '', %(desc)s::varchar,
           %(now)s::timestamptz
      FROM h, w
     WHERE h.captured_nanos > 0
    RETURNING 1
)
SELECT h.captured_nanos, w.id, w.recharge_due, (SELECT count(*) FROM s), (SELECT count(*) FROM l)
  FROM h, w{also}
"""


_SETTLE_CTE = _settle_sql()


def _settle_one_statement(*, request_id: str, actual_nanos: int, description: str) -> int | None:
    """PostgreSQL: the open-hold settlement (hold, wallet, project spend, ledger) as ONE statement.

    Locks the hold row, then the wallet, then the project's spend row (the order of
    :func:`hold_open`). Returns what was charged, or ``None`` when no open hold matched.
    """
    with connection.cursor() as cur:
        cur.execute(
            _SETTLE_CTE,
            {
                "rid": request_id,
                "actual": actual_nanos,
                "desc": description[:255],
                "now": timezone.now(),
            },
        )
        row = cur.fetchone()
    if row is None:
        return None
    charged, wallet_id, recharge_due = int(row[0]), int(row[1]), bool(row[2])
    if recharge_due:
        auto_recharge_on_commit(wallet_id=wallet_id)
    return charged


def _late_cap(*, request_id: str, claimed: _Claimed) -> tuple[int, str]:
    """A settlement after expiry: charge at most what the wallet has available now.

    The hold no longer reserves anything, so ``min(actual, hold)`` could overdraw the wallet
    (another call may have spent the released money). Locks the wallet (after the hold row:
    the lock order of every settlement) and returns ``(charged, note)``; when less than owed
    can be collected, the hold's ``captured_nanos`` is lowered to what was charged and ``note``
    says how much went uncollected.
    """
    owed = claimed.captured_nanos
    balance, held = (
        Wallet.objects.select_for_update()
        .filter(pk=claimed.wallet_id)
        .values_list("balance_nanos", "held_nanos")
        .get()
    )
    collectable = max(balance - held, 0)
    if owed <= collectable:
        return owed, ""
    Hold.objects.filter(request_id=request_id).update(captured_nanos=collectable)
    return collectable, (
        f"hold had expired: ${nanos_to_usd_str(owed - collectable)} of "
        f"${nanos_to_usd_str(owed)} uncollected (${nanos_to_usd_str(collectable)} available)"
    )


def _settle_in_tx(
    *, request_id: str, actual_nanos: int, description: str, one_statement: bool = True
) -> int | None:
    """The settlement's writes; must run inside a transaction. ``None``: no hold to settle."""
    if one_statement and _use_one_statement():
        charged = _settle_one_statement(
            request_id=request_id, actual_nanos=actual_nanos, description=description
        )
        if charged is not None:
            return charged
    claimed = _claim(request_id=request_id, actual_nanos=actual_nanos, from_status=HoldStatus.OPEN)
    late = False
    if claimed is None:
        claimed = _claim(
            request_id=request_id, actual_nanos=actual_nanos, from_status=HoldStatus.EXPIRED
        )
        late = True
    if claimed is None:
        return None
    held_delta = 0 if late else -claimed.amount_nanos
    charged, note = (
        _late_cap(request_id=request_id, claimed=claimed)
        if late and claimed.captured_nanos
        else (claimed.captured_nanos, "")
    )
    row = wallet_apply(wallet_id=claimed.wallet_id, balance_delta=-charged, held_delta=held_delta)
    if claimed.project_id is not None:
        with connection.cursor() as cur:
            cur.execute(
                f"UPDATE {SPEND} SET held_nanos = held_nanos + %s, used_nanos = used_nanos + %s"
                " WHERE project_id = %s AND month = %s",
                [held_delta, charged, claimed.project_id, claimed.month],
            )
    if charged or note:
        # A late settlement that could collect nothing still gets its (zero) usage entry: the
        # wallet's history shows the call and what went uncollected.
        text = description or ("usage (after hold expiry)" if late else "")
        if note:
            text = f"{text[: 255 - len(note) - 2]}; {note}" if text else note
        LedgerEntry.objects.create(
            wallet_id=claimed.wallet_id,
            kind=EntryKind.USAGE,
            amount_nanos=-charged,
            balance_after_nanos=row.balance_nanos,
            idempotency_key=f"usage:{request_id}",
            project_id=claimed.project_id,
            api_key_id=claimed.api_key_id,
            request_id=request_id,
            description=text[:255],
        )
    if row.auto_recharge_due:
        auto_recharge_on_commit(wallet_id=claimed.wallet_id)
    return charged


def hold_settle(*, request_id: str, actual_nanos: int, description: str = "") -> int:
    """Charge ``min(actual_nanos, hold)`` and release the hold; returns the nano-USD charged.

    All or nothing (hold transition, wallet, project spend, ledger entry), and exactly once: a
    second call — sequential or concurrent — writes nothing and returns what the first charged.
    Raises :class:`HoldNotFound` when ``request_id`` never had a hold.

    - **In autocommit** (no ``atomic`` around the call): on PostgreSQL a single statement for an
      open hold (its own transaction), else one durable ``atomic`` block.
    - **Inside the caller's** ``transaction.atomic()``: the same writes join the caller's
      transaction (the single statement on PostgreSQL, else a savepoint), so e.g. the request
      log row and the settlement commit together::

          with transaction.atomic():
              RequestLog(...).save()
              hold_settle(request_id=rid, actual_nanos=cost)

      They also roll back with it: if the caller's block fails after this returns, the hold is
      still open and the caller must settle again (e.g. without the log row). Until the caller
      commits, a concurrent settle of the same hold waits on the hold row, then finds it closed.

    A hold the sweeper already expired is charged at most what the wallet has available at
    that moment (the released reservation may have been spent); what could not be collected is
    noted in the ``usage`` entry's description and the hold's ``captured_nanos`` is what was
    charged.
    """
    if actual_nanos < 0:
        raise ValueError("actual_nanos must be >= 0")
    in_caller_tx = transaction.get_connection().in_atomic_block
    charged: int | None = None
    if _use_one_statement():
        # One statement: its own transaction in autocommit (no BEGIN/COMMIT round trips on the
        # hot path), or part of the caller's transaction.
        charged = _settle_one_statement(
            request_id=request_id, actual_nanos=actual_nanos, description=description
        )
    if charged is None:
        with transaction.atomic(durable=not in_caller_tx):
            charged = _settle_in_tx(
                request_id=request_id,
                actual_nanos=actual_nanos,
                description=description,
                one_statement=False,
            )
    if charged is not None:
        return charged
    hold = Hold.objects.filter(request_id=request_id).values_list("captured_nanos").first()
    if hold is None:
        raise HoldNotFound(f"no hold for request {request_id}")
    return hold[0] or 0


# --- renewal ----------------------------------------------------------------------------------


def holds_renew(*, request_ids: list[str], ttl_s: int) -> int:
    """Push back the expiry of the holds of ``request_ids`` that are still open; returns how many.

    Sets ``expires_at = now + ttl_s`` in one ``UPDATE``. A process that is still relaying a
    call renews its hold periodically (well within ``ttl_s``), so the sweeper only expires the
    holds of processes that died. Holds already settled or expired are left alone (a renewal
    never reopens a hold).
    """
    if ttl_s <= 0:
        raise ValueError("ttl_s must be > 0")
    if not request_ids:
        return 0
    expires = timezone.now() + dt.timedelta(seconds=ttl_s)
    return Hold.objects.filter(request_id__in=request_ids, status=HoldStatus.OPEN).update(
        expires_at=expires
    )


# --- expiry -----------------------------------------------------------------------------------


def hold_expire(*, hold_id: int) -> bool:
    """Release one expired open hold: a zero-amount ``hold_expired`` entry (with the hold's
    request id, project and key) shows it.

    One durable transaction; False when the hold was no longer open (settled meanwhile).
    """
    with transaction.atomic(durable=True):
        with connection.cursor() as cur:
            cur.execute(
                f"UPDATE {HOLD} SET status = %s, closed_at = %s WHERE id = %s AND status = %s"
                " RETURNING wallet_id, project_id, api_key_id, amount_nanos, month, request_id",
                [HoldStatus.EXPIRED, timezone.now(), hold_id, HoldStatus.OPEN],
            )
            row = cur.fetchone()
            if row is None:
                return False
            wallet_id, project_id, api_key_id, amount, month, request_id = row
            if project_id is not None:
                cur.execute(
                    f"UPDATE {SPEND} SET held_nanos = held_nanos - %s"
                    " WHERE project_id = %s AND month = %s",
                    [amount, project_id, month],
                )
        post_entry(
            wallet_id=wallet_id,
            amount_nanos=0,
            held_delta=-amount,
            kind=EntryKind.HOLD_EXPIRED,
            idempotency_key=f"hold_expired:{request_id}",
            project_id=project_id,
            api_key_id=api_key_id,
            request_id=request_id,
            description=f"Hold of ${nanos_to_usd_str(amount)} released after expiry",
        )
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


# --- async ------------------------------------------------------------------------------------


def _hold_open_thread(**kwargs: object) -> None:
    try:
        hold_open(**kwargs)  # type: ignore[arg-type]
    finally:
        close_old_connections()


def _hold_settle_thread(**kwargs: object) -> int:
    try:
        return hold_settle(**kwargs)  # type: ignore[arg-type]
    finally:
        close_old_connections()


def _holds_renew_thread(**kwargs: object) -> int:
    try:
        return holds_renew(**kwargs)  # type: ignore[arg-type]
    finally:
        close_old_connections()


_hold_open_async = sync_to_async(_hold_open_thread, thread_sensitive=False)
_hold_settle_async = sync_to_async(_hold_settle_thread, thread_sensitive=False)
_holds_renew_async = sync_to_async(_holds_renew_thread, thread_sensitive=False)


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
    """:func:`hold_open` for async code, same contract. On PostgreSQL the opening statement
    runs on the loop (:mod:`config.adb`: no thread hop, prepared once per connection); elsewhere,
    and for a refusal's explanation, in a worker thread.

    On the loop the hold commits without waiting for the disk (:data:`config.adb.DEFER_FLUSH`),
    so the wallet row is locked only while the statement runs. What a hold guards — that
    concurrent calls never reserve more than the wallet has — rests on the commit being
    visible, which it is at once. Durability follows with the call's settlement, which waits
    for the disk (:func:`asettle`) and so flushes the hold before it. Only a PostgreSQL crash
    within the flush delay (well under a second) can forget a hold, and then its reservation
    with it; the call in flight cannot settle against that database anyway.
    """
    if amount_nanos < 0:
        raise ValueError("amount_nanos must be >= 0")
    if not adb.enabled():
        await _hold_open_async(
            organization_id=organization_id,
            project_id=project_id,
            api_key_id=api_key_id,
            request_id=request_id,
            amount_nanos=amount_nanos,
            budget_nanos=budget_nanos,
            key_budget_nanos=key_budget_nanos,
            ttl_s=ttl_s,
        )
        return
    params = _OpenParams.at(
        timezone.now(),
        org=organization_id,
        project=project_id,
        key=api_key_id,
        rid=request_id,
        amount=amount_nanos,
        budget=budget_nanos,
        ttl_s=ttl_s,
    )
    values = params.values()
    try:
        if budget_nanos is None and key_budget_nanos is None:
            # Without a budget only the wallet can refuse, and then nothing is written: the
            # statement is its own transaction (no BEGIN/COMMIT round trips).
            async with adb.connection() as conn:
                if await adb.fetchrow(conn, _OPEN_ASYNC, values) is None:
                    raise _Refused
            return
        async with adb.transaction() as conn:
            if await adb.fetchrow(conn, _OPEN_ASYNC, values) is None:
                raise _Refused  # rolls back a wallet reservation the budget refused
            if key_budget_nanos is not None and api_key_id is not None:
                row = await adb.fetchrow(conn, _KEY_SPENT_ASYNC, [api_key_id, params.month])
                spent = int(row[0]) if row else 0
                if spent > key_budget_nanos:
                    raise _key_budget_refusal(
                        spent=spent, amount_nanos=amount_nanos, budget_nanos=key_budget_nanos
                    )
    except _Refused:
        raise await sync_to_async(_refusal_thread, thread_sensitive=False)(
            organization_id=organization_id,
            project_id=project_id,
            month=params.month,
            amount_nanos=amount_nanos,
            budget_nanos=budget_nanos,
        ) from None
    except adb.UniqueViolation as exc:
        raise HoldExists(f"a hold for request {request_id} already exists") from exc


def _refusal_thread(**kwargs: object) -> InsufficientQuota:
    try:
        return _refusal(**kwargs)  # type: ignore[arg-type]
    finally:
        close_old_connections()


@dataclass(frozen=True, slots=True)
class Settled:
    """What :func:`asettle` did: the nano-USD charged, and the wallet whose auto-recharge
    became due (``None`` when none did)."""

    charged: int
    recharge_wallet_id: int | None


@functools.cache
def _settle_after(statement: str | None) -> adb.Statement:
    """The settlement for :mod:`config.adb`, with ``statement`` (data-modifying, named
    parameters) run first in the same statement, its commit not waiting for the disk."""
    return adb.Statement.compile(_settle_sql(pre=statement, defer_flush=True))


async def asettle(
    conn: asyncpg.Connection,
    *,
    request_id: str,
    actual_nanos: int,
    description: str = "",
    before: tuple[str, dict[str, object]] | None = None,
) -> Settled | None:
    """Settle ``request_id``'s **open** hold on ``conn`` with the single statement
    :func:`hold_settle` uses on PostgreSQL (see its contract), in autocommit: the statement is
    its own transaction. It returns once the settlement is on disk, like a synchronous commit,
    but the wallet row is locked only while the statement runs, not while PostgreSQL flushes
    (:func:`config.adb.flush`): calls of one organization do not queue behind each other's
    disk writes.

    ``before`` is the caller's own write, ``(sql, params)`` with named parameters (e.g. the
    request-log row): it runs inside the same statement, so both commit together or neither
    does. It runs whether or not a hold matched.

    ``None`` when no open hold matched (settled already, expired, or never opened): the caller
    then uses :func:`hold_settle`, which handles each of those (``before`` is written then).
    After it, the caller passes ``recharge_wallet_id`` to :func:`arequest_recharge`.
    """
    params: dict[str, object] = {
        "rid": request_id,
        "actual": actual_nanos,
        "desc": description[:255],
        "now": timezone.now(),
    }
    if before is not None:
        params.update(before[1])
    row = await adb.fetchrow(conn, _settle_after(before[0] if before is not None else None), params)
    # The statement committed without waiting for the disk, so the wallet row's lock was held
    # only while it ran; the caller answers only once the settlement is durable.
    try:
        await adb.flush(conn)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        # Committed and visible; only the wait failed (the database is going away). Report
        # what was done: settling again would find the hold closed, re-inserting ``before``
        # would fail on its unique key.
        log.warning("settlement of %s committed, its flush failed: %r", request_id, exc)
    if row is None:
        return None
    return Settled(charged=int(row[0]), recharge_wallet_id=int(row[1]) if row[2] else None)


async def arequest_recharge(wallet_id: int) -> None:
    """Ask the worker to consider an auto-recharge of ``wallet_id`` (after the settlement that
    made it due has committed; the worker re-checks the wallet under its lock)."""
    await sync_to_async(auto_recharge_enqueue, thread_sensitive=False)(wallet_id)


async def ahold_settle(*, request_id: str, actual_nanos: int, description: str = "") -> int:
    """:func:`hold_settle` for async code (runs in a worker thread; same contract)."""
    return await _hold_settle_async(
        request_id=request_id, actual_nanos=actual_nanos, description=description
    )


async def aholds_renew(*, request_ids: list[str], ttl_s: int) -> int:
    """:func:`holds_renew` for async code (runs in a worker thread; same contract)."""
    return await _holds_renew_async(request_ids=list(request_ids), ttl_s=ttl_s)
