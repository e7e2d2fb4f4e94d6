"""The live websocket re-checks the session and the membership before every event it forwards:
a member who logs out, is removed or loses billing rights stops receiving at once."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async

from accounts.models import Membership, Role
from accounts.services import membership_change_role, membership_remove
from dashboard.consumers import CLOSE_FORBIDDEN
from tests.dashboard.test_live import (  # noqa: F401  (_no_wait_for_rows: autouse)
    _connect,
    _no_wait_for_rows,
    logged_in_session,
    push_usage,
    push_wallet_changed,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def _closed_on_next_event(ws, organization_id: int) -> dict:
    await push_usage(organization_id)
    return await ws.receive_output(timeout=5)


def test_a_removed_member_is_closed_on_the_next_event(member_client):
    _, member, org = member_client(Role.ADMIN)

    async def scenario() -> tuple[dict, dict]:
        ws, connected = await _connect(member, org.slug)
        assert connected
        await push_usage(org.pk)
        before = await ws.receive_json_from(timeout=5)
        await ws.receive_json_from(timeout=5)  # the balance that follows a usage event
        membership = await database_sync_to_async(Membership.objects.get)(user=member)
        await database_sync_to_async(membership_remove)(membership=membership)
        after = await _closed_on_next_event(ws, org.pk)
        return before, after

    before, after = async_to_sync(scenario)()
    assert before["kind"] == "usage"
    assert after == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}


def test_a_logged_out_session_is_closed_on_the_next_event(member_client):
    _, member, org = member_client(Role.MEMBER)

    async def scenario() -> dict:
        session = await sync_to_async(logged_in_session)(member)
        ws, connected = await _connect(member, org.slug, session=session)
        assert connected
        await sync_to_async(session.flush)()  # what logout() does
        return await _closed_on_next_event(ws, org.pk)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}


def test_a_session_of_another_user_or_none_is_refused_on_connect(member_client, make_user):
    _, member, org = member_client(Role.OWNER)
    stranger = make_user("stranger@example.com")

    async def scenario() -> list[bool]:
        results = []
        # The scope claims the member, but the session belongs to a stranger.
        session = await sync_to_async(logged_in_session)(stranger)
        ws, connected = await _connect(member, org.slug, session=session)
        results.append(connected)
        if connected:
            await ws.disconnect()
        return results

    assert async_to_sync(scenario)() == [False]


def test_a_changed_password_ends_the_stream(member_client):
    _, member, org = member_client(Role.MEMBER)

    async def scenario() -> dict:
        ws, connected = await _connect(member, org.slug)
        assert connected

        def change_password() -> None:
            member.set_password("a-new-long-password-1")
            member.save()

        await sync_to_async(change_password)()
        return await _closed_on_next_event(ws, org.pk)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}


def test_losing_billing_rights_stops_balance_events_at_once(member_client):
    _, member, org = member_client(Role.BILLING)

    async def scenario() -> tuple[list[str], list[str]]:
        ws, connected = await _connect(member, org.slug)
        assert connected
        await push_wallet_changed(org.pk)
        before = [(await ws.receive_json_from(timeout=5))["kind"]]
        membership = await database_sync_to_async(Membership.objects.get)(user=member)
        await database_sync_to_async(membership_change_role)(
            membership=membership, role=Role.MEMBER
        )
        await push_wallet_changed(org.pk)
        await push_usage(org.pk)
        after = [(await ws.receive_json_from(timeout=5))["kind"]]
        assert await ws.receive_nothing(timeout=0.2)
        await ws.disconnect()
        return before, after

    before, after = async_to_sync(scenario)()
    assert before == ["balance"] and after == ["usage"]
