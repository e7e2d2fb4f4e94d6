"""Writes of the accounts app: organizations, memberships, projects, API keys."""

from __future__ import annotations

import enum
import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Final

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.text import slugify

from accounts import keys
from accounts.audit import (
    AuditAction,
    audit_record,
    diff,
    key_snapshot,
    key_target,
)
from accounts.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Project,
    Role,
    User,
)
from accounts.policy import (
    MEMBER_KEY_CEILING,
    OWNS_LIMITS,
    Actor,
    KeyLimits,
    credential_change_check,
    key_limits_check,
)
from infra import fastcache

KEY_CACHE_PREFIX = "apikey:"
INVITATION_TTL = timedelta(days=7)


def organization_create(*, name: str, owner: User | None = None, slug: str = "") -> Organization:
    """Create an organization (and the owner's membership). The slug is made unique."""
    base = slugify(slug or name)[:56] or "org"
    candidate, n = base, 1
    while Organization.objects.filter(slug=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    with transaction.atomic():
        org = Organization.objects.create(name=name, slug=candidate)
        if owner is not None:
            Membership.objects.create(user=owner, organization=org, role=Role.OWNER)
        _organization_opened_hook(organization=org, owner=owner)
    return org


def _organization_opened_hook(*, organization: Organization, owner: User | None) -> None:
    """Run ``settings.INFRAI_ORGANIZATION_OPENED_HOOK`` (billing opens the wallet and grants the
    starter credit) in the creating transaction; a setting so ``accounts`` imports no other app."""
    dotted = settings.INFRAI_ORGANIZATION_OPENED_HOOK
    if dotted:
        import_string(dotted)(organization=organization, owner=owner)


def membership_set(*, organization: Organization, user: User, role: Role | str) -> Membership:
    """Give ``user`` the ``role`` in ``organization`` (creating the membership if needed)."""
    membership, _ = Membership.objects.update_or_create(
        organization=organization, user=user, defaults={"role": role}
    )
    return membership


def project_create(
    *,
    organization: Organization,
    name: str,
    monthly_budget_nanos: int | None = None,
    actor: Actor | None = None,
) -> Project:
    """Create a project in ``organization`` (audited: ``project.create``)."""
    with transaction.atomic():
        project = Project.objects.create(
            organization=organization, name=name, monthly_budget_nanos=monthly_budget_nanos
        )
        audit_record(
            organization_id=organization.pk,
            action=AuditAction.PROJECT_CREATE,
            actor=actor,
            target=f"project {name}",
            changes={"name": name, "monthly_budget_nanos": monthly_budget_nanos},
        )
    return project


def api_key_create(
    *,
    project: Project,
    name: str = "",
    expires_at: datetime | None = None,
    created_by: User | None = None,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    monthly_budget_nanos: int | None = None,
    actor: Actor | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for ``project``; returns the row and the full key (show it once).

    Rate limits left ``None`` take the model's defaults; ``monthly_budget_nanos`` ``None`` is
    no budget of its own (the project's and the wallet's limits still apply). Audited
    (``key.create``, by ``actor``, else by ``created_by`` in the dashboard, else the system).
    """
    if actor is None and created_by is not None:
        actor = Actor(user=created_by, role=Role.MEMBER)
    raw = keys.generate()
    limits = {
        field: value
        for field, value in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        )
        if value is not None
    }
    with transaction.atomic():
        api_key = ApiKey.objects.create(
            organization_id=project.organization_id,
            project=project,
            name=name,
            prefix=raw[:8],
            last_four=raw[-4:],
            key_hash=keys.hash_key(raw),
            expires_at=expires_at,
            created_by=created_by,
            monthly_budget_nanos=monthly_budget_nanos,
            **limits,
        )
        audit_record(
            organization_id=project.organization_id,
            action=AuditAction.KEY_CREATE,
            actor=actor,
            target=key_target(api_key),
            changes={"project": project.name, **key_snapshot(api_key)},
        )
    return api_key, raw


def api_key_revoke(*, api_key: ApiKey, actor: Actor | None = None) -> ApiKey:
    """Revoke a key. Effective at once in every process: the cached lookup is deleted.
    Audited (``key.revoke``) when it was not revoked yet."""
    with transaction.atomic():
        if api_key.revoked_at is None:
            api_key.revoked_at = timezone.now()
            api_key.save(update_fields=["revoked_at"])
            audit_record(
                organization_id=api_key.organization_id,
                action=AuditAction.KEY_REVOKE,
                actor=actor,
                target=key_target(api_key),
            )
    api_key_cache_forget(key_hash=api_key.key_hash)
    return api_key


def api_key_roll(
    *, api_key: ApiKey, expires_at: datetime | None = None, actor: Actor | None = None
) -> tuple[ApiKey, str]:
    """Give ``api_key`` a new secret (same row, name, limits and usage history; a revoked key
    is reactivated); returns the row and the new full key. The old secret stops working at
    once in every process (its cached lookup is deleted). Audited (``key.roll``: the old and
    new display forms, no secret)."""
    old_hash, old_display = api_key.key_hash, api_key.display
    raw = keys.generate()
    api_key.prefix, api_key.last_four, api_key.key_hash = raw[:8], raw[-4:], keys.hash_key(raw)
    api_key.expires_at = expires_at
    api_key.revoked_at = None
    with transaction.atomic():
        api_key.save(update_fields=["prefix", "last_four", "key_hash", "expires_at", "revoked_at"])
        audit_record(
            organization_id=api_key.organization_id,
            action=AuditAction.KEY_ROLL,
            actor=actor,
            target=key_target(api_key),
            changes={"key": [old_display, api_key.display], "expires_at": expires_at},
        )
    api_key_cache_forget(key_hash=old_hash)
    return api_key, raw


def api_key_update(
    *, api_key: ApiKey, name: str | None = None, expires_at: datetime | None = None
) -> ApiKey:
    """Rename a key or change its expiry; the cached lookup is refreshed on next use."""
    if name is not None:
        api_key.name = name
    api_key.expires_at = expires_at
    api_key.save(update_fields=["name", "expires_at"])
    api_key_cache_forget(key_hash=api_key.key_hash)
    return api_key


def api_key_limits_set(
    *,
    api_key: ApiKey,
    requests_per_minute: int,
    tokens_per_minute: int,
    monthly_budget_nanos: int | None,
) -> ApiKey:
    """Set a key's rate limits and its monthly budget in nano-USD (``None``: no budget).

    Every value is written as given (pass the current one to keep it). The cached ``/v1``
    lookup is dropped, so the change holds from the key's next call in every process; holds
    already open keep counting against the new budget.
    """
    if requests_per_minute < 1 or tokens_per_minute < 1:
        raise ValueError("rate limits must be >= 1")
    if monthly_budget_nanos is not None and monthly_budget_nanos < 0:
        raise ValueError("monthly_budget_nanos must be >= 0")
    api_key.requests_per_minute = requests_per_minute
    api_key.tokens_per_minute = tokens_per_minute
    api_key.monthly_budget_nanos = monthly_budget_nanos
    api_key.save(update_fields=["requests_per_minute", "tokens_per_minute", "monthly_budget_nanos"])
    api_key_cache_forget(key_hash=api_key.key_hash)
    return api_key


def api_key_cache_forget(*, key_hash: str) -> None:
    """Drop the cached authentication of a key (shared cache: all processes see it)."""
    fastcache.delete_sync(key_cache_key(key_hash))


def key_slot_tag(key_hash: str) -> str:
    """The Redis Cluster hash tag of everything kept per API key (its cache entry, its
    rate-limit counters): one slot, so one pipeline may touch them all (``inference.limits``)."""
    return "{k:" + key_hash + "}"


def key_cache_key(key_hash: str) -> str:
    """The shared cache's key for the context of the API key hashed ``key_hash``."""
    return KEY_CACHE_PREFIX + key_slot_tag(key_hash)


class LastOwnerError(ValueError):
    """Raised when a change would leave an organization without an owner."""


def _owner_count(*, organization: Organization) -> int:
    return Membership.objects.filter(organization=organization, role=Role.OWNER).count()


def membership_change_role(
    *, membership: Membership, role: Role | str, actor: Actor | None = None
) -> Membership:
    """Change a member's role; raises :class:`LastOwnerError` when it demotes the last owner.
    Audited (``member.role``) when the role changes."""
    with transaction.atomic():
        locked = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
        if (
            locked.role == Role.OWNER
            and role != Role.OWNER
            and _owner_count(organization=locked.organization) <= 1
        ):
            raise LastOwnerError("An organization needs at least one owner.")
        old = locked.role
        locked.role = role
        locked.save(update_fields=["role"])
        if old != role:
            audit_record(
                organization_id=locked.organization_id,
                action=AuditAction.MEMBER_ROLE,
                actor=actor,
                target=f"member {locked.user.email}",
                changes={"role": [Role(old).value, Role(role).value]},
            )
    return locked


def membership_remove(*, membership: Membership, actor: Actor | None = None) -> None:
    """Remove a member; raises :class:`LastOwnerError` for the last owner. Audited
    (``member.remove``)."""
    with transaction.atomic():
        locked = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
        if locked.role == Role.OWNER and _owner_count(organization=locked.organization) <= 1:
            raise LastOwnerError("An organization needs at least one owner.")
        audit_record(
            organization_id=locked.organization_id,
            action=AuditAction.MEMBER_REMOVE,
            actor=actor,
            target=f"member {locked.user.email}",
            changes={"role": Role(locked.role).value},
        )
        locked.delete()


def project_update(
    *,
    project: Project,
    name: str,
    monthly_budget_nanos: int | None,
    actor: Actor | None = None,
) -> Project:
    """Rename a project and set (or clear, with None) its monthly budget in nano-USD.
    Audited (``project.update``) when either changes.

    Keys cache the budget for ``INFRAI_KEY_CACHE_TTL_S``; their cached lookups are dropped.
    """
    before = {"name": project.name, "monthly_budget_nanos": project.monthly_budget_nanos}
    project.name = name
    project.monthly_budget_nanos = monthly_budget_nanos
    changes = diff(before, {"name": name, "monthly_budget_nanos": monthly_budget_nanos})
    with transaction.atomic():
        project.save(update_fields=["name", "monthly_budget_nanos"])
        if changes:
            audit_record(
                organization_id=project.organization_id,
                action=AuditAction.PROJECT_UPDATE,
                actor=actor,
                target=f"project {name}",
                changes=changes,
            )
    _project_keys_cache_forget(project=project)
    return project


def project_archive(*, project: Project, actor: Actor | None = None) -> Project:
    """Archive a project: its keys stop authenticating at once (cached lookups dropped).
    Audited (``project.archive``)."""
    with transaction.atomic():
        if project.archived_at is None:
            project.archived_at = timezone.now()
            project.save(update_fields=["archived_at"])
            audit_record(
                organization_id=project.organization_id,
                action=AuditAction.PROJECT_ARCHIVE,
                actor=actor,
                target=f"project {project.name}",
            )
    _project_keys_cache_forget(project=project)
    return project


def project_unarchive(*, project: Project, actor: Actor | None = None) -> Project:
    """Bring an archived project back; its unrevoked keys work again. Audited
    (``project.restore``)."""
    with transaction.atomic():
        if project.archived_at is not None:
            project.archived_at = None
            project.save(update_fields=["archived_at"])
            audit_record(
                organization_id=project.organization_id,
                action=AuditAction.PROJECT_RESTORE,
                actor=actor,
                target=f"project {project.name}",
            )
    _project_keys_cache_forget(project=project)
    return project


def _project_keys_cache_forget(*, project: Project) -> None:
    for key_hash in ApiKey.objects.filter(project=project).values_list("key_hash", flat=True):
        api_key_cache_forget(key_hash=key_hash)


def user_create(*, email: str, password: str, name: str = "") -> User:
    """A new, unverified user (the e-mail address is lower-cased)."""
    return User.objects.create_user(email=email, password=password, name=name)


def user_mark_email_verified(*, user: User) -> User:
    """Record that ``user`` proved they read mail at their address."""
    if not user.email_verified:
        user.email_verified = True
        user.save(update_fields=["email_verified"])
    return user


def invitation_token_hash(token: str) -> str:
    """The stored form of an invitation token (SHA-256 hex; tokens are 256-bit random)."""
    return hashlib.sha256(token.encode()).hexdigest()


def invitation_create(
    *,
    organization: Organization,
    email: str,
    role: Role | str,
    invited_by: User | None,
    actor: Actor | None = None,
) -> tuple[Invitation, str]:
    """Invite ``email`` into ``organization``; returns the row and the token for the link.

    A pending invitation of the same address is revoked first, so one link is valid at a time.
    Sending the e-mail is the caller's job (after commit). Audited (``member.invite``; by
    ``actor``, else by ``invited_by`` in the dashboard).
    """
    if actor is None and invited_by is not None:
        actor = Actor(user=invited_by, role=Role.MEMBER)
    email = email.strip().lower()
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    with transaction.atomic():
        Invitation.objects.filter(
            organization=organization, email=email, accepted_at=None, revoked_at=None
        ).update(revoked_at=now)
        invitation = Invitation.objects.create(
            organization=organization,
            email=email,
            role=role,
            token_hash=invitation_token_hash(token),
            invited_by=invited_by,
            expires_at=now + INVITATION_TTL,
        )
        audit_record(
            organization_id=organization.pk,
            action=AuditAction.MEMBER_INVITE,
            actor=actor,
            target=f"invitation {email}",
            changes={"email": email, "role": Role(role).value},
        )
    return invitation, token


def invitation_revoke(*, invitation: Invitation, actor: Actor | None = None) -> Invitation:
    """Make an invitation's link unusable. Audited (``member.invite_revoke``)."""
    with transaction.atomic():
        if invitation.revoked_at is None and invitation.accepted_at is None:
            invitation.revoked_at = timezone.now()
            invitation.save(update_fields=["revoked_at"])
            audit_record(
                organization_id=invitation.organization_id,
                action=AuditAction.MEMBER_INVITE_REVOKE,
                actor=actor,
                target=f"invitation {invitation.email}",
            )
    return invitation


class InvitationError(ValueError):
    """The invitation cannot be accepted by this user (message says why)."""


def invitation_accept(*, invitation: Invitation, user: User) -> Membership:
    """Accept an invitation for ``user``: exactly once, only by the invited, verified address.

    An existing owner stays owner (an invitation never demotes); anyone else gets the invited
    role. Raises :class:`InvitationError` with a message fit for the user.
    """
    with transaction.atomic():
        locked = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if not locked.is_pending:
            raise InvitationError("This invitation is no longer valid.")
        if not user.email_verified:
            raise InvitationError("Verify your e-mail address before accepting invitations.")
        if user.email.lower() != locked.email:
            raise InvitationError(f"This invitation was sent to {locked.email}.")
        existing = Membership.objects.filter(organization=locked.organization, user=user).first()
        if existing is not None and existing.role == Role.OWNER:
            membership = existing
        else:
            membership = membership_set(
                organization=locked.organization, user=user, role=locked.role
            )
        locked.accepted_at = timezone.now()
        locked.save(update_fields=["accepted_at"])
        audit_record(
            organization_id=locked.organization_id,
            action=AuditAction.MEMBER_JOIN,
            actor=Actor(user=user, role=Role(membership.role)),
            target=f"member {user.email}",
            changes={"role": Role(membership.role).value},
        )
    return membership


# --- keys on someone's behalf: the rules of accounts.policy ---------------------------------


class _Default(enum.Enum):
    DEFAULT = "default"


#: "Not given": the limit the actor's role gets by default (see :func:`api_key_issue`).
DEFAULT: Final = _Default.DEFAULT


def _creator_role(*, api_key: ApiKey) -> Role | None:
    if api_key.created_by_id is None:
        return None
    role = (
        Membership.objects.filter(
            organization_id=api_key.organization_id, user_id=api_key.created_by_id
        )
        .values_list("role", flat=True)
        .first()
    )
    return Role(role) if role is not None else None


def api_key_issue(
    *,
    actor: Actor,
    project: Project,
    name: str = "",
    expires_at: datetime | None = None,
    requests_per_minute: int | _Default = DEFAULT,
    tokens_per_minute: int | _Default = DEFAULT,
    monthly_budget_nanos: int | _Default | None = DEFAULT,
) -> tuple[ApiKey, str]:
    """Create a key for ``project`` on ``actor``'s behalf (the dashboard's and the management
    API's way in); returns the row and the full key (show it once).

    A limit left :data:`DEFAULT` is the keys' default for owners and admins (600 requests and
    1,000,000 tokens a minute, no budget) and :data:`~accounts.policy.MEMBER_KEY_CEILING` for
    anyone else. Raises :class:`~accounts.policy.NotAllowed` (nothing created) when a limit is
    above what ``actor``'s role may give (:func:`~accounts.policy.key_limits_check`).
    """
    ceiling = MEMBER_KEY_CEILING
    owns = actor.role in OWNS_LIMITS
    requested = KeyLimits(
        requests_per_minute=ceiling.requests_per_minute
        if requests_per_minute is DEFAULT
        else requests_per_minute,
        tokens_per_minute=ceiling.tokens_per_minute
        if tokens_per_minute is DEFAULT
        else tokens_per_minute,
        monthly_budget_nanos=(None if owns else ceiling.monthly_budget_nanos)
        if monthly_budget_nanos is DEFAULT
        else monthly_budget_nanos,
    )
    key_limits_check(actor=actor, requested=requested, bound=ceiling)
    return api_key_create(
        project=project,
        name=name,
        expires_at=expires_at,
        actor=actor,
        created_by=actor.user,
        requests_per_minute=requested.requests_per_minute,
        tokens_per_minute=requested.tokens_per_minute,
        monthly_budget_nanos=requested.monthly_budget_nanos,
    )


def api_key_change(
    *,
    actor: Actor,
    api_key: ApiKey,
    name: str | None,
    expires_at: datetime | None,
    limits: KeyLimits | None = None,
) -> ApiKey:
    """Change a key on ``actor``'s behalf: rename (``name`` ``None`` keeps it), set the expiry
    (written as given: pass the current one to keep it) and, unless ``limits`` is ``None``, its
    limits. One transaction; the cached ``/v1`` lookup is dropped.

    Raises :class:`~accounts.policy.NotAllowed` (nothing changed) when ``actor`` may not change
    this key (:func:`~accounts.policy.credential_change_check`) or may not loosen its limits
    (:func:`~accounts.policy.key_limits_check` against the key's current limits).
    """
    credential_change_check(
        actor=actor,
        creator_id=api_key.created_by_id,
        creator_role=_creator_role(api_key=api_key),
        what="API key",
    )
    if limits is not None:
        current = KeyLimits(
            requests_per_minute=api_key.requests_per_minute,
            tokens_per_minute=api_key.tokens_per_minute,
            monthly_budget_nanos=api_key.monthly_budget_nanos,
        )
        key_limits_check(actor=actor, requested=limits, bound=current)
    before = key_snapshot(api_key)
    with transaction.atomic():
        api_key_update(api_key=api_key, name=name, expires_at=expires_at)
        if limits is not None:
            api_key_limits_set(
                api_key=api_key,
                requests_per_minute=limits.requests_per_minute,
                tokens_per_minute=limits.tokens_per_minute,
                monthly_budget_nanos=limits.monthly_budget_nanos,
            )
        api_key_audit_change(api_key=api_key, before=before, actor=actor)
    return api_key


def api_key_audit_change(
    *, api_key: ApiKey, before: dict[str, object], actor: Actor | None
) -> None:
    """Record ``key.update`` with what changed since ``before`` (:func:`accounts.audit.
    key_snapshot` of the key before the change; nothing when nothing changed). Call it in the
    change's transaction (the admin's change form does, after saving)."""
    changes = diff(before, key_snapshot(api_key))
    if changes:
        audit_record(
            organization_id=api_key.organization_id,
            action=AuditAction.KEY_UPDATE,
            actor=actor,
            target=key_target(api_key),
            changes=changes,
        )


def api_key_revoke_as(*, actor: Actor, api_key: ApiKey) -> ApiKey:
    """Revoke a key on ``actor``'s behalf (:func:`api_key_revoke`); raises
    :class:`~accounts.policy.NotAllowed` (nothing revoked) when ``actor`` may not: an owner's key
    needs an owner, someone else's key an owner or admin."""
    credential_change_check(
        actor=actor,
        creator_id=api_key.created_by_id,
        creator_role=_creator_role(api_key=api_key),
        what="API key",
    )
    return api_key_revoke(api_key=api_key, actor=actor)
