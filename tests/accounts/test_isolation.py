"""Tenant isolation: selectors scoped by organization never return another tenant's rows."""

from accounts import selectors
from accounts.services import api_key_create, organization_create, project_create


def test_one_organization_cannot_reach_anothers_keys_or_projects(db):
    a = organization_create(name="A")
    b = organization_create(name="B")
    pa = project_create(organization=a, name="p")
    pb = project_create(organization=b, name="p")
    ka, _ = api_key_create(project=pa)
    kb, _ = api_key_create(project=pb)
    assert selectors.project_get(organization=a, project_id=pb.pk) is None
    assert selectors.api_key_get(organization=a, key_id=kb.pk) is None
    assert list(selectors.api_keys_for_organization(organization=a)) == [ka]
    assert list(selectors.projects_for_organization(organization=b)) == [pb]
