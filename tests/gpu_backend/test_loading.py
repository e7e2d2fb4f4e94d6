"""Readiness of the real server while its models load: /health ETAs, waiting, the bounded 503.

Each test runs the real app in this process with its model loads held behind a gate
(:func:`tests.gpu.gated_backend`), so "still loading" lasts exactly as long as the test wants.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_backend import CHAT_MODEL_ID, EMBEDDING_MODEL_ID
from gpu_backend.backend import LOAD_TIMES_FILE, Backend
from gpu_backend.config import BackendConfig
from gpu_backend.readiness import MODELS_WAIT_S, Watcher
from tests.gpu import gated_backend

CHAT = {"model": CHAT_MODEL_ID, "messages": [{"role": "user", "content": "Say hi"}]}


def wait_for_state(url: str, model: str, state: str) -> dict[str, Any]:
    """Poll ``/health`` until ``model`` is in ``state`` (the loader thread starts at once)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        health = httpx.get(url + "/health").json()
        if health["models"][model]["state"] == state:
            return dict(health)
        time.sleep(0.05)
    pytest.fail(f"{model} never reached {state}")


def test_health_reports_loading_models_with_an_eta() -> None:
    with gated_backend((CHAT_MODEL_ID, EMBEDDING_MODEL_ID)) as (url, _gate):
        health = wait_for_state(url, CHAT_MODEL_ID, "loading")
        assert health["status"] == "loading" and health["ready"] is False
        assert health["ready_models"] == []
        chat, embeddings = health["models"][CHAT_MODEL_ID], health["models"][EMBEDDING_MODEL_ID]
        assert isinstance(chat, dict) and isinstance(embeddings, dict)
        assert list(health["models"]) == [CHAT_MODEL_ID, EMBEDDING_MODEL_ID]  # chat loads first
        assert embeddings["state"] == "pending"
        # the model behind it in the queue is ready later than the one loading
        assert chat["eta_s"] >= 1 and embeddings["eta_s"] > chat["eta_s"]
        assert health["eta_s"] == embeddings["eta_s"]
        # the model list (what the gateway's probe reads) already names both
        listed = {m["id"] for m in httpx.get(url + "/v1/models").json()["data"]}
        assert listed == {CHAT_MODEL_ID, EMBEDDING_MODEL_ID}


