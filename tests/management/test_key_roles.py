"""Who may set a key's limits and who may touch an owner's credentials (accounts/policy.py), over
the management API and in the dashboard: one rule, enforced by the same services."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.test import Client

from accounts.models import ApiKey, Membership, Project, Role
from accounts.policy import MEMBER_KEY_CEILING
from accounts.services import api_key_create, membership_set
from management.models import AdminKey
from management.services import admin_key_create
from tests.management.conftest import Tenant, new_user
from tests.management.test_auth import error_of


def _project(tenant: Tenant) -> str:
    created = tenant.http.post("/projects", json={"name": "keys"})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _refused(response: httpx.Response, param: str | None) -> dict[str, Any]:
    assert response.status_code == 403, response.text
    error = error_of(response)
    assert (error["type"], error["code"], error["param"]) == (
        "permission_error",
        "permission_denied",
        param,
    )
    return error


def _key_count(tenant: Tenant) -> int:
    return ApiKey.objects.filter(organization=tenant.org).count()


def test_a_members_new_key_gets_the_members_ceiling_budget_included(tenant, key_with_role):
    member = key_with_role(Role.MEMBER)
    project = _project(tenant)
    created = member.post(f"/projects/{project}/api_keys", json={"name": "mine"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["requests_per_minute"], body["tokens_per_minute"]) == (600, 1_000_000)
    assert body["monthly_budget_usd"] == "10"
    row = ApiKey.objects.get(pk=int(body["id"][4:]))
    assert row.monthly_budget_nanos == MEMBER_KEY_CEILING.monthly_budget_nanos
    # Within the ceiling a member chooses freely.
    small = member.post(
        f"/projects/{project}/api_keys",
        json={"monthly_budget_usd": "2.5", "requests_per_minute": 10, "tokens_per_minute": 5000},
    )
    assert small.status_code == 201, small.text
    assert (small.json()["monthly_budget_usd"], small.json()["requests_per_minute"]) == ("2.5", 10)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"monthly_budget_usd": None}, "monthly_budget_usd"),
        ({"monthly_budget_usd": "10.000000001"}, "monthly_budget_usd"),
        ({"monthly_budget_usd": "1000000"}, "monthly_budget_usd"),
        ({"requests_per_minute": 601}, "requests_per_minute"),
        ({"requests_per_minute": 1_000_000}, "requests_per_minute"),
        ({"tokens_per_minute": 2_000_000_000}, "tokens_per_minute"),
    ],
)
def test_a_member_cannot_mint_a_key_above_its_ceiling(tenant, key_with_role, fields, param):
    member = key_with_role(Role.MEMBER)
    project = _project(tenant)
    before = _key_count(tenant)
    refused = member.post(f"/projects/{project}/api_keys", json={"name": "big", **fields})
    error = _refused(refused, param)
    assert "owner or admin" in str(error["message"])
    assert _key_count(tenant) == before  # nothing was created


def test_owners_and_admins_set_any_limits_and_no_budget(tenant, key_with_role):
    admin = key_with_role(Role.ADMIN)
    project = _project(tenant)
    for http in (tenant.http, admin):
        created = http.post(
            f"/projects/{project}/api_keys",
            json={"requests_per_minute": 1_000_000, "tokens_per_minute": 2_000_000_000},
        )
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["monthly_budget_usd"] is None
        assert (body["requests_per_minute"], body["tokens_per_minute"]) == (
            1_000_000,
            2_000_000_000,
        )


def test_a_member_tightens_its_own_key_but_never_loosens_it(tenant, key_with_role):
    member = key_with_role(Role.MEMBER)
    project = _project(tenant)
    key = member.post(f"/projects/{project}/api_keys", json={"monthly_budget_usd": "5"}).json()
    url = f"/projects/{project}/api_keys/{key['id']}"

    lowered = member.post(url, json={"monthly_budget_usd": "3", "requests_per_minute": 100})
    assert lowered.status_code == 200, lowered.text
    assert (lowered.json()["monthly_budget_usd"], lowered.json()["requests_per_minute"]) == (
        "3",
        100,
    )
    assert member.post(url, json={"name": "renamed"}).status_code == 200

    for fields, param in [
        ({"monthly_budget_usd": "4"}, "monthly_budget_usd"),
        ({"monthly_budget_usd": None}, "monthly_budget_usd"),
        ({"requests_per_minute": 101}, "requests_per_minute"),
        ({"tokens_per_minute": 1_000_001}, "tokens_per_minute"),
    ]:
        _refused(member.post(url, json={"name": "loose", **fields}), param)
    row = ApiKey.objects.get(pk=int(key["id"][4:]))
    assert (row.name, row.monthly_budget_nanos, row.requests_per_minute) == (
        "renamed",
        3_000_000_000,
        100,
    )

    # An admin raises it; the member may keep what the admin gave, not raise it further.
    admin = key_with_role(Role.ADMIN)
    raised = admin.post(url, json={"monthly_budget_usd": "50", "requests_per_minute": 5000})
    assert raised.status_code == 200, raised.text
    assert member.post(url, json={"monthly_budget_usd": "50"}).status_code == 200
    _refused(member.post(url, json={"requests_per_minute": 5001}), "requests_per_minute")
    assert admin.post(url, json={"monthly_budget_usd": None}).json()["monthly_budget_usd"] is None


def test_a_member_cannot_change_or_revoke_someone_elses_key(tenant, key_with_role):
    member = key_with_role(Role.MEMBER)
    admin = key_with_role(Role.ADMIN)
    project = _project(tenant)
    theirs = admin.post(f"/projects/{project}/api_keys", json={"name": "admin's"}).json()
    url = f"/projects/{project}/api_keys/{theirs['id']}"
    _refused(member.post(url, json={"name": "mine now"}), None)
    _refused(member.post(url, json={"expires_at": 1}), None)
    _refused(member.delete(url), None)
    row = ApiKey.objects.get(pk=int(theirs["id"][4:]))
    assert (row.name, row.expires_at, row.revoked_at) == ("admin's", None, None)


def test_no_admin_revokes_or_changes_an_owners_key(tenant, key_with_role):
    admin = key_with_role(Role.ADMIN)
    project = _project(tenant)
    owners = tenant.http.post(f"/projects/{project}/api_keys", json={"name": "owner's"}).json()
    url = f"/projects/{project}/api_keys/{owners['id']}"
    for response in (
        admin.delete(url),
        admin.post(url, json={"requests_per_minute": 1}),
        admin.post(url, json={"monthly_budget_usd": "0"}),
        admin.post(url, json={"expires_at": 1}),
    ):
        error = _refused(response, None)
        assert "owner's API key" in str(error["message"])
    row = ApiKey.objects.get(pk=int(owners["id"][4:]))
    assert (row.revoked_at, row.requests_per_minute, row.monthly_budget_nanos, row.expires_at) == (
        None,
        600,
        None,
        None,
    )
    # Another owner may.
    second_owner = key_with_role(Role.OWNER)
    assert second_owner.post(url, json={"requests_per_minute": 1}).status_code == 200
    assert second_owner.delete(url).status_code == 200


def test_no_admin_revokes_an_owners_admin_key_or_demotes_an_owner(tenant, key_with_role):
    admin = key_with_role(Role.ADMIN)
    owners_key = AdminKey.objects.get(organization=tenant.org, created_by=tenant.owner)
    error = _refused(admin.delete(f"/admin_api_keys/admin_key_{owners_key.pk}"), None)
    assert "owner's admin key" in str(error["message"])
    owners_key.refresh_from_db()
    assert owners_key.revoked_at is None
    assert tenant.http.get("/projects").status_code == 200  # the owner's key still works

    owner_id = f"user_{tenant.owner.pk}"
    _refused(admin.post(f"/users/{owner_id}", json={"role": "member"}), None)
    _refused(admin.delete(f"/users/{owner_id}"), None)
    membership = Membership.objects.get(organization=tenant.org, user=tenant.owner)
    assert membership.role == Role.OWNER

    # An admin revokes its own key and other admins' keys; an owner revokes anyone's.
    other_admin = new_user("admin")
    membership_set(organization=tenant.org, user=other_admin, role=Role.ADMIN)
    others, _ = admin_key_create(organization=tenant.org, created_by=other_admin)
    assert admin.delete(f"/admin_api_keys/admin_key_{others.pk}").status_code == 200
    admins_own = AdminKey.objects.filter(organization=tenant.org, role=Role.ADMIN).exclude(
        created_by=other_admin
    )
    (admin_row,) = admins_own
    assert tenant.http.delete(f"/admin_api_keys/admin_key_{admin_row.pk}").status_code == 200
    assert admin.get("/projects").status_code == 401


def test_an_owner_may_revoke_its_own_admin_key_even_when_acting_as_admin(tenant, clients):
    """A key made while its creator was admin acts as admin after the creator becomes owner;
    it may still revoke the creator's own keys (they are the actor's own), no other owner's."""
    user = new_user("promoted")
    membership = membership_set(organization=tenant.org, user=user, role=Role.ADMIN)
    _, raw = admin_key_create(organization=tenant.org, created_by=user)
    own_other, _ = admin_key_create(organization=tenant.org, created_by=user)
    membership.role = Role.OWNER
    membership.save()
    http = clients(raw)
    owners_key = AdminKey.objects.get(organization=tenant.org, created_by=tenant.owner)
    _refused(http.delete(f"/admin_api_keys/admin_key_{owners_key.pk}"), None)
    assert http.delete(f"/admin_api_keys/admin_key_{own_other.pk}").status_code == 200


