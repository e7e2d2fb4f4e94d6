"""Health, model list and generic errors of the real server."""

from __future__ import annotations

import httpx

from tests.gpu import TEST_DEVICE

MODELS = {
    "SmolLM2-135M-Instruct": "chat",
    "all-MiniLM-L6-v2": "embeddings",
    "infrai-moderation-minilm": "moderation",
    "whisper-tiny.en": "transcription",
    "piper-en-us-joe": "speech",
}


def test_health_reports_each_model_ready_on_the_test_device(http: httpx.Client) -> None:
    health = http.get("/health").json()
    assert health["ready"] and health["status"] == "ok"
    assert health["device"] == TEST_DEVICE and health["threads"] == 1
    expected_dtypes = ("float32",) if TEST_DEVICE == "cpu" else ("bfloat16", "float16")
    assert health["dtype"] in expected_dtypes
    assert {m: s["kind"] for m, s in health["models"].items()} == MODELS
    assert all(
        s["state"] == "ready" and s["load_seconds"] is not None for s in health["models"].values()
    )


def test_model_list_is_openai_shaped_and_claims_no_image_model(http: httpx.Client) -> None:
    listing = http.get("/v1/models").json()
    assert listing["object"] == "list"
    assert {m["id"] for m in listing["data"]} == set(MODELS)
    assert all(m["object"] == "model" and m["owned_by"] == "infrai" for m in listing["data"])
    assert http.get("/v1/models/whisper-tiny.en").json()["id"] == "whisper-tiny.en"
    assert http.get("/v1/models/dall-e-3").status_code == 404
    assert http.post("/v1/images/generations", json={"prompt": "x"}).status_code == 404


def test_malformed_json_is_a_400_in_openai_shape(http: httpx.Client) -> None:
    response = http.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "code", "param"}
