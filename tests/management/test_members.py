"""Members and invitations over the management API, with the dashboard's rules."""

from __future__ import annotations

from django.core import mail

from accounts.models import Invitation, Membership, Role
from accounts.services import membership_set
from tests.management.conftest import new_user
from tests.management.test_auth import error_of


def test_members_invite_change_role_remove_and_the_last_owner(tenant, key_with_role):
    http = tenant.http
    colleague = new_user("colleague")
    membership_set(organization=tenant.org, user=colleague, role=Role.MEMBER)

    users = http.get("/users").json()
    assert {u["email"]: u["role"] for u in users["data"]} == {
        tenant.owner.email: "owner",
        colleague.email: "member",
    }
    first = http.get("/users", params={"limit": 1}).json()
    assert first["has_more"] is True
    second = http.get("/users", params={"limit": 1, "after": first["last_id"]}).json()
    assert second["has_more"] is False
    assert first["data"][0]["id"] != second["data"][0]["id"]

    invited = http.post("/invites", json={"email": "New@Example.com", "role": "billing"})
    assert invited.status_code == 201, invited.text
    invite = invited.json()
    assert (invite["email"], invite["role"], invite["status"]) == (
        "new@example.com",
        "billing",
        "pending",
    )
    assert [m.to for m in mail.outbox] == [["new@example.com"]]
    assert [i["id"] for i in http.get("/invites").json()["data"]] == [invite["id"]]
    assert http.delete(f"/invites/{invite['id']}").json()["deleted"] is True
    assert Invitation.objects.get(pk=int(invite["id"][7:])).revoked_at is not None

    promoted = http.post(f"/users/user_{colleague.pk}", json={"role": "admin"})
    assert promoted.json()["role"] == "admin"
    bad_role = http.post(f"/users/user_{colleague.pk}", json={"role": "king"})
    assert (bad_role.status_code, error_of(bad_role)["param"]) == (400, "role")

    last_owner = http.post(f"/users/user_{tenant.owner.pk}", json={"role": "member"})
    assert (last_owner.status_code, error_of(last_owner)["code"]) == (400, "last_owner")

    admin = key_with_role(Role.ADMIN)
    assert admin.delete(f"/users/user_{tenant.owner.pk}").status_code == 403
    assert (
        admin.post("/invites", json={"email": "x@example.com", "role": "owner"}).status_code == 403
    )
    assert admin.post(f"/users/user_{colleague.pk}", json={"role": "owner"}).status_code == 403

    removed = http.delete(f"/users/user_{colleague.pk}")
    assert removed.json() == {
        "object": "organization.user.deleted",
        "id": f"user_{colleague.pk}",
        "deleted": True,
    }
    assert not Membership.objects.filter(organization=tenant.org, user=colleague).exists()
    assert http.get(f"/users/user_{colleague.pk}").status_code == 404
