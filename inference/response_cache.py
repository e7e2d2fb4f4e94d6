"""Exact-match response cache for deterministic calls, scoped per organization, with request
coalescing.

The key is a SHA-256 of the organization id and the canonical JSON of everything that shapes
the answer (the forwarded payload minus ``stream``/``stream_options``/``user``, and the routing
inputs), so one tenant can never read — or probe for — another's prompts. A hit costs the
caller nothing and is logged like any call.

Coalescing: the first caller of a key that misses becomes its *leader* (:func:`lead`); an
identical request arriving while the leader is in flight in this process waits for the
leader's entry (:func:`find`, at most :data:`WAIT_S`) instead of calling the vendor again, and
is then answered as a cache hit (billed 0). If the leader fails, or takes longer, the follower
makes its own call.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from infra import fastcache, jsonio

# How long an identical request waits for the one in flight before calling the vendor itself.
WAIT_S = 30.0
_leaders: dict[str, asyncio.Future[dict[str, Any] | None]] = {}

TTL_S = 3600
_IGNORED = {"stream", "stream_options", "user"}


def cache_key(*, organization_id: int, endpoint: str, payload: dict[str, Any], extra: Any) -> str:
    """The cache key of a request (hex digest; nothing of the prompt is readable in it)."""
    shaped = {k: v for k, v in payload.items() if k not in _IGNORED}
    canonical = jsonio.canonical([organization_id, endpoint, shaped, extra])
    return "rc:" + hashlib.sha256(canonical).hexdigest()


async def lookup(key: str) -> dict[str, Any] | None:
    """The cached entry or None."""
    found = await fastcache.get(key)
    return found if isinstance(found, dict) else None


async def store(key: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` (the vendor's body and who served it) for :data:`TTL_S`."""
    await fastcache.set(key, entry, TTL_S)


async def find(key: str) -> dict[str, Any] | None:
    """The cached entry of ``key``, or the entry of an identical request in flight in this
    process once it lands; ``None`` when there is neither (the caller should then
    :func:`lead`, with no ``await`` in between)."""
    hit = await lookup(key)
    if hit is not None:
        return hit
    leader = _leaders.get(key)
    if leader is None:
        return None
    try:
        return await asyncio.wait_for(asyncio.shield(leader), WAIT_S)
    except TimeoutError:
        return None


def lead(key: str) -> Leader:
    """Make this request the one in flight for ``key``: identical requests wait for it."""
    return Leader(key)


class Leader:
    """The request in flight for one key: :meth:`done` hands its entry to the followers and
    :meth:`store` caches it; :meth:`close` (always, in ``finally``) releases the followers of a
    failed call."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.future: asyncio.Future[dict[str, Any] | None] = (
            asyncio.get_running_loop().create_future()
        )
        _leaders[key] = self.future

    def done(self, entry: dict[str, Any]) -> None:
        """Hand ``entry`` to the requests waiting for it; until :meth:`store` has written it,
        new identical requests still find it here."""
        if not self.future.done():
            self.future.set_result(entry)

    async def store(self, entry: dict[str, Any]) -> None:
        """Write ``entry`` to the cache, then stop being the request in flight."""
        try:
            await store(self.key, entry)
        finally:
            self._forget()

    def close(self) -> None:
        """Release the followers (they call the vendor themselves) if :meth:`done` never ran."""
        if not self.future.done():
            self.future.set_result(None)
            self._forget()

    def _forget(self) -> None:
        if _leaders.get(self.key) is self.future:
            del _leaders[self.key]
