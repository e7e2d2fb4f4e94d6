"""A new organization's wallet and its starter credit.

The wallet is opened in the same transaction as the organization (``accounts`` calls
:func:`organization_opened` through ``settings.INFRAI_ORGANIZATION_OPENED_HOOK``, so ``accounts``
imports nothing of ``billing``). The starter credit (``settings.INFRAI_STARTER_CREDIT_USD``, 0 turns
it off) lets a new customer make a first call without an operator; it is abuse-limited:

- only to an **owner whose e-mail address is verified** (granted when an organization is created
  by a verified user, or when its owner verifies the address later);
- **once per organization** (the wallet row is locked and checked for an earlier starter entry);
- **once per e-mail address** across all organizations: the ledger's unique idempotency key is
  derived from the normalized address, so creating more organizations (or a new account with
  the same address) grants nothing more, even under concurrency.

Every grant is one ``starter_credit`` ledger entry; nothing else changes a balance.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from accounts.roles import Role
from accounts.selectors import organizations_owned_by, user_has_role
from billing.models import EntryKind, LedgerEntry, Wallet
from billing.services.ledger import post_entry
from billing.services.wallet import wallet_get_or_create
from money.usd import nanos_to_usd_display, usd_to_nanos

if TYPE_CHECKING:
    from accounts.models import Organization, User


def starter_credit_nanos() -> int:
    """The configured starter credit in nano-USD (0: none is granted)."""
    return max(0, usd_to_nanos(Decimal(str(settings.INFRAI_STARTER_CREDIT_USD))))


def _email_key(email: str) -> str:
    digest = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:40]
    return f"starter_credit:email:{digest}"


def starter_credit_grant(*, organization: Organization, owner: User) -> LedgerEntry | None:
    """Grant the starter credit to ``organization`` if ``owner`` may receive it.

    Returns the new entry, or ``None`` when nothing was granted (credit configured as 0, owner
    not verified or not an owner, the organization or the address already had one). Safe to call
    any number of times; runs in the caller's transaction if there is one.
    """
    amount = starter_credit_nanos()
    if amount <= 0 or not owner.email_verified:
        return None
    if not user_has_role(user=owner, organization=organization, roles={Role.OWNER}):
        return None
    with transaction.atomic():
        wallet = wallet_get_or_create(organization=organization)
        Wallet.objects.select_for_update().filter(pk=wallet.pk).first()
        if LedgerEntry.objects.filter(wallet=wallet, kind=EntryKind.STARTER_CREDIT).exists():
            return None
        entry, created = post_entry(
            wallet_id=wallet.pk,
            amount_nanos=amount,
            kind=EntryKind.STARTER_CREDIT,
            idempotency_key=_email_key(owner.email),
            description=f"Starter credit of {nanos_to_usd_display(amount)} for a new organization",
        )
    return entry if created else None


def starter_credit_on_verified(*, user: User) -> LedgerEntry | None:
    """After ``user`` verified their address: grant the credit to the first organization they own
    that has none yet (at most one grant per address in all)."""
    if not user.email_verified:
        return None
    for organization in organizations_owned_by(user=user):
        entry = starter_credit_grant(organization=organization, owner=user)
        if entry is not None:
            return entry
    return None


def organization_opened(*, organization: Organization, owner: User | None) -> Wallet:
    """Open the wallet of a just-created organization (same transaction) and grant the starter
    credit when its owner is already verified."""
    wallet = wallet_get_or_create(organization=organization)
    if owner is not None:
        starter_credit_grant(organization=organization, owner=owner)
    return wallet
