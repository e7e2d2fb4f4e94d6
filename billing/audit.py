"""Money invariants, checked by ``manage.py billing_audit``, the ``billing.audit`` beat task and
the tests.

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
its model is looked up by name (``apps.get_model("inference", "RequestLog")``) and the two
``*_log*`` checks are skipped when that app is not installed.

Every check is one query that returns only the offending rows (aggregates, correlated
subqueries and a window function on the database, never a query per row), at most
:data:`LIMIT` each; all run in one REPEATABLE READ snapshot on PostgreSQL, so concurrent
settlements cannot make the checks disagree with each other.
"""

from __future__ import annotations

import datetime as dt
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
    Sum,
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

#: Checks that compare the ledger with the inference app's request log.
LOG_CHECKS = frozenset({"negative_cost", "log_without_entry", "entry_without_log"})
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


@dataclass(frozen=True, slots=True)
class Finding:
    """One broken invariant: which ``check`` and what exactly (ids and amounts in nano-USD)."""

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


@dataclass
class AuditReport:
    wallets: int = 0
    entries: int = 0
    open_holds: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def drift(self) -> list[str]:
        """Every finding as a line (empty: the books are clean)."""
        return [str(f) for f in self.findings]

    @property
    def money(self) -> list[str]:
        """The findings about wallets, ledger, holds and spend alone (not the request log):
        what a test that settles holds without writing request logs can assert on."""
        return [str(f) for f in self.findings if f.check not in LOG_CHECKS]


def _add(report: AuditReport, check: str, rows: models.QuerySet[Any], line: Any) -> None:
    """Append one finding per row of ``rows`` (at most :data:`LIMIT`, then one summary line);
    reads at most ``LIMIT + 1`` rows."""
    for n, row in enumerate(rows[: LIMIT + 1]):
        if n == LIMIT:
            report.findings.append(Finding(check, f"more than {LIMIT} rows; only these listed"))
            return
        report.findings.append(Finding(check, line(row)))


def _sum_of(queryset: models.QuerySet[Any], group: str) -> Subquery:
    return Subquery(
        queryset.order_by().values(group).annotate(s=Sum("amount_nanos")).values("s")[:1],
        output_field=BigIntegerField(),
    )


def _charged() -> Subquery:
    """The nano-USD the ``usage`` entry of the outer row's ``request_id`` charged (its amount,
    negated; NULL when there is none)."""
    usage = LedgerEntry.objects.filter(kind=EntryKind.USAGE, request_id=OuterRef("request_id"))
    return Subquery(
        usage.annotate(c=_ZERO - F("amount_nanos")).values("c")[:1],
        output_field=BigIntegerField(),
    )


def _wallets(report: AuditReport) -> None:
    open_holds = Hold.objects.filter(status=HoldStatus.OPEN)
    rows = (
        Wallet.objects.annotate(
            ledger=Coalesce(
                _sum_of(LedgerEntry.objects.filter(wallet=OuterRef("pk")), "wallet"), _ZERO
            ),
            open_held=Coalesce(_sum_of(open_holds.filter(wallet=OuterRef("pk")), "wallet"), _ZERO),
            newest=Subquery(
                LedgerEntry.objects.filter(wallet=OuterRef("pk"))
                .order_by("-pk")
                .values("balance_after_nanos")[:1]
            ),
        )
        .filter(
            ~Q(balance_nanos=F("ledger"))
            | ~Q(held_nanos=F("open_held"))
            | (Q(newest__isnull=False) & ~Q(newest=F("balance_nanos")))
        )
        .order_by("pk")
        .values_list(
            "pk", "organization_id", "balance_nanos", "held_nanos", "ledger", "open_held", "newest"
        )[: LIMIT + 1]
    )
    for pk, org, balance, held, ledger, open_held, newest in rows:
        if balance != ledger:
            report.findings.append(
                Finding(
                    "balance",
                    f"wallet {pk} (org {org}): balance {balance} != ledger sum {ledger} "
                    f"(drift {balance - ledger})",
                )
            )
        if held != open_held:
            report.findings.append(
                Finding("held", f"wallet {pk}: held {held} != open holds {open_held}")
            )
        if newest is not None and newest != balance:
            report.findings.append(
                Finding(
                    "newest_entry", f"wallet {pk}: newest entry says {newest}, balance is {balance}"
                )
            )


def _chain(report: AuditReport) -> None:
    rows = (
        LedgerEntry.objects.annotate(
            previous=Window(
                Lag("balance_after_nanos"), partition_by=[F("wallet_id")], order_by=F("id").asc()
            )
        )
        .annotate(expected=Coalesce(F("previous"), _ZERO) + F("amount_nanos"))
        .filter(~Q(balance_after_nanos=F("expected")))
        .order_by("wallet_id", "id")
        .values_list("wallet_id", "id", "balance_after_nanos", "previous", "amount_nanos")
    )
    _add(
        report,
        "chain",
        rows,
        lambda r: (
            f"wallet {r[0]} entry {r[1]}: balance_after {r[2]} != previous {r[3] or 0} "
            f"+ amount {r[4]}"
        ),
    )


