"""The live websocket: ``/ws/o/<slug>/live/`` turns an organization's :mod:`infra.live`
announcements into what its open pages show, for members only."""

from __future__ import annotations

import asyncio
from importlib import import_module
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth

from accounts.models import Membership, Organization, User
from billing.selectors import wallet_summary
from dashboard.permissions import SEE_BILLING
from dashboard.templatetags.dashboard import usd
from inference.selectors import request_recorded
from infra import live
from infra.db import db_async
from infra.live import group_name

BALANCE_KEYS = ("balance_nanos", "balance_display", "available_display", "held_display")
# Closed by the server: the session ended or the membership is gone (the page should reload).
CLOSE_FORBIDDEN = 4403


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


class _SessionRequest:
    """The one attribute :func:`django.contrib.auth.get_user` reads from a request."""

    def __init__(self, session: Any) -> None:
        self.session = session


def _session_user(session_key: str | None) -> User | None:
    """The user the session ``session_key`` is logged in as right now, read afresh from the
    session store (a logged-out, flushed or expired session, or one whose password hash no
    longer matches, has none)."""
    if not session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = auth.get_user(_SessionRequest(store))  # type: ignore[arg-type]
    if not isinstance(user, User) or not user.is_active or not user.email_verified:
        return None
    return user


def access_on_connect(session_key: str | None, slug: str) -> tuple[int, int, bool] | None:
    """``(user_id, organization_id, may_see_billing)`` for a verified member, else None."""
    user = _session_user(session_key)
    if user is None:
        return None
    membership = (
        Membership.objects.filter(user=user, organization__slug=slug)
        .values_list("organization_id", "role")
        .first()
    )
    if membership is None:
        return None
    organization_id, role = membership
    return user.pk, organization_id, role in SEE_BILLING


def access_now(session_key: str | None, user_id: int, organization_id: int) -> bool | None:
    """``may_see_billing`` while the session is still ``user_id``'s and they are still a member
    of ``organization_id``; None once either has ended. A few indexed queries."""
    user = _session_user(session_key)
    if user is None or user.pk != user_id:
        return None
    role = (
        Membership.objects.filter(user_id=user_id, organization_id=organization_id)
        .values_list("role", flat=True)
        .first()
    )
    if role is None or not Organization.objects.filter(pk=organization_id).exists():
        return None
    return role in SEE_BILLING


_access_on_connect = db_async(access_on_connect)
_access_now = db_async(access_now)
_balance_payload = db_async(balance_payload)
_request_recorded = db_async(request_recorded)

# How long a usage event waits for its request-log row to be committed before it is forwarded
# anyway (the request path announces a call while its row is still being written).
RECORD_WAIT_S = 3.0
_RECORD_POLL_S = 0.05


async def _recorded(organization_id: int, request_id: str) -> bool:
    """Wait until the call's row is readable (so a page re-reading itself now shows it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECORD_WAIT_S
    while not await _request_recorded(organization_id=organization_id, request_id=request_id):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_RECORD_POLL_S)
    return True


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the organization's group after checking the session user's membership.

    Consumers bypass Django's middleware: the check is done here — on connect, and again before
    **every** event is forwarded, from the session store and the database (not the scope's
    copies), so a member who logged out, was removed or lost their role stops receiving at the
    next event: the socket is closed with 4403. Balance events reach only roles that may see
    the wallet, as they are now.
    """

    group: str = ""
    _resync: asyncio.TimerHandle | None = None
    session_key: str | None = None
    user_id: int = 0
    organization_id: int = 0

    async def connect(self) -> None:
        slug = self.scope["url_route"]["kwargs"]["slug"]
        session = self.scope.get("session")
        self.session_key = getattr(session, "session_key", None)
        found = await _access_on_connect(self.session_key, slug)
        if found is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user_id, self.organization_id, _ = found
        self.group = group_name(self.organization_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await live.watch(self.organization_id)
        await self.accept()
        # Announcements may skip this page for up to WATCH_MEMO_S after it opened (processes
        # trust their "nobody is watching" that long): then ask the page to re-read.
        self._resync = asyncio.get_running_loop().call_later(
            live.WATCH_MEMO_S, lambda: asyncio.ensure_future(self.send_json({"kind": "resync"}))
        )

    async def disconnect(self, code: int) -> None:
        if self._resync is not None:
            self._resync.cancel()
            self._resync = None
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await live.unwatch(self.organization_id)
            self.group = ""

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients only listen; anything they send is ignored."""

    async def live_event(self, event: dict[str, Any]) -> None:
        may_see_billing = await _access_now(self.session_key, self.user_id, self.organization_id)
        if may_see_billing is None:
            await self.disconnect(CLOSE_FORBIDDEN)
            await self.close(code=CLOSE_FORBIDDEN)
            return
        payload = {k: v for k, v in event.items() if k != "type"}
        kind = payload.get("kind")
        if kind == "balance" and not may_see_billing:
            return
        if kind == "usage":
            await _recorded(self.organization_id, str(payload.get("request_id") or ""))
            payload.setdefault("cost_display", usd(int(payload.get("cost_nanos") or 0)))
        if kind != "wallet_changed":
            await self.send_json(payload)
        if kind in ("usage", "wallet_changed") and may_see_billing:
            # The wallet moved (a call was settled, a top-up credited): read it once per open
            # page, so API calls never pay for dashboards nobody is watching.
            await self.send_json(await _balance_payload(organization_id=self.organization_id))
