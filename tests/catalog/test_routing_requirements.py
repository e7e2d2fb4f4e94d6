"""What a request needs is a routing filter checked before any hold (issue 13, items 3, 4, 8, 9):
features and parameter limits, context and output limits, permanent vs transient 503s."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from catalog.errors import NoRoute, RoutingRefused
from catalog.models import Vendor
from catalog.routing import Candidate, RoutingRequest, decide_route
from catalog.selectors import build_snapshot
from catalog.services import vendor_verify
from catalog.types import CatalogSnapshot
from inference.errors import api_error
from tests.catalog.conftest import NOW

pytestmark = pytest.mark.django_db

SMOL = "SmolLM2-135M-Instruct"
MINILM = "all-MiniLM-L6-v2"


def decide(snapshot: CatalogSnapshot, **kw):
    return decide_route(snapshot=snapshot, request=RoutingRequest(**kw), health={}, now=NOW)


@pytest.fixture
def local_only(seeded: None) -> CatalogSnapshot:
    """What ``make run`` has on a fresh machine: only the gpu-backend's local models."""
    vendor_verify(vendor=Vendor.objects.get(name="infrai-gpu"), models=[SMOL, MINILM])
    return build_snapshot(version="test")


@pytest.fixture
def local_and_openai(local_only: CatalogSnapshot, make_routable: Callable[..., CatalogSnapshot]):
    make_routable("openai")
    vendor_verify(vendor=Vendor.objects.get(name="infrai-gpu"), models=[SMOL, MINILM])
    return build_snapshot(version="test")


@pytest.mark.parametrize(
    ("capability", "param"),
    [("json_mode", "response_format"), ("tools", "tools"), ("vision", "messages")],
)
def test_a_routing_mode_without_a_model_for_the_feature_is_a_400_naming_the_param(
    local_only, capability, param
):
    with pytest.raises(RoutingRefused) as err:
        decide(local_only, model="auto", capabilities=frozenset({"chat", capability}))
    assert api_error(err.value).status == 400
    assert err.value.param == param
    assert err.value.code == "unsupported_capability"
    assert "No model available here does" in err.value.message


def test_a_routing_mode_picks_a_model_that_honours_the_feature_and_lists_them(
    local_and_openai,
):
    decision = decide(local_and_openai, model="auto", capabilities=frozenset({"chat", "json_mode"}))
    assert SMOL not in {c.model for c in decision.candidates}
    assert {c.model for c in decision.candidates} == {"gpt-4o", "gpt-4o-mini"}
    assert any(e.label == SMOL and "JSON" in e.reason for e in decision.excluded)
    # Each model misses something: the 400 blames what rules out most of them (top_k: both
    # OpenAI models) and lists the available models that accept it.
    with pytest.raises(RoutingRefused) as err:
        decide(
            local_and_openai,
            model="cheapest",
            capabilities=frozenset({"chat", "tools"}),
            params={"n": 10, "top_k": 5},
        )
    assert err.value.param == "top_k"
    assert err.value.message.endswith(f"Models that do: {SMOL}.")


def test_dimensions_filter_embedding_models_and_name_the_param(local_only, local_and_openai):
    embeddings = frozenset({"embeddings"})
    with pytest.raises(RoutingRefused) as err:
        decide(local_only, model="auto", capabilities=embeddings, params={"dimensions": 512})
    assert err.value.param == "dimensions"
    routed = decide(
        local_and_openai, model="auto", capabilities=embeddings, params={"dimensions": 512}
    )
    assert [c.model for c in routed.candidates] == ["text-embedding-3-small"]
    with pytest.raises(RoutingRefused) as above:
        decide(local_and_openai, model="auto", capabilities=embeddings, params={"dimensions": 4096})
    assert above.value.param == "dimensions"
    assert "Models that do" not in above.value.message


def test_pinned_parameter_limits_from_the_matrix(local_only):
    with pytest.raises(RoutingRefused) as n:
        decide(local_only, model=SMOL, params={"n": 9})
    assert (n.value.param, n.value.code) == ("n", "invalid_value")
    assert "at most 8" in n.value.message
    assert decide(local_only, model=SMOL, params={"n": 8}).first.model == SMOL
    with pytest.raises(RoutingRefused) as bias:
        decide(local_only, model=SMOL, params={"logit_bias": {"10": 5, "60000": -100}})
    assert bias.value.param == "logit_bias"
    assert "60000" in bias.value.message and "49151" in bias.value.message
    assert decide(local_only, model=SMOL, params={"logit_bias": {"49151": 1}}).first.model == SMOL


