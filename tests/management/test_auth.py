"""Who may call the management API: admin keys only, never on inference; audit; rate limits."""

from __future__ import annotations

import httpx

from accounts.models import Membership, Role
from accounts.policy import Actor
from accounts.services import api_key_create, membership_set, project_create
from management.models import AdminKey
from management.services import admin_key_revoke
from tests.management.conftest import new_user


def error_of(response: httpx.Response) -> dict[str, object]:
    """The OpenAI error object of a response (asserting its exact shape)."""
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "code", "param"}
    return body["error"]  # type: ignore[no-any-return]


def test_admin_keys_only_on_management_and_api_keys_only_on_inference(tenant, base, live_url):
    chat = httpx.post(
        live_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {tenant.key}"},
        json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 401
    assert error_of(chat)["type"] == "authentication_error"
    assert "Admin keys" in str(error_of(chat)["message"])
    assert tenant.key not in chat.text

    _, raw = api_key_create(project=project_create(organization=tenant.org, name="p"))
    refused = httpx.get(base + "/projects", headers={"Authorization": f"Bearer {raw}"})
    assert refused.status_code == 401
    assert error_of(refused)["code"] == "admin_key_required"
    assert httpx.get(live_url + "/v1/models", headers={"Authorization": f"Bearer {raw}"}).is_success

    assert error_of(httpx.get(base + "/projects"))["code"] == "missing_api_key"
    bogus = httpx.get(base + "/projects", headers={"Authorization": "Bearer ifr_admin_nope"})
    assert (bogus.status_code, error_of(bogus)["code"]) == (401, "invalid_api_key")

    ok = tenant.http.get("/projects")
    assert ok.status_code == 200
    assert ok.json()["object"] == "list"
    assert ok.headers["x-ratelimit-limit-requests"] == "300"

    unknown = tenant.http.get("/nope/nothing")
    assert unknown.status_code == 404
    assert error_of(unknown)["type"] == "invalid_request_error"


def test_a_revoked_admin_key_fails_at_once_and_keeps_its_audit_trail(tenant):
    listed = tenant.http.get("/admin_api_keys")
    assert listed.status_code == 200
    (item,) = listed.json()["data"]
    assert (item["created_by"], item["role"]) == (f"user_{tenant.owner.pk}", "owner")
    assert item["redacted_value"].startswith("ifr_admin_")
    assert tenant.key not in listed.text

    row = AdminKey.objects.get(organization=tenant.org)
    admin_key_revoke(admin_key=row, actor=Actor(user=tenant.owner, role=Role.OWNER))
    response = tenant.http.get("/projects")
    assert response.status_code == 401
    assert error_of(response)["code"] == "revoked_api_key"
    row.refresh_from_db()
    assert row.last_used_at is not None
    assert (row.created_by, row.revoked_by) == (tenant.owner, tenant.owner)


def test_an_admin_key_stops_working_when_its_creator_leaves(tenant):
    membership_set(organization=tenant.org, user=new_user(), role="owner")
    Membership.objects.filter(organization=tenant.org, user=tenant.owner).delete()
    response = tenant.http.get("/projects")
    assert response.status_code == 401
    assert "no longer a member" in str(error_of(response)["message"])


def test_admin_keys_are_rate_limited_per_key(tenant, make_tenant):
    AdminKey.objects.filter(organization=tenant.org).update(requests_per_minute=2)
    statuses = [tenant.http.get("/projects").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    limited = tenant.http.get("/projects")
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert error_of(limited)["type"] == "rate_limit_error"
    # another key (another organization's) has its own counter
    assert make_tenant("Other").http.get("/projects").status_code == 200
