"""The key page's rate limits and monthly budget: set, seen with the month's spend, and
refused exactly as the management API refuses them (same check, same text)."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from accounts.models import ApiKey, Role, User
from accounts.policy import Actor
from accounts.services import (
    api_key_issue,
    membership_change_role,
    membership_set,
    organization_create,
    project_create,
)
from billing.services import hold_open, hold_settle
from billing.services.wallet import wallet_fund
from management.services import admin_key_create

pytestmark = pytest.mark.django_db
USD = 1_000_000_000


def _person(org, email: str, role: Role) -> tuple[User, Client]:
    user = User.objects.create_user(email=email, password="x" * 12, email_verified=True)
    membership_set(organization=org, user=user, role=role)
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def setup():
    owner = User.objects.create_user(email="o@example.com", password="x" * 12, email_verified=True)
    org = organization_create(name="Limits", owner=owner)
    project = project_create(organization=org, name="P")
    client = Client()
    client.force_login(owner)
    return org, project, owner, client


def _form(**values: str) -> dict[str, str]:
    base = {
        "name": "k",
        "expires_on": "",
        "requests_per_minute": "600",
        "tokens_per_minute": "1000000",
        "monthly_budget_usd": "",
    }
    return {**base, **values}


def _api_error(org, user: User, role: Role, key: ApiKey, body: dict) -> str:
    """The message the management API answers for ``body`` on ``key``, with an admin key of
    ``user`` acting as ``role``."""
    membership = membership_set(organization=org, user=user, role=Role.ADMIN)
    _, raw = admin_key_create(organization=org, created_by=user)
    if role != Role.ADMIN:
        membership_change_role(membership=membership, role=role)
    response = Client().post(
        f"/v1/organization/projects/proj_{key.project_id}/api_keys/key_{key.pk}",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code in (400, 403)
    return response.json()["error"]["message"]


def _errors(response) -> str:
    return html.unescape(response.content.decode())


def test_owner_sets_limits_and_sees_them_with_the_months_spend(setup):
    org, project, owner, client = setup
    key, _ = api_key_issue(actor=Actor(user=owner, role=Role.OWNER), project=project, name="k")
    page = client.post(
        f"/o/{org.slug}/keys/{key.pk}/",
        _form(requests_per_minute="30", tokens_per_minute="9000", monthly_budget_usd="4.5"),
    )
    assert page.status_code == 302
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_minute, key.monthly_budget_nanos) == (
        30,
        9000,
        4_500_000_000,
    )
    wallet_fund(organization=org, amount_nanos=10 * USD, idempotency_key="fund")
    hold_open(
        organization_id=org.pk,
        project_id=project.pk,
        api_key_id=key.pk,
        request_id="r1",
        amount_nanos=USD,
    )
    hold_settle(request_id="r1", actual_nanos=1_250_000_000 // 10)
    body = client.get(f"/o/{org.slug}/keys/{key.pk}/").content.decode()
    assert 'data-testid="key-rpm">30<' in body and 'data-testid="key-tpm">9000<' in body
    assert "$4.50" in body and "$0.125 of $4.50" in body
    # Emptying the budget removes it (an owner may).
    client.post(f"/o/{org.slug}/keys/{key.pk}/", _form(requests_per_minute="30"))
    key.refresh_from_db()
    assert key.monthly_budget_nanos is None


@pytest.mark.parametrize(
    ("field", "value", "api_body"),
    [
        ("requests_per_minute", "0", {"requests_per_minute": 0}),
        ("requests_per_minute", "1000001", {"requests_per_minute": 1_000_001}),
        ("tokens_per_minute", "2000000001", {"tokens_per_minute": 2_000_000_001}),
        ("monthly_budget_usd", "-1", {"monthly_budget_usd": "-1"}),
        ("monthly_budget_usd", "1000000.01", {"monthly_budget_usd": "1000000.01"}),
    ],
)
def test_out_of_bounds_is_refused_with_the_apis_text(setup, field, value, api_body):
    org, project, owner, client = setup
    key, _ = api_key_issue(actor=Actor(user=owner, role=Role.OWNER), project=project, name="k")
    response = client.post(f"/o/{org.slug}/keys/{key.pk}/", _form(**{field: value}))
    assert response.status_code == 400
    admin = User.objects.create_user(email="a@example.com", password="x" * 12)
    api_message = _api_error(org, admin, Role.ADMIN, key, api_body)
    assert api_message == f"Invalid '{field}': " + api_message.split(": ", 1)[1]
    assert api_message.split(": ", 1)[1] in _errors(response)
    key.refresh_from_db()
    assert (key.requests_per_minute, key.monthly_budget_nanos) == (600, None)


def test_a_member_may_lower_but_not_raise_with_the_apis_text(setup):
    org, project, _owner, _ = setup
    member, client = _person(org, "m@example.com", Role.MEMBER)
    key, _ = api_key_issue(actor=Actor(user=member, role=Role.MEMBER), project=project, name="k")
    assert key.monthly_budget_nanos == 10 * USD  # MEMBER_KEY_CEILING
    page = client.get(f"/o/{org.slug}/keys/{key.pk}/").content.decode()
    assert "only an owner or admin raises or removes them" in page
    lowered = client.post(f"/o/{org.slug}/keys/{key.pk}/", _form(monthly_budget_usd="3"))
    assert lowered.status_code == 302
    for values, body in [
        ({"monthly_budget_usd": "4"}, {"monthly_budget_usd": "4"}),
        ({"monthly_budget_usd": ""}, {"monthly_budget_usd": None}),
        ({"monthly_budget_usd": "3", "requests_per_minute": "601"}, {"requests_per_minute": 601}),
    ]:
        refused = client.post(f"/o/{org.slug}/keys/{key.pk}/", _form(**values))
        assert refused.status_code == 400
        api_message = _api_error(org, member, Role.MEMBER, key, body)
        assert "may not give a key" in api_message
        assert api_message in _errors(refused)
    key.refresh_from_db()
    assert (key.monthly_budget_nanos, key.requests_per_minute) == (3 * USD, 600)
