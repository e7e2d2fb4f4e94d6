"""The optional llama.cpp chat engine (``--cpu-engine llama-cpp``): the same sequences, events
and batching counters as the torch engine, on the GGUF itself. Runs only where the optional
``llama-cpp`` extra (llama-cpp-python) is installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_backend.chat_model import ChatModel, load_chat_tokenizer
from gpu_backend.device import select_device
from gpu_backend.engine import Finished
from gpu_backend.locate import smollm2_gguf
from tests.gpu_backend.conftest import model_cache_dir, run_queued

pytest.importorskip("llama_cpp", reason="the optional llama-cpp extra is not installed")

from gpu_backend.llama_cpp_engine import LlamaCppEngine


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatModel]:
    yield load_chat_tokenizer(model_cache_dir(), select_device("cpu"))


def run(
    chat: ChatModel, prompts: list[str], max_tokens: int
) -> tuple[list[str], list[Finished], LlamaCppEngine]:
    """Greedy completions of ``prompts``, all submitted before the engine starts."""
    engine = LlamaCppEngine(chat, smollm2_gguf(), threads=1, max_batch=4)
    texts, ends = run_queued(engine, chat, prompts, max_tokens)
    return texts, ends, engine


def test_llama_cpp_answers_batched_sequences_with_the_same_events(chat: ChatModel) -> None:
    prompts = ["What is the capital of France?", "Count from 1 to 20, one per line.", "Hi"]
    texts, ends, engine = run(chat, prompts, max_tokens=24)
    assert all(text.strip() for text in texts)
    assert all(end.reason in {"stop", "length"} and 0 < end.completion_tokens <= 24 for end in ends)
    assert engine.stats.max_prefill_size == 3 and engine.stats.max_batch_size >= 2
    assert engine.stats.tokens_generated == sum(end.completion_tokens for end in ends)


def test_a_slot_is_reused_cleanly_after_its_sequence_ended(chat: ChatModel) -> None:
    first, _ends, _engine = run(chat, ["What is the capital of France?"], max_tokens=12)
    again, _ends, _engine = run(chat, ["What is the capital of France?"], max_tokens=12)
    assert first == again
