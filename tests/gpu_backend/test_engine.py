"""The continuous-batching engine in-process: a batched sequence computes what it computes alone.

Prompts of different lengths submitted before the engine starts are prefilled in one padded
forward pass and decoded together; their greedy outputs must equal each prompt run alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_backend.chat_model import ChatModel, load_chat_model
from gpu_backend.device import select_device
from gpu_backend.engine import GenerationEngine
from tests.gpu import TEST_DEVICE
from tests.gpu_backend.conftest import model_cache_dir, run_queued

PROMPTS = [
    "Hi",
    "Count from 1 to 20, one number per line.",
    "Write a haiku about the sea and the sky at night.",
    "Tell me a short story about a dragon who loves tea and lives in a castle.",
]


@pytest.fixture(scope="module")
def chat(backend_url: str) -> Iterator[ChatModel]:
    """SmolLM2 loaded in this process from the converted copy (the server fixture made it)."""
    yield load_chat_model(model_cache_dir(), select_device(TEST_DEVICE))


def generate(
    chat: ChatModel, prompts: list[str], max_tokens: int = 16
) -> tuple[list[str], GenerationEngine]:
    """Greedy completions of ``prompts``, all queued before the engine starts."""
    engine = GenerationEngine(chat, max_batch=8)
    texts, _ends = run_queued(engine, chat, prompts, max_tokens)
    return texts, engine


def test_mixed_length_batch_matches_solo_runs(chat: ChatModel) -> None:
    together, engine = generate(chat, PROMPTS)
    alone = [generate(chat, [prompt])[0][0] for prompt in PROMPTS]

    assert engine.stats.max_prefill_size == len(PROMPTS)  # one padded prefill pass for all
    assert engine.stats.max_batch_size >= 2
    assert together == alone
