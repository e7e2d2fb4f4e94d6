"""The management API's OpenAPI document, generated from the DRF views by drf-spectacular, and
merged into ``GET /v1/openapi.json`` beside the inference endpoints."""

from __future__ import annotations

import json

import httpx
from django.test import Client

from inference.endpoints.openapi import document, merged
from management import resource_urls

ROUTES = {
    "/" + str(p.pattern).replace("<str:", "{").replace(">", "}") for p in resource_urls.urlpatterns
}


def test_the_management_document_covers_every_resource_with_bodies_and_the_admin_key_scheme():
    response = Client().get("/v1/organization/openapi.json")
    assert response.status_code == 200
    doc = json.loads(response.content)
    assert doc["openapi"] == "3.1.0"
    assert doc["servers"] == [{"url": "/v1/organization"}]
    assert set(doc["paths"]) == ROUTES
    create = doc["paths"]["/projects/{project_id}/api_keys"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    fields = doc["components"]["schemas"][body.rsplit("/", 1)[1]]["properties"]
    assert {"requests_per_minute", "monthly_budget_usd"} <= set(fields)
    assert doc["components"]["securitySchemes"]["AdminKey"]["scheme"] == "bearer"
    operation_ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
    assert "project_list_get" in operation_ids


def test_v1_openapi_json_serves_inference_and_management_in_one_document(live_url, base):
    served = httpx.get(live_url + "/v1/openapi.json", timeout=30).json()
    alone = httpx.get(base + "/openapi.json", timeout=30).json()
    assert served["servers"] == [{"url": "/v1"}]
    management = {"/organization" + path for path in ROUTES}
    assert set(document()["paths"]) | management <= set(served["paths"])
    assert not set(document()["paths"]) & management
    assert served["paths"]["/organization/projects"] == alone["paths"]["/projects"]
    assert served["paths"]["/chat/completions"] == document()["paths"]["/chat/completions"]
    # Management operations need an admin key, the rest of /v1 an API key (the default).
    assert served["security"] == [{"apiKey": []}]
    for path, item in served["paths"].items():
        if path.startswith("/organization/"):
            assert all(op["security"] == [{"AdminKey": []}] for op in item.values()), path
    # /v1/messages also takes the key as Anthropic's SDKs send it (x-api-key).
    assert set(served["components"]["securitySchemes"]) == {"apiKey", "AdminKey", "anthropicKey"}
    assert set(alone["components"]["schemas"]) <= set(served["components"]["schemas"])


def test_merging_parts_that_define_the_same_name_is_refused():
    base = {"paths": {"/a": {}}, "components": {"schemas": {"X": {}}}}
    assert set(merged(base, {"paths": {"/b": {}}})["paths"]) == {"/a", "/b"}
    for part in ({"paths": {"/a": {}}}, {"paths": {}, "components": {"schemas": {"X": {}}}}):
        try:
            merged(base, part)
        except ValueError as exc:
            assert "same names" in str(exc)
        else:
            raise AssertionError(f"{part} was merged")
    assert base == {"paths": {"/a": {}}, "components": {"schemas": {"X": {}}}}  # untouched
