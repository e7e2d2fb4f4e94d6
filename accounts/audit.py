"""The audit log: who changed keys, members, limits and budgets, and billing settings.

An :class:`AuditEvent` is **append-only**: written once by :func:`audit_record`, in the same
transaction as the change it describes, by the service that makes the change
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
from django.utils import timezone

if TYPE_CHECKING:
    from accounts.models import ApiKey, User
    from accounts.policy import Actor


class AppendOnly(RuntimeError):
    """An audit event was about to be changed or deleted."""


class AuditAction(models.TextChoices):
    KEY_CREATE = "key.create", "API key created"
    KEY_UPDATE = "key.update", "API key changed"
    KEY_REVOKE = "key.revoke", "API key revoked"
    KEY_ROLL = "key.roll", "API key given a new secret"
    ADMIN_KEY_CREATE = "admin_key.create", "Admin key created"
    ADMIN_KEY_REVOKE = "admin_key.revoke", "Admin key revoked"
    MEMBER_INVITE = "member.invite", "Member invited"
    MEMBER_INVITE_REVOKE = "member.invite_revoke", "Invitation revoked"
    MEMBER_JOIN = "member.join", "Invitation accepted"
    MEMBER_ADD = "member.add", "Member added"
    MEMBER_ROLE = "member.role", "Role changed"
    MEMBER_REMOVE = "member.remove", "Member removed"
    PROJECT_CREATE = "project.create", "Project created"
    PROJECT_UPDATE = "project.update", "Project changed"
    PROJECT_ARCHIVE = "project.archive", "Project archived"
    PROJECT_RESTORE = "project.restore", "Project restored"
    AUTO_RECHARGE = "wallet.auto_recharge", "Auto-recharge settings changed"
    CARD_REMOVE = "wallet.card_remove", "Saved card removed"
    LOW_BALANCE = "wallet.low_balance", "Low-balance alert changed"


class Via(models.TextChoices):
    DASHBOARD = "dashboard", "Dashboard"
    API = "api", "Management API"
    ADMIN = "admin", "Staff admin"
    SYSTEM = "system", "System"


#: The key fields an event may show (never ``key_hash``).
KEY_FIELDS = (
    "name",
    "expires_at",
    "requests_per_minute",
    "tokens_per_minute",
    "monthly_budget_nanos",
)


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnly("audit events are never updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit events are never deleted")


class AuditEvent(models.Model):
    """One change, by whom (``actor``, ``via``, ``credential``), to what (``target``)."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="+"
    )
    actor = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_email = models.CharField(max_length=254, blank=True)
    via = models.CharField(max_length=16, choices=Via.choices)
    credential = models.CharField(
        max_length=40, blank=True, help_text="The admin key a management call was made with."
    )
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    target = models.CharField(max_length=200)
    changes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        app_label = "accounts"
        indexes = [models.Index(fields=["organization", "-id"], name="audit_org_id_idx")]

    def __str__(self) -> str:
        return f"{self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("audit events are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit events are never deleted")

    @property
    def who(self) -> str:
        """The actor as a page shows it."""
        return self.actor_email or Via(self.via).label


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
