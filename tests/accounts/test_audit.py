"""The audit log: every change to keys, members, budgets, limits and wallet settings leaves
exactly one append-only entry, whichever way it came in (dashboard, management API, admin);
only owners see the page; the database refuses to change or delete an entry."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client

from accounts.audit import AppendOnly, AuditEvent
from accounts.models import ApiKey, Membership, Project, Role, User
from accounts.services import api_key_create, membership_set, organization_create, project_create
from management.services import admin_key_create

pytestmark = pytest.mark.django_db


def _user(email: str, *, staff: bool = False) -> User:
    return User.objects.create_user(
        email=email, password="x" * 12, email_verified=True, is_staff=staff, is_superuser=staff
    )


@pytest.fixture
def org():
    owner = _user("owner@example.com")
    org = organization_create(name="Audited", owner=owner)
    return org


def _owner_client(org) -> Client:
    client = Client()
    client.force_login(User.objects.get(email="owner@example.com"))
    return client


def _api(org) -> tuple[Client, dict[str, str]]:
    _, raw = admin_key_create(
        organization=org, created_by=User.objects.get(email="owner@example.com"), name="ci"
    )
    return Client(), {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _events(org, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(organization=org, action=action).order_by("pk"))


def _one(org, action: str, via: str) -> AuditEvent:
    (event,) = [e for e in _events(org, action) if e.via == via]
    return event


def test_dashboard_key_create_edit_revoke_each_leave_one_entry(org):
    client = _owner_client(org)
    project = project_create(organization=org, name="P")
    assert (
        client.post(f"/o/{org.slug}/keys/new/", {"project": project.pk, "name": "k"}).status_code
        == 302
    )
    key = ApiKey.objects.get(organization=org, name="k")
    created = _one(org, "key.create", "dashboard")
    assert created.actor_email == "owner@example.com" and key.display in created.target
    edit = client.post(
        f"/o/{org.slug}/keys/{key.pk}/",
        {
            "name": "k2",
            "expires_on": "",
            "requests_per_minute": "60",
            "tokens_per_minute": "5000",
            "monthly_budget_usd": "2.5",
        },
    )
    assert edit.status_code == 302
    changed = _one(org, "key.update", "dashboard")
    assert changed.changes["requests_per_minute"] == [600, 60]
    assert changed.changes["monthly_budget_nanos"] == [None, 2_500_000_000]
    assert changed.changes["name"] == ["k", "k2"]
    assert client.post(f"/o/{org.slug}/keys/{key.pk}/revoke/").status_code == 302
    client.post(f"/o/{org.slug}/keys/{key.pk}/revoke/")  # twice: still one entry
    assert len(_events(org, "key.revoke")) == 1


def test_dashboard_members_projects_and_wallet_settings_are_audited(org):
    client = _owner_client(org)
    client.post(f"/o/{org.slug}/members/invite/", {"email": "new@example.com", "role": "member"})
    assert _one(org, "member.invite", "dashboard").changes == {
        "email": "new@example.com",
        "role": "member",
    }
    bob = _user("bob@example.com")
    bob_m = membership_set(organization=org, user=bob, role=Role.MEMBER)
    client.post(f"/o/{org.slug}/members/{bob_m.pk}/role/", {"role": "admin"})
    assert _one(org, "member.role", "dashboard").changes == {"role": ["member", "admin"]}
    client.post(f"/o/{org.slug}/members/{bob_m.pk}/remove/")
    assert _one(org, "member.remove", "dashboard").target == "member bob@example.com"
    client.post(f"/o/{org.slug}/projects/new/", {"name": "Web", "monthly_budget_usd": ""})
    project = Project.objects.get(organization=org, name="Web")
    client.post(
        f"/o/{org.slug}/projects/{project.pk}/", {"name": "Web", "monthly_budget_usd": "50"}
    )
    assert _one(org, "project.update", "dashboard").changes == {
        "monthly_budget_nanos": [None, 50_000_000_000]
    }
    client.post(f"/o/{org.slug}/wallet/low-balance/", {"threshold_usd": "7.50"})
    assert _one(org, "wallet.low_balance", "dashboard").changes == {
        "threshold_nanos": [1_000_000_000, 7_500_000_000]
    }


def test_management_api_changes_are_audited_with_the_admin_key(org):
    client, auth = _api(org)
    project = project_create(organization=org, name="API")
    url = f"/v1/organization/projects/proj_{project.pk}/api_keys"
    created = client.post(url, {"name": "svc"}, content_type="application/json", **auth)
    assert created.status_code == 201
    key_id = created.json()["id"]
    secret = created.json()["value"]
    changed = client.post(
        f"{url}/{key_id}", {"monthly_budget_usd": "3"}, content_type="application/json", **auth
    )
    assert changed.status_code == 200
    assert client.delete(f"{url}/{key_id}", **auth).status_code == 200
    for action in ("key.create", "key.update", "key.revoke"):
        event = _one(org, action, "api")
        assert event.actor_email == "owner@example.com" and event.credential.startswith(
            "ifr_admin_"
        )
    bob = _user("bob@example.com")
    membership_set(organization=org, user=bob, role=Role.MEMBER)
    role = client.post(
        f"/v1/organization/users/user_{bob.pk}",
        {"role": "billing"},
        content_type="application/json",
        **auth,
    )
    assert role.status_code == 200
    assert _one(org, "member.role", "api").changes == {"role": ["member", "billing"]}
    assert client.delete(f"/v1/organization/users/user_{bob.pk}", **auth).status_code == 200
    _one(org, "member.remove", "api")
    invite = client.post(
        "/v1/organization/invites",
        {"email": "x@example.com"},
        content_type="application/json",
        **auth,
    )
    assert invite.status_code == 201
    _one(org, "member.invite", "api")
    budget = client.post(
        f"/v1/organization/projects/proj_{project.pk}",
        {"monthly_budget_usd": "9"},
        content_type="application/json",
        **auth,
    )
    assert budget.status_code == 200
    _one(org, "project.update", "api")
    # No secret anywhere in the log.
    dump = json.dumps(
        [[e.target, e.changes, e.credential] for e in AuditEvent.objects.filter(organization=org)]
    )
    assert secret not in dump and "key_hash" not in dump


def test_admin_changes_are_audited_as_staff(org):
    staff = _user("staff@example.com", staff=True)
    client = Client()
    client.force_login(staff)
    project = project_create(organization=org, name="Adm")
    key, _ = api_key_create(project=project, name="a")
    form: dict[str, Any] = {
        "organization": org.pk,
        "project": project.pk,
        "name": "renamed",
        "created_by": "",
        "expires_at_0": "",
        "expires_at_1": "",
        "requests_per_minute": 10,
        "tokens_per_minute": 1000,
        "monthly_budget_nanos": 5,
    }
    response = client.post(f"/admin/accounts/apikey/{key.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    event = _one(org, "key.update", "admin")
    assert event.actor_email == "staff@example.com"
    assert event.changes["requests_per_minute"] == [600, 10]
    client.post(
        "/admin/accounts/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    _one(org, "key.revoke", "admin")
    response = client.post(
        f"/admin/accounts/project/{project.pk}/change/",
        {
            "organization": org.pk,
            "name": "Adm",
            "monthly_budget_nanos": 7,
            "archived_at_0": "",
            "archived_at_1": "",
            "created_at_0": "2024-01-01",
            "created_at_1": "00:00:00",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert _one(org, "project.update", "admin").changes == {"monthly_budget_nanos": [None, 7]}


def test_only_owners_see_the_page_newest_first_and_paged(org):
    project = project_create(organization=org, name="Many")
    for n in range(55):
        api_key_create(project=project, name=f"k{n}")
    client = _owner_client(org)
    page = client.get(f"/o/{org.slug}/audit/")
    body = page.content.decode()
    assert page.status_code == 200
    assert body.index("k54") < body.index("k10")  # newest first
    assert "k3)" not in body and "Older entries" in body
    older = client.get(
        f"/o/{org.slug}/audit/",
        {"before": AuditEvent.objects.filter(organization=org).order_by("-pk")[49].pk},
    )
    assert "k3)" in older.content.decode()
    for role in (Role.ADMIN, Role.MEMBER, Role.BILLING):
        user = _user(f"{role.value}@example.com")
        membership_set(organization=org, user=user, role=role)
        other = Client()
        other.force_login(user)
        assert other.get(f"/o/{org.slug}/audit/").status_code == 403
        assert "Audit log" not in other.get(f"/o/{org.slug}/").content.decode()
    stranger = Client()
    stranger.force_login(_user("stranger@example.com"))
    assert stranger.get(f"/o/{org.slug}/audit/").status_code == 404


def test_entries_refuse_update_and_delete_in_the_model_and_the_database(org):
    project = project_create(organization=org, name="Locked")
    event = AuditEvent.objects.get(organization=org, action="project.create")
    event.target = "forged"
    with pytest.raises(AppendOnly):
        event.save()
    with pytest.raises(AppendOnly):
        event.delete()
    with pytest.raises(AppendOnly):
        AuditEvent.objects.filter(pk=event.pk).update(target="forged")
    with pytest.raises(AppendOnly):
        AuditEvent.objects.filter(pk=event.pk).delete()
    table = AuditEvent._meta.db_table
    for sql in (
        f"UPDATE {table} SET target = 'forged' WHERE id = %s",
        f"DELETE FROM {table} WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cur,
        ):
            cur.execute(sql, [event.pk])
    assert AuditEvent.objects.get(pk=event.pk).target == f"project {project.name}"


def test_deleting_a_user_keeps_their_entries_by_address(org):
    bob = _user("bob@example.com")
    membership_set(organization=org, user=bob, role=Role.OWNER)
    project = project_create(organization=org, name="B")
    api_key_create(project=project, name="bobs", created_by=bob)
    Membership.objects.filter(user=bob).delete()
    bob.delete()  # Django nulls actor_id: the one update the trigger allows
    event = _one(org, "key.create", "dashboard")
    assert event.actor_id is None and event.actor_email == "bob@example.com"
