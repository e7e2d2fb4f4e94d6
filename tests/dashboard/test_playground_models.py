"""The playground offers only models that can chat (it sends chat completions)."""

from __future__ import annotations

import pytest

from accounts.models import Role
from accounts.services import project_create
from catalog.documents import catalog_load
from catalog.models import Vendor

pytestmark = pytest.mark.django_db

PRICE = {
    "effective_from": "2025-01-01T00:00:00Z",
    "source": "test price",
    "input_per_mtok_usd": "1.00",
    "cached_input_per_mtok_usd": "0.50",
    "output_per_mtok_usd": "2.00",
}


def _model(model_id: str, capability: str) -> dict:
    return {
        "id": model_id,
        "display_name": model_id,
        "owned_by": "tests",
        "capabilities": [capability],
        "tasks": [capability],
        "context_window": 8000,
        "max_output_tokens": 1000,
        "quality_tier": 3,
        "created": "2025-01-01",
        "parameters": {},
        "offerings": [{"vendor": "pg", "upstream_model": model_id, "prices": [PRICE]}],
    }


def test_playground_lists_chat_models_and_not_embedding_models(member_client):
    Vendor.objects.update(enabled=False)
    catalog_load(
        {
            "vendors": [
                {
                    "name": "pg",
                    "display_name": "PG",
                    "adapter_kind": "openai",
                    "base_url": "http://127.0.0.1:9",
                    "credentials_env": "",
                    "region": "eu",
                    "enabled": True,
                    "verified_models": ["pg-chat", "pg-embed"],
                }
            ],
            "models": [_model("pg-chat", "chat"), _model("pg-embed", "embeddings")],
        }
    )
    client, _, org = member_client(Role.MEMBER)
    project = project_create(organization=org, name="P")
    page = client.post(f"/o/{org.slug}/playground/", {"project": project.pk}).content.decode()
    assert 'id="chat-form"' in page
    start = client.get(f"/o/{org.slug}/start/").content.decode()
    assert "pg-embed" in start  # the catalog has it
    assert "pg-chat" in page and "pg-embed" not in page
