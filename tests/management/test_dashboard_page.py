"""The dashboard's admin-keys page: owners and admins create (shown once) and revoke."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts import keys as api_keys
from accounts.models import Role, User
from accounts.services import membership_set, organization_create
from management import keys
from management.models import AdminKey


@pytest.mark.django_db
def test_admin_keys_page_creates_shows_once_and_revokes_and_members_get_403():
    owner = User.objects.create_user(email="o@example.com", password="x" * 12, email_verified=True)
    org = organization_create(name="Acme", owner=owner)
    client = Client()
    client.force_login(owner)
    url = f"/o/{org.slug}/admin-keys/"

    created = client.post(url, {"name": "CI"})
    assert created.status_code == 200
    assert created["Cache-Control"] == "no-store"
    row = AdminKey.objects.get(organization=org)
    raw = next(w for w in created.content.decode().split() if w.startswith(keys.PREFIX))
    raw = raw.split("<")[0].strip('"')
    assert keys.is_well_formed(raw)
    assert not api_keys.is_well_formed(raw)
    assert (row.name, row.role, row.created_by) == ("CI", "owner", owner)
    assert raw not in client.get(url).content.decode()

    client.post(url, {"revoke": str(row.pk)})
    row.refresh_from_db()
    assert row.revoked_at is not None and row.revoked_by == owner

    member = User.objects.create_user(email="m@example.com", password="x" * 12, email_verified=True)
    membership_set(organization=org, user=member, role=Role.MEMBER)
    client.force_login(member)
    assert client.get(url).status_code == 403
    assert client.post(url, {"name": "x"}).status_code == 403
    assert AdminKey.objects.filter(organization=org).count() == 1
