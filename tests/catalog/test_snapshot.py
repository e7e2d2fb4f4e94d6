"""The in-process catalog snapshot: served without queries, rebuilt after a catalog write."""

from __future__ import annotations

import asyncio

import pytest

from catalog.models import Offering
from catalog.selectors import VERSION_KEY, catalog_snapshot
from catalog.services import catalog_changed
from infra import fastcache

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot():
    return asyncio.run(catalog_snapshot())


def test_snapshot_is_reused_until_the_version_changes(seeded, settings, django_assert_num_queries):
    settings.INFRAI_CATALOG_CHECK_S = 0  # check the shared version on every call
    first = snapshot()
    with django_assert_num_queries(0):
        assert snapshot() is first
    Offering.objects.filter(model__model_id="gpt-4o").update(enabled=False)
    assert snapshot() is first  # a raw write without a version bump is not seen …
    catalog_changed()
    rebuilt = snapshot()  # … the bump is
    assert rebuilt is not first
    gpt4o = next(o for o in rebuilt.offerings if o.model_id == "gpt-4o")
    assert gpt4o.unroutable_detail == "offering disabled"
    assert gpt4o.unroutable_reason == "vendor openai does not offer this model now"


def test_another_process_bumping_the_version_is_noticed(seeded, settings):
    settings.INFRAI_CATALOG_CHECK_S = 0
    first = snapshot()
    fastcache.set_sync(VERSION_KEY, "bumped-elsewhere", None)  # another process's write
    assert snapshot() is not first
    assert snapshot().version == "bumped-elsewhere"


def test_version_checks_are_rate_limited(seeded, settings):
    settings.INFRAI_CATALOG_CHECK_S = 3600
    first = snapshot()
    fastcache.set_sync(VERSION_KEY, "bumped-elsewhere", None)
    assert snapshot() is first


# --- an invalid row written past the admin's checks ------------------------------------------

_PRICE = {
    "effective_from": "2025-01-01T00:00:00Z",
    "source": "test",
    "input_per_mtok_usd": "1",
    "output_per_mtok_usd": "2",
}


def _two_models(vendor_url: str) -> None:
    from catalog.documents import catalog_load
    from catalog.models import Vendor

    Vendor.objects.update(enabled=False)

    def model(model_id: str) -> dict[str, object]:
        return {
            "id": model_id,
            "owned_by": "tests",
            "capabilities": ["chat"],
            "tasks": ["chat"],
            "context_window": 8000,
            "max_output_tokens": 1000,
            "created": "2025-01-01",
            "parameters": {},
            "offerings": [{"vendor": "local", "upstream_model": "up", "prices": [_PRICE]}],
        }

    catalog_load(
        {
            "vendors": [
                {
                    "name": "local",
                    "adapter_kind": "openai",
                    "base_url": vendor_url,
                    "credentials_env": "",
                    "region": "eu",
                    "verified_models": ["up"],
                }
            ],
            "models": [model("good-chat"), model("broken-chat"), model("badcell-chat")],
        }
    )


def test_a_bad_row_is_left_out_and_reported_instead_of_failing_the_build(seeded, caplog):
    from catalog.models import Model, ParameterRule
    from catalog.selectors import build_snapshot

    gpt4o = Model.objects.get(model_id="gpt-4o")
    Model.objects.filter(pk=gpt4o.pk).update(capabilities=["chat", 5])  # past the admin
    ParameterRule.objects.create(
        model=Model.objects.get(model_id="SmolLM2-135M-Instruct"), parameter="seed", support="x"
    )
    built = build_snapshot()
    assert "gpt-4o" not in built.models
    assert not built.offerings_of("gpt-4o")
    assert "SmolLM2-135M-Instruct" not in built.models
    assert "gpt-4o-mini" in built.models  # the rest of the catalog is there
    assert any("model gpt-4o left out" in p and "5" in p for p in built.problems)
    assert any("SmolLM2-135M-Instruct" in p and "'x'" in p for p in built.problems)
    assert "model gpt-4o left out of routing" in caplog.text


def test_v1_still_answers_for_the_good_models_after_a_bad_row_is_written(
    api_base, issue_key, settings
):
    import openai

    from catalog.models import Model, ParameterRule
    from tests.fakes.vendors import FakeVendor

    vendor = FakeVendor(models=["up"]).start()
    try:
        _two_models(vendor.url)
        key = issue_key(credit_usd="5")
        client = openai.OpenAI(base_url=api_base, api_key=key, max_retries=0)
        assert {"good-chat", "broken-chat"} <= {m.id for m in client.models.list()}

        # Straight to the database: a capability typed as 5, a task that is not a list.
        Model.objects.filter(model_id="broken-chat").update(capabilities=[5], tasks="chat")
        ParameterRule.objects.create(
            model=Model.objects.get(model_id="badcell-chat"), parameter="seed", support="sometimes"
        )
        catalog_changed()

        listed = {m.id for m in client.models.list()}
        assert "good-chat" in listed and not {"broken-chat", "badcell-chat"} & listed
        reply = client.chat.completions.create(
            model="good-chat", messages=[{"role": "user", "content": "still there?"}]
        )
        assert reply.choices[0].message.content
        auto = client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "and routing?"}]
        )
        assert auto.model == "good-chat"
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(
                model="broken-chat", messages=[{"role": "user", "content": "hi"}]
            )
        assert refused.value.status_code == 404
    finally:
        vendor.stop()
