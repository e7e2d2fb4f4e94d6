"""First run through the gateway: a local model that is still loading is routable and its calls
wait, instead of the 503 "cannot be served right now" a newcomer used to get.

The gpu-backend here is the real app with its model loads held behind a gate
(:func:`tests.gpu.gated_backend`); the catalog's ``infrai-gpu`` vendor points at it, unverified
until the real probe runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
import yaml

from catalog import health
from catalog.documents import SEED_PATH, catalog_load
from catalog.models import Vendor
from catalog.services import vendor_probe
from catalog.types import CircuitState
from gpu_backend import CHAT_MODEL_ID
from tests.gpu import Gate, gated_backend


@pytest.fixture
def loading_backend(transactional_db: None) -> Iterator[tuple[str, Gate]]:
    """A gated gpu-backend serving the chat model, and the seed's ``infrai-gpu`` vendor and
    ``SmolLM2-135M-Instruct`` pointed at it (not verified: no probe yet); nothing else routable."""
    seed = yaml.safe_load(SEED_PATH.read_text())
    with gated_backend((CHAT_MODEL_ID,)) as (url, gate):
        gpu = next(v for v in seed["vendors"] if v["name"] == "infrai-gpu")
        gpu = {**gpu, "base_url": url + "/v1", "base_url_setting": "", "enabled": True}
        gpu.pop("verified_models", None)
        chat = next(m for m in seed["models"] if m["id"] == CHAT_MODEL_ID)
        catalog_load({"vendors": [gpu], "models": [chat]})
        Vendor.objects.exclude(name="infrai-gpu").update(enabled=False)
        deadline = time.monotonic() + 30
        while httpx.get(url + "/health").json()["models"][CHAT_MODEL_ID]["state"] != "loading":
            assert time.monotonic() < deadline, "the chat model never started loading"
            time.sleep(0.05)
        yield url, gate


def test_the_probe_marks_a_loading_backend_up_and_its_models_routable(
    loading_backend: tuple[str, Gate],
) -> None:
    result = vendor_probe(vendor=Vendor.objects.get(name="infrai-gpu"))
    assert result.error == "" and result.models is not None
    assert CHAT_MODEL_ID in result.models
    vendor = Vendor.objects.get(name="infrai-gpu")
    assert CHAT_MODEL_ID in vendor.verified_models and vendor.verified_at is not None
    state = health.health_of(["infrai-gpu"])["infrai-gpu"]
    assert state.state is CircuitState.CLOSED and state.consecutive_failures == 0


def test_a_call_during_load_waits_and_is_answered_through_the_gateway(
    loading_backend: tuple[str, Gate],
    client_for: Callable[..., openai.OpenAI],
    issue_key: Callable[..., str],
) -> None:
    _url, gate = loading_backend
    vendor_probe(vendor=Vendor.objects.get(name="infrai-gpu"))
    client = client_for(issue_key(), timeout=150.0)

    def ask() -> Any:
        return client.chat.completions.with_raw_response.create(
            model=CHAT_MODEL_ID, messages=[{"role": "user", "content": "Say hi"}], max_tokens=4
        )

    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(ask)
        time.sleep(1.0)
        assert not call.done()  # the gate is shut: the gateway's call can only be waiting
        gate.open()
        raw = call.result(timeout=150)
    completion = raw.parse()
    assert raw.http_response.status_code == 200
    assert completion.model == CHAT_MODEL_ID
    assert completion.choices[0].message.role == "assistant"
    assert completion.usage is not None and completion.usage.completion_tokens >= 1
    # the wait was no failure: the vendor's circuit is still closed
    state = health.health_of(["infrai-gpu"])["infrai-gpu"]
    assert state.state is CircuitState.CLOSED and state.consecutive_failures == 0