def test_pinned_context_window_and_output_limit(local_only):
    # The case: 4,531 prompt tokens fit an 8,192-token model when no cap is asked for.
    served = decide(local_only, model=SMOL, prompt_tokens=4531).first
    assert (served.context_window, served.max_output_tokens) == (8192, 2048)
    # No cap asked for: the model's default output limit (512), not its whole output limit.
    assert served.output_room(4531) == 512
    assert served.output_room(4531, 2048) == 2048
    assert served.output_room(7900) == 292
    assert served.output_room(7000, 2000) == 1192
    assert served.output_room(7000, 100) == 100
    with pytest.raises(RoutingRefused) as context:
        decide(local_only, model=SMOL, prompt_tokens=7000, max_output_tokens=2000)
    assert (context.value.param, context.value.code) == ("messages", "context_length_exceeded")
    assert "8192" in context.value.message and "9000" in context.value.message
    with pytest.raises(RoutingRefused) as output:
        decide(
            local_only,
            model=SMOL,
            prompt_tokens=10,
            max_output_tokens=10**30,
            max_output_param="max_completion_tokens",
        )
    assert (output.value.param, output.value.code) == ("max_completion_tokens", "invalid_value")
    assert "2048" in output.value.message


def test_limits_filter_candidates_under_routing_modes(local_and_openai):
    big = decide(local_and_openai, model="cheapest", prompt_tokens=20_000)
    assert SMOL not in {c.model for c in big.candidates}
    assert any(e.label == SMOL and "context window" in e.reason for e in big.excluded)
    with pytest.raises(RoutingRefused) as huge:
        decide(local_and_openai, model="auto", prompt_tokens=500_000)
    assert (huge.value.param, huge.value.code) == ("messages", "context_length_exceeded")
    with pytest.raises(RoutingRefused) as cap:
        decide(local_and_openai, model="auto", prompt_tokens=10, max_output_tokens=2**63)
    assert (cap.value.param, cap.value.code) == ("max_tokens", "invalid_value")
    assert "16384" in cap.value.message


def test_candidates_carry_the_model_limits(local_and_openai):
    for candidate in decide(local_and_openai, model="auto").candidates:
        assert isinstance(candidate, Candidate)
        assert candidate.context_window > 0 and candidate.max_output_tokens > 0


def test_permanent_refusals_say_do_not_retry_and_transient_ones_do_not(seeded):
    # Seed only: the gpu-backend is not verified yet (a transient state: it is loading).
    with pytest.raises(NoRoute) as loading:
        decide(build_snapshot(), model="auto")
    assert not loading.value.permanent
    assert "x-should-retry" not in api_error(loading.value).headers()
    # Nothing left but vendors without credentials: waiting will not help.
    Vendor.objects.filter(name="infrai-gpu").update(enabled=False)
    with pytest.raises(NoRoute) as never:
        decide(build_snapshot(), model="auto")
    assert never.value.permanent
    assert api_error(never.value).headers()["x-should-retry"] == "false"
    for text in (never.value.message, loading.value.message):
        assert "_API_KEY" not in text and "set " not in text


def test_modes_and_model_ids_are_case_insensitive(local_and_openai):
    assert decide(local_and_openai, model="Auto").mode == "auto"
    assert decide(local_and_openai, model="CHEAPEST").mode == "cheapest"
    assert decide(local_and_openai, model="GPT-4o-MINI").first.model == "gpt-4o-mini"


def test_top_k_without_a_sampling_temperature_is_reported_ignored(local_only):
    greedy = decide(local_only, model=SMOL, params={"top_k": 40}).first
    assert greedy.ignored_params == ("top_k",)
    zero = decide(local_only, model=SMOL, params={"top_k": 40, "temperature": 0}).first
    assert zero.ignored_params == ("top_k",)
    sampled = decide(local_only, model=SMOL, params={"top_k": 40, "temperature": 0.7}).first
    assert sampled.ignored_params == ()


def test_parameters_the_gateway_does_not_forward_are_reported_ignored(local_only):
    params = {"reasoning_effort": "low", "verbosity": "low", "prediction": {"type": "content"}}
    served = decide(local_only, model=SMOL, params=params).first
    assert served.ignored_params == ("prediction", "reasoning_effort", "verbosity")


def test_smollm_response_format_is_stated_truthfully(local_only):
    smol = local_only.models[SMOL]
    assert smol.rule("response_format").effect({"type": "text"}).value == "honoured"
    assert smol.rule("response_format").effect({"type": "json_object"}).value == "fails"
