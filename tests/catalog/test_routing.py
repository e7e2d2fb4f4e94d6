"""The routing decision over the shipped catalog: modes, task, pins, matrix refusals, health."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from catalog.errors import ModelNotFound, NoRoute, RoutingRefused
from catalog.models import Offering, Price
from catalog.routing import RoutingRequest, decide_route
from catalog.types import CatalogSnapshot, CircuitState, Support, VendorHealth
from inference.errors import api_error
from money.pricing import Usage, cost_nanos
from tests.catalog.conftest import NOW

pytestmark = pytest.mark.django_db

MakeRoutable = Callable[..., CatalogSnapshot]


def decide(snapshot: CatalogSnapshot, health: dict[str, VendorHealth] | None = None, **kw):
    return decide_route(
        snapshot=snapshot, request=RoutingRequest(**kw), health=health or {}, now=NOW
    )


def labels(decision) -> list[str]:
    return [c.label for c in decision.candidates]


def test_seed_is_not_routable_without_verification(seeded):
    from catalog.selectors import build_snapshot

    snapshot = build_snapshot()
    with pytest.raises(NoRoute) as err:
        decide(snapshot, model="auto")
    assert api_error(err.value).status == 503


def test_cheapest_ranks_by_the_billing_cost_of_the_expected_usage(make_routable: MakeRoutable):
    snapshot = make_routable("openai", "deepseek")
    usage = Usage(input_tokens=10_000, output_tokens=100)
    decision = decide(snapshot, model="cheapest", expected_usage=usage)
    costs = [c.expected_cost_nanos for c in decision.candidates]
    assert costs == sorted(costs)
    first = decision.first
    assert first.expected_cost_nanos == cost_nanos(price=first.price, usage=usage)
    # 10k input tokens: gpt-4o-mini ($0.15/M in) beats deepseek-chat ($0.28/M in) …
    assert first.model == "gpt-4o-mini"
    # … but an output-heavy call flips it (deepseek $0.42/M out vs $0.60/M).
    heavy = decide(snapshot, model="cheapest", expected_usage=Usage(output_tokens=10_000))
    assert heavy.first.model == "deepseek-chat"


def test_smartest_chooses_the_highest_quality_tier(make_routable: MakeRoutable):
    snapshot = make_routable("openai", "anthropic")
    decision = decide(snapshot, model="smartest")
    assert decision.first.model == "claude-sonnet-4-5"
    tiers = [c.quality_tier for c in decision.candidates]
    assert tiers == sorted(tiers, reverse=True)


def test_auto_is_balanced_and_prefer_switches_the_ordering(make_routable: MakeRoutable):
    snapshot = make_routable("openai", "anthropic", "deepseek")
    auto = decide(snapshot, model="auto")
    assert auto.prefer == "balanced"
    # deepseek-chat: tier 8 at a price close to the cheapest → best blend.
    assert auto.first.model == "deepseek-chat"
    scores = [c.score for c in auto.candidates]
    assert scores == sorted(scores, reverse=True)
    assert decide(snapshot, model="auto", prefer="smartest").first.model == "claude-sonnet-4-5"
    assert decide(snapshot, model="auto", prefer="cheapest").first.model == "gpt-4o-mini"


def test_unknown_prefer_is_a_400(make_routable: MakeRoutable):
    snapshot = make_routable("openai")
    with pytest.raises(RoutingRefused) as err:
        decide(snapshot, model="auto", prefer="loudest")
    assert err.value.param == "prefer"


def test_ties_are_broken_deterministically(make_routable: MakeRoutable):
    snapshot = make_routable("infrai-gpu", "openai")
    first = [labels(decide(snapshot, model=m)) for m in ("auto", "cheapest", "smartest")]
    again = [labels(decide(snapshot, model=m)) for m in ("auto", "cheapest", "smartest")]
    assert first == again
    # DeepSeek-V3.1/V3.2/gpt-oss-120b/MiniMax-M3 share tier 8: the cheaper comes first.
    smartest = decide(snapshot, model="smartest")
    tier8 = [c for c in smartest.candidates if c.quality_tier == 8]
    assert [c.expected_cost_nanos for c in tier8] == sorted(c.expected_cost_nanos for c in tier8)


def test_task_narrows_to_models_tagged_for_it(make_routable: MakeRoutable):
    snapshot = make_routable("infrai-gpu", "openai")
    decision = decide(snapshot, model="cheapest", task="reasoning")
    assert decision.task == "reasoning"
    assert all("reasoning" in snapshot.models[c.model].tasks for c in decision.candidates)
    assert "infrai-gpu/SmolLM2-135M-Instruct" not in labels(decision)
    assert decide(snapshot, model="cheapest").first.model == "SmolLM2-135M-Instruct"
    with pytest.raises(RoutingRefused) as err:
        decide(snapshot, model="auto", task="knitting")
    assert err.value.param == "task"


def test_capabilities_narrow_the_candidates(make_routable: MakeRoutable):
    snapshot = make_routable("infrai-gpu", "openai")
    vision = decide(snapshot, model="auto", capabilities=frozenset({"chat", "vision"}))
    assert set(labels(vision)) == {
        "infrai-gpu/gemma-4-31B-it",
        "openai/gpt-4o",
        "openai/gpt-4o-mini",
    }
    embed = decide(snapshot, model="cheapest", capabilities=frozenset({"embeddings"}))
    assert labels(embed) == ["infrai-gpu/all-MiniLM-L6-v2", "openai/text-embedding-3-small"]
    images = decide(snapshot, model="auto", capabilities=frozenset({"images"}))
    assert labels(images) == ["openai/dall-e-3"]


def test_routing_modes_never_choose_a_model_on_which_a_parameter_fails(
    make_routable: MakeRoutable,
):
    snapshot = make_routable("infrai-gpu")
    decision = decide(snapshot, model="auto", params={"logit_bias": {"1000": -100}})
    # Only gpt-oss-120b honours logit_bias among the six; SmolLM2 (gpu-backend) does too.
    assert set(labels(decision)) == {
        "infrai-gpu/gpt-oss-120b",
        "infrai-gpu/SmolLM2-135M-Instruct",
    }
    excluded = {e.label: e.reason for e in decision.excluded}
    assert excluded["MiniMax-M3"] == "'logit_bias' not supported at this value"
    # A token id outside SmolLM2's 49,152-token vocabulary rules it out as well.
    beyond = decide(snapshot, model="auto", params={"logit_bias": {"50256": -100}})
    assert set(labels(beyond)) == {"infrai-gpu/gpt-oss-120b"}
    penalty = decide(snapshot, model="smartest", params={"repetition_penalty": 1.1})
    assert "infrai-gpu/MiniMax-M3" not in labels(penalty)
    neutral = decide(snapshot, model="smartest", params={"repetition_penalty": 1.0})
    assert "infrai-gpu/MiniMax-M3" in labels(neutral)


def test_no_effect_parameters_are_reported_as_ignored(make_routable: MakeRoutable):
    snapshot = make_routable("infrai-gpu")
    params = {"seed": 7, "logprobs": True, "repetition_penalty": 1.0, "temperature": 0.5}
    minimax = decide(snapshot, model="MiniMax-M3", params=params).first
    assert minimax.ignored_params == ("logprobs", "seed")
    assert minimax.rules["repetition_penalty"].effect(1.0) is Support.HONOURED
    llama = decide(snapshot, model="Meta-Llama-3.3-70B-Instruct", params=params).first
    assert llama.ignored_params == ("repetition_penalty",)
    oss = decide(snapshot, model="gpt-oss-120b", params=params).first
    assert oss.ignored_params == ()


@pytest.mark.parametrize(
    ("model", "param", "value", "code"),
    [
        ("MiniMax-M3", "repetition_penalty", 1.1, "invalid_value"),
        ("gemma-4-31B-it", "logit_bias", {"1": 5}, "unsupported_parameter"),
        ("DeepSeek-V3.1", "logit_bias", {"1": 5}, "unsupported_parameter"),
        ("Meta-Llama-3.3-70B-Instruct", "logit_bias", {"1": 5}, "unsupported_parameter"),
        ("gpt-oss-120b", "frequency_penalty", 0.5, "invalid_value"),
        ("gpt-4o-mini", "top_k", 40, "unsupported_parameter"),
    ],
)
def test_a_failing_parameter_on_a_pinned_model_is_a_400_naming_both(
    make_routable: MakeRoutable, model: str, param: str, value: object, code: str
):
    snapshot = make_routable("infrai-gpu", "openai")
    with pytest.raises(RoutingRefused) as err:
        decide(snapshot, model=model, params={param: value})
    assert api_error(err.value).status == 400
    assert err.value.param == param
    assert err.value.code == code
    assert model in err.value.message
    assert param in err.value.message


def test_penalties_follow_the_spec_400_text(make_routable: MakeRoutable):
    snapshot = make_routable("infrai-gpu")
    with pytest.raises(RoutingRefused) as err:
        decide(snapshot, model="gpt-oss-120b", params={"frequency_penalty": 0.5})
    assert err.value.message.startswith("Invalid value for 'frequency_penalty': 0.5.")
    assert "Use 'repetition_penalty' to penalize repetition." in err.value.message
    ok = decide(snapshot, model="gpt-oss-120b", params={"frequency_penalty": 0})
    assert ok.first.ignored_params == ()


def test_a_pinned_model_lacking_a_capability_is_a_400(make_routable: MakeRoutable):
    snapshot = make_routable("infrai-gpu")
    with pytest.raises(RoutingRefused) as err:
        decide(snapshot, model="SmolLM2-135M-Instruct", capabilities=frozenset({"chat", "tools"}))
    assert err.value.code == "unsupported_capability"
    assert err.value.param == "tools"
    assert "SmolLM2-135M-Instruct" in err.value.message


def test_unknown_model_is_a_404_model_not_found(make_routable: MakeRoutable):
    snapshot = make_routable("openai")
    for name in ("gpt-7", "openai/gpt-7", "nosuchvendor/gpt-4o"):
        with pytest.raises(ModelNotFound) as err:
            decide(snapshot, model=name)
        assert (api_error(err.value).status, err.value.code, err.value.param) == (
            404,
            "model_not_found",
            "model",
        )


def test_vendor_pin_restricts_to_that_vendor(make_routable: MakeRoutable):
    make_routable("openai")
    # A second vendor serving gpt-4o-mini, cheaper and first by priority.
    from catalog.documents import catalog_load

    catalog_load(
        {
            "vendors": [
                {
                    "name": "azure",
                    "adapter_kind": "openai",
                    "base_url": "http://127.0.0.1:9/v1",
                    "credentials_env": "",  # the seed's azure preset needs a key
                    "verified_models": ["gpt-4o-mini"],
                }
            ],
            "models": [
                {
                    "id": "gpt-4o-mini",
                    "owned_by": "openai",
                    "offerings": [
                        {
                            "vendor": "azure",
                            "upstream_model": "gpt-4o-mini",
                            "priority": 10,
                            "prices": [
                                {
                                    "effective_from": "2025-01-01T00:00:00Z",
                                    "source": "test",
                                    "input_per_mtok_usd": "0.10",
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    from catalog.selectors import build_snapshot

    snapshot = build_snapshot()
    assert labels(decide(snapshot, model="gpt-4o-mini")) == [
        "azure/gpt-4o-mini",
        "openai/gpt-4o-mini",
    ]
    pinned = decide(snapshot, model="openai/gpt-4o-mini")
    assert labels(pinned) == ["openai/gpt-4o-mini"]
    assert pinned.first.credentials_env == "OPENAI_API_KEY"
    assert pinned.first.adapter_kind == "openai"
    assert pinned.first.base_url == "https://api.openai.com/v1"
    with pytest.raises(ModelNotFound):
        decide(snapshot, model="azure/gpt-4o")


def test_pinned_model_on_an_unconfigured_vendor_is_a_permanent_503_naming_no_setting(seeded):
    from catalog.selectors import build_snapshot

    snapshot = build_snapshot()
    with pytest.raises(NoRoute) as err:
        decide(snapshot, model="dashscope/qwen-plus")
    # The customer learns which vendor and why, not which environment variable is missing …
    assert "dashscope" in err.value.message
    assert "not available" in err.value.message
    assert "DASHSCOPE_API_KEY" not in err.value.message
    assert "set " not in err.value.message
    # … and the SDKs are told not to retry: waiting does not configure a vendor.
    assert err.value.permanent
    assert api_error(err.value).headers()["x-should-retry"] == "false"
    # Staff see the setting in the admin's detail.
    qwen = next(o for o in snapshot.offerings if o.model_id == "qwen-plus")
    assert "DASHSCOPE_API_KEY" in qwen.unroutable_detail


def test_open_circuit_removes_a_vendor_and_half_open_demotes_it(make_routable: MakeRoutable):
    snapshot = make_routable("openai", "deepseek")
    healthy = decide(snapshot, model="auto")
    assert healthy.first.vendor == "deepseek"
    opened = decide(snapshot, {"deepseek": VendorHealth(state=CircuitState.OPEN)}, model="auto")
    assert "deepseek" not in {c.vendor for c in opened.candidates}
    assert any(e.reason == "vendor deepseek is failing right now" for e in opened.excluded)
    half = decide(snapshot, {"deepseek": VendorHealth(state=CircuitState.HALF_OPEN)}, model="auto")
    assert half.candidates[-1].vendor == "deepseek"
    assert half.candidates[-1].health is CircuitState.HALF_OPEN
    with pytest.raises(NoRoute):
        decide(snapshot, {"deepseek": VendorHealth(state=CircuitState.OPEN)}, model="deepseek-chat")


def test_fastest_uses_recent_latency(make_routable: MakeRoutable):
    snapshot = make_routable("openai", "deepseek")
    health = {
        "openai": VendorHealth(latency_ms=900),
        "deepseek": VendorHealth(latency_ms=200),
    }
    assert decide(snapshot, health, model="auto", prefer="fastest").first.vendor == "deepseek"
    health["openai"] = VendorHealth(latency_ms=100)
    assert decide(snapshot, health, model="auto", prefer="fastest").first.vendor == "openai"


def test_the_price_in_force_at_the_time_is_used(make_routable: MakeRoutable):
    make_routable("openai")
    offering = Offering.objects.get(vendor__name="openai", model__model_id="gpt-4o-mini")
    Price.objects.create(  # a price change is a new row (what the admin's price form saves)
        offering=offering,
        source="test: price cut",
        effective_from=NOW + timedelta(days=1),
        input_per_mtok_nanos=1,
        output_per_mtok_nanos=1,
    )
    from catalog.selectors import build_snapshot, price_in_force

    snapshot = build_snapshot()
    before = decide(snapshot, model="gpt-4o-mini").first.price
    assert before.input_per_mtok_nanos == 150_000_000
    after = decide_route(
        snapshot=snapshot,
        request=RoutingRequest(model="gpt-4o-mini"),
        health={},
        now=NOW + timedelta(days=2),
    ).first.price
    assert after.input_per_mtok_nanos == 1
    assert price_in_force(offering_id=offering.pk, at=NOW) == before


def test_reason_is_ready_for_the_infrai_routing_object(make_routable: MakeRoutable):
    snapshot = make_routable("openai", "deepseek")
    decision = decide(snapshot, model="cheapest")
    reason = decision.reason()
    assert reason["mode"] == "cheapest"
    assert reason["chosen"] == decision.first.label
    assert reason["why"].startswith("cheapest")
    assert [a["model"] for a in reason["alternatives"]] == [
        c.model for c in decision.candidates[1:6]
    ]
    after_failover = decision.reason(chosen=decision.candidates[1])
    assert after_failover["chosen"] == decision.candidates[1].label
