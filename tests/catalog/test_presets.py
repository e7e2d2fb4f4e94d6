"""The vendor presets of the seed: sourced rules, routing by vendor rules, and migration 0007."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from catalog import validation
from catalog.documents import SEED_PATH, CatalogDocumentError, catalog_load, read_document
from catalog.errors import RoutingRefused
from catalog.models import Offering, Vendor
from catalog.routing import RoutingRequest, decide_route
from catalog.types import CatalogSnapshot

LLAMA = "Meta-Llama-3.3-70B-Instruct"
PRESETS = ("groq", "together", "fireworks", "mistral", "xai", "openrouter", "ollama", "vllm",
           "sglang", "azure", "gemini", "bedrock")  # fmt: skip
BEFORE, PRESETS_MIGRATION = "0006_vendor_api_version_and_rules", "0007_vendor_presets"


def _seed_vendors() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in read_document(SEED_PATH)["vendors"]}


def test_every_preset_rule_names_the_vendor_docs_it_comes_from():
    vendors = _seed_vendors()
    assert set(PRESETS) <= set(vendors)
    cells = [(n, p, c) for n, v in vendors.items() for p, c in v.get("parameter_rules", {}).items()]
    assert {n for n, _p, _c in cells} >= {"groq", "fireworks", "ollama"}
    for name, parameter, cell in cells:
        assert cell["source"].startswith("https://"), (name, parameter)
        assert validation.vendor_rules_problems({parameter: cell}) == []


def test_groq_preset_carries_its_documented_refusals():
    rules = _seed_vendors()["groq"]["parameter_rules"]
    assert {p for p, c in rules.items() if c["support"] == "fails"} == {
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "n",
    }
    assert rules["n"]["accepted_values"] == [1]


@pytest.mark.parametrize(
    ("cell", "says"),
    [
        ({"support": "sometimes", "source": "https://x.example/docs"}, "support 'sometimes'"),
        ({"support": "fails"}, "a source URL"),
        ({"support": "fails", "source": "see the docs"}, "a source URL"),
        ({"support": "fails", "source": "https://x.example", "why": "?"}, "unknown key"),
    ],
)
def test_a_document_rule_without_a_known_support_or_a_source_is_refused(db, cell, says):
    vendor = {"name": "bad", "adapter_kind": "openai", "base_url": "http://127.0.0.1:9/v1"}
    with pytest.raises(CatalogDocumentError, match=says):
        catalog_load({"vendors": [{**vendor, "parameter_rules": {"logit_bias": cell}}]})
    assert not Vendor.objects.filter(name="bad").exists()


def test_a_vendor_row_with_unreadable_rules_is_left_out_of_routing(seeded, make_routable):
    Vendor.objects.filter(name="groq").update(parameter_rules={"logit_bias": "fails"})
    snapshot = make_routable("groq")
    assert "groq" not in snapshot.vendors
    assert any("vendor groq" in p for p in snapshot.problems)


@pytest.fixture
def llama_on_groq_and_gpu(
    seeded: None, make_routable: Any, monkeypatch: pytest.MonkeyPatch
) -> CatalogSnapshot:
    """The seed with Groq (key set) and infrai-gpu routable: both serve Llama 3.3 70B."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test")
    return make_routable("groq", "infrai-gpu")  # type: ignore[no-any-return]


def _route(snapshot: CatalogSnapshot, model: str, **params: Any) -> Any:
    return decide_route(
        snapshot=snapshot,
        request=RoutingRequest(model=model, params=params),
        health={},
        now=timezone.now(),
    )


def test_a_parameter_the_vendor_refuses_routes_to_the_models_other_vendors(llama_on_groq_and_gpu):
    plain = _route(llama_on_groq_and_gpu, LLAMA)
    assert plain.first.vendor == "groq"  # the cheaper of the two
    decision = _route(llama_on_groq_and_gpu, LLAMA, logprobs=True)
    assert [c.vendor for c in decision.candidates] == ["infrai-gpu"]
    excluded = {e["offering"]: e["reason"] for e in decision.reason()["excluded"]}
    assert excluded[f"groq/{LLAMA}"] == "vendor groq does not accept 'logprobs'"


def test_only_the_values_a_vendor_takes_keep_it(llama_on_groq_and_gpu):
    assert _route(llama_on_groq_and_gpu, LLAMA, n=1).first.vendor == "groq"
    assert [c.vendor for c in _route(llama_on_groq_and_gpu, LLAMA, n=2).candidates] == [
        "infrai-gpu"
    ]


