"""The role matrix: owner / admin / billing / member × every action, as in the dashboard."""

from __future__ import annotations

import re

from accounts.models import Project, Role
from accounts.selectors import membership_get
from accounts.services import api_key_create, membership_change_role, membership_set
from management import resource_urls
from management.models import AdminKey
from management.services import admin_key_create
from tests.dashboard.factories import request_log_row
from tests.management.conftest import new_user

OW, AD, BI, ME = Role.OWNER, Role.ADMIN, Role.BILLING, Role.MEMBER
EVERYONE = {OW, AD, BI, ME}

# (method, path, body, roles allowed). Per role, fresh objects: {p} a project, {k} one of its
# keys and {a} an admin key, both created by an admin (an owner's credentials are an owner's:
# tests/management/test_key_roles.py), {m} a member, {i} an invitation, {r} a request-log row;
# {u} a member every role's change targets.
MATRIX = [
    ("GET", "/projects", None, EVERYONE),
    ("GET", "/projects/{p}", None, EVERYONE),
    ("POST", "/projects", {"name": "n-{role}"}, {OW, AD}),
    ("POST", "/projects/{p}", {"monthly_budget_usd": "5"}, {OW, AD}),
    ("GET", "/projects/{p}/api_keys", None, EVERYONE),
    ("GET", "/projects/{p}/api_keys/{k}", None, EVERYONE),
    ("POST", "/projects/{p}/api_keys", {"name": "k"}, {OW, AD, ME}),
    ("POST", "/projects/{p}/api_keys/{k}", {"name": "renamed"}, {OW, AD}),
    ("POST", "/projects/{p}/api_keys/{k}", {"monthly_budget_usd": "2"}, {OW, AD}),
    ("POST", "/projects/{p}/api_keys", {"monthly_budget_usd": "2"}, {OW, AD, ME}),
    ("GET", "/users", None, EVERYONE),
    ("GET", "/users/{u}", None, EVERYONE),
    ("POST", "/users/{u}", {"role": "member"}, {OW, AD}),
    ("GET", "/invites", None, {OW, AD}),
    ("GET", "/invites/{i}", None, {OW, AD}),
    ("POST", "/invites", {"email": "i-{role}@example.com"}, {OW, AD}),
    ("GET", "/usage/completions?start_time=0&limit=1", None, EVERYONE),
    ("GET", "/costs?start_time=0&limit=1", None, EVERYONE),
    ("GET", "/requests", None, EVERYONE),
    ("GET", "/requests/{r}", None, EVERYONE),
    ("GET", "/wallet", None, {OW, AD, BI}),
    ("GET", "/wallet/ledger", None, {OW, AD, BI}),
    (
        "POST",
        "/wallet/topups",
        {"amount_usd": "20", "success_url": "https://e.com/ok", "cancel_url": "https://e.com/no"},
        {OW, AD, BI},
    ),
    ("GET", "/models", None, EVERYONE),
    ("GET", "/admin_api_keys", None, {OW, AD}),
    ("GET", "/admin_api_keys/{a}", None, {OW, AD}),
    ("DELETE", "/admin_api_keys/{a}", None, {OW, AD}),
    ("DELETE", "/invites/{i}", None, {OW, AD}),
    ("DELETE", "/users/{m}", None, {OW, AD}),
    ("DELETE", "/projects/{p}/api_keys/{k}", None, {OW, AD}),
    ("POST", "/projects/{p}/archive", None, {OW, AD}),
]


def _allowed(status: int, path: str) -> bool:
    """The call went through the role check (a top-up may then be 503 without Stripe)."""
    return status < 400 or (status == 503 and path == "/wallet/topups")


def test_the_matrix_covers_every_route_and_method():
    covered = {(method, path.split("?")[0]) for method, path, _, _ in MATRIX}
    for pattern in resource_urls.urlpatterns:
        route = "/" + re.sub(r"<str:(\w+)>", "{x}", str(pattern.pattern))
        view = pattern.callback.view_class  # type: ignore[attr-defined]
        for method in ("GET", "POST", "DELETE"):
            if hasattr(view, method.lower()):
                shapes = {(m, re.sub(r"\{\w\}", "{x}", p)) for m, p in covered}
                assert (method, route) in shapes, f"{method} {route} is not in the matrix"


def test_every_role_can_do_exactly_what_the_dashboard_lets_it(tenant, key_with_role):
    clients = {role: key_with_role(role) for role in (OW, AD, BI, ME)}
    target = tenant.http.post("/projects", json={"name": "target-user-holder"}).json()
    assert target["id"].startswith("proj_")
    member_user_id = tenant.http.get("/users", params={"limit": 100}).json()["data"][-1]["id"]
    failures = []
    for role, http in clients.items():
        project = tenant.http.post("/projects", json={"name": f"p-{role}"}).json()["id"]
        holder = new_user("holder")
        membership_set(organization=tenant.org, user=holder, role=Role.ADMIN)
        key, _ = api_key_create(project=Project.objects.get(pk=int(project[5:])), created_by=holder)
        leaver = new_user("leaver")
        membership_set(organization=tenant.org, user=leaver, role=Role.MEMBER)
        invite = tenant.http.post("/invites", json={"email": f"x-{role}@example.com"}).json()
        spare, _ = admin_key_create(organization=tenant.org, created_by=holder)
        log = request_log_row(organization_id=tenant.org.pk)
        ids = {
            "p": project,
            "k": f"key_{key.pk}",
            "u": member_user_id,
            "m": f"user_{leaver.pk}",
            "i": invite["id"],
            "a": f"admin_key_{spare.pk}",
            "r": log.request_id,
        }
        for method, path, body, allowed in MATRIX:
            url = path.format(**ids, role=role)
            data = {k: v.format(role=role) for k, v in body.items()} if body else None
            status = http.request(method, url, json=data).status_code
            expected_ok = role in allowed
            if expected_ok != _allowed(status, path) or (not expected_ok and status != 403):
                failures.append((role.value, method, url, status))
    assert failures == []


def test_a_key_follows_its_creator_down_but_never_up(tenant, key_with_role):
    admin = key_with_role(Role.ADMIN)
    row = AdminKey.objects.filter(organization=tenant.org, role="admin").get()
    membership = membership_get(user=row.created_by, organization=tenant.org)
    assert admin.get("/invites").status_code == 200

    membership_change_role(membership=membership, role=Role.OWNER)
    assert (
        admin.post("/invites", json={"email": "o@example.com", "role": "owner"}).status_code == 403
    )

    membership_change_role(membership=membership, role=Role.MEMBER)
    assert admin.get("/invites").status_code == 403
    assert admin.get("/wallet").status_code == 403
    assert admin.get("/projects").status_code == 200
