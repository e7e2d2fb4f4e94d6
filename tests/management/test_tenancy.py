"""Another organization's admin key sees and changes nothing of this one: 404s."""

from __future__ import annotations

from accounts.models import ApiKey, Invitation, Membership, Project
from accounts.services import (
    api_key_create,
    invitation_create,
    membership_set,
    project_create,
)
from management.models import AdminKey
from tests.dashboard.factories import request_log_row
from tests.management.conftest import new_user


def test_another_organizations_ids_are_404_and_nothing_changes(tenant, make_tenant):
    project = project_create(organization=tenant.org, name="secret")
    key, _ = api_key_create(project=project)
    member = new_user()
    membership_set(organization=tenant.org, user=member, role="member")
    invite, _ = invitation_create(
        organization=tenant.org, email="x@example.com", role="member", invited_by=None
    )
    log = request_log_row(organization_id=tenant.org.pk, project_id=project.pk)

    admin_key = AdminKey.objects.get(organization=tenant.org)
    intruder = make_tenant("Intruder").http
    p, k, a = f"proj_{project.pk}", f"key_{key.pk}", f"admin_key_{admin_key.pk}"
    attempts = [
        ("GET", f"/projects/{p}", None),
        ("POST", f"/projects/{p}", {"name": "pwned", "monthly_budget_usd": "0"}),
        ("POST", f"/projects/{p}/archive", None),
        ("GET", f"/projects/{p}/api_keys", None),
        ("POST", f"/projects/{p}/api_keys", {"name": "backdoor"}),
        ("GET", f"/projects/{p}/api_keys/{k}", None),
        ("POST", f"/projects/{p}/api_keys/{k}", {"requests_per_minute": 1}),
        ("POST", f"/projects/{p}/api_keys/{k}", {"monthly_budget_usd": "0"}),
        ("DELETE", f"/projects/{p}/api_keys/{k}", None),
        ("GET", f"/users/user_{member.pk}", None),
        ("POST", f"/users/user_{member.pk}", {"role": "owner"}),
        ("DELETE", f"/users/user_{member.pk}", None),
        ("GET", f"/invites/invite_{invite.pk}", None),
        ("DELETE", f"/invites/invite_{invite.pk}", None),
        ("GET", f"/requests/{log.request_id}", None),
        ("GET", f"/admin_api_keys/{a}", None),
        ("DELETE", f"/admin_api_keys/{a}", None),
    ]
    statuses = {
        (method, path): intruder.request(method, path, json=body).status_code
        for method, path, body in attempts
    }
    assert set(statuses.values()) == {404}, statuses

    listed = [
        intruder.get(path).json()["data"]
        for path in ("/projects", "/users", "/invites", "/requests", "/wallet/ledger")
    ]
    assert all(f"proj_{project.pk}" not in str(page) for page in listed)
    assert log.request_id not in str(listed[3])
    assert member.email not in str(listed[1])

    project.refresh_from_db()
    key.refresh_from_db()
    assert (project.name, project.archived_at, project.monthly_budget_nanos) == (
        "secret",
        None,
        None,
    )
    assert (key.revoked_at, key.requests_per_minute, key.monthly_budget_nanos) == (None, 600, None)
    admin_key.refresh_from_db()
    assert admin_key.revoked_at is None
    assert tenant.http.get("/projects").status_code == 200
    assert ApiKey.objects.filter(project=project).count() == 1
    assert Membership.objects.get(organization=tenant.org, user=member).role == "member"
    assert Invitation.objects.get(pk=invite.pk).revoked_at is None
    assert Project.objects.filter(organization=tenant.org).count() == 1
