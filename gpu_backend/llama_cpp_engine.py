"""The chat engine on llama.cpp (``--cpu-engine llama-cpp``): the same continuous batching, the
same sequences, sampling and events as :class:`~gpu_backend.engine.GenerationEngine`, with
llama.cpp's forward pass on the Q4_1 GGUF itself (about six times transformers' fp32 single-stream
decode rate on a CPU, docs/performance.md).

Optional: ``llama-cpp-python`` is the ``llama-cpp`` extra (a source build of minutes, never in the
default install); without it ``--cpu-engine llama-cpp`` fails the chat model's load with the
reason. Each running sequence owns a llama.cpp sequence id (a KV slot); a slot is cleared when a
new sequence takes it. Prompts are templated and detokenised by the converted copy's tokenizer
(the GGUF's vocabulary), so requests, usage and stop handling are those of the torch engine.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .chat_model import ChatModel
from .engine import PREFILL_TOKEN_BUDGET, GenerationEngine, Sequence
from .llama_cpp_batch import fill_batch, silence_llama_cpp

SEQUENCE_CONTEXT = 2048  # KV cells per sequence (the context a request may use here)


class LlamaCppEngine(GenerationEngine):
    """Continuous batching over llama.cpp: one ``llama_decode`` per prefill and per decode step.

    ``chat`` supplies the tokenizer, end-of-turn ids and context length (``model`` is unused);
    ``gguf`` is the model file; ``threads`` llama.cpp's CPU threads.
    """

    def __init__(self, chat: ChatModel, gguf: Path, threads: int, max_batch: int = 16) -> None:
        super().__init__(chat, max_batch)
        import llama_cpp  # the optional extra: ImportError names what to install

        self._lc: Any = llama_cpp
        llama_cpp.llama_backend_init()
        silence_llama_cpp()
        model = llama_cpp.llama_model_load_from_file(
            str(gguf).encode(), llama_cpp.llama_model_default_params()
        )
        if not model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = SEQUENCE_CONTEXT * self.max_batch
        params.n_batch = params.n_ubatch = PREFILL_TOKEN_BUDGET + SEQUENCE_CONTEXT
        params.n_seq_max = self.max_batch
        params.n_threads = params.n_threads_batch = threads
        self._model = model
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._buffer = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self._slot: dict[int, int] = {}  # id(sequence) → llama.cpp sequence id
        self._lock = threading.Lock()
        self.chat.context_length = min(self.chat.context_length, SEQUENCE_CONTEXT)

    def stop(self) -> None:
        """Stop the engine thread, then free llama.cpp's context and model."""
        super().stop()
        with self._lock:
            if self._ctx:
                self._lc.llama_batch_free(self._buffer)
                self._lc.llama_free(self._ctx)
                self._lc.llama_model_free(self._model)
                self._ctx = None

    # --- engine thread -------------------------------------------------------------------------

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> list[int]:
        """Run ``(token, position, slot, wants_logits)`` entries through llama.cpp; returns the
        batch indices whose logits were asked for."""
        batch = self._buffer
        wanted = fill_batch(batch, entries)
        status = self._lc.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        return wanted

    def _logits(self, index: int) -> torch.Tensor:
        """The logits of batch entry ``index`` as a float tensor (a copy: llama.cpp reuses it)."""
        pointer = self._lc.llama_get_logits_ith(self._ctx, index)
        return torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).copy())

    def _prefill(self, seqs: list[Sequence]) -> None:
        """Give each new sequence a free slot, prefill all prompts in one ``llama_decode`` and
        sample each first token; unfinished sequences join the running batch."""
        used = {self._slot[id(s)] for s in self._batch.seqs}
        free = [slot for slot in range(self.max_batch) if slot not in used]
        entries: list[tuple[int, int, int, bool]] = []
        for seq, slot in zip(seqs, free[: len(seqs)], strict=True):
            self._slot[id(seq)] = slot
            self._lc.llama_memory_seq_rm(self._memory, slot, -1, -1)
            last = len(seq.prompt_ids) - 1
            entries += [(t, p, slot, p == last) for p, t in enumerate(seq.prompt_ids)]
        wanted = self._decode(entries)
        self.stats.prefills += 1
        self.stats.sequences += len(seqs)
        self.stats.max_prefill_size = max(self.stats.max_prefill_size, len(seqs))
        kept = [s for s, i in zip(seqs, wanted, strict=True) if self._accept(s, self._logits(i))]
        self.rate.add(len(seqs))
        self._batch.seqs.extend(kept)
        self._forget_finished(seqs)

    def _decode_step(self) -> None:
        """One ``llama_decode`` over every running sequence's last token, then sample."""
        for seq in self._batch.seqs:
            if seq.cancelled:
                seq.finish("cancelled")
        running = [s for s in self._batch.seqs if not s.cancelled]
        self._batch.seqs = running
        if not running:
            return
        entries = [
            (s.out_ids[-1], len(s.prompt_ids) + len(s.out_ids) - 1, self._slot[id(s)], True)
            for s in running
        ]
        wanted = self._decode(entries)
        self.stats.decode_steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, len(running))
        if len(running) > 1:
            self.stats.batched_steps += 1
        self._batch.seqs = [
            s for s, i in zip(running, wanted, strict=True) if self._accept(s, self._logits(i))
        ]
        self.rate.add(len(running))
        self._forget_finished(running)

    def _forget_finished(self, seqs: list[Sequence]) -> None:
        """Drop the slot of every sequence in ``seqs`` that left the batch (cleared on reuse)."""
        alive = {id(s) for s in self._batch.seqs}
        for seq in seqs:
            if id(seq) not in alive:
                self._slot.pop(id(seq), None)
