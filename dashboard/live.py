"""Live updates for open dashboard pages, pushed through the channel layer.

Other apps call these after the fact they report is committed (e.g. from
``transaction.on_commit`` or after writing the request-log row). Pushing is best effort: a
failing channel layer is logged and never raised, so it cannot fail an API call.

Every message goes to the group ``org-<organization_id>``; :class:`dashboard.consumers.LiveConsumer`
joins it for members of that organization and forwards balance fields only to roles that may
see the wallet.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync

from billing.selectors import wallet_summary
from config import live
from dashboard.templatetags.dashboard import usd

log = logging.getLogger(__name__)


group_name = live.group_name
_send = live.asend


def balance_payload(*, organization_id: int) -> dict[str, Any]:
    """The ``balance`` event of an organization's wallet as it is now (one or two queries)."""
    summary = wallet_summary(organization_id=organization_id)
    return {
        "kind": "balance",
        "balance_nanos": summary.balance_nanos,
        "balance_display": usd(summary.balance_nanos),
        "available_display": usd(summary.available_nanos),
        "held_display": usd(summary.held_nanos),
    }


async def apush_usage(
    *,
    organization_id: int,
    request_id: str,
    model: str,
    vendor: str,
    status: str,
    input_tokens: int,
    output_tokens: int,
    cost_nanos: int,
    latency_ms: int,
    project_id: int | None = None,
    api_key_id: int | None = None,
) -> None:
    """Report one recorded ``/v1`` call (:func:`config.live.usage_event` is the one shape;
    the consumer adds ``cost_display`` for the page)."""
    await _send(
        organization_id,
        live.usage_event(
            request_id=request_id,
            model=model,
            vendor=vendor,
            status=status,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_nanos=cost_nanos,
            latency_ms=latency_ms,
            project_id=project_id,
            api_key_id=api_key_id,
        ),
    )


def push_usage(
    *,
    organization_id: int,
    request_id: str,
    model: str,
    vendor: str,
    status: str,
    input_tokens: int,
    output_tokens: int,
    cost_nanos: int,
    latency_ms: int,
    project_id: int | None = None,
    api_key_id: int | None = None,
) -> None:
    """Sync twin of :func:`apush_usage` (for sync code: services, Celery tasks, tests).

    Must not be called from a thread running an event loop; use ``await apush_usage`` there.
    """
    async_to_sync(apush_usage)(
        organization_id=organization_id,
        request_id=request_id,
        model=model,
        vendor=vendor,
        status=status,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_nanos=cost_nanos,
        latency_ms=latency_ms,
        project_id=project_id,
        api_key_id=api_key_id,
    )


async def apush_balance(*, organization_id: int, balance_nanos: int, held_nanos: int) -> None:
    """Report the wallet's new balance and held amount (after a top-up, debit, release)."""
    await _send(
        organization_id,
        {
            "kind": "balance",
            "balance_nanos": balance_nanos,
            "balance_display": usd(balance_nanos),
            "available_display": usd(balance_nanos - held_nanos),
            "held_display": usd(held_nanos),
        },
    )


def push_balance(*, organization_id: int, balance_nanos: int, held_nanos: int) -> None:
    """Sync twin of :func:`apush_balance`; not from a thread running an event loop."""
    async_to_sync(apush_balance)(
        organization_id=organization_id, balance_nanos=balance_nanos, held_nanos=held_nanos
    )
