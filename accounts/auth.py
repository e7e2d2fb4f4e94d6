"""Authentication of ``/v1`` calls from ``Authorization: Bearer <key>``.

A checksum test (no I/O), then the key's context from the shared cache (one GET); on a miss,
one indexed query, cached for ``INFRAI_KEY_CACHE_TTL_S`` seconds. Revocation and edits delete
the cache entry (see :func:`accounts.services.api_key_cache_forget`), so a revoked key fails on
its next call in every process sharing the cache.

The metered hot path saves the GET: each process also remembers the contexts it has read
(:data:`_memo`, bounded in age and size). A route whose handler counts the call against the
key's limits before it does anything for the caller authenticates with ``confirm=False``:
the remembered context lets it read and validate the body, and :func:`confirm` — fed the cache
entry read in the same Redis round trip as the rate-limit counters (``inference.limits``) —
checks it is still current before anything is served, held or charged: a revoked key gets its
401 there, in every process. Every other route confirms up front (the GET), as before.
``last_used_at`` is written at most once a minute per key, off the request's critical path.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey
from accounts.services import key_cache_key, key_slot_tag
from config.errors import AuthenticationFailed
from infra import background, fastcache, observability
from infra.db import db_async

_USED_PREFIX = "apikey-used:"
_TOUCH_EVERY_S = 60
# Per-process memo of when this process last claimed a key's once-a-minute touch, so most
# calls skip the shared-cache round trip that arbitrates between processes.
_touched_at: dict[int, float] = {}
# At most this many remembered contexts per process (the memo is emptied when it is full).
MEMO_MAX_KEYS = 10_000


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
    # The organization's retention of stored Responses in days (None: the platform default;
    # 0: zero retention). Defaulted for the same reason.
    response_retention_days: int | None = None


@dataclass(slots=True)
class _Remembered:
    """A context this process read, as the shared cache holds it (``raw``), and when it was
    last known current (monotonic seconds)."""

    raw: str
    context: KeyContext
    at: float


# Contexts by key hash (module docstring). Entries older than INFRAI_KEY_CACHE_TTL_S are not
# used without confirmation.
_memo: dict[str, _Remembered] = {}


def _remember(context: KeyContext, raw: str) -> KeyContext:
    if len(_memo) >= MEMO_MAX_KEYS:
        _memo.clear()
    _memo[context.key_hash] = _Remembered(raw=raw, context=context, at=time.monotonic())
    return context


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
        response_retention_days=row.organization.response_retention_days,
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
async def authenticate(authorization: str | None, *, confirm: bool = True) -> KeyContext:
    """Resolve the caller of a request or raise :class:`AuthenticationFailed`.

    Distinct codes: ``missing_api_key``, ``invalid_api_key`` (unknown or malformed),
    ``revoked_api_key``, ``expired_api_key``; an admin key (``ifr_admin_…``, management API
    only) is ``invalid_api_key`` with a message saying so. The error never echoes the key.

    With ``confirm=False`` a context this process remembers (younger than
    ``INFRAI_KEY_CACHE_TTL_S``) is returned without I/O; the caller MUST pass the shared cache
    entry to :func:`confirm` before it serves, holds or charges anything.
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
    remembered = None if confirm else _memo.get(key_hash)
    if (
        remembered is not None
        and time.monotonic() - remembered.at < settings.INFRAI_KEY_CACHE_TTL_S
    ):
        return await _admitted(remembered.context)
    return await _admitted(await _current(key_hash, await fastcache.get_raw(cache_key(key_hash))))


async def confirm(ctx: KeyContext, cached: str | None) -> KeyContext:
    """The current context of ``ctx``'s key, given ``cached``: the shared cache's entry for it
    (:func:`cache_key`) as read just now. Raises :class:`AuthenticationFailed` when the key was
    revoked or expired (or deleted) since ``ctx`` was read. No I/O when the entry is the one
    this process remembers."""
    return await _admitted(await _current(ctx.key_hash, cached))


def cache_key(key_hash: str) -> str:
    """The shared cache's key for the context of the API key hashed ``key_hash`` (under the
    key's hash tag, :func:`slot_tag`)."""
    return key_cache_key(key_hash)


def slot_tag(key_hash: str) -> str:
    """The Redis Cluster hash tag of every key kept per API key (:func:`cache_key`, the
    rate-limit counters of ``inference.limits``): a pipeline over them stays on one slot."""
    return key_slot_tag(key_hash)


async def _current(key_hash: str, cached: str | None) -> KeyContext:
    """The context from the shared cache's entry ``cached`` (parsed only when it is not the one
    remembered), or — when there is none — from the database (then cached); remembered either
    way. Unknown key: 401 ``invalid_api_key``."""
    if cached is not None:
        remembered = _memo.get(key_hash)
        if remembered is not None and remembered.raw == cached:
            remembered.at = time.monotonic()
            return remembered.context
        return _remember(KeyContext(**fastcache.decode(cached)), cached)
    ctx = await _context_from_db_async(key_hash)
    if ctx is None:
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
    value = asdict(ctx)
    await fastcache.set(cache_key(key_hash), value, settings.INFRAI_KEY_CACHE_TTL_S)
    return _remember(ctx, fastcache.encode(value))


async def _admitted(ctx: KeyContext) -> KeyContext:
    """``ctx`` if its key may call now (not revoked, not expired), else the 401."""
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
        background.spawn(_touch_last_used_async(key_id, now))


def key_context(*, key_id: int) -> KeyContext | None:
    """The current context of the API key ``key_id`` read from the database (``None`` when it
    is gone), for work a key started that runs outside its request (a batch's lines): the
    caller must refuse to serve a context that is revoked or expired."""
    key_hash = ApiKey.objects.filter(pk=key_id).values_list("key_hash", flat=True).first()
    return None if key_hash is None else _context_from_db(key_hash)