def _spend(report: AuditReport) -> None:
    open_holds = Hold.objects.filter(status=HoldStatus.OPEN, project__isnull=False)
    rows = (
        ProjectSpend.objects.annotate(
            open_held=Coalesce(
                _sum_of(
                    open_holds.filter(project=OuterRef("project"), month=OuterRef("month")),
                    "project",
                ),
                _ZERO,
            )
        )
        .exclude(held_nanos=F("open_held"))
        .order_by("project_id", "month")
        .values_list("project_id", "month", "held_nanos", "open_held")
    )
    _add(
        report,
        "spend",
        rows,
        lambda r: f"project {r[0]} {r[1]:%Y-%m}: held {r[2]} != open holds {r[3]}",
    )
    orphans = (
        open_holds.exclude(
            Exists(
                ProjectSpend.objects.filter(project=OuterRef("project"), month=OuterRef("month"))
            )
        )
        .order_by()
        .values("project_id", "month")
        .annotate(s=Sum("amount_nanos"))
        .order_by("project_id", "month")
        .values_list("project_id", "month", "s")
    )
    _add(
        report,
        "spend",
        orphans,
        lambda r: f"project {r[0]} {r[1]:%Y-%m}: {r[2]} held, no spend row",
    )


def _holds(report: AuditReport, now: dt.datetime) -> None:
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
        stuck,
        lambda r: (
            f"hold {r[0]} (wallet {r[1]}, {r[2]}) open {int((now - r[3]).total_seconds())} s "
            "past its expiry"
        ),
    )
    mismatched = (
        Hold.objects.filter(
            Q(status=HoldStatus.SETTLED)
            | Q(status=HoldStatus.EXPIRED, captured_nanos__isnull=False)
        )
        .annotate(
            charged=Coalesce(_charged(), _ZERO),
            captured=Coalesce(F("captured_nanos"), _ZERO),
        )
        .exclude(captured=F("charged"))
        .order_by("pk")
        .values_list("request_id", "captured", "charged")
    )
    _add(
        report,
        "capture",
        mismatched,
        lambda r: f"hold {r[0]}: captured {r[1]} != usage entry {r[2]}",
    )


def _expired_alive(report: AuditReport) -> None:
    seen = Process.objects.filter(token=OuterRef("process"), seen_at__gt=OuterRef("closed_at"))
    rows = (
        Hold.objects.filter(status=HoldStatus.EXPIRED)
        .exclude(process="")
        .annotate(seen_at=Subquery(seen.values("seen_at")[:1]))
        .filter(seen_at__isnull=False)
        .order_by("pk")
        .values_list("request_id", "process", "amount_nanos", "captured_nanos", "closed_at")
    )
    _add(
        report,
        "expired_alive",
        rows,
        lambda r: (
            f"hold {r[0]} ({r[2]}) expired at {r[4]:%Y-%m-%d %H:%M:%S} while its process {r[1]} "
            f"was alive; charged {r[3] or 0}"
        ),
    )


def _journals(report: AuditReport) -> None:
    for name, count in journal.pending_everywhere().items():
        report.findings.append(
            Finding("journal", f"{count} settlement(s) not yet in the database in {name}")
        )


def _request_logs(report: AuditReport) -> None:
    try:
        request_log = apps.get_model("inference", "RequestLog")
    except LookupError:
        return
    negative = (
        request_log.objects.filter(cost_nanos__lt=0)
        .order_by("pk")
        .values_list("request_id", "cost_nanos")
    )
    _add(report, "negative_cost", negative, lambda r: f"request {r[0]}: cost {r[1]}")
    hold = Hold.objects.filter(request_id=OuterRef("request_id"))
    expired = LedgerEntry.objects.filter(
        idempotency_key=Concat(Value("hold_expired:"), OuterRef("request_id"))
    )
    unbilled = (
        request_log.objects.filter(cost_nanos__gt=0)
        .annotate(
            charged=_charged(),
            captured=Subquery(hold.values("captured_nanos")[:1], output_field=BigIntegerField()),
            late=Exists(expired),
        )
        .filter(Q(charged__isnull=True) | ~Q(charged=F("cost_nanos")))
        # A late settlement that could collect only part: captured == charged < cost.
        .exclude(
            Q(late=True)
            & Q(charged__isnull=False)
            & Q(captured=F("charged"))
            & Q(charged__lt=F("cost_nanos"))
        )
        .order_by("pk")
        .values_list("request_id", "cost_nanos", "charged")
    )
    _add(
        report,
        "log_without_entry",
        unbilled,
        lambda r: (
            f"request {r[0]}: cost {r[1]} but no usage entry"
            if r[2] is None
            else f"request {r[0]}: cost {r[1]} != usage entry {r[2]}"
        ),
    )
    retention_days = Coalesce(
        F("wallet__organization__request_log_retention_days"),
        Value(int(settings.INFRAI_REQUEST_LOG_RETENTION_DAYS)),
    )
    kept_since = ExpressionWrapper(
        Value(timezone.now() + RETENTION_MARGIN) - retention_days * Value(dt.timedelta(days=1)),
        output_field=DateTimeField(),
    )
    orphans = (
        LedgerEntry.objects.filter(kind=EntryKind.USAGE, created_at__gte=kept_since)
        .exclude(Exists(request_log.objects.filter(request_id=OuterRef("request_id"))))
        .order_by("pk")
        .values_list("request_id", "wallet_id", "amount_nanos")
    )
    _add(
        report,
        "entry_without_log",
        orphans,
        lambda r: f"usage entry of request {r[0]!r} (wallet {r[1]}, {r[2]}) has no request log",
    )


def _run(report: AuditReport) -> None:
    now = timezone.now()
    report.wallets = Wallet.objects.count()
    report.entries = LedgerEntry.objects.count()
    report.open_holds = Hold.objects.filter(status=HoldStatus.OPEN).count()
    _wallets(report)
    _chain(report)
    _spend(report)
    _holds(report, now)
    _expired_alive(report)
    _request_logs(report)
    _journals(report)


def audit_findings() -> AuditReport:
    """Every broken money invariant (see the module docstring); read-only."""
    report = AuditReport()
    if connection.in_atomic_block:
        _run(report)  # inside the caller's transaction (and its snapshot, if any)
        return report
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        _run(report)
    return report
