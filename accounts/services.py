"""Writes of the accounts app: organizations, memberships, projects, API keys."""

from __future__ import annotations

from datetime import datetime

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from accounts import keys
from accounts.models import ApiKey, Membership, Organization, Project, Role, User

KEY_CACHE_PREFIX = "apikey:"


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
    return org


def membership_set(*, organization: Organization, user: User, role: Role | str) -> Membership:
    """Give ``user`` the ``role`` in ``organization`` (creating the membership if needed)."""
    membership, _ = Membership.objects.update_or_create(
        organization=organization, user=user, defaults={"role": role}
    )
    return membership


def project_create(
    *, organization: Organization, name: str, monthly_budget_nanos: int | None = None
) -> Project:
    """Create a project in ``organization``."""
    return Project.objects.create(
        organization=organization, name=name, monthly_budget_nanos=monthly_budget_nanos
    )


def api_key_create(
    *,
    project: Project,
    name: str = "",
    expires_at: datetime | None = None,
    created_by: User | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for ``project``; returns the row and the full key (show it once)."""
    raw = keys.generate()
    api_key = ApiKey.objects.create(
        organization_id=project.organization_id,
        project=project,
        name=name,
        prefix=raw[:8],
        last_four=raw[-4:],
        key_hash=keys.hash_key(raw),
        expires_at=expires_at,
        created_by=created_by,
    )
    return api_key, raw


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke a key. Effective at once in every process: the cached lookup is deleted."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    api_key_cache_forget(key_hash=api_key.key_hash)
    return api_key


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


def api_key_cache_forget(*, key_hash: str) -> None:
    """Drop the cached authentication of a key (shared cache: all processes see it)."""
    cache.delete(KEY_CACHE_PREFIX + key_hash)
