"""Clients on the real gpu-backend server for these tests.

The server itself is the session fixture ``backend_url`` of :mod:`tests.gpu` (registered in
``tests/conftest.py``, shared with the gateway's tests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import httpx
import openai
import pytest

from gpu_backend.chat_api import template_prompt
from gpu_backend.chat_model import ChatModel
from gpu_backend.engine import Delta, Event, Finished, GenerationEngine
from gpu_backend.sampling import SamplingParams
from tests.gpu import model_cache_dir

if TYPE_CHECKING:
    from gpu_backend.llama_cpp_engine import LlamaCppEngine

__all__ = ["model_cache_dir", "run_queued"]


def run_queued(
    engine: GenerationEngine | LlamaCppEngine, chat: ChatModel, prompts: list[str], max_tokens: int
) -> tuple[list[str], list[Finished]]:
    """Greedy completions of ``prompts``, all submitted before ``engine`` starts: each prompt's
    text and the event that ended it. The engine is stopped before this returns."""
    texts, ends = [""] * len(prompts), [Finished("none", 0)] * len(prompts)
    done = threading.Semaphore(0)

    def sink_for(index: int) -> Callable[[Event], None]:
        def sink(event: Event) -> None:
            if isinstance(event, Delta):
                texts[index] += event.text
            else:
                ends[index] = event
                done.release()

        return sink

    for index, prompt in enumerate(prompts):
        ids = template_prompt(chat, [{"role": "user", "content": prompt}])
        engine.submit(
            engine.new_sequence(ids, SamplingParams(max_tokens=max_tokens), sink_for(index))
        )
    engine.start()
    try:
        for _ in prompts:
            assert done.acquire(timeout=120)
    finally:
        engine.stop()
    return texts, ends


@pytest.fixture(scope="session")
def http(backend_url: str) -> Iterator[httpx.Client]:
    """An httpx client on the backend."""
    with httpx.Client(base_url=backend_url, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="session")
def client(backend_url: str) -> openai.OpenAI:
    """The OpenAI SDK pointed at the backend (it needs no key; any string will do)."""
    return openai.OpenAI(
        base_url=backend_url + "/v1", api_key="unused", max_retries=0, timeout=120.0
    )
