"""One pooled ``httpx.AsyncClient`` per vendor (per event loop: a pool cannot cross loops)."""

from __future__ import annotations

import asyncio
import weakref

import httpx

from inference.vendors.base import VendorTarget

_LIMITS = httpx.Limits(max_connections=200, max_keepalive_connections=50, keepalive_expiry=30)
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)


def timeout_for(target: VendorTarget) -> httpx.Timeout:
    """Explicit timeouts of one call: connect, read (the longest silence between two chunks,
    or before the answer), write, pool."""
    return httpx.Timeout(
        connect=target.connect_timeout_s, read=target.read_timeout_s, write=10.0, pool=5.0
    )


def client_for(target: VendorTarget) -> httpx.AsyncClient:
    """The shared client for ``target.vendor`` on the running loop, created on first use.

    Each request passes :func:`timeout_for` its target, so settings changes apply at once.
    """
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    key = f"{target.vendor}|{target.base_url}"
    client = per_loop.get(key)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(
            base_url=target.base_url.rstrip("/") + "/",
            timeout=timeout_for(target),
            limits=_LIMITS,
            headers={"user-agent": "infrai-gateway/0.1"},
        )
        per_loop[key] = client
    return client
