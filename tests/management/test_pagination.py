"""Every list of the management API pages with ``after``/``limit`` over more rows than a page:
each row once, in order, ``has_more`` false only on the last page."""

from __future__ import annotations

from typing import Any

from accounts.models import Invitation, Membership
from accounts.services import (
    api_key_create,
    invitation_create,
    membership_set,
    project_create,
)
from management.models import AdminKey
from management.services import admin_key_create
from tests.management.conftest import new_user


def _walk(http: Any, path: str) -> tuple[list[str], int]:
    """Every id of a list, page by page (limit 2); returns (ids, pages)."""
    seen: list[str] = []
    after, pages = None, 0
    while True:
        params = {"limit": 2} | ({"after": after} if after else {})
        body = http.get(path, params=params).json()
        pages += 1
        assert body["object"] == "list" and len(body["data"]) <= 2
        seen += [row["id"] for row in body["data"]]
        if not body["has_more"]:
            return seen, pages
        assert body["last_id"] == body["data"][-1]["id"]
        after = body["last_id"]


def _ids(prefix: str, qs: Any) -> list[str]:
    return [f"{prefix}{pk}" for pk in qs.values_list("pk", flat=True)]


def test_users_keys_invites_and_admin_keys_page_over_several_pages(tenant):
    project = project_create(organization=tenant.org, name="many")
    for n in range(4):
        api_key_create(project=project, name=f"k{n}")
        membership_set(organization=tenant.org, user=new_user(), role="member")
        invitation_create(
            organization=tenant.org, email=f"p{n}@example.com", role="member", invited_by=None
        )
        admin_key_create(organization=tenant.org, created_by=tenant.owner)
    org = tenant.org
    expected = {
        f"/projects/proj_{project.pk}/api_keys": _ids("key_", project.api_keys.all()),
        "/users": [f"user_{m.user_id}" for m in Membership.objects.filter(organization=org)],
        "/invites": _ids("invite_", Invitation.objects.filter(organization=org)),
        "/admin_api_keys": _ids("admin_key_", AdminKey.objects.filter(organization=org)),
    }
    for path, ids in expected.items():
        seen, pages = _walk(tenant.http, path)
        assert len(ids) >= 4 and pages >= 2, path
        assert len(seen) == len(set(seen)), path
        assert sorted(seen) == sorted(ids), path
