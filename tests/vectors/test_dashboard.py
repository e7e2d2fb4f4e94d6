"""The dashboard's vector store page: the organization's collections, size and cost, no others."""

from __future__ import annotations

import pytest

from accounts.models import Project, Role
from vectors.models import Collection
from vectors.services import collection_create

pytestmark = pytest.mark.django_db


def _collection(org_id: int, name: str, **numbers: int) -> Collection:
    project, _ = Project.objects.get_or_create(organization_id=org_id, name="default")
    made = collection_create(organization_id=org_id, project_id=project.pk, name=name)
    Collection.objects.filter(pk=made.pk).update(**numbers)
    return made


@pytest.mark.parametrize("role", list(Role))
def test_the_page_lists_the_collections_with_size_and_cost_for_every_role(member_client, role):
    client, _, org = member_client(role)
    _collection(
        org.pk, "handbook", vector_count=1200, size_bytes=2_500_000, queries=40,
        storage_charged_nanos=250_000, queries_charged_nanos=400_000,
    )  # fmt: skip
    _, _, other = member_client(Role.OWNER)
    _collection(other.pk, "not-yours", size_bytes=1)

    page = client.get(f"/o/{org.slug}/vectors/").content.decode()
    assert "handbook" in page and "1,200" in page and "2.4\xa0MB" in page
    assert "$0.00065" in page  # storage $0.00025 + queries $0.0004
    assert "not-yours" not in page
    assert f'href="/o/{org.slug}/vectors/"' in page  # the navigation link


def test_the_empty_page_says_how_to_create_a_collection(member_client):
    client, _, org = member_client(Role.MEMBER)
    page = client.get(f"/o/{org.slug}/vectors/").content.decode()
    assert "No collections yet." in page and "/v1/vector/upsert" in page
