"""Fixtures of the management API tests: a live app, organizations, admin keys, a client."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from accounts.models import Organization, Role, User
from accounts.services import membership_change_role, membership_set, organization_create
from management.services import admin_key_create

_seq = itertools.count(1)


@dataclass
class Tenant:
    """An organization, its owner and the owner's admin key with an HTTP client."""

    org: Organization
    owner: User
    key: str
    http: httpx.Client


@pytest.fixture
def base(live_url: str, transactional_db: None) -> str:
    return live_url + "/v1/organization"


@pytest.fixture
def clients(base: str) -> Iterator[Callable[[str], httpx.Client]]:
    made: list[httpx.Client] = []

    def make(raw: str) -> httpx.Client:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {raw}"}, timeout=30)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def new_user(label: str = "u") -> User:
    return User.objects.create_user(email=f"{label}{next(_seq)}@example.com", password="x" * 12)


@pytest.fixture
def make_tenant(clients: Callable[[str], httpx.Client]) -> Callable[..., Tenant]:
    def make(name: str = "Acme") -> Tenant:
        owner = new_user("owner")
        org = organization_create(name=name, owner=owner)
        _, raw = admin_key_create(organization=org, created_by=owner, name="ci")
        return Tenant(org=org, owner=owner, key=raw, http=clients(raw))

    return make


@pytest.fixture
def tenant(make_tenant: Callable[..., Tenant]) -> Tenant:
    return make_tenant()


@pytest.fixture
def key_with_role(
    tenant: Tenant, clients: Callable[[str], httpx.Client]
) -> Callable[[Role], httpx.Client]:
    """A client whose admin key acts as ``role`` in ``tenant``: an admin creates it, then is
    given ``role`` (keys carry their creator's current role, never more than at creation)."""

    def make(role: Role) -> httpx.Client:
        user = new_user(role.value)
        membership = membership_set(
            organization=tenant.org,
            user=user,
            role=Role.OWNER if role == Role.OWNER else Role.ADMIN,
        )
        _, raw = admin_key_create(organization=tenant.org, created_by=user)
        if role not in (Role.OWNER, Role.ADMIN):
            membership_change_role(membership=membership, role=role)
        return clients(raw)

    return make
