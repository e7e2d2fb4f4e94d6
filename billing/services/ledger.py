"""The ledger: billing's one way to change a wallet's numbers (the bottom of billing's services).

Every balance change is :func:`wallet_apply` (one ``UPDATE … RETURNING`` that adds to the
balance and/or the held amount, locking the wallet row until the transaction ends) followed by
its ledger row in the same transaction — :func:`post_entry` does both — so
``balance == sum(ledger)`` can never drift and the ``balance_after_nanos`` of consecutive entries
are consistent. The hold path (:mod:`billing.services.holds`) writes its settlement entries in
its own single statement and uses :func:`wallet_apply` otherwise.

Imports run one way: this module imports no other billing service and not ``billing.tasks``
(which imports the services). A write that makes an auto-recharge due asks for it with
:func:`auto_recharge_on_commit`, which finds the Celery task by its name.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from celery import current_app
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing.models import PAYMENT_KINDS, EntryKind, LedgerEntry, Wallet
from infra import live

if TYPE_CHECKING:
    from accounts.models import User

WALLET_TABLE = Wallet._meta.db_table
#: The Celery task that charges a wallet's saved card (defined in ``billing.tasks``).
AUTO_RECHARGE_TASK = "billing.auto_recharge_wallet"
#: The Celery task that sends a wallet's low-balance e-mail if it wins the crossing.
LOW_BALANCE_TASK = "billing.low_balance_notify"
#: The Celery task that mails the receipt of one payment (a ledger entry).
RECEIPT_TASK = "billing.receipt_send"

#: SQL (``RETURNING`` of a wallet update, new values): whether the debit ``delta`` (an SQL
#: expression, negative for a debit) left an armed wallet's available balance below its
#: low-balance threshold. Only debits fire it: a credit never says "low balance".
LOW_BALANCE_DUE = (
    "(({delta}) < 0 AND {wl}.low_balance_armed AND {wl}.low_balance_threshold_nanos > 0"
    " AND {wl}.balance_nanos - {wl}.held_nanos < {wl}.low_balance_threshold_nanos)"
    " AS low_balance_due"
)


@dataclass(frozen=True, slots=True)
class WalletRow:
    """A wallet's numbers right after a change (still locked by the running transaction)."""

    id: int
    organization_id: int
    balance_nanos: int
    held_nanos: int
    auto_recharge_due: bool
    low_balance_due: bool = False


