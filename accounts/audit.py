"""The audit log: who changed keys, members, limits and budgets, and billing settings.

An :class:`~accounts.models.AuditEvent` is **append-only**: written once by
:func:`audit_record`, in the same transaction as the change it describes, by the service that
makes the change
(:mod:`accounts.services`, :mod:`management.services`, ``billing.services``) — so the
dashboard, the management API and the Django admin all leave the same trail. It is never
updated or deleted: ``save()`` of a stored row and ``delete()`` raise :class:`AppendOnly`, the
admin is read-only, and on PostgreSQL a trigger (migration ``0004_audit_event``) refuses
UPDATE, DELETE and a TRUNCATE by a role that does not own the table — except nulling
``actor_id`` when that user is deleted (the e-mail address stays in ``actor_email``).

No secret ever goes in: a key is named by its display form (``ifr_abcd…wxyz``), never its
value or hash; ``changes`` holds only the fields listed in :data:`KEY_FIELDS` and the like.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import models, transaction

from accounts.models import ApiKey, AppendOnly, AuditAction, AuditEvent, User, Via

if TYPE_CHECKING:
    from accounts.policy import Actor

__all__ = ["AppendOnly", "AuditAction", "AuditEvent", "Via", "audit_events", "audit_record"]


#: The key fields an event may show (never ``key_hash``).
KEY_FIELDS = (
    "name",
    "expires_at",
    "requests_per_minute",
    "tokens_per_minute",
    "monthly_budget_nanos",
)


def _plain(value: Any) -> Any:
    """A JSON-able form of a changed value (datetimes as ISO 8601, enums as their value)."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, models.Choices):
        return value.value
    return value


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[Any]]:
    """``{field: [old, new]}`` of the fields whose value differs."""
    return {
        name: [_plain(before.get(name)), _plain(after.get(name))]
        for name in after
        if before.get(name) != after.get(name)
    }


def key_snapshot(api_key: ApiKey) -> dict[str, Any]:
    """The audited fields of a key (:data:`KEY_FIELDS`)."""
    return {name: getattr(api_key, name) for name in KEY_FIELDS}


def key_target(api_key: ApiKey) -> str:
    """How an event names a key: its display form and name, never its secret."""
    return f"{api_key.display} ({api_key.name})" if api_key.name else api_key.display


def audit_record(
    *,
    organization_id: int,
    action: AuditAction,
    actor: Actor | None,
    target: str,
    changes: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """Append one event; call it inside the transaction of the change (it must commit or roll
    back with it: raises ``RuntimeError`` outside one). ``actor`` ``None`` is the system
    (a command, a webhook); ``changes`` must hold no secret."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record must run inside the change's transaction.atomic()")
    user: User | None = actor.user if actor is not None else None
    return AuditEvent.objects.create(
        organization_id=organization_id,
        actor=user,
        actor_email=user.email if user is not None else "",
        via=actor.via if actor is not None else Via.SYSTEM,
        credential=actor.credential if actor is not None else "",
        action=action,
        target=target[:200],
        changes={k: _plain(v) for k, v in (changes or {}).items()},
    )


def audit_events(
    *, organization_id: int, before_id: int | None = None, limit: int = 50
) -> list[AuditEvent]:
    """The organization's events newest first; pass the last id seen as ``before_id`` for the
    next page (keyset, no OFFSET)."""
    qs = AuditEvent.objects.filter(organization_id=organization_id)
    if before_id is not None:
        qs = qs.filter(pk__lt=before_id)
    return list(qs.order_by("-pk")[:limit])