def test_a_pin_to_the_refusing_vendor_is_a_400_naming_the_parameter(llama_on_groq_and_gpu):
    with pytest.raises(RoutingRefused) as info:
        _route(llama_on_groq_and_gpu, f"groq/{LLAMA}", top_logprobs=2, logprobs=True)
    assert info.value.param == "logprobs"
    assert "Vendor 'groq'" in str(info.value)
    with pytest.raises(RoutingRefused) as info:
        _route(llama_on_groq_and_gpu, f"groq/{LLAMA}", n=3)
    assert info.value.param == "n" and info.value.code == "invalid_value"


def test_a_model_only_refusing_vendors_can_serve_is_a_400_not_a_503(
    seeded, make_routable, monkeypatch
):
    Offering.objects.filter(model__model_id=LLAMA).exclude(vendor__name="groq").delete()
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test")
    snapshot = make_routable("groq")
    with pytest.raises(RoutingRefused) as info:
        _route(snapshot, LLAMA, logprobs=True)
    assert info.value.param == "logprobs" and "groq" in str(info.value)


def test_a_parameter_the_vendor_ignores_is_reported_for_that_vendor_only(seeded, make_routable):
    Vendor.objects.filter(name="ollama").update(enabled=True)
    ollama = Vendor.objects.get(name="ollama")
    model = Offering.objects.filter(model__model_id=LLAMA).first().model
    Offering.objects.create(vendor=ollama, model=model, upstream_model="llama3.3:70b")
    snapshot = make_routable("ollama", "infrai-gpu")
    # A staff-added offering without a price is not routable: price it like the gpu's.
    assert _route(snapshot, f"infrai-gpu/{LLAMA}", n=1).first.ignored_params == ()
    from catalog.models import Price

    gpu_price = Price.objects.filter(offering__model=model, offering__vendor__name="infrai-gpu")
    price = gpu_price.get()
    price.pk = None
    price.offering = Offering.objects.get(vendor=ollama, model=model)
    price.save()
    snapshot = make_routable("ollama", "infrai-gpu")
    assert _route(snapshot, f"ollama/{LLAMA}", n=1).first.ignored_params == ("n",)


# --- migration 0007 --------------------------------------------------------------------------


def _migrate(target: str) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate([("catalog", target)])
    executor.loader.build_graph()
    return executor.loader.project_state(("catalog", target)).apps


def _migrate_to_latest() -> None:
    """Every catalog migration after the one under test, so the models of today (and the
    tests after this one) find the schema they expect."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("catalog"))


@pytest.mark.django_db(transaction=True)
def test_migration_0007_adds_the_presets_and_keeps_what_staff_changed():
    old = _migrate(BEFORE)
    # A database from before the presets: the seed as migration 0002 loaded it (no rules or
    # api_version columns), then some presets missing, and one a member of staff edited.
    catalog_load(read_document(SEED_PATH), apps=old)
    old_vendor = old.get_model("catalog", "Vendor")
    old_vendor.objects.update(parameter_rules={}, api_version="")
    old_vendor.objects.filter(name__in=["xai", "together"]).delete()
    old.get_model("catalog", "Model").objects.filter(model_id="grok-4").delete()
    staff_rules = {"seed": {"support": "no_effect", "source": "https://staff.example/notes"}}
    old_vendor.objects.filter(name="fireworks").update(
        base_url="https://fw.staff.example/v1", enabled=False, parameter_rules=staff_rules
    )
    _migrate(PRESETS_MIGRATION)
    _migrate_to_latest()

    seed = _seed_vendors()
    groq = Vendor.objects.get(name="groq")
    assert groq.parameter_rules == seed["groq"]["parameter_rules"]  # filled on the old row
    assert Vendor.objects.get(name="azure").api_version == seed["azure"]["api_version"]
    xai = Vendor.objects.get(name="xai")  # re-created whole
    assert xai.base_url == "https://api.x.ai/v1" and xai.credentials_env == "XAI_API_KEY"
    grok = Offering.objects.get(vendor=xai, model__model_id="grok-4")
    assert grok.prices.get().output_per_mtok_nanos == 15_000_000_000
    assert grok.model.parameter_rules.get(parameter="stop").support == "fails"
    together = Offering.objects.get(vendor__name="together", model__model_id=LLAMA)
    assert together.upstream_model == "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    assert together.prices.count() == 1
    fireworks = Vendor.objects.get(name="fireworks")
    assert (fireworks.base_url, fireworks.enabled) == ("https://fw.staff.example/v1", False)
    assert fireworks.parameter_rules == staff_rules
