"""Writes of the management app: admin keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from accounts.audit import AuditAction, audit_record
from accounts.policy import Actor, credential_change_check
from accounts.roles import Role
from accounts.selectors import membership_get, membership_get_by_user_id
from dashboard.permissions import MANAGE_ORG, role_allows
from management import keys
from management.models import AdminKey

if TYPE_CHECKING:
    from accounts.models import Organization, User


class AdminKeyNotAllowed(PermissionError):
    """Only an organization's owners and admins create admin keys."""


def admin_key_create(
    *, organization: Organization, created_by: User, name: str = ""
) -> tuple[AdminKey, str]:
    """Create an admin key acting with ``created_by``'s current role; returns the row and the
    full key (show it once). Raises :class:`AdminKeyNotAllowed` unless owner or admin."""
    membership = membership_get(user=created_by, organization=organization)
    if membership is None or not role_allows(membership.role, MANAGE_ORG):
        raise AdminKeyNotAllowed("Only owners and admins create admin keys.")
    raw = keys.generate()
    with transaction.atomic():
        admin_key = AdminKey.objects.create(
            organization=organization,
            name=name,
            prefix=raw[: len(keys.PREFIX) + 4],
            last_four=raw[-4:],
            key_hash=keys.hash_key(raw),
            role=Role(membership.role),
            created_by=created_by,
        )
        audit_record(
            organization_id=organization.pk,
            action=AuditAction.ADMIN_KEY_CREATE,
            actor=Actor(user=created_by, role=Role(membership.role)),
            target=_target(admin_key),
            changes={"name": name, "role": Role(membership.role).value},
        )
    return admin_key, raw


def _target(admin_key: AdminKey) -> str:
    return f"{admin_key.display} ({admin_key.name})" if admin_key.name else admin_key.display


def admin_key_revoke(*, admin_key: AdminKey, actor: Actor) -> AdminKey:
    """Revoke an admin key on ``actor``'s behalf (effective on its next call: lookups are not
    cached); ``actor.user`` is recorded as ``revoked_by``.

    Raises :class:`~accounts.policy.NotAllowed` (nothing revoked) unless ``actor`` may: anyone
    their own key; only an owner a key whose creator is currently an owner; owners and admins
    the rest (:func:`accounts.policy.credential_change_check`).
    """
    creator = (
        membership_get_by_user_id(
            organization=admin_key.organization, user_id=admin_key.created_by_id
        )
        if admin_key.created_by_id is not None
        else None
    )
    credential_change_check(
        actor=actor,
        creator_id=admin_key.created_by_id,
        creator_role=creator.role if creator is not None else None,
        what="admin key",
    )
    with transaction.atomic():
        if admin_key.revoked_at is None:
            admin_key.revoked_at = timezone.now()
            admin_key.revoked_by = actor.user
            admin_key.save(update_fields=["revoked_at", "revoked_by"])
            audit_record(
                organization_id=admin_key.organization_id,
                action=AuditAction.ADMIN_KEY_REVOKE,
                actor=actor,
                target=_target(admin_key),
            )
    return admin_key
