"""Moderations end to end: the official SDK → live app → the real local moderation model."""

from __future__ import annotations

import httpx
import openai
import pytest

from catalog.documents import catalog_load
from inference import tokens
from money.pricing import Usage
from tests.inference.conftest import assert_400_before_any_hold, assert_billed

pytestmark = pytest.mark.usefixtures("gateway_catalog")

MODERATE = "infrai-moderation-minilm"
CATEGORIES = {
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit",
    "illicit/violent", "self-harm", "self-harm/intent", "self-harm/instructions", "sexual",
    "sexual/minors", "violence", "violence/graphic",
}  # fmt: skip
VIOLENT = "I am going to stab my coworker to death tomorrow."
HARMLESS = "I love sunny afternoons in the park with my family."


def test_sdk_moderation_flags_violence_and_is_free(issue_key, client_for):
    raw = client_for(issue_key()).moderations.with_raw_response.create(
        model="auto", input=[VIOLENT, HARMLESS]
    )
    resp = raw.parse()
    violent, harmless = resp.results
    assert resp.model == MODERATE and resp.id.startswith("modr-")
    assert violent.flagged and violent.categories.violence
    assert not harmless.flagged
    scores = violent.category_scores.model_dump(by_alias=True)
    assert set(scores) == CATEGORIES and max(scores, key=lambda c: scores[c]) == "violence"
    infrai = resp.model_extra["infrai"]
    assert infrai["vendor"] == "infrai-gpu" and infrai["routing"]["mode"] == "auto"
    assert infrai["cost_nanos"] == 0 and raw.headers["x-infrai-cost-usd"] == "0"
    assert_billed(infrai["request_id"], model=MODERATE, vendor="infrai-gpu", usage=Usage())


def test_a_priced_moderation_model_bills_input_tokens(issue_key, client_for):
    catalog_load(
        {
            "models": [
                {
                    "id": MODERATE,
                    "owned_by": "infrai",
                    "offerings": [
                        {
                            "vendor": "infrai-gpu",
                            "upstream_model": MODERATE,
                            "prices": [
                                {
                                    "effective_from": "2025-06-01T00:00:00Z",
                                    "source": "test price",
                                    "input_per_mtok_usd": "3.00",
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    )
    resp = client_for(issue_key()).moderations.create(
        model=f"infrai-gpu/{MODERATE}", input=HARMLESS
    )
    infrai = resp.model_extra["infrai"]
    assert infrai["usage_estimated"] is True
    used = Usage(input_tokens=tokens.count_text(HARMLESS))
    cost = assert_billed(infrai["request_id"], model=MODERATE, vendor="infrai-gpu", usage=used)
    assert cost > 0 and infrai["cost_nanos"] == cost


def test_text_parts_are_accepted(issue_key, api_base):
    response = httpx.post(
        f"{api_base}/moderations",
        json={"input": [{"type": "text", "text": VIOLENT}]},
        headers={"authorization": f"Bearer {issue_key()}"},
    )
    result = response.json()["results"][0]
    assert response.status_code == 200 and result["flagged"]
    assert set(result["categories"]) == CATEGORIES


@pytest.mark.parametrize(
    ("body", "param"),
    [({}, "input"), ({"input": 7}, "input"), ({"input": [{"type": "audio"}]}, "input[0].type"),
     ({"input": "x", "model": "all-MiniLM-L6-v2"}, "model"),
     ({"input": "x", "prefer": "slowest"}, "prefer")],
)  # fmt: skip
def test_bad_requests_are_400_before_any_hold(issue_key, api_base, body, param):
    assert_400_before_any_hold(api_base, issue_key(), "moderations", body, param)


def test_unknown_model_is_404(issue_key, client_for):
    with pytest.raises(openai.NotFoundError):
        client_for(issue_key()).moderations.create(model="no-such-model", input="x")