def wallet_apply(*, wallet_id: int, balance_delta: int = 0, held_delta: int = 0) -> WalletRow:
    """Add the deltas to one wallet in one statement; must run inside a transaction.

    Writes no ledger entry: the caller writes it in the same transaction (or uses
    :func:`post_entry`). Also re-arms auto-recharge when the new balance is at or above its
    threshold (SET clauses read the old values, so ``balance_nanos + delta`` is the new
    balance), and the low-balance alert when a credit leaves the available balance at or above
    its threshold; ``low_balance_due`` says a debit left an armed wallet below it
    (:mod:`billing.services.notify` decides who sends the e-mail). Raises ``RuntimeError``
    outside a transaction, ``Wallet.DoesNotExist`` for an unknown wallet.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("wallet_apply must run inside transaction.atomic()")
    sql = f"""
        UPDATE {WALLET_TABLE}
           SET balance_nanos = balance_nanos + %s,
               held_nanos = held_nanos + %s,
               auto_recharge_armed = CASE
                   WHEN balance_nanos + %s >= auto_recharge_threshold_nanos THEN TRUE
                   ELSE auto_recharge_armed END,
               low_balance_armed = CASE
                   WHEN %s > 0 AND balance_nanos + %s - held_nanos - %s
                        >= low_balance_threshold_nanos THEN TRUE
                   ELSE low_balance_armed END,
               updated_at = %s
         WHERE id = %s
        RETURNING id, organization_id, balance_nanos, held_nanos, auto_recharge_enabled,
                  auto_recharge_armed, auto_recharge_threshold_nanos,
                  {LOW_BALANCE_DUE.format(delta="%s", wl=WALLET_TABLE)}
    """
    d = balance_delta
    now = timezone.now()
    params: list[int | dt.datetime] = [d, held_delta, d, d, d, held_delta, now, wallet_id, d]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    if row is None:
        raise Wallet.DoesNotExist(f"wallet {wallet_id} does not exist")
    wid, org_id, balance, held, enabled, armed, threshold, low_balance_due = row
    return WalletRow(
        id=wid,
        organization_id=org_id,
        balance_nanos=balance,
        held_nanos=held,
        auto_recharge_due=bool(enabled and armed and balance < threshold),
        low_balance_due=bool(low_balance_due),
    )


def post_entry(
    *,
    wallet_id: int,
    amount_nanos: int,
    kind: EntryKind,
    idempotency_key: str,
    held_delta: int = 0,
    description: str = "",
    external_ref: str = "",
    created_by: User | None = None,
    project_id: int | None = None,
    api_key_id: int | None = None,
    request_id: str = "",
) -> tuple[LedgerEntry, bool]:
    """Apply ``amount_nanos`` (and ``held_delta``) to the wallet and write its ledger entry,
    exactly once per ``idempotency_key``.

    Runs in a savepoint inside the caller's transaction (``transaction.atomic()`` required).
    Returns ``(entry, created)``; on a repeated key nothing changes and the existing entry
    comes back with ``created=False`` (the unique key is the arbiter, also under concurrency).
    After commit: an auto-recharge is queued if the entry made one due, and the organization's
    open dashboards are told the wallet changed.
    """
    existing = LedgerEntry.objects.filter(idempotency_key=idempotency_key).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            row = wallet_apply(
                wallet_id=wallet_id, balance_delta=amount_nanos, held_delta=held_delta
            )
            entry = LedgerEntry.objects.create(
                wallet_id=wallet_id,
                kind=kind,
                amount_nanos=amount_nanos,
                balance_after_nanos=row.balance_nanos,
                idempotency_key=idempotency_key,
                description=description[:255],
                external_ref=external_ref[:64],
                created_by=created_by,
                project_id=project_id,
                api_key_id=api_key_id,
                request_id=request_id,
            )
    except IntegrityError:
        return LedgerEntry.objects.get(idempotency_key=idempotency_key), False
    if row.auto_recharge_due:
        auto_recharge_on_commit(wallet_id=wallet_id)
    if row.low_balance_due:
        low_balance_on_commit(wallet_id=wallet_id)
    if kind in PAYMENT_KINDS:
        task_on_commit(RECEIPT_TASK, entry.pk)
    live.announce_wallet_change_on_commit(row.organization_id)
    return entry, True


def auto_recharge_enqueue(wallet_id: int) -> None:
    """Ask the worker to consider an auto-recharge of this wallet now (Celery task
    :data:`AUTO_RECHARGE_TASK`; run in place when ``CELERY_TASK_ALWAYS_EAGER``)."""
    current_app.tasks[AUTO_RECHARGE_TASK].delay(wallet_id)


def auto_recharge_on_commit(*, wallet_id: int) -> None:
    """:func:`auto_recharge_enqueue` once the running transaction commits (never on rollback)."""
    transaction.on_commit(lambda: auto_recharge_enqueue(wallet_id))


def task_enqueue(task: str, *args: int) -> None:
    """Queue the billing Celery task named ``task`` (run in place when eager)."""
    current_app.tasks[task].delay(*args)


def task_on_commit(task: str, *args: int) -> None:
    """:func:`task_enqueue` once the running transaction commits (never on rollback): e-mails
    and other side effects stay out of the money transaction."""
    transaction.on_commit(lambda: task_enqueue(task, *args))


def low_balance_on_commit(*, wallet_id: int) -> None:
    """Ask for the wallet's low-balance e-mail after commit (:data:`LOW_BALANCE_TASK`; the
    task sends it only if it wins the crossing)."""
    task_on_commit(LOW_BALANCE_TASK, wallet_id)
