"""Authentication of ``/v1`` calls from ``Authorization: Bearer <key>``.

The hot path: a checksum test (no I/O), then one cache GET. On a miss, one indexed query; the
result is cached for ``INFRAI_KEY_CACHE_TTL_S`` seconds. Revocation and edits delete the cache
entry (see :func:`accounts.services.api_key_cache_forget`), so a revoked key fails on its next
call in every process sharing the cache. ``last_used_at`` is written at most once a minute per
key, off the request's critical path.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey
from accounts.services import KEY_CACHE_PREFIX
from config import fastcache, observability
from config.db import db_async
from config.errors import AuthenticationFailed

_USED_PREFIX = "apikey-used:"
_TOUCH_EVERY_S = 60
_background: set[asyncio.Task[None]] = set()
# Per-process memo of when this process last claimed a key's once-a-minute touch, so most
# calls skip the shared-cache round trip that arbitrates between processes.
_touched_at: dict[int, float] = {}


@dataclass(frozen=True, slots=True)
class KeyContext:
    """What a request knows about its caller after authentication."""

    key_id: int
    key_hash: str
    project_id: int
    organization_id: int
    requests_per_minute: int
    tokens_per_minute: int
    expires_at: float | None  # unix seconds
    revoked: bool
    monthly_budget_nanos: int | None  # the project's
    log_prompts: bool
    # The key's own monthly budget (None = none). Defaulted so that a context cached by a
    # process from before the field still loads.
    key_budget_nanos: int | None = None


def _context_from_db(key_hash: str) -> KeyContext | None:
    row = ApiKey.objects.select_related("project", "organization").filter(key_hash=key_hash).first()
    if row is None:
        return None
    return KeyContext(
        key_id=row.pk,
        key_hash=key_hash,
        project_id=row.project_id,
        organization_id=row.organization_id,
        requests_per_minute=row.requests_per_minute,
        tokens_per_minute=row.tokens_per_minute,
        expires_at=row.expires_at.timestamp() if row.expires_at else None,
        revoked=row.revoked_at is not None or row.project.archived_at is not None,
        monthly_budget_nanos=row.project.monthly_budget_nanos,
        log_prompts=row.organization.log_prompts,
        key_budget_nanos=row.monthly_budget_nanos,
    )


_context_from_db_async = db_async(_context_from_db)


def _touch_last_used(key_id: int, now: datetime) -> None:
    ApiKey.objects.filter(pk=key_id).update(last_used_at=now)


_touch_last_used_async = db_async(_touch_last_used)


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer`` header, or raise 401 ``missing_api_key``."""
    if not authorization:
        raise AuthenticationFailed(
            "You didn't provide an API key. Send it as 'Authorization: Bearer ifr_...'.",
            code="missing_api_key",
        )
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed(
            "Malformed Authorization header: expected 'Bearer <key>'.", code="missing_api_key"
        )
    return token


@observability.traced("infrai.auth")
async def authenticate(authorization: str | None) -> KeyContext:
    """Resolve the caller of a request or raise :class:`AuthenticationFailed`.

    Distinct codes: ``missing_api_key``, ``invalid_api_key`` (unknown or malformed),
    ``revoked_api_key``, ``expired_api_key``; an admin key (``ifr_admin_…``, management API
    only) is ``invalid_api_key`` with a message saying so. The error never echoes the key.
    """
    raw = bearer_token(authorization)
    if raw.startswith("ifr_admin_"):
        raise AuthenticationFailed(
            "Admin keys (ifr_admin_...) cannot call inference endpoints: they are for the "
            "management API under /v1/organization/. Use a project API key.",
            code="invalid_api_key",
        )
    if not keys.is_well_formed(raw):
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
    key_hash = keys.hash_key(raw)
    cache_key = KEY_CACHE_PREFIX + key_hash
    cached = await fastcache.get(cache_key)
    if cached is None:
        ctx = await _context_from_db_async(key_hash)
        if ctx is None:
            raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
        await fastcache.set(cache_key, asdict(ctx), settings.INFRAI_KEY_CACHE_TTL_S)
    else:
        ctx = KeyContext(**cached)
    if ctx.revoked:
        raise AuthenticationFailed("This API key has been revoked.", code="revoked_api_key")
    now = timezone.now()
    if ctx.expires_at is not None and ctx.expires_at <= now.timestamp():
        raise AuthenticationFailed("This API key has expired.", code="expired_api_key")
    await _touch(ctx.key_id, now)
    return ctx


async def _touch(key_id: int, now: datetime) -> None:
    """Update ``last_used_at`` at most once a minute per key across all processes."""
    ts = now.timestamp()
    if ts - _touched_at.get(key_id, 0.0) < _TOUCH_EVERY_S:
        return
    _touched_at[key_id] = ts
    if await fastcache.add(_USED_PREFIX + str(key_id), 1, _TOUCH_EVERY_S):
        task = asyncio.get_running_loop().create_task(_touch_last_used_async(key_id, now))
        _background.add(task)
        task.add_done_callback(_background.discard)