# --- the dashboard: the same services, the same rule ---------------------------------------


@pytest.fixture
def org_client(tenant: Tenant):
    def make(role: Role) -> tuple[Client, Any]:
        user = new_user(role.value)
        user.email_verified = True
        user.save()
        membership_set(organization=tenant.org, user=user, role=role)
        client = Client()
        client.force_login(user)
        return client, user

    return make


def test_the_dashboard_gives_a_members_key_the_ceiling(tenant, org_client):
    client, user = org_client(Role.MEMBER)
    project = Project.objects.create(organization=tenant.org, name="dash")
    response = client.post(
        f"/o/{tenant.org.slug}/keys/new/", {"project": project.pk, "name": "from the page"}
    )
    assert response.status_code == 302
    row = ApiKey.objects.get(organization=tenant.org, created_by=user)
    assert (row.monthly_budget_nanos, row.requests_per_minute, row.tokens_per_minute) == (
        MEMBER_KEY_CEILING.monthly_budget_nanos,
        MEMBER_KEY_CEILING.requests_per_minute,
        MEMBER_KEY_CEILING.tokens_per_minute,
    )
    admin, admin_user = org_client(Role.ADMIN)
    assert admin.post(f"/o/{tenant.org.slug}/keys/new/", {"project": project.pk}).status_code == 302
    assert ApiKey.objects.get(created_by=admin_user).monthly_budget_nanos is None


def test_the_dashboard_refuses_an_admin_the_owners_keys(tenant, org_client):
    admin, _ = org_client(Role.ADMIN)
    project = Project.objects.create(organization=tenant.org, name="dash")
    owners, _ = api_key_create(project=project, name="owner's", created_by=tenant.owner)
    slug = tenant.org.slug
    assert admin.post(f"/o/{slug}/keys/{owners.pk}/revoke/").status_code == 403
    edit = admin.post(f"/o/{slug}/keys/{owners.pk}/", {"name": "taken", "expires_on": ""})
    assert edit.status_code == 403
    owners.refresh_from_db()
    assert (owners.revoked_at, owners.name) == (None, "owner's")

    owners_admin_key = AdminKey.objects.get(organization=tenant.org, created_by=tenant.owner)
    page = admin.post(f"/o/{slug}/admin-keys/", {"revoke": str(owners_admin_key.pk)})
    assert page.status_code == 403
    owners_admin_key.refresh_from_db()
    assert owners_admin_key.revoked_at is None
