"""Exact-match response cache for deterministic calls, scoped per organization.

The key is a SHA-256 of the organization id and the canonical JSON of everything that shapes
the answer (the forwarded payload minus ``stream``/``stream_options``/``user``, and the routing
inputs), so one tenant can never read — or probe for — another's prompts. A hit costs the
caller nothing and is logged like any call.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from config import fastcache

TTL_S = 3600
_IGNORED = {"stream", "stream_options", "user"}


def cache_key(*, organization_id: int, endpoint: str, payload: dict[str, Any], extra: Any) -> str:
    """The cache key of a request (hex digest; nothing of the prompt is readable in it)."""
    shaped = {k: v for k, v in payload.items() if k not in _IGNORED}
    canonical = json.dumps(
        [organization_id, endpoint, shaped, extra], sort_keys=True, separators=(",", ":")
    )
    return "rc:" + hashlib.sha256(canonical.encode()).hexdigest()


async def lookup(key: str) -> dict[str, Any] | None:
    """The cached entry or None."""
    found = await fastcache.get(key)
    return found if isinstance(found, dict) else None


async def store(key: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` (the vendor's body and who served it) for :data:`TTL_S`."""
    await fastcache.set(key, entry, TTL_S)
