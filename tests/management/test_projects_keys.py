"""Projects and their API keys over the management API, against the live app."""

from __future__ import annotations

import time

import httpx

from accounts.models import ApiKey, Project
from tests.management.test_auth import error_of


def test_project_lifecycle_create_list_budget_archive_and_pagination(tenant):
    http = tenant.http
    created = http.post("/projects", json={"name": "search", "monthly_budget_usd": "25.50"})
    assert created.status_code == 201, created.text
    project = created.json()
    assert project["object"] == "organization.project"
    assert project["monthly_budget_usd"] == "25.5"
    assert Project.objects.get(pk=int(project["id"][5:])).monthly_budget_nanos == 25_500_000_000

    duplicate = http.post("/projects", json={"name": "search"})
    assert (duplicate.status_code, error_of(duplicate)["param"]) == (400, "name")
    bad = http.post("/projects", json={"name": "x", "monthly_budget_usd": "1.0000000001"})
    assert (bad.status_code, error_of(bad)["param"]) == (400, "monthly_budget_usd")

    changed = http.post(f"/projects/{project['id']}", json={"monthly_budget_usd": None})
    assert changed.json()["monthly_budget_usd"] is None
    assert http.get(f"/projects/{project['id']}").json()["name"] == "search"

    for n in range(4):
        assert http.post("/projects", json={"name": f"p{n}"}).status_code == 201
    seen, after, pages = [], None, 0
    while True:
        params = {"limit": 2} | ({"after": after} if after else {})
        body = http.get("/projects", params=params).json()
        pages += 1
        seen += [p["id"] for p in body["data"]]
        assert body["last_id"] == body["data"][-1]["id"]
        if not body["has_more"]:
            break
        after = body["last_id"]
    assert pages == 3
    assert len(seen) == len(set(seen)) == 5

    archived = http.post(f"/projects/{project['id']}/archive")
    assert archived.json()["status"] == "archived"
    assert project["id"] not in [p["id"] for p in http.get("/projects").json()["data"]]
    everything = http.get("/projects", params={"include_archived": "true", "limit": 100})
    assert project["id"] in [p["id"] for p in everything.json()["data"]]


def test_a_key_created_over_the_api_works_at_once_and_a_revoked_one_fails_at_once(tenant, live_url):
    http = tenant.http
    project = http.post("/projects", json={"name": "svc"}).json()
    created = http.post(
        f"/projects/{project['id']}/api_keys",
        json={"name": "ci", "requests_per_minute": 7, "tokens_per_minute": 5000},
    )
    assert created.status_code == 201, created.text
    key = created.json()
    secret = key["value"]
    assert created.headers["cache-control"] == "no-store"
    assert (key["requests_per_minute"], key["tokens_per_minute"]) == (7, 5000)

    def v1_models() -> httpx.Response:
        return httpx.get(live_url + "/v1/models", headers={"Authorization": f"Bearer {secret}"})

    assert v1_models().status_code == 200

    listed = http.get(f"/projects/{project['id']}/api_keys").json()
    assert [k["id"] for k in listed["data"]] == [key["id"]]
    assert secret not in str(listed)

    changed = http.post(
        f"/projects/{project['id']}/api_keys/{key['id']}", json={"requests_per_minute": 3}
    )
    assert changed.json()["requests_per_minute"] == 3
    assert ApiKey.objects.get(pk=int(key["id"][4:])).requests_per_minute == 3

    expired = http.post(
        f"/projects/{project['id']}/api_keys/{key['id']}",
        json={"expires_at": int(time.time()) - 10},
    )
    assert expired.status_code == 200
    assert error_of(v1_models())["code"] == "expired_api_key"
    http.post(f"/projects/{project['id']}/api_keys/{key['id']}", json={"expires_at": None})
    assert v1_models().status_code == 200

    revoked = http.delete(f"/projects/{project['id']}/api_keys/{key['id']}")
    assert revoked.json() == {
        "object": "organization.project.api_key.deleted",
        "id": key["id"],
        "deleted": True,
    }
    assert error_of(v1_models())["code"] == "revoked_api_key"
    assert http.get(f"/projects/{project['id']}/api_keys/{key['id']}").json()["revoked_at"]
