"""The live websocket: ``/ws/o/<slug>/live/`` streams ``dashboard.live`` events to members."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.models import User
from accounts.selectors import organization_for_member
from dashboard.live import balance_payload, group_name
from dashboard.permissions import SEE_BILLING

BALANCE_KEYS = ("balance_nanos", "balance_display", "available_display", "held_display")


def _membership(user: Any, slug: str) -> tuple[int, bool] | None:
    """``(organization_id, may_see_billing)`` for a verified member, else None."""
    if not isinstance(user, User) or not user.is_active or not user.email_verified:
        return None
    found = organization_for_member(user=user, slug=slug)
    if found is None:
        return None
    organization, membership = found
    return organization.pk, membership.role in SEE_BILLING


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the organization's group after checking the session user's membership.

    Consumers bypass Django's middleware: the check is done here, on connect. Balance events
    reach only roles that may see the wallet.
    """

    group: str = ""
    may_see_billing: bool = False
    organization_id: int = 0

    async def connect(self) -> None:
        slug = self.scope["url_route"]["kwargs"]["slug"]
        found = await database_sync_to_async(_membership)(self.scope.get("user"), slug)
        if found is None:
            await self.close(code=4403)
            return
        organization_id, self.may_see_billing = found
        self.organization_id = organization_id
        self.group = group_name(organization_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients only listen; anything they send is ignored."""

    async def live_event(self, event: dict[str, Any]) -> None:
        payload = {k: v for k, v in event.items() if k != "type"}
        kind = payload.get("kind")
        if kind == "balance" and not self.may_see_billing:
            return
        if kind != "wallet_changed":
            await self.send_json(payload)
        if kind in ("usage", "wallet_changed") and self.may_see_billing:
            # The wallet moved (a call was settled, a top-up credited): read it once per open
            # page, so API calls never pay for dashboards nobody is watching.
            await self.send_json(
                await database_sync_to_async(balance_payload)(organization_id=self.organization_id)
            )
