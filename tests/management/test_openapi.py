"""The management API's OpenAPI document, generated from the DRF views by drf-spectacular."""

from __future__ import annotations

import json

from django.test import Client

from management import resource_urls


def test_the_openapi_document_covers_every_resource_with_bodies_and_the_admin_key_scheme():
    response = Client().get("/v1/organization/openapi.json")
    assert response.status_code == 200
    doc = json.loads(response.content)
    assert doc["openapi"].startswith("3.")
    assert doc["servers"] == [{"url": "/v1/organization"}]
    routes = {
        "/" + str(p.pattern).replace("<str:", "{").replace(">", "}")
        for p in resource_urls.urlpatterns
    }
    assert set(doc["paths"]) == routes
    create = doc["paths"]["/projects/{project_id}/api_keys"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert (
        "requests_per_minute" in doc["components"]["schemas"][body.rsplit("/", 1)[1]]["properties"]
    )
    assert doc["components"]["securitySchemes"]["AdminKey"]["scheme"] == "bearer"
