"""Projects and API keys pages: forms, the key shown once, permissions, tenant isolation."""

from __future__ import annotations

import pytest
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey, Project, Role
from accounts.services import api_key_create, project_create

pytestmark = pytest.mark.django_db


def test_owner_creates_a_project_with_a_budget_in_exact_nanos(member_client):
    client, _, org = member_client(Role.OWNER)
    response = client.post(
        f"/o/{org.slug}/projects/new/", {"name": "Backend", "monthly_budget_usd": "12.34"}
    )
    assert response.status_code == 302
    project = Project.objects.get(organization=org, name="Backend")
    assert project.monthly_budget_nanos == 12_340_000_000


def test_project_form_errors_are_specific(member_client):
    client, _, org = member_client(Role.ADMIN)
    project_create(organization=org, name="Backend")
    response = client.post(
        f"/o/{org.slug}/projects/new/", {"name": "Backend", "monthly_budget_usd": "-1"}
    )
    assert response.status_code == 400
    text = response.content.decode()
    assert "A project with this name already exists." in text
    assert "Ensure this value is greater than or equal to 0.01." in text


def test_rename_budget_and_archive(member_client):
    client, _, org = member_client(Role.OWNER)
    project = project_create(organization=org, name="Old", monthly_budget_nanos=5)
    client.post(f"/o/{org.slug}/projects/{project.pk}/", {"name": "New", "monthly_budget_usd": ""})
    project.refresh_from_db()
    assert (project.name, project.monthly_budget_nanos) == ("New", None)
    client.post(f"/o/{org.slug}/projects/{project.pk}/archive/")
    project.refresh_from_db()
    assert project.archived_at is not None


@pytest.mark.parametrize("role", [Role.MEMBER, Role.BILLING])
def test_members_and_billing_cannot_create_or_archive_projects(member_client, role):
    client, _, org = member_client(role)
    project = project_create(organization=org, name="P")
    assert client.post(f"/o/{org.slug}/projects/new/", {"name": "X"}).status_code == 403
    assert client.post(f"/o/{org.slug}/projects/{project.pk}/archive/").status_code == 403
    assert client.get(f"/o/{org.slug}/projects/{project.pk}/").status_code == 403
    assert not Project.objects.filter(name="X").exists()
    project.refresh_from_db()
    assert project.archived_at is None


def test_created_key_is_shown_once_after_a_redirect_and_a_reload_mints_nothing(member_client):
    client, user, org = member_client(Role.MEMBER)
    project = project_create(organization=org, name="P")
    posted = client.post(
        f"/o/{org.slug}/keys/new/",
        {"name": "ci", "project": project.pk, "expires_in_days": "30"},
    )
    api_key = ApiKey.objects.get(organization=org)
    assert posted.status_code == 302
    assert posted["Location"] == f"/o/{org.slug}/keys/{api_key.pk}/created/"
    response = client.get(posted["Location"])
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    text = response.content.decode()
    raw = text.split('data-testid="new-key">', 1)[1].split("<", 1)[0]
    assert keys.is_well_formed(raw) and keys.hash_key(raw) == api_key.key_hash
    assert f'api_key="{raw}"' in text  # the SDK snippet carries the key
    assert api_key.created_by == user and api_key.expires_at > timezone.now()
    listing = client.get(f"/o/{org.slug}/keys/").content.decode()
    assert api_key.display in listing and raw not in listing
    assert user.email in listing  # "created by"
    # A reload of the shown page: back to the list, the key is not shown again nor re-minted.
    again = client.get(posted["Location"], follow=True)
    text = again.content.decode()
    assert raw not in text and "cannot be shown again" in text
    assert ApiKey.objects.filter(organization=org).count() == 1


def test_revoking_someone_else_s_key_needs_an_owner_or_admin(member_client):
    owner, owner_user, org = member_client(Role.OWNER)
    member, member_user, _ = member_client(Role.MEMBER, org=org)
    project = project_create(organization=org, name="P")
    theirs, _ = api_key_create(project=project, created_by=owner_user)
    mine, _ = api_key_create(project=project, created_by=member_user)
    listing = member.get(f"/o/{org.slug}/keys/").content.decode()
    assert f"/keys/{mine.pk}/revoke/" in listing and f"/keys/{theirs.pk}/revoke/" not in listing
    assert member.post(f"/o/{org.slug}/keys/{theirs.pk}/revoke/").status_code == 403
    assert member.post(f"/o/{org.slug}/keys/{mine.pk}/revoke/").status_code == 302
    assert owner.post(f"/o/{org.slug}/keys/{theirs.pk}/revoke/").status_code == 302
    theirs.refresh_from_db()
    mine.refresh_from_db()
    assert theirs.revoked_at is not None and mine.revoked_at is not None


def test_billing_role_cannot_create_keys(member_client):
    client, _, org = member_client(Role.BILLING)
    project = project_create(organization=org, name="P")
    response = client.post(f"/o/{org.slug}/keys/new/", {"project": project.pk})
    assert response.status_code == 403
    assert not ApiKey.objects.exists()


def test_key_edit_rejects_a_past_expiry_and_revoke_revokes(member_client):
    client, _, org = member_client(Role.ADMIN)
    api_key, _ = api_key_create(project=project_create(organization=org, name="P"))
    response = client.post(
        f"/o/{org.slug}/keys/{api_key.pk}/", {"name": "x", "expires_on": "2000-01-01"}
    )
    assert "Pick a day after today" in response.content.decode()
    client.post(f"/o/{org.slug}/keys/{api_key.pk}/revoke/")
    api_key.refresh_from_db()
    assert api_key.revoked_at is not None


def test_key_of_another_organization_is_404_and_untouched(member_client, make_org):
    client, _, org = member_client(Role.OWNER)
    other = make_org("Other")
    foreign, _ = api_key_create(project=project_create(organization=other, name="P"))
    assert client.post(f"/o/{org.slug}/keys/{foreign.pk}/revoke/").status_code == 404
    assert client.get(f"/o/{other.slug}/keys/").status_code == 404
    foreign.refresh_from_db()
    assert foreign.revoked_at is None


def test_create_key_with_another_organizations_project_is_refused(member_client, make_org):
    client, _, org = member_client(Role.OWNER)
    project_create(organization=org, name="Mine")
    foreign = project_create(organization=make_org("Other"), name="Theirs")
    response = client.post(f"/o/{org.slug}/keys/new/", {"project": foreign.pk})
    assert response.status_code == 400
    assert not ApiKey.objects.exists()
