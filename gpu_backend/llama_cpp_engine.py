"""The chat engine on llama.cpp (``--cpu-engine llama-cpp``): the same continuous batching, the
same sequences, sampling and events as :class:`~gpu_backend.engine.GenerationEngine`, with
llama.cpp's forward pass on the Q4_1 GGUF itself (about six times transformers' fp32 single-stream
decode rate on a CPU, docs/performance.md).

Optional: ``llama-cpp-python`` is the ``llama-cpp`` extra (a source build of minutes, never in the
default install); without it ``--cpu-engine llama-cpp`` fails the chat model's load with the
reason. Each running sequence owns a llama.cpp sequence id; all of them share one unified KV cache
of ``kv_cells`` token cells (bounded memory), and any one sequence may use the model's whole
context. A sequence is admitted only when its worst case (prompt plus ``max_tokens``, at most the
context) fits beside the worst cases of the running ones, so the cache is never over-committed;
the rest wait, in order. Prompts are templated and detokenised by the converted copy's tokenizer
(the GGUF's vocabulary), so requests, usage and stop handling are those of the torch engine.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import engine as _engine
from .chat_model import ChatModel
from .engine import GenerationEngine, Sequence
from .llama_cpp_batch import fill_batch, silence_llama_cpp

KV_CELLS = 32768  # token cells of the shared KV cache: 720 MiB for SmolLM2-135M at f16
MICRO_BATCH = 512  # tokens per physical forward pass (llama.cpp splits a larger prefill)


def reservation(seq: Sequence, context_length: int) -> int:
    """The KV cells ``seq`` can ever occupy: its prompt plus ``max_tokens``, at most the context."""
    return min(len(seq.prompt_ids) + seq.params.max_tokens, context_length)


class LlamaCppEngine(GenerationEngine):
    """Continuous batching over llama.cpp: one ``llama_decode`` per prefill and per decode step.

    ``chat`` supplies the tokenizer, end-of-turn ids and context length (``model`` is unused; its
    ``context_length`` is lowered to ``kv_cells`` if larger); ``gguf`` is the model file;
    ``threads`` llama.cpp's CPU threads; ``kv_cells`` the size of the KV cache all running
    sequences share.
    """

    def __init__(
        self,
        chat: ChatModel,
        gguf: Path,
        threads: int,
        max_batch: int = 16,
        kv_cells: int = KV_CELLS,
    ) -> None:
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
        context = min(chat.context_length, kv_cells)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = kv_cells
        params.kv_unified = True  # one cache for all sequences: each may use n_ctx cells
        params.n_seq_max = self.max_batch
        # A prefill is one llama_decode: the first prompt whole plus the engine's token budget.
        params.n_batch = _engine.PREFILL_TOKEN_BUDGET + context
        params.n_ubatch = MICRO_BATCH
        params.n_threads = params.n_threads_batch = threads
        self._model = model
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(model)
            raise RuntimeError("llama.cpp could not create a context")
        self.kv_cells = int(llama_cpp.llama_n_ctx(self._ctx))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._n_batch = int(params.n_batch)
        self._buffer = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._slot: dict[int, int] = {}  # id(sequence) → llama.cpp sequence id
        self._lock = threading.Lock()
        self.chat.context_length = min(self.chat.context_length, self.kv_cells)

    def stop(self) -> None:
        """Stop the engine thread, then free llama.cpp's context and model."""
        super().stop()
        with self._lock:
            if self._ctx:
                self._lc.llama_batch_free(self._buffer)
                self._lc.llama_free(self._ctx)
                self._lc.llama_model_free(self._model)
                self._ctx = None

    @property
    def kv_reserved(self) -> int:
        """KV cells reserved by the running sequences (never more than ``kv_cells``)."""
        return sum(reservation(s, self.chat.context_length) for s in self._batch.seqs)

    # --- engine thread -------------------------------------------------------------------------

    def _fits(self, seq: Sequence, admitted: list[Sequence]) -> bool:
        """Only while ``seq``'s :func:`reservation` fits in the cells the running and newly
        admitted sequences leave (the first that does not waits at the head of the line). With
        nothing running every sequence fits: a reservation is at most the context, and the
        context at most the cache."""
        taken = self.kv_reserved + sum(reservation(s, self.chat.context_length) for s in admitted)
        return reservation(seq, self.chat.context_length) <= self.kv_cells - taken

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> list[int]:
        """Run ``(token, position, slot, wants_logits)`` entries through llama.cpp; returns the
        batch indices whose logits were asked for."""
        if len(entries) > self._n_batch:
            raise RuntimeError(f"{len(entries)} tokens exceed the batch of {self._n_batch}")
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
        """Clear every slot no running sequence holds (the cells of ended ones go back to the
        cache), give each new sequence one, prefill all prompts in one ``llama_decode`` and
        sample each first token; unfinished sequences join the running batch."""
        used = {self._slot[id(s)] for s in self._batch.seqs}
        free = [slot for slot in range(self.max_batch) if slot not in used]
        for slot in free:
            self._lc.llama_memory_seq_rm(self._memory, slot, -1, -1)
        self._slot = {id(s): self._slot[id(s)] for s in self._batch.seqs}
        entries: list[tuple[int, int, int, bool]] = []
        for seq, slot in zip(seqs, free[: len(seqs)], strict=True):
            self._slot[id(seq)] = slot
            last = len(seq.prompt_ids) - 1
            entries += [(t, p, slot, p == last) for p, t in enumerate(seq.prompt_ids)]
        wanted = self._decode(entries)
        self.stats.prefills += 1
        self.stats.sequences += len(seqs)
        self.stats.max_prefill_size = max(self.stats.max_prefill_size, len(seqs))
        kept = [s for s, i in zip(seqs, wanted, strict=True) if self._accept(s, self._logits(i))]
        self.rate.add(len(seqs))
        self._batch.seqs.extend(kept)

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
