"""Authentication, roles and rate limits of the management API.

``Authorization: Bearer ifr_admin_…`` → the admin key, its organization and the role it acts
with. API keys (``ifr_…``) are refused here with a 401 that says so, as admin keys are refused
on ``/v1`` inference (:func:`accounts.auth.authenticate`).

Lookups are not cached: the management API is not a hot path, and an uncached lookup makes a
revocation or a change of the creator's role effective on the very next call.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from accounts.auth import bearer_token
from accounts.roles import Role
from accounts.selectors import membership_get_by_user_id
from config.errors import AuthenticationFailed, RateLimited
from management import keys
from management.models import AdminKey

if TYPE_CHECKING:
    from accounts.models import Organization

_RANK = {Role.OWNER: 3, Role.ADMIN: 2, Role.BILLING: 1, Role.MEMBER: 1}
_TOUCH_EVERY_S = 60
WINDOW_S = 60


@dataclass(frozen=True, slots=True)
class AdminContext:
    """What a management call knows about its caller."""

    admin_key: AdminKey
    organization: Organization
    role: Role


def effective_role(*, created: Role | str, current: Role | str) -> Role:
    """The role a key acts with: the creator's current role, never above the one it was
    created with (a promotion of the creator does not widen an existing key)."""
    created, current = Role(created), Role(current)
    return created if _RANK[current] > _RANK[created] else current


class AdminKeyAuthentication(BaseAuthentication):
    """DRF authentication by admin key; failures raise :class:`AuthenticationFailed` (401)."""

    def authenticate(self, request: Request) -> tuple[Any, AdminContext]:
        raw = bearer_token(request.headers.get("Authorization"))
        if not keys.is_well_formed(raw):
            if raw.startswith("ifr_") and not raw.startswith(keys.PREFIX):
                raise AuthenticationFailed(
                    "API keys cannot call the management API: use an admin key (ifr_admin_...), "
                    "created by an owner or admin in the dashboard.",
                    code="admin_key_required",
                )
            raise AuthenticationFailed("Incorrect admin key provided.", code="invalid_api_key")
        admin_key = (
            AdminKey.objects.select_related("organization", "created_by")
            .filter(key_hash=keys.hash_key(raw))
            .first()
        )
        if admin_key is None:
            raise AuthenticationFailed("Incorrect admin key provided.", code="invalid_api_key")
        if admin_key.revoked_at is not None:
            raise AuthenticationFailed("This admin key has been revoked.", code="revoked_api_key")
        membership = (
            membership_get_by_user_id(
                organization=admin_key.organization, user_id=admin_key.created_by_id
            )
            if admin_key.created_by_id is not None
            else None
        )
        if membership is None:
            raise AuthenticationFailed(
                "This admin key's creator is no longer a member of the organization.",
                code="revoked_api_key",
            )
        _touch(admin_key)
        role = effective_role(created=admin_key.role, current=membership.role)
        ctx = AdminContext(admin_key=admin_key, organization=admin_key.organization, role=role)
        return admin_key.created_by, ctx

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="infrai management"'


def _touch(admin_key: AdminKey) -> None:
    """Record ``last_used_at`` at most once a minute per key (shared cache arbitrates)."""
    if cache.add(f"adminkey-used:{admin_key.pk}", 1, _TOUCH_EVERY_S):
        now = timezone.now()
        AdminKey.objects.filter(pk=admin_key.pk).update(last_used_at=now)
        admin_key.last_used_at = now


def rate_limit(admin_key: AdminKey) -> dict[str, str]:
    """Count one call against the key's requests per minute (fixed one-minute windows in the
    shared cache: Redis in production). Returns OpenAI's ``x-ratelimit-*`` request headers or
    raises :class:`RateLimited` (429 with ``retry-after``)."""
    now = time.time()
    window = int(now // WINDOW_S)
    reset_s = (window + 1) * WINDOW_S - now
    key = f"rl-admin:{admin_key.pk}:{window}"
    cache.add(key, 0, WINDOW_S + 5)
    try:
        used = int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.add(key, 1, WINDOW_S + 5)
        used = 1
    limit = admin_key.requests_per_minute
    headers = {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(max(limit - used, 0)),
        "x-ratelimit-reset-requests": f"{math.ceil(reset_s)}s",
    }
    if used > limit:
        raise RateLimited(
            f"Rate limit reached for this admin key: {limit} requests per minute. "
            f"Try again in {math.ceil(reset_s)}s.",
            headers={"retry-after": str(math.ceil(reset_s)), **headers},
        )
    return headers
