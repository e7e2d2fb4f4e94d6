"""Billing fixtures: organizations with funded wallets, a PostgreSQL-only marker."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import connection

from accounts.models import ApiKey, Organization, Project
from accounts.services import api_key_create, organization_create, project_create
from billing.models import EntryKind
from billing.services import wallet_credit, wallet_get_or_create

USD = 1_000_000_000


@dataclass
class Tenant:
    org: Organization
    project: Project
    key: ApiKey


def postgres_only() -> None:
    """Skip unless on PostgreSQL: the property proven needs real row locks and concurrency."""
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL (concurrent row locking); CI runs it with DATABASE_URL=postgres://…"
        )


@pytest.fixture
def make_tenant() -> Callable[..., Tenant]:
    """``make_tenant(balance_nanos=…, budget_nanos=…)``: org + project + key + funded wallet."""

    def make(*, balance_nanos: int = 0, budget_nanos: int | None = None) -> Tenant:
        org = organization_create(name=f"org-{secrets.token_hex(4)}")
        project = project_create(
            organization=org, name="default", monthly_budget_nanos=budget_nanos
        )
        key, _ = api_key_create(project=project)
        wallet_get_or_create(organization=org)
        if balance_nanos:
            wallet_credit(
                organization=org,
                amount_nanos=balance_nanos,
                kind=EntryKind.CREDIT,
                idempotency_key=f"test-credit:{secrets.token_hex(8)}",
            )
        return Tenant(org=org, project=project, key=key)

    return make
