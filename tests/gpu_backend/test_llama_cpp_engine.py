"""The optional llama.cpp chat engine (``--cpu-engine llama-cpp``): the same sequences, events
and batching counters as the torch engine, on the GGUF itself, with the model's whole context in
a KV cache all sequences share. Runs only where the optional ``llama-cpp`` extra
(llama-cpp-python) is installed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from gpu_backend.chat_api import template_prompt
from gpu_backend.chat_model import ChatModel, load_chat_tokenizer
from gpu_backend.device import select_device
from gpu_backend.engine import Finished
from gpu_backend.llama_cpp_batch import probe
from gpu_backend.locate import smollm2_gguf
from tests.gpu_backend.conftest import model_cache_dir, run_queued

pytest.importorskip("llama_cpp", reason="the optional llama-cpp extra is not installed")

from gpu_backend.llama_cpp_engine import LlamaCppEngine


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatModel]:
    yield load_chat_tokenizer(model_cache_dir(), select_device("cpu"))


def run(
    chat: ChatModel, prompts: list[str], max_tokens: int, kv_cells: int = 32768
) -> tuple[list[str], list[Finished], LlamaCppEngine]:
    """Greedy completions of ``prompts``, all submitted before the engine starts."""
    engine = LlamaCppEngine(chat, smollm2_gguf(), threads=1, max_batch=4, kv_cells=kv_cells)
    texts, ends = run_queued(engine, chat, prompts, max_tokens)
    return texts, ends, engine


def test_a_multi_token_prefill_runs_in_this_llama_cpp_build() -> None:
    """The probe ``--cpu-engine auto`` runs before choosing llama.cpp (in a child process: a
    build that crashes, GCC 12 on an AMX CPU, fails it instead of the test run)."""
    assert probe(smollm2_gguf()) is None


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


def test_a_sequence_may_use_the_whole_catalog_context(chat: ChatModel) -> None:
    long = "Here is a list of fruit: " + "apple, pear, plum, " * 345 + "Name one fruit."
    assert len(template_prompt(chat, [{"role": "user", "content": long}])) > 2048
    texts, ends, engine = run(chat, [long], max_tokens=8)
    assert chat.context_length == 8192
    assert texts[0].strip() and ends[0].reason in {"stop", "length"}
    assert engine.stats.prefills == 1


def test_admission_never_reserves_more_kv_cells_than_the_cache_has(chat: ChatModel) -> None:
    small = dataclasses.replace(chat)
    prompts = ["What is the capital of France?", "Name a colour.", "Hi"]
    longest = max(len(template_prompt(chat, [{"role": "user", "content": p}])) for p in prompts)
    max_tokens = 128 - longest  # each reserves at most 128 of 256 cells: two fit, not three
    assert 3 * (max_tokens + 20) > 256
    texts, ends, engine = run(small, prompts, max_tokens=max_tokens, kv_cells=256)
    assert engine.kv_cells == 256 and small.context_length == 256
    assert all(text.strip() for text in texts)
    assert all(end.reason in {"stop", "length"} for end in ends)
    assert engine.stats.sequences == 3 and engine.stats.prefills == 2
    assert engine.stats.max_prefill_size == 2 and engine.stats.max_batch_size == 2
