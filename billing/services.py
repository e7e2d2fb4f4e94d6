"""Writes of the billing app. Every balance change is one ledger entry in one transaction."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F

from accounts.models import Organization, User
from billing.models import EntryKind, LedgerEntry, Wallet


def wallet_get_or_create(*, organization: Organization) -> Wallet:
    """The organization's wallet (created empty on first use)."""
    wallet, _ = Wallet.objects.get_or_create(organization=organization)
    return wallet


def wallet_credit(
    *,
    organization: Organization,
    amount_nanos: int,
    kind: EntryKind,
    idempotency_key: str,
    description: str = "",
    created_by: User | None = None,
) -> LedgerEntry:
    """Add ``amount_nanos`` (may be negative for refunds/disputes/adjustments) to the wallet.

    Exactly once per ``idempotency_key``: a repeat returns the existing entry and changes nothing.
    The balance update and the entry are one transaction; the update is a single
    ``UPDATE … SET balance = balance + x`` so concurrent credits never lose each other.
    """
    wallet = wallet_get_or_create(organization=organization)
    existing = LedgerEntry.objects.filter(idempotency_key=idempotency_key).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            Wallet.objects.filter(pk=wallet.pk).update(
                balance_nanos=F("balance_nanos") + amount_nanos
            )
            balance = Wallet.objects.values_list("balance_nanos", flat=True).get(pk=wallet.pk)
            return LedgerEntry.objects.create(
                wallet=wallet,
                kind=kind,
                amount_nanos=amount_nanos,
                balance_after_nanos=balance,
                idempotency_key=idempotency_key,
                description=description,
                created_by=created_by,
            )
    except IntegrityError:
        return LedgerEntry.objects.get(idempotency_key=idempotency_key)
