"""The playground: only models that can chat (it sends chat completions), one key per user and
project (reused, never one per visit); prices shown are the ones in force."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.keys import hash_key
from accounts.models import ApiKey, Role
from accounts.services import api_key_revoke, project_create
from catalog.documents import catalog_load
from catalog.models import Vendor
from catalog.selectors import model_prices
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering

pytestmark = pytest.mark.django_db


def _model(model_id: str, capability: str) -> dict:
    return catalog_model(
        model_id,
        capabilities=[capability],
        tasks=[capability],
        context_window=8000,
        max_output_tokens=1000,
        quality_tier=3,
        offerings=[offering("pg", model_id, PRICE)],
    )


def _catalog(*models: dict, verified: list[str]) -> None:
    Vendor.objects.update(enabled=False)
    vendor = catalog_vendor(
        "pg", display_name="PG", base_url="http://127.0.0.1:9", verified_models=verified
    )
    catalog_load({"vendors": [vendor], "models": list(models)})


def test_playground_lists_chat_models_and_not_embedding_models(member_client):
    _catalog(
        _model("pg-chat", "chat"),
        _model("pg-embed", "embeddings"),
        verified=["pg-chat", "pg-embed"],
    )
    client, _, org = member_client(Role.MEMBER)
    project = project_create(organization=org, name="P")
    page = client.post(
        f"/o/{org.slug}/playground/", {"project": project.pk}, follow=True
    ).content.decode()
    assert 'id="chat-form"' in page
    start = client.get(f"/o/{org.slug}/start/").content.decode()
    assert "pg-embed" in start  # the catalog has it
    assert "pg-chat" in page and "pg-embed" not in page


def _page_key(page: str) -> str:
    found = re.search(r'data-key="([^"]+)"', page)
    assert found is not None, "no chat form on the page"
    return found.group(1)


def test_one_playground_key_per_user_and_project_reused_across_reloads_and_visits(
    member_client,
):
    client, user, org = member_client(Role.MEMBER)
    project = project_create(organization=org, name="P")
    other = project_create(organization=org, name="Q")
    url = f"/o/{org.slug}/playground/"

    opened = client.post(url, {"project": project.pk})
    assert opened.status_code == 302 and opened["Location"].endswith(f"?project={project.pk}")
    first = _page_key(client.get(opened["Location"]).content.decode())
    assert _page_key(client.get(opened["Location"]).content.decode()) == first  # reload
    assert _page_key(client.get(opened["Location"]).content.decode()) == first  # later visit
    key = ApiKey.objects.get(project=project, created_by=user)
    assert key.key_hash == hash_key(first)

    # Another project: its own key; the first one is still the same.
    _page_key(client.get(f"{url}?project={other.pk}").content.decode())
    assert ApiKey.objects.filter(created_by=user).count() == 2

    # Another browser (a new session): the same row gets a new secret; the old one is dead.
    browser2 = Client()
    browser2.force_login(user)
    second = _page_key(browser2.get(f"{url}?project={project.pk}").content.decode())
    assert second != first
    assert ApiKey.objects.filter(project=project, created_by=user).count() == 1
    key.refresh_from_db()
    assert key.key_hash == hash_key(second) and key.revoked_at is None

    # A revoked key is not handed out again: the row comes back with a new secret.
    api_key_revoke(api_key=key)
    third = _page_key(browser2.get(f"{url}?project={project.pk}").content.decode())
    assert third != second
    key.refresh_from_db()
    assert key.revoked_at is None and key.key_hash == hash_key(third)
    assert ApiKey.objects.filter(project=project, created_by=user).count() == 1


def test_the_playground_of_another_organizations_project_shows_no_key(member_client, make_org):
    client, _, org = member_client(Role.MEMBER)
    foreign = project_create(organization=make_org("Other"), name="Theirs")
    page = client.get(f"/o/{org.slug}/playground/?project={foreign.pk}").content.decode()
    assert 'id="chat-form"' not in page
    assert not ApiKey.objects.filter(project=foreign).exists()


def test_pages_show_the_price_in_force_not_a_future_dated_one(member_client):
    future = {
        **PRICE,
        "effective_from": (timezone.now() + timedelta(days=30)).isoformat(),
        "input_per_mtok_usd": "9.00",
        "output_per_mtok_usd": "99.00",
        "source": "announced",
    }
    chat = _model("pg-chat", "chat")
    chat["offerings"][0]["prices"] = [PRICE, future]
    _catalog(chat, verified=["pg-chat"])
    client, _, org = member_client(Role.MEMBER)

    [listed] = model_prices(at=timezone.now())
    assert (listed.input_per_mtok_nanos, listed.output_per_mtok_nanos) == (
        1_000_000_000,
        2_000_000_000,
    )
    [later] = model_prices(at=timezone.now() + timedelta(days=31))
    assert later.output_per_mtok_nanos == 99_000_000_000

    start = client.get(f"/o/{org.slug}/start/").content.decode()
    assert "$2.00" in start and "$99" not in start and "$9.00" not in start
