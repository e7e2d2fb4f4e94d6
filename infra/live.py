"""The live channel of an organization's open dashboard pages (a channel-layer group).

Any app may announce that something of an organization changed; the dashboard's websocket
consumer (:mod:`dashboard.consumers`) turns announcements into what the page shows. Sending is
best effort: a failing channel layer is logged, never raised, so it cannot fail the caller.

Announcements cost Redis round trips, so they go only to organizations with a page open: the
consumer counts its pages in (:func:`watch`/:func:`unwatch`), and a process trusts what it read
of that count for :data:`WATCH_MEMO_S`. A page that opens may therefore miss that long of
announcements (as it misses those between its render and its socket opening): the consumer
tells it to re-read once that window has passed (``resync``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from infra import fastcache, outages

log = logging.getLogger(__name__)
# How long a process trusts what it read of an organization's open-page count.
WATCH_MEMO_S = 1.0
# A count left behind by a process that died with pages open expires after this long.
_WATCH_TTL_S = 86_400
_watched: dict[int, tuple[float, bool]] = {}


def group_name(organization_id: int) -> str:
    """The channel-layer group of one organization's open dashboard pages."""
    return f"org-{organization_id}"


def _watchers_key(organization_id: int) -> str:
    return f"live:watchers:{organization_id}"


async def watch(organization_id: int) -> None:
    """A page of the organization opened (announcements start reaching it)."""
    await fastcache.incr_many([(_watchers_key(organization_id), 1)], _WATCH_TTL_S)
    _watched.pop(organization_id, None)


async def unwatch(organization_id: int) -> None:
    """A page that :func:`watch` counted closed."""
    await fastcache.incr_many([(_watchers_key(organization_id), -1)], _WATCH_TTL_S)


def known_unwatched(organization_id: int) -> bool:
    """Whether this process read, less than :data:`WATCH_MEMO_S` ago, that the organization
    has no page open (then :func:`asend` would send nothing: callers may skip even the task)."""
    memo = _watched.get(organization_id)
    return memo is not None and memo[0] > time.monotonic() and not memo[1]


async def _is_watched(organization_id: int) -> bool:
    """Whether the organization has a page open, as read at most :data:`WATCH_MEMO_S` ago."""
    now = time.monotonic()
    memo = _watched.get(organization_id)
    if memo is not None and memo[0] > now:
        return memo[1]
    count = await fastcache.get(_watchers_key(organization_id))
    watched = bool(count and int(count) > 0)
    _watched[organization_id] = (now + WATCH_MEMO_S, watched)
    return watched


async def asend(organization_id: int, payload: dict[str, Any]) -> None:
    """Send ``payload`` (a ``kind`` plus fields) to the organization's pages, if it has any
    open."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if not await _is_watched(organization_id):
            return
        await layer.group_send(group_name(organization_id), {"type": "live.event", **payload})
    except Exception as exc:  # best effort: never fail the caller
        if not outages.noted(exc):
            log.warning("live push to org %s failed", organization_id, exc_info=True)


def usage_event(
    *,
    request_id: str,
    model: str,
    vendor: str,
    status: str,
    input_tokens: int,
    output_tokens: int,
    cost_nanos: int,
    latency_ms: int,
    project_id: int | None,
    api_key_id: int | None,
) -> dict[str, Any]:
    """The ``usage`` announcement of one recorded ``/v1`` call."""
    return {
        "kind": "usage",
        "request_id": request_id,
        "model": model,
        "vendor": vendor,
        "status": status,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_nanos": cost_nanos,
        "latency_ms": latency_ms,
        "project_id": project_id,
        "api_key_id": api_key_id,
    }


def announce_wallet_change_on_commit(organization_id: int) -> None:
    """After the current transaction commits, tell open pages the wallet changed."""

    def send() -> None:
        try:
            async_to_sync(asend)(organization_id, {"kind": "wallet_changed"})
        except Exception as exc:
            if not outages.noted(exc):
                log.warning(
                    "live wallet announcement for org %s failed", organization_id, exc_info=True
                )

    transaction.on_commit(send)
