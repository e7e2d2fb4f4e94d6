"""The live channel of an organization's open dashboard pages (a channel-layer group).

Any app may announce that something of an organization changed; the dashboard's websocket
consumer (:mod:`dashboard.consumers`) turns announcements into what the page shows. Sending is
best effort: a failing channel layer is logged, never raised, so it cannot fail the caller.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def group_name(organization_id: int) -> str:
    """The channel-layer group of one organization's open dashboard pages."""
    return f"org-{organization_id}"


async def asend(organization_id: int, payload: dict[str, Any]) -> None:
    """Send ``payload`` (a ``kind`` plus fields) to the organization's pages."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(group_name(organization_id), {"type": "live.event", **payload})
    except Exception:  # best effort: never fail the caller
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
        except Exception:
            log.warning(
                "live wallet announcement for org %s failed", organization_id, exc_info=True
            )

    transaction.on_commit(send)
