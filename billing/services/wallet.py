"""Wallet writes: credits, debits and staff adjustments, each one ledger entry.

Each is one :func:`billing.services.ledger.post_entry` (the wallet's numbers and the ledger row
in one transaction) in a durable transaction of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services.ledger import post_entry

if TYPE_CHECKING:
    from accounts.models import Organization, User


def wallet_get_or_create(*, organization: Organization) -> Wallet:
    """The organization's wallet (created empty, with no ledger entry, on first use)."""
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
    """Add ``amount_nanos`` (negative for a debit) to the organization's wallet.

    One durable transaction writing one ledger entry. Exactly once per ``idempotency_key``: a
    repeat returns the existing entry and changes nothing (the unique key is the arbiter, so
    this holds under concurrency too).
    """
    wallet = wallet_get_or_create(organization=organization)
    with transaction.atomic(durable=True):
        entry, _ = post_entry(
            wallet_id=wallet.pk,
            amount_nanos=amount_nanos,
            kind=kind,
            idempotency_key=idempotency_key,
            description=description,
            created_by=created_by,
        )
    return entry


def wallet_fund(
    *, organization: Organization, amount_nanos: int, idempotency_key: str, description: str = ""
) -> None:
    """Open the organization's wallet (if it has none) and credit it ``amount_nanos`` as one
    promotional ``credit`` entry; no entry when ``amount_nanos`` is 0.

    What ``manage.py issue_key`` and test tenants do. Exactly once per ``idempotency_key``, like
    :func:`wallet_credit`.
    """
    wallet_get_or_create(organization=organization)
    if amount_nanos:
        wallet_credit(
            organization=organization,
            amount_nanos=amount_nanos,
            kind=EntryKind.CREDIT,
            idempotency_key=idempotency_key,
            description=description,
        )


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
