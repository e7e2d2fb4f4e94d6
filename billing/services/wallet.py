"""Wallet writes: credits, debits and staff adjustments, each one ledger entry.

Every balance change goes through :func:`_wallet_apply` (one ``UPDATE … RETURNING`` that adds to
the balance and/or the held amount, locking the wallet row until the transaction ends) followed
by the ledger row in the same transaction, so ``balance == sum(ledger)`` can never drift and
the ``balance_after_nanos`` of consecutive entries are consistent.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.models import Organization, User
from billing.models import EntryKind, LedgerEntry, Wallet
from config import live

WALLET_TABLE = Wallet._meta.db_table


@dataclass(frozen=True, slots=True)
class WalletRow:
    """A wallet's numbers right after a change (still locked by the running transaction)."""

    id: int
    organization_id: int
    balance_nanos: int
    held_nanos: int
    auto_recharge_due: bool


def wallet_get_or_create(*, organization: Organization) -> Wallet:
    """The organization's wallet (created empty, with no ledger entry, on first use)."""
    wallet, _ = Wallet.objects.get_or_create(organization=organization)
    return wallet


def _wallet_apply(*, wallet_id: int, balance_delta: int = 0, held_delta: int = 0) -> WalletRow:
    """Add the deltas to one wallet in one statement; must run inside a transaction.

    Also re-arms auto-recharge when the new balance is at or above its threshold (SET clauses
    read the old values, so ``balance_nanos + delta`` is the new balance).
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("_wallet_apply must run inside transaction.atomic()")
    sql = f"""
        UPDATE {WALLET_TABLE}
           SET balance_nanos = balance_nanos + %s,
               held_nanos = held_nanos + %s,
               auto_recharge_armed = CASE
                   WHEN balance_nanos + %s >= auto_recharge_threshold_nanos THEN TRUE
                   ELSE auto_recharge_armed END,
               updated_at = %s
         WHERE id = %s
        RETURNING id, organization_id, balance_nanos, held_nanos, auto_recharge_enabled,
                  auto_recharge_armed, auto_recharge_threshold_nanos
    """
    with connection.cursor() as cur:
        cur.execute(sql, [balance_delta, held_delta, balance_delta, timezone.now(), wallet_id])
        row = cur.fetchone()
    if row is None:
        raise Wallet.DoesNotExist(f"wallet {wallet_id} does not exist")
    wid, org_id, balance, held, enabled, armed, threshold = row
    return WalletRow(
        id=wid,
        organization_id=org_id,
        balance_nanos=balance,
        held_nanos=held,
        auto_recharge_due=bool(enabled and armed and balance < threshold),
    )


def _post(
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
    """Apply ``amount_nanos`` and write its ledger entry, exactly once per key.

    Runs in a savepoint inside the caller's transaction. Returns ``(entry, created)``; on a
    repeated key nothing changes and the existing entry comes back with ``created=False``.
    """
    existing = LedgerEntry.objects.filter(idempotency_key=idempotency_key).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            row = _wallet_apply(
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
        _recharge_on_commit(wallet_id=wallet_id)
    live.announce_wallet_change_on_commit(row.organization_id)
    return entry, True


def _recharge_on_commit(*, wallet_id: int) -> None:
    """After commit, ask the worker to consider an auto-recharge for this wallet."""
    from billing.tasks import auto_recharge_wallet

    transaction.on_commit(lambda: auto_recharge_wallet.delay(wallet_id))


def wallet_credit(
    *,
    organization: Organization,
    amount_nanos: int,
    kind: EntryKind,
    idempotency_key: str,
    description: str = "",
    created_by: User | None = None,
) -> LedgerEntry:
    """Add ``amount_nanos`` (negative for a debit) to the organization's wallet.

    One durable transaction writing one ledger entry. Exactly once per ``idempotency_key``: a
    repeat returns the existing entry and changes nothing (the unique key is the arbiter, so
    this holds under concurrency too).
    """
    wallet = wallet_get_or_create(organization=organization)
    with transaction.atomic(durable=True):
        entry, _ = _post(
            wallet_id=wallet.pk,
            amount_nanos=amount_nanos,
            kind=kind,
            idempotency_key=idempotency_key,
            description=description,
            created_by=created_by,
        )
    return entry


def wallet_adjust(
    *,
    organization: Organization,
    amount_nanos: int,
    reason: str,
    staff_user: User,
    idempotency_key: str,
) -> LedgerEntry:
    """A staff adjustment: one ``adjustment`` ledger entry carrying the reason and the author.

    Never edits a number in place. ``reason`` is required; ``amount_nanos`` must not be 0.
    ``idempotency_key`` (e.g. a token rendered into the admin form) makes a double submit safe.
    """
    reason = reason.strip()
    if not reason:
        raise ValueError("An adjustment needs a reason.")
    if amount_nanos == 0:
        raise ValueError("An adjustment of 0 changes nothing.")
    if not staff_user.is_staff:
        raise PermissionError("Only staff may adjust a wallet.")
    return wallet_credit(
        organization=organization,
        amount_nanos=amount_nanos,
        kind=EntryKind.ADJUSTMENT,
        idempotency_key=f"adjust:{idempotency_key}",
        description=reason,
        created_by=staff_user,
    )
