"""Every admin page a support person opens renders, with search; keys never show their hash."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from accounts.services import api_key_create, organization_create, project_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def some_data():
    org = organization_create(name="Acme Support")
    api_key, raw = api_key_create(project=project_create(organization=org, name="web"), name="ci")
    return api_key, raw


def test_every_changelist_renders_with_search(admin_client, some_data):
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        response = admin_client.get(url, {"q": "acme"} if model_admin.search_fields else {})
        assert response.status_code == 200, url
        if model_admin.has_add_permission(response.wsgi_request):
            add = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
            assert add.status_code == 200, opts.label


def test_keys_show_prefix_and_last_four_only(admin_client, some_data):
    api_key, raw = some_data
    listing = admin_client.get(reverse("admin:accounts_apikey_changelist")).content.decode()
    detail = admin_client.get(
        reverse("admin:accounts_apikey_change", args=[api_key.pk])
    ).content.decode()
    for page in (listing, detail):
        assert raw not in page and api_key.key_hash not in page
    assert api_key.display in listing
