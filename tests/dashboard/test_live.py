"""The live websocket: members of the organization get its events; nobody else does."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.backends.db import SessionStore

from accounts.models import Role
from dashboard import consumers
from dashboard.routing import websocket_urlpatterns
from infra import live

pytestmark = pytest.mark.django_db(transaction=True)

app = URLRouter(websocket_urlpatterns)

USAGE = {
    "request_id": "req_live1",
    "model": "gpt-4o-mini",
    "vendor": "openai",
    "status": "ok",
    "input_tokens": 3,
    "output_tokens": 4,
    "cost_nanos": 1_500_000,
    "latency_ms": 42,
}


@pytest.fixture(autouse=True)
def _no_wait_for_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """These events name calls that were never recorded: forward them without waiting."""
    monkeypatch.setattr(consumers, "RECORD_WAIT_S", 0)


async def push_usage(organization_id: int) -> None:
    """What the request path announces after recording a call."""
    await live.asend(organization_id, live.usage_event(project_id=None, api_key_id=None, **USAGE))


async def push_wallet_changed(organization_id: int) -> None:
    """What billing announces after a wallet change commits."""
    await live.asend(organization_id, {"kind": "wallet_changed"})


def logged_in_session(user) -> SessionStore:
    """A saved session logged in as ``user`` (what the login view leaves behind)."""
    session = SessionStore()
    if user.is_authenticated:
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return session


async def _connect(user, slug: str, session=None) -> tuple[WebsocketCommunicator, bool]:
    communicator = WebsocketCommunicator(app, f"/ws/o/{slug}/live/")
    communicator.scope["user"] = user
    communicator.scope["session"] = session or await sync_to_async(logged_in_session)(user)
    connected, _ = await communicator.connect()
    return communicator, connected


def test_a_member_receives_usage_and_balance_events_of_its_organization(member_client, make_org):
    _, owner, org = member_client(Role.OWNER)
    other = make_org("Other")

    async def scenario() -> list[dict]:
        ws, connected = await _connect(owner, org.slug)
        assert connected
        await push_usage(other.pk)  # not ours: never arrives
        await push_usage(org.pk)
        got = [await ws.receive_json_from(timeout=5), await ws.receive_json_from(timeout=5)]
        await push_wallet_changed(org.pk)
        got.append(await ws.receive_json_from(timeout=5))
        assert await ws.receive_nothing(timeout=0.2)
        await ws.disconnect()
        return got

    usage, refreshed, balance = async_to_sync(scenario)()
    assert usage["kind"] == "usage" and usage["request_id"] == "req_live1"
    assert usage["cost_display"] == "$0.0015"
    # a settled call moved the wallet: the page re-reads it (empty here)
    assert refreshed["kind"] == "balance" and refreshed["balance_display"] == "$0.00"
    assert balance == {
        "kind": "balance",
        "balance_nanos": 0,
        "balance_display": "$0.00",
        "available_display": "$0.00",
        "held_display": "$0.00",
    }


def test_a_member_without_billing_rights_gets_usage_but_not_the_balance(member_client):
    _, member, org = member_client(Role.MEMBER)

    async def scenario() -> list[str]:
        ws, connected = await _connect(member, org.slug)
        assert connected
        await push_wallet_changed(org.pk)
        await push_usage(org.pk)
        kinds = [(await ws.receive_json_from(timeout=5))["kind"]]
        assert await ws.receive_nothing(timeout=0.2)
        await ws.disconnect()
        return kinds

    assert async_to_sync(scenario)() == ["usage"]


def test_strangers_and_anonymous_users_are_refused(member_client, make_user, make_org):
    _, _, org = member_client(Role.OWNER)
    stranger = make_user("stranger@example.com")

    async def scenario() -> list[bool]:
        results = []
        for user in (stranger, AnonymousUser()):
            ws, connected = await _connect(user, org.slug)
            results.append(connected)
            await ws.disconnect()
        return results

    assert async_to_sync(scenario)() == [False, False]


def test_a_credit_reaches_open_wallet_pages_after_commit(member_client):
    from billing.models import EntryKind
    from billing.services import wallet_credit

    _, owner, org = member_client(Role.BILLING)

    async def scenario() -> dict:
        ws, connected = await _connect(owner, org.slug)
        assert connected
        from asgiref.sync import sync_to_async

        await sync_to_async(wallet_credit)(
            organization=org,
            amount_nanos=7_000_000_000,
            kind=EntryKind.TOPUP,
            idempotency_key="live-1",
        )
        got = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert got["kind"] == "balance"
    assert got["balance_display"] == "$7.00"


def test_a_usage_event_is_forwarded_once_its_row_is_readable(member_client, monkeypatch):
    """The request path announces a call while its row is being written; the page re-reads
    itself on the event, so the event waits for the row (and is forwarded anyway after
    ``RECORD_WAIT_S``)."""
    from tests.dashboard.factories import request_log_row

    monkeypatch.setattr(consumers, "RECORD_WAIT_S", 10)
    _, owner, org = member_client(Role.MEMBER)

    async def scenario() -> tuple[bool, dict]:
        ws, connected = await _connect(owner, org.slug)
        assert connected
        await push_usage(org.pk)
        early = await ws.receive_nothing(timeout=0.3)  # no row yet: held back
        await sync_to_async(request_log_row)(organization_id=org.pk, request_id="req_live1")
        got = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        return early, got

    early, got = async_to_sync(scenario)()
    assert early is True
    assert got["kind"] == "usage" and got["request_id"] == "req_live1"
