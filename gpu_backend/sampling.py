"""Per-sequence decoding parameters and the logits → next-token step.

Everything here works on one row of logits (float32, on the model's device) so that sequences
batched together keep their own temperature, top_p, top_k, penalty, bias and random generator.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How one choice is decoded. ``temperature`` None or 0 means greedy (argmax)."""

    max_tokens: int
    temperature: float | None = None
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logit_bias: dict[int, float] = field(default_factory=dict)
    top_logprobs: int | None = None  # None: no logprobs; 0..20: chosen token (+ that many)

    @property
    def greedy(self) -> bool:
        """True when the next token is the argmax (temperature absent or 0)."""
        return self.temperature is None or self.temperature == 0.0


def make_generator(seed: int | None) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (or from the OS when there is none).

    Sampling draws on the CPU so the same seed gives the same tokens on CPU and CUDA hosts
    whenever the logits agree.
    """
    generator = torch.Generator(device="cpu")
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    generator.manual_seed(seed)
    return generator


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> None:
    """CTRL-style penalty, in place: logits of ``seen`` token ids are divided (if positive)
    or multiplied (if negative) by ``penalty``. Prompt tokens count as seen, as the spec says."""
    if penalty == 1.0 or seen.numel() == 0:
        return
    scores = logits.index_select(0, seen)
    scores = torch.where(scores < 0, scores * penalty, scores / penalty)
    logits.index_copy_(0, seen, scores)


def apply_logit_bias(logits: torch.Tensor, bias: dict[int, float]) -> None:
    """Add OpenAI's ``logit_bias`` (token id → -100..100) to ``logits`` in place."""
    for token_id, value in bias.items():
        logits[token_id] += value


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``logits`` with everything outside the top-k and the top-p nucleus set to -inf.

    ``top_k`` 0 disables the k limit; ``top_p`` 1.0 disables the nucleus. At least one token
    always survives.
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, -math.inf)
    return logits


@dataclass(frozen=True)
class TokenChoice:
    """The token picked for one step, with OpenAI logprobs data when it was asked for."""

    token_id: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


def choose_token(
    raw_logits: torch.Tensor,
    seen: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator,
) -> TokenChoice:
    """Pick the next token from one row of logits (``[vocab]``, any device).

    Order: repetition penalty, logit bias, then greedy argmax or temperature → top-k → top-p →
    multinomial draw from ``generator``. Logprobs (when requested) are those of the model's
    distribution after penalty and bias, before temperature, like OpenAI reports them.
    """
    logits = raw_logits.float().clone()
    apply_repetition_penalty(logits, seen, params.repetition_penalty)
    apply_logit_bias(logits, params.logit_bias)
    if params.greedy:
        token_id = int(torch.argmax(logits).item())
    else:
        assert params.temperature is not None
        scaled = filter_top_k_top_p(logits / params.temperature, params.top_k, params.top_p)
        probs = torch.softmax(scaled, dim=-1).cpu()
        token_id = int(torch.multinomial(probs, 1, generator=generator).item())
    if params.top_logprobs is None:
        return TokenChoice(token_id)
    logprobs = torch.log_softmax(logits, dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if params.top_logprobs > 0:
        values, ids = torch.topk(logprobs, params.top_logprobs)
        top = tuple((int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist(), strict=True))
    return TokenChoice(token_id, float(logprobs[token_id].item()), top)
