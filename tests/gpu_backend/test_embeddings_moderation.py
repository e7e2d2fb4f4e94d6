"""Embeddings (all-MiniLM-L6-v2) and moderation (infrai-moderation-minilm) on the real server."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai

EMBED = "all-MiniLM-L6-v2"
MODERATE = "infrai-moderation-minilm"


def vectors(client: openai.OpenAI, texts: list[str]) -> np.ndarray:
    """Embeddings of ``texts`` as rows."""
    result = client.embeddings.create(model=EMBED, input=texts)
    assert [d.index for d in result.data] == list(range(len(texts)))
    return np.array([d.embedding for d in result.data])


def test_similar_sentences_are_closer_than_unrelated_ones(client: openai.OpenAI) -> None:
    cat, kitten, markets = vectors(
        client,
        ["A cat is sleeping on the sofa.", "A kitten naps on the couch.",
         "Interest rates rose sharply this quarter."],
    )  # fmt: skip
    assert cat.shape == (384,)
    assert np.allclose([np.linalg.norm(v) for v in (cat, kitten, markets)], 1.0, atol=1e-4)
    assert cat @ kitten > 0.5
    assert cat @ kitten > cat @ markets + 0.3


def test_embedding_response_shape_usage_and_base64(http: httpx.Client) -> None:
    body = {"model": EMBED, "input": "hello world"}
    floats = http.post("/v1/embeddings", json=body).json()
    packed = http.post("/v1/embeddings", json={**body, "encoding_format": "base64"}).json()

    assert floats["object"] == "list" and floats["model"] == EMBED
    assert floats["data"][0]["object"] == "embedding"
    assert floats["usage"] == {"prompt_tokens": 4, "total_tokens": 4}  # [CLS] hello world [SEP]
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, floats["data"][0]["embedding"], atol=1e-6)


def test_embedding_requests_are_batched(http: httpx.Client) -> None:
    before = http.get("/stats").json()["embeddings"]
    long_texts = [
        f"Sentence number {i} about weather, travel, food and music. " * 4 for i in range(48)
    ]
    small = [{"model": EMBED, "input": f"short text {i}"} for i in range(6)]
    with ThreadPoolExecutor(max_workers=7) as pool:
        big = pool.submit(http.post, "/v1/embeddings", json={"model": EMBED, "input": long_texts})
        responses = list(pool.map(lambda body: http.post("/v1/embeddings", json=body), small))
    assert big.result().status_code == 200 and all(r.status_code == 200 for r in responses)
    after = http.get("/stats").json()["embeddings"]

    assert after["requests"] - before["requests"] == 7
    assert after["max_texts_per_pass"] >= 48
    # The six small requests queued behind the big one share forward passes.
    assert after["forward_passes"] - before["forward_passes"] < 7
    assert after["max_requests_per_pass"] >= 2


def test_embedding_errors(http: httpx.Client) -> None:
    unknown = http.post("/v1/embeddings", json={"model": "text-embedding-3-small", "input": "x"})
    empty = http.post("/v1/embeddings", json={"model": EMBED, "input": ""})
    dims = http.post("/v1/embeddings", json={"model": EMBED, "input": "x", "dimensions": 64})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "input"
    assert dims.status_code == 400 and dims.json()["error"]["param"] == "dimensions"


def test_moderation_flags_violence_and_passes_harmless_text(client: openai.OpenAI) -> None:
    result = client.moderations.create(
        model=MODERATE,
        input=["I am going to stab my coworker to death tomorrow.",
               "I love sunny afternoons in the park with my family."],
    )  # fmt: skip
    violent, harmless = result.results
    assert result.id.startswith("modr-") and result.model == MODERATE

    assert violent.flagged
    assert violent.categories.violence
    scores = violent.category_scores.model_dump(by_alias=True)
    assert max(scores, key=lambda c: scores[c]) == "violence"

    assert not harmless.flagged
    assert not any(harmless.categories.model_dump().values())
    assert max(harmless.category_scores.model_dump().values()) < 0.2


def test_moderation_shape_lists_every_openai_category(http: httpx.Client) -> None:
    body = http.post(
        "/v1/moderations", json={"input": "You are such a pathetic, brainless clown."}
    ).json()
    result = body["results"][0]
    expected = {
        "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit",
        "illicit/violent", "self-harm", "self-harm/intent", "self-harm/instructions", "sexual",
        "sexual/minors", "violence", "violence/graphic",
    }  # fmt: skip
    assert body["model"] == MODERATE  # the default when no model is given
    assert set(result["categories"]) == set(result["category_scores"]) == expected
    assert all(0.0 <= s <= 1.0 for s in result["category_scores"].values())
    assert result["flagged"] and result["categories"]["harassment"]
