"""Money invariants, checked by ``manage.py billing_audit``, the ``billing.audit`` and
``billing.audit_full`` beat tasks and the tests.

:func:`audit_findings` checks, read-only:

- ``balance``: each wallet's balance == the sum of its ledger entries;
- ``newest_entry``: the newest entry's ``balance_after_nanos`` == the wallet's balance;
- ``chain``: per wallet in pk order, each entry's ``balance_after_nanos`` == the previous
  entry's ``balance_after_nanos`` + its own amount (the first entry: its amount) — catches
  edited or inserted rows even where the sums still agree;
- ``held``: each wallet's ``held_nanos`` == the sum of its open holds;
- ``spend``: each project's monthly ``held_nanos`` == the sum of its open holds;
- ``stuck_hold``: holds still open more than :data:`EXPIRY_GRACE_S` after their ``expires_at``
  (the sweeper is not running, or is failing);
- ``capture``: settled holds, and expired holds charged to their checkpoint, whose
  ``captured_nanos`` differs from their ``usage`` entry (none when 0 was captured);
- ``expired_alive``: holds that expired while the process that opened them was alive (it was
  seen after the expiry: :class:`billing.models.Process`) — a renewal or a settlement that did
  not reach the database, so a call served and perhaps never charged. A process that died
  (SIGKILL, a crash) is never seen again; its holds are no finding. The sweeper's
  ``abandoned`` row of such a call says ``settlement_lost``, not ``process_died``;
- ``journal``: settlements still waiting in a journal of this host (:mod:`billing.journal`):
  calls answered whose charge is not in PostgreSQL yet;
- ``negative_cost``: request logs with ``cost_nanos < 0``;
- ``log_without_entry``: request logs with ``cost_nanos > 0`` and no ``usage`` entry of that
  ``request_id``, or one of another amount — except a settlement after the hold expired that
  could only collect what the wallet had left (its hold had a ``hold_expired`` entry and
  captured exactly what the entry charged; the entry's description says what went uncollected);
- ``entry_without_log``: ``usage`` entries with no request log of that ``request_id`` —
  among entries younger than their organization's request-log retention
  (``Organization.request_log_retention_days``, else ``INFRAI_REQUEST_LOG_RETENTION_DAYS``)
  less :data:`RETENTION_MARGIN`: older calls' rows are deleted by design
  (:mod:`inference.partitions`), their entries stay.

The request log belongs to the inference app; billing must not import inference modules, so
its model is looked up by name (``apps.get_model("inference", "RequestLog")``) and the three
request-log checks are skipped when that app is not installed.

Every check is one query, or two in a window (its own rows, and the older ones its entries
reach), that returns only the offending rows (aggregates, joins, correlated subqueries and a
window function on the database, never a query per row), at most :data:`LIMIT` each; all run
in one REPEATABLE READ snapshot on PostgreSQL, so concurrent settlements cannot make the
checks disagree with each other.

**The full audit and the windowed one.** ``audit_findings()`` reads the whole books: every
entry, hold and request-log row there is — ~25 s for 5 M calls on the bench machine, growing
with the history (``docs/performance.md``, "The money audit at scale").
``audit_findings(since=…)`` reads what was *written* from ``since`` on, plus the books' present
state: the ``billing.audit`` beat task runs it every 5 minutes with ``since`` = when the
previous audit began, so its cost follows the last hour's writes, not the history (~0.3 s on
the bench at 1 M calls a day: ~125× less than the full audit it replaced every 5 minutes).
``billing.audit_full`` (daily) and ``manage.py billing_audit`` run the full audit; the
command's ``--since`` the windowed one. The window:

- *State* is read whole, exactly as by the full audit: wallets, open holds, the month
  counters, journals — ``held``, ``spend``, ``stuck_hold``, ``journal``, ``newest_entry``
  (one index probe a wallet; open holds summed once through their status index).
- *The ledger* is append-only: a row, once committed, never changes (migration ``0003``'s
  trigger refuses UPDATE, DELETE and TRUNCATE to every role but the table's owner). The window
  holds the entries above its *anchor*, the newest entry created before ``since`` less
  :data:`WINDOW_SLACK` (an entry commits at most that long after its ``created_at``). The
  anchor is found by reading the primary key backwards from the newest entry until one is
  older — no index on ``created_at``: ids and ``created_at`` are both taken when the row is
  written, so this reads the window's rows and no more (1.5 ms on the bench, where a scan of
  ``created_at`` takes 500 ms). ``chain`` checks each window
  entry against the previous entry of its wallet — for a wallet's first, its last entry at or
  below the anchor — and ``balance`` checks each wallet's balance against that entry's
  ``balance_after_nanos`` plus the window's amounts. Both are exact by induction: the previous
  audits checked every entry up to the anchor (consecutive windows overlap by the slack), and
  nothing below it can change since.
- *Holds* change after they are written (settled, expired, settled late), but every change
  that moves money writes a ledger entry with the hold's request id in the same statement
  (``usage``, ``hold_expired``). The window holds the holds created since ``since`` less
  :func:`window_margin` (an hour by default: a hold closes at most that long after it opened
  but for late settlements and expiries, which write entries), found like the ledger's
  anchor, and the older holds of the window's entries (one probe of ``request_id`` each):
  ``capture`` and ``expired_alive`` read those.
- *Request-log rows* are keyed by the call's arrival (``created_at``: their partition) and
  written when it ends — a stream up to ``INFRAI_MAX_STREAM_S`` later, the sweeper's
  ``abandoned`` row after the hold's expiry, a journal replay whenever PostgreSQL is back. The
  window holds the rows created since ``since`` less :func:`window_margin` (their last
  partition, through the BRIN index on ``created_at``) and the rows of the window's ``usage``
  entries whatever their age (a late settlement of an old call: its entry is new, its row in
  an old partition). ``entry_without_log`` looks for each window entry's row among the rows
  created within the margin of the entry (one or two partitions, pruned as the query runs)
  and, only where none is there, in every partition — which also finds the old rows of the
  second kind; ``negative_cost`` and ``log_without_entry`` read both kinds.

A fault written in the window is found by both audits alike (``tests/billing/test_audit.py``
seeds each check's fault and runs both). Since each routine run's window starts where the
previous run's began, every write is read by at least one routine run; what the windows cannot
see is a fault written *into the past*, which the daily full audit finds:

- an entry edited or deleted below the anchor (``chain``): the trigger refuses it to every
  role but the table's owner or a superuser — who can also disable the trigger, so no check
  inside the database can be trusted against them — and the application connects as neither
  (``docs/billing.md``, "Append-only ledger and database roles");
- a request-log row written more than the margin after its call arrived *without* a usage
  entry written with it (``log_without_entry``), or a cost changed later by hand: the request
  path writes a call's row and its settlement in one transaction, so a late row brings its
  entry into the window;
- a hold closed more than the margin after it opened without a ledger entry (``capture``): a
  settlement of nothing, which only a batch's reservation makes at the batch's end; what it
  did to the wallet and the month counter is still checked (``held``, ``spend``: state);
- a process seen alive more than :data:`WINDOW_SLACK` after its hold expired
  (``expired_alive``): a live process says so every few seconds;
- usage entries whose row retention deleted are skipped by both (``entry_without_log``).

A finding of history leaves the window once older than it; the beat task keeps it in the
metric until a full audit no longer finds it (:mod:`billing.tasks`). The window is one of time
rather than of ids (the previous run's newest ids) because what is written late is bounded in
time — the margins — and the request log is keyed by time; the ledger's and the holds' ids
come from those times through their anchors. No index was added: a new one on the ledger
would be written by every call's settlement, and the anchors cost milliseconds without one.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import (
    BigIntegerField,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    Value,
    Window,
)
from django.db.models.functions import Coalesce, Concat, Lag
from django.utils import timezone

from billing import journal
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Process, ProjectSpend, Wallet

#: An open hold is reported only this long after its ``expires_at`` (the sweeper runs every
#: minute; a hold it is about to release is not a finding).
EXPIRY_GRACE_S = 120
#: At most this many findings per check (the rest are summarised in one line).
LIMIT = 50
# An entry is expected to have its request log until this long before its organization's
# retention ends (the log's row carries the call's arrival, the entry its settlement: up to a
# stream's longest run later, and the retention task runs hourly).
RETENTION_MARGIN = dt.timedelta(days=1)
#: How long after its ``created_at`` a ledger entry may still commit (a statement waiting on a
#: wallet's lock, a caller's open transaction, the clocks of two hosts): a window reads entries
#: from this long before its ``since``. Also the part of :func:`window_margin` for the sweeper.
WINDOW_SLACK = dt.timedelta(minutes=15)

#: Checks that compare the ledger with the inference app's request log.
LOG_CHECKS = frozenset({"negative_cost", "log_without_entry", "entry_without_log"})
#: Checks of history (entries, holds, request-log rows): a windowed audit sees the window's
#: part of it. The others check the books' present state, which every audit reads whole.
HISTORY_CHECKS = frozenset({"chain", "capture", "expired_alive", *LOG_CHECKS})
#: Every check, in the order they run (what the metric labels).
CHECKS = (
    "balance",
    "held",
    "newest_entry",
    "chain",
    "spend",
    "stuck_hold",
    "capture",
    "expired_alive",
    *sorted(LOG_CHECKS),
    "journal",
)


_ZERO = Value(0, output_field=BigIntegerField())
_NONE = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # a probe's answer: no request log


def window_margin() -> dt.timedelta:
    """How long after its own time a call's request-log row or hold may still be written:
    ``INFRAI_MAX_STREAM_S`` (a stream's row and settlement, keyed by its arrival) +
    ``INFRAI_HOLD_TTL_S`` (an expiry, after the last renewal) + :data:`WINDOW_SLACK` (the
    sweeper's minute, :data:`EXPIRY_GRACE_S`, the ``abandoned`` row's 10 minutes of journal
    grace, open transactions). One hour by default."""
    seconds = float(settings.INFRAI_MAX_STREAM_S) + float(settings.INFRAI_HOLD_TTL_S)
    return dt.timedelta(seconds=seconds) + WINDOW_SLACK


@dataclass(frozen=True, slots=True)
class Finding:
    """One broken invariant: which ``check`` and what exactly (ids and amounts in nano-USD)."""

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


@dataclass(frozen=True, slots=True)
class AuditWindow:
    """What a windowed audit of the writes since ``since`` reads (the module's docstring):
    ledger entries above ``entry_id`` (the newest created before ``since`` less
    :data:`WINDOW_SLACK`), holds above ``hold_id`` (the newest created before ``rows_since``)
    and the older holds ``touched`` (ids) by those entries, request-log rows created from
    ``rows_since`` (``since`` less :func:`window_margin`) and the older rows of those
    entries."""

    since: dt.datetime
    rows_since: dt.datetime
    entry_id: int
    hold_id: int
    touched: tuple[int, ...]

    def __str__(self) -> str:
        return (
            f"writes since {self.since:%Y-%m-%d %H:%M:%S} UTC: entries after #{self.entry_id}, "
            f"holds after #{self.hold_id} (and {len(self.touched)} older ones those entries "
            f"settled), request-log rows from {self.rows_since:%H:%M:%S}"
        )


@dataclass
class AuditReport:
    """What one audit found. ``entries``: the ledger entries it read (all, or the window's);
    ``window``: ``None`` for the full audit; ``timings_s``: seconds per step (each step runs
    the checks its name lists)."""

    wallets: int = 0
    entries: int = 0
    open_holds: int = 0
    findings: list[Finding] = field(default_factory=list)
    window: AuditWindow | None = None
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def drift(self) -> list[str]:
        """Every finding as a line (empty: the books are clean)."""
        return [str(f) for f in self.findings]

    @property
    def money(self) -> list[str]:
        """The findings about wallets, ledger, holds and spend alone (not the request log):
        what a test that settles holds without writing request logs can assert on."""
        return [str(f) for f in self.findings if f.check not in LOG_CHECKS]


def _add(report: AuditReport, check: str, rows: Iterable[Any], line: Any, *, whole: bool) -> None:
    """Append one finding per row of ``rows``' querysets (or lists), in order: at most
    :data:`LIMIT` in all, then one summary line.

    ``whole``: each query reads a bounded part of the books (a window, or one row a wallet):
    it is run without a ``LIMIT`` and cut here. A ``LIMIT`` makes PostgreSQL prefer walking
    an index in the ``ORDER BY``'s order, filtering row by row, expecting to stop early —
    through the whole table when, as on healthy books, no row matches. Otherwise (the full
    audit reads everything anyway) at most ``LIMIT + 1`` rows of each are read."""
    n = 0
    for queryset in rows:
        for row in queryset if whole else queryset[: LIMIT + 1 - n]:
            if n == LIMIT:
                report.findings.append(Finding(check, f"more than {LIMIT} rows; only these listed"))
                return
            report.findings.append(Finding(check, line(row)))
            n += 1


def _charged() -> Subquery:
    """The nano-USD the ``usage`` entry of the outer row's ``request_id`` charged (its amount,
    negated; NULL when there is none)."""
    usage = LedgerEntry.objects.filter(kind=EntryKind.USAGE, request_id=OuterRef("request_id"))
    return Subquery(
        usage.annotate(c=_ZERO - F("amount_nanos")).values("c")[:1],
        output_field=BigIntegerField(),
    )


def _last_id_before(model: type[models.Model], moment: dt.datetime) -> int:
    """The id of ``model``'s newest row created before ``moment`` (0: none): its primary key
    read backwards from the newest row until one is older — the rows since ``moment`` and no
    more, as ids and ``created_at`` are both taken when a row is written."""
    pk = (
        model._default_manager.filter(created_at__lt=moment)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    return int(pk or 0)


def _window(since: dt.datetime) -> AuditWindow:
    rows_since = since - window_margin()
    entry_id = _last_id_before(LedgerEntry, since - WINDOW_SLACK)
    hold_id = _last_id_before(Hold, rows_since)
    # The window's entries that settled (or expired) a hold opened before the window. A
    # subquery a row (one probe of the unique index), not a join the planner could turn into
    # a scan of every hold.
    settled = LedgerEntry.objects.filter(
        pk__gt=entry_id, kind__in=(EntryKind.USAGE, EntryKind.HOLD_EXPIRED)
    ).annotate(
        hold=Subquery(Hold.objects.filter(request_id=OuterRef("request_id")).values("pk")[:1])
    )
    touched = settled.filter(hold__lte=hold_id).values_list("hold", flat=True)
    return AuditWindow(
        since=since,
        rows_since=rows_since,
        entry_id=entry_id,
        hold_id=hold_id,
        touched=tuple(sorted(set(touched))),
    )


def _in_window(holds: models.QuerySet[Hold], window: AuditWindow | None) -> list[Any]:
    """``holds`` as querysets in pk order: all of them (the full audit), or the window's —
    those its entries touched, then those opened in it."""
    if window is None:
        return [holds]
    return [holds.filter(pk__in=window.touched), holds.filter(pk__gt=window.hold_id)]


_WALLET, _LEDGER, _HOLD = (m._meta.db_table for m in (Wallet, LedgerEntry, Hold))

# Each wallet's balance and held amount against its ledger, open holds and newest entry. The
# ledger and the open holds are each summed once (GROUP BY, not a sum a wallet: a wallet's
# own entries and holds are scattered over the tables), the newest entry is one probe of
# (wallet, -id) a wallet; the OFFSET 0 keeps PostgreSQL from evaluating the probes again in
# the outer conditions. The full audit sums every entry; a window, the entries above its
# anchor, on top of each wallet's last entry at or below it (``{anchored}``).
_WALLETS = f"""
SELECT id, organization_id, balance_nanos, held_nanos, ledger, open_held, newest FROM (
    SELECT w.id, w.organization_id, w.balance_nanos, w.held_nanos,
           {{anchored}} + COALESCE(l.amount, 0) AS ledger,
           COALESCE(o.amount, 0) AS open_held,
           (SELECT e.balance_after_nanos FROM {_LEDGER} AS e
             WHERE e.wallet_id = w.id ORDER BY e.id DESC LIMIT 1) AS newest
      FROM {_WALLET} AS w
      LEFT JOIN (SELECT wallet_id, SUM(amount_nanos) AS amount FROM {_LEDGER}
                  WHERE id > %(entry_id)s GROUP BY wallet_id) AS l ON l.wallet_id = w.id
      LEFT JOIN (SELECT wallet_id, SUM(amount_nanos) AS amount FROM {_HOLD}
                  WHERE status = %(open)s GROUP BY wallet_id) AS o ON o.wallet_id = w.id
    OFFSET 0
) AS t
WHERE balance_nanos <> ledger OR held_nanos <> open_held
   OR (newest IS NOT NULL AND newest <> balance_nanos)
ORDER BY id
"""
_ANCHORED = f"""COALESCE((SELECT e.balance_after_nanos FROM {_LEDGER} AS e
                 WHERE e.wallet_id = w.id AND e.id <= %(entry_id)s
                 ORDER BY e.id DESC LIMIT 1), 0)"""


def _wallets(report: AuditReport, window: AuditWindow | None) -> None:
    sql = _WALLETS.format(anchored="0" if window is None else _ANCHORED)
    params: dict[str, int | str] = {
        "entry_id": 0 if window is None else window.entry_id,
        "open": HoldStatus.OPEN.value,
    }
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()  # the offending wallets: at most one row a wallet
    findings: list[Finding] = []
    for pk, org, balance, held, ledger_sum, open_held, newest in rows:
        if balance != ledger_sum:
            findings.append(
                Finding(
                    "balance",
                    f"wallet {pk} (org {org}): balance {balance} != ledger sum {ledger_sum} "
                    f"(drift {balance - ledger_sum})",
                )
            )
        if held != open_held:
            findings.append(Finding("held", f"wallet {pk}: held {held} != open holds {open_held}"))
        if newest is not None and newest != balance:
            findings.append(
                Finding(
                    "newest_entry", f"wallet {pk}: newest entry says {newest}, balance is {balance}"
                )
            )
    for check in ("balance", "held", "newest_entry"):
        _add(
            report,
            check,
            [[f for f in findings if f.check == check]],
            lambda f: f.detail,
            whole=True,
        )


def _chain(report: AuditReport, window: AuditWindow | None) -> None:
    entries = LedgerEntry.objects.all()
    previous: Any = Window(
        Lag("balance_after_nanos"), partition_by=[F("wallet_id")], order_by=F("id").asc()
    )
    if window is not None:
        # The first entry of a wallet in the window follows the wallet's last entry at or
        # below the anchor (looked up only there: COALESCE stops at its first value).
        entries = entries.filter(pk__gt=window.entry_id)
        anchor = LedgerEntry.objects.filter(wallet=OuterRef("wallet_id"), pk__lte=window.entry_id)
        previous = Coalesce(
            previous, Subquery(anchor.order_by("-pk").values("balance_after_nanos")[:1])
        )
    rows = (
        entries.annotate(previous=previous)
        .annotate(expected=Coalesce(F("previous"), _ZERO) + F("amount_nanos"))
        .filter(~Q(balance_after_nanos=F("expected")))
        .order_by("wallet_id", "id")
        .values_list("wallet_id", "id", "balance_after_nanos", "previous", "amount_nanos")
    )
    _add(
        report,
        "chain",
        [rows],
        lambda r: (
            f"wallet {r[0]} entry {r[1]}: balance_after {r[2]} != previous {r[3] or 0} "
            f"+ amount {r[4]}"
        ),
        whole=window is not None,
    )


# Each project's month counter against its open holds, summed once (the table holds a row a
# project and month). A FULL JOIN: counters with no open hold, and open holds with no counter
# (``s.held_nanos`` NULL).
_SPEND = f"""
SELECT COALESCE(s.project_id, o.project_id), COALESCE(s.month, o.month), s.held_nanos,
       COALESCE(o.held, 0)
  FROM {ProjectSpend._meta.db_table} AS s
  FULL JOIN (SELECT project_id, month, SUM(amount_nanos) AS held
               FROM {_HOLD}
              WHERE status = %s AND project_id IS NOT NULL
              GROUP BY project_id, month) AS o
         ON o.project_id = s.project_id AND o.month = s.month
 WHERE s.project_id IS NULL OR s.held_nanos <> COALESCE(o.held, 0)
 ORDER BY 1, 2
"""


def _spend(report: AuditReport) -> None:
    with connection.cursor() as cur:
        cur.execute(_SPEND, [HoldStatus.OPEN.value])
        rows = cur.fetchall()
    _add(
        report,
        "spend",
        [rows],
        lambda r: (
            f"project {r[0]} {r[1]:%Y-%m}: {r[3]} held, no spend row"
            if r[2] is None
            else f"project {r[0]} {r[1]:%Y-%m}: held {r[2]} != open holds {r[3]}"
        ),
        whole=True,
    )


def _stuck_holds(report: AuditReport, now: dt.datetime) -> None:
    stuck = (
        Hold.objects.filter(
            status=HoldStatus.OPEN, expires_at__lt=now - dt.timedelta(seconds=EXPIRY_GRACE_S)
        )
        .order_by("expires_at")
        .values_list("request_id", "wallet_id", "amount_nanos", "expires_at")
    )
    _add(
        report,
        "stuck_hold",
        [stuck],
        lambda r: (
            f"hold {r[0]} (wallet {r[1]}, {r[2]}) open {int((now - r[3]).total_seconds())} s "
            "past its expiry"
        ),
        whole=False,  # the (status, expires_at) index, in its order
    )


def _capture(report: AuditReport, window: AuditWindow | None) -> None:
    closed = Hold.objects.filter(
        Q(status=HoldStatus.SETTLED) | Q(status=HoldStatus.EXPIRED, captured_nanos__isnull=False)
    )
    _add(
        report,
        "capture",
        [
            holds.annotate(
                charged=Coalesce(_charged(), _ZERO),
                captured=Coalesce(F("captured_nanos"), _ZERO),
            )
            .exclude(captured=F("charged"))
            .order_by("pk")
            .values_list("request_id", "captured", "charged")
            for holds in _in_window(closed, window)
        ],
        lambda r: f"hold {r[0]}: captured {r[1]} != usage entry {r[2]}",
        whole=window is not None,
    )


def _expired_alive(report: AuditReport, window: AuditWindow | None) -> None:
    seen = Process.objects.filter(token=OuterRef("process"), seen_at__gt=OuterRef("closed_at"))
    expired = Hold.objects.filter(status=HoldStatus.EXPIRED).exclude(process="")
    _add(
        report,
        "expired_alive",
        [
            holds.annotate(seen_at=Subquery(seen.values("seen_at")[:1]))
            .filter(seen_at__isnull=False)
            .order_by("pk")
            .values_list("request_id", "process", "amount_nanos", "captured_nanos", "closed_at")
            for holds in _in_window(expired, window)
        ],
        lambda r: (
            f"hold {r[0]} ({r[2]}) expired at {r[4]:%Y-%m-%d %H:%M:%S} while its process {r[1]} "
            f"was alive; charged {r[3] or 0}"
        ),
        whole=window is not None,
    )


def _journals(report: AuditReport) -> None:
    for name, count in journal.pending_everywhere().items():
        report.findings.append(
            Finding("journal", f"{count} settlement(s) not yet in the database in {name}")
        )


def _kept_since(now: dt.datetime) -> ExpressionWrapper:
    """Per ledger entry: from when its organization's request logs are still kept, less
    :data:`RETENTION_MARGIN`."""
    retention_days = Coalesce(
        F("wallet__organization__request_log_retention_days"),
        Value(int(settings.INFRAI_REQUEST_LOG_RETENTION_DAYS)),
    )
    return ExpressionWrapper(
        Value(now + RETENTION_MARGIN) - retention_days * Value(dt.timedelta(days=1)),
        output_field=DateTimeField(),
    )


def _without_log(r: tuple[Any, ...]) -> str:
    return f"usage entry of request {r[0]!r} (wallet {r[1]}, {r[2]}) has no request log"


def _entries_without_log(
    report: AuditReport,
    request_log: type[models.Model],
    now: dt.datetime,
    window: AuditWindow | None,
) -> list[str]:
    """``entry_without_log``; returns the request ids of the window's entries whose row was
    created before the window's rows (the log checks read those rows too).

    The full audit: one anti-join of every usage entry with the log. A window: each of its
    entries' row is looked for among the rows created within :func:`window_margin` of the
    entry (one or two partitions, pruned while the query runs: a call's row carries its
    arrival, its entry its settlement), and only where that finds none, in every partition."""
    kept = Q(created_at__gte=_kept_since(now))
    usage = LedgerEntry.objects.filter(kind=EntryKind.USAGE)
    logs = request_log._default_manager.filter(request_id=OuterRef("request_id")).order_by()
    if window is None:
        orphans = (
            usage.filter(kept)
            .exclude(Exists(logs))
            .order_by("pk")
            .values_list("request_id", "wallet_id", "amount_nanos")
        )
        _add(report, "entry_without_log", [orphans], _without_log, whole=False)
        return []
    margin = window_margin()
    near = logs.filter(
        created_at__gte=ExpressionWrapper(
            OuterRef("created_at") - Value(margin), output_field=DateTimeField()
        ),
        created_at__lte=ExpressionWrapper(
            OuterRef("created_at") + Value(margin), output_field=DateTimeField()
        ),
    )
    probed = (
        usage.filter(pk__gt=window.entry_id)
        .annotate(
            logged_at=Coalesce(
                Subquery(near.values("created_at")[:1]),
                Subquery(logs.values("created_at")[:1]),  # only where the first found none
                Value(_NONE),
                output_field=DateTimeField(),
            ),
            kept=kept,
        )
        # Rows older than the window's, and none at all: one condition, as each mention of
        # logged_at is its subqueries again.
        .filter(logged_at__lt=window.rows_since)
        .order_by("pk")
        .values_list("request_id", "wallet_id", "amount_nanos", "logged_at", "kept")
    )
    late, orphans_ = [], []
    for request_id, wallet_id, amount, logged_at, is_kept in probed:
        if logged_at != _NONE:
            late.append(request_id)
        elif is_kept:
            orphans_.append((request_id, wallet_id, amount))
    _add(report, "entry_without_log", [orphans_], _without_log, whole=True)
    return late


def _request_logs(report: AuditReport, now: dt.datetime, window: AuditWindow | None) -> None:
    try:
        request_log = apps.get_model("inference", "RequestLog")
    except LookupError:
        return
    late = _entries_without_log(report, request_log, now, window)
    logs = request_log._default_manager.order_by("pk")
    if window is None:
        scopes = [logs]
    else:
        # The window's rows (unordered: the ORDER BY would read them through the primary key
        # of their partition, whole), and older rows of its entries (late settlements).
        scopes = [logs.filter(created_at__gte=window.rows_since).order_by()]
        if late:
            scopes.insert(0, logs.filter(created_at__lt=window.rows_since, request_id__in=late))
    _add(
        report,
        "negative_cost",
        [rows.filter(cost_nanos__lt=0).values_list("request_id", "cost_nanos") for rows in scopes],
        lambda r: f"request {r[0]}: cost {r[1]}",
        whole=window is not None,
    )
    hold = Hold.objects.filter(request_id=OuterRef("request_id"))
    expired = LedgerEntry.objects.filter(
        idempotency_key=Concat(Value("hold_expired:"), OuterRef("request_id"))
    )
    unbilled = [
        rows.filter(cost_nanos__gt=0)
        .annotate(
            charged=_charged(),
            captured=Subquery(hold.values("captured_nanos")[:1], output_field=BigIntegerField()),
            late=Exists(expired),
        )
        # No usage entry, or one of another amount (one probe: a cost here is > 0).
        .filter(~Q(cost_nanos=Coalesce(F("charged"), Value(-1))))
        # A late settlement that could collect only part: captured == charged < cost.
        .exclude(
            Q(late=True)
            & Q(charged__isnull=False)
            & Q(captured=F("charged"))
            & Q(charged__lt=F("cost_nanos"))
        )
        .values_list("request_id", "cost_nanos", "charged")
        for rows in scopes
    ]
    _add(
        report,
        "log_without_entry",
        unbilled,
        lambda r: (
            f"request {r[0]}: cost {r[1]} but no usage entry"
            if r[2] is None
            else f"request {r[0]}: cost {r[1]} != usage entry {r[2]}"
        ),
        whole=window is not None,
    )


def _run(report: AuditReport, since: dt.datetime | None) -> None:
    now = timezone.now()
    started = time.perf_counter()
    window = report.window = None if since is None else _window(since)
    report.wallets = Wallet.objects.count()
    entries = LedgerEntry.objects.all()
    report.entries = (entries if window is None else entries.filter(pk__gt=window.entry_id)).count()
    report.open_holds = Hold.objects.filter(status=HoldStatus.OPEN).count()
    report.timings_s["window and counts"] = time.perf_counter() - started
    steps: list[tuple[str, Callable[[], None]]] = [
        ("balance, held, newest_entry", lambda: _wallets(report, window)),
        ("chain", lambda: _chain(report, window)),
        ("spend", lambda: _spend(report)),
        ("stuck_hold", lambda: _stuck_holds(report, now)),
        ("capture", lambda: _capture(report, window)),
        ("expired_alive", lambda: _expired_alive(report, window)),
        (
            "entry_without_log, negative_cost, log_without_entry",
            lambda: _request_logs(report, now, window),
        ),
        ("journal", lambda: _journals(report)),
    ]
    for name, step in steps:
        started = time.perf_counter()
        step()
        report.timings_s[name] = time.perf_counter() - started


def audit_findings(*, since: dt.datetime | None = None) -> AuditReport:
    """Every broken money invariant (see the module docstring); read-only. ``since``: audit
    only what was written from then on (and the books' present state) — the start of the
    previous audit, for the beat task — instead of the whole books."""
    report = AuditReport()
    if connection.in_atomic_block:
        _run(report, since)  # inside the caller's transaction (and its snapshot, if any)
        return report
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            if since is not None:
                # A window's queries take milliseconds; JIT-compiling them (their estimates
                # count partitions they will not read) took several times that on the bench.
                cur.execute("SET LOCAL jit = off")
        _run(report, since)
    return report