def test_a_call_while_loading_waits_and_is_answered() -> None:
    with gated_backend((CHAT_MODEL_ID,)) as (url, gate), ThreadPoolExecutor(1) as pool:
        wait_for_state(url, CHAT_MODEL_ID, "loading")
        call = pool.submit(
            httpx.post, url + "/v1/chat/completions", json={**CHAT, "max_tokens": 4}, timeout=120
        )
        time.sleep(0.5)
        assert not call.done()  # the gate is shut: it can only be waiting
        gate.open()
        response = call.result(timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["role"] == "assistant"
        health = httpx.get(url + "/health").json()
        assert health["ready"] is True and health["ready_models"] == [CHAT_MODEL_ID]
        assert health["models"][CHAT_MODEL_ID]["eta_s"] == 0


def test_after_the_bounded_wait_a_clear_503_with_retry_after() -> None:
    with gated_backend((CHAT_MODEL_ID,), load_wait_s=0.3) as (url, _gate):
        wait_for_state(url, CHAT_MODEL_ID, "loading")
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert response.status_code == 503
        assert int(response.headers["retry-after"]) >= 1
        error = response.json()["error"]
        assert error["code"] == "model_loading" and error["type"] == "server_error"
        assert f"`{CHAT_MODEL_ID}` is still loading" in error["message"]
        assert f"retry after {response.headers['retry-after']} s" in error["message"]


def test_a_model_that_failed_to_load_says_so() -> None:
    with gated_backend((CHAT_MODEL_ID,)) as (url, gate):
        gate.fail("no GGUF here")
        wait_for_state(url, CHAT_MODEL_ID, "failed")
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "model_unavailable" and "no GGUF here" in error["message"]
        health = httpx.get(url + "/health").json()
        assert health["models"][CHAT_MODEL_ID]["eta_s"] is None


def test_eta_uses_the_load_times_of_the_last_start(tmp_path: Path) -> None:
    (tmp_path / LOAD_TIMES_FILE).write_text(
        json.dumps({CHAT_MODEL_ID: 7.5, EMBEDDING_MODEL_ID: 2.5})
    )
    backend = Backend(BackendConfig(cache_dir=tmp_path, models=(EMBEDDING_MODEL_ID, CHAT_MODEL_ID)))
    etas = backend.etas()
    chat_eta = etas[CHAT_MODEL_ID]
    # the prebuilt copy exists (install step), so no conversion time is added
    assert chat_eta == (7.5 if not backend._converting else 32.5)
    assert etas[EMBEDDING_MODEL_ID] == chat_eta + 2.5
    backend.slots[CHAT_MODEL_ID].state = "ready"
    backend.slots[CHAT_MODEL_ID].load_seconds = 3.0
    assert backend.etas() == {CHAT_MODEL_ID: 0.0, EMBEDDING_MODEL_ID: 2.5}
    backend._record_load_times()
    saved = json.loads((tmp_path / LOAD_TIMES_FILE).read_text())
    assert saved == ({CHAT_MODEL_ID: 3.0} if not backend._converting else {})


def test_readiness_lines_say_when_the_platform_can_answer() -> None:
    lines: list[str] = []
    watcher = Watcher(public_url="http://127.0.0.1:8000/v1", since=100.0, emit=lines.append)

    def health(chat: str, speech: str) -> dict[str, object]:
        return {
            "models": {
                CHAT_MODEL_ID: {"kind": "chat", "state": chat, "eta_s": 3.0},
                "piper-en-us-joe": {"kind": "speech", "state": speech, "eta_s": 5.0},
            }
        }

    assert watcher.feed(None, gateway_up=False, now=111.0) is None
    assert lines == ["infrai: not answering yet (+11 s): gpu-backend starting; gateway starting"]
    assert watcher.feed(health("ready", "loading"), gateway_up=False, now=112.0) is None
    assert not any("can answer" in line for line in lines)  # the gateway is not up yet
    # The chat model and the gateway are up, the platform's workers not yet: said, not announced.
    assert watcher.feed(health("ready", "loading"), True, now=113.0, started=False) is None
    assert lines[-1] == "infrai: chat model ready (+13 s)"
    assert not any("can answer" in line for line in lines)
    # The workers are up; the announcement waits for the other model's load too (it would take
    # the cores from the first calls) ...
    assert watcher.feed(health("ready", "loading"), gateway_up=True, now=114.0) is None
    assert not any("can answer" in line for line in lines)
    assert watcher.feed(health("ready", "ready"), gateway_up=True, now=116.0) is True
    assert lines[-3:] == [
        "infrai can answer now (+16 s): http://127.0.0.1:8000/v1",
        "infrai: ready: SmolLM2-135M-Instruct (chat), piper-en-us-joe (speech)",
        "infrai: all local models ready (+16 s)",
    ]


def test_readiness_announces_without_a_model_that_loads_too_long() -> None:
    lines: list[str] = []
    watcher = Watcher(public_url="u", since=0.0, emit=lines.append)
    models = {
        CHAT_MODEL_ID: {"kind": "chat", "state": "ready"},
        "piper-en-us-joe": {"kind": "speech", "state": "loading", "eta_s": 90.0},
    }
    assert watcher.feed({"models": models}, gateway_up=True, now=5.0) is None
    assert watcher.feed({"models": models}, gateway_up=True, now=5.0 + MODELS_WAIT_S) is None
    assert lines[-3:] == [
        f"infrai can answer now (+{5 + MODELS_WAIT_S:.0f} s): u",
        "infrai: ready: SmolLM2-135M-Instruct (chat)",
        "infrai: still loading (calls to them wait): piper-en-us-joe (speech) ~90 s",
    ]


def test_readiness_lines_report_a_failed_model() -> None:
    lines: list[str] = []
    watcher = Watcher(public_url="u", since=0.0, emit=lines.append)
    models = {
        CHAT_MODEL_ID: {"kind": "chat", "state": "ready"},
        "piper-en-us-joe": {"kind": "speech", "state": "failed", "error": "no voice"},
    }
    assert watcher.feed({"models": models}, gateway_up=True, now=4.0) is False
    assert "infrai: local model piper-en-us-joe (speech) FAILED to load: no voice" in lines
    assert "infrai can answer now (+4 s): u" in lines
    assert lines[-1] == "infrai: local models ready except piper-en-us-joe (+4 s)"
