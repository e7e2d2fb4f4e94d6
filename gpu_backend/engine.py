"""Continuous batching for chat generation.

One engine thread owns the model. Sequences that arrived since the last step are prefilled
together (left-padded, one forward pass), join the running batch at once and leave it the
moment they finish, so a new request never waits for others to end.
Each decode step is a single forward pass over every active sequence: their key/value caches are
left-padded to a common length and an attention mask hides the padding; position ids are
per-sequence, so a batched sequence computes exactly what it would compute alone.

Events go to each sequence's ``sink`` from the engine thread: ``Delta`` for text as it becomes
final and one ``Finished`` at the end.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicCache

from .chat_model import ChatModel
from .sampling import SamplingParams, TokenChoice, choose_token, make_generator
from .textstream import IncrementalDetokenizer, StopMatcher

log = logging.getLogger("infrai.gpu_backend.engine")

PREFILL_TOKEN_BUDGET = 8192  # prompt tokens prefilled in one forward pass (beyond the first)


@dataclass(frozen=True)
class TopLogprob:
    """One alternative token in OpenAI's ``top_logprobs``."""

    token: str
    logprob: float
    bytes: list[int]


@dataclass(frozen=True)
class TokenLogprob:
    """OpenAI's per-token logprob entry (``choices[].logprobs.content[]``)."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


@dataclass(frozen=True)
class Delta:
    """Text that is final (never retracted), with the logprobs of the tokens that made it."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class Finished:
    """The end of a sequence. ``reason``: ``stop``, ``length``, ``cancelled`` or ``error``."""

    reason: str
    completion_tokens: int
    error: str | None = None


Event = Delta | Finished


class Sequence:
    """One choice being generated: its prompt, decoding parameters, progress and event sink.

    ``cancel()`` may be called from any thread; the engine drops the sequence before its next
    step. ``completion_tokens`` counts every token the model sampled for it, including the
    end-of-turn token when generation ended on one.
    """

    def __init__(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        sink: Callable[[Event], None],
        decoder: IncrementalDetokenizer,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.sink = sink
        self.out_ids: list[int] = []
        self.generator = make_generator(params.seed)
        self._detok = decoder
        self._stopper = StopMatcher(params.stop)
        self._pending_logprobs: list[TokenLogprob] = []
        self._seen: torch.Tensor | None = None
        self.cancelled = False
        self.done = False

    def cancel(self) -> None:
        """Ask the engine to stop generating this sequence (client went away)."""
        self.cancelled = True

    def seen_ids(self, device: torch.device) -> torch.Tensor:
        """Prompt and generated ids as a tensor (for the repetition penalty), kept up to date."""
        if self._seen is None:
            self._seen = torch.tensor(
                self.prompt_ids + self.out_ids, dtype=torch.long, device=device
            )
        return self._seen

    def record(
        self, choice: TokenChoice, logprob: TokenLogprob | None, device: torch.device
    ) -> str:
        """Append a sampled token; returns the text now final for the client (may be empty)."""
        self.out_ids.append(choice.token_id)
        if self._seen is not None:
            tail = torch.tensor([choice.token_id], dtype=torch.long, device=device)
            self._seen = torch.cat([self._seen, tail])
        if logprob is not None:
            self._pending_logprobs.append(logprob)
        return self._stopper.feed(self._detok.push(choice.token_id))

    @property
    def hit_stop_string(self) -> bool:
        """True once a ``stop`` string appeared in the output."""
        return self._stopper.stopped

    def emit_text(self, text: str) -> None:
        """Send released text (with the logprobs gathered since the last delta)."""
        if text:
            self.sink(Delta(text, self._pending_logprobs))
            self._pending_logprobs = []

    def finish(self, reason: str, error: str | None = None) -> None:
        """Flush held text (unless a stop string cut it) and send the ``Finished`` event once."""
        if self.done:
            return
        self.done = True
        if reason in {"stop", "length"}:
            self.emit_text(self._stopper.flush())
        self.sink(Finished(reason, len(self.out_ids), error))


@dataclass
class EngineStats:
    """Counters the server exposes on ``/health`` and ``/stats`` (batching proof)."""

    sequences: int = 0
    prefills: int = 0
    decode_steps: int = 0
    batched_steps: int = 0
    max_batch_size: int = 0
    max_prefill_size: int = 0
    tokens_generated: int = 0


class TokenRate:
    """Tokens generated per second over the last ``window_s`` seconds.

    The engine thread calls :meth:`add` once per forward pass; any thread may read
    :meth:`per_second`, which is the tokens of the passes inside the window divided by the
    window (so it falls to 0 within ``window_s`` of the engine going idle).
    """

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def add(self, tokens: int, now: float | None = None) -> None:
        """Record ``tokens`` generated at ``now`` (``time.monotonic()`` by default)."""
        at = time.monotonic() if now is None else now
        with self._lock:
            self._samples.append((at, tokens))
            while self._samples and self._samples[0][0] < at - self.window_s:
                self._samples.popleft()

    def per_second(self, now: float | None = None) -> float:
        """Tokens per second over the window ending at ``now``."""
        at = time.monotonic() if now is None else now
        with self._lock:
            recent = sum(n for t, n in self._samples if t >= at - self.window_s)
        return recent / self.window_s


class _Batch:
    """The running batch: sequences, their shared left-padded KV cache and attention mask."""

    def __init__(self) -> None:
        self.seqs: list[Sequence] = []
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.mask: torch.Tensor | None = None

    def add(
        self,
        seqs: list[Sequence],
        layers: list[tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor,
    ) -> None:
        """Append prefilled sequences: their caches (``[n, heads, len, dim]`` per layer) and
        their left-padded ``[n, len]`` attention mask."""
        if not seqs:
            return
        if not self.seqs:
            self.seqs, self.layers, self.mask = list(seqs), layers, mask
            self.keep(list(range(len(seqs))))  # trims columns that are padding in every row
            return
        assert self.mask is not None
        width = max(self.mask.shape[1], mask.shape[1])
        old_pad, new_pad = width - self.mask.shape[1], width - mask.shape[1]
        self.layers = [
            (
                torch.cat([_left_pad(k_old, old_pad), _left_pad(k_new, new_pad)]),
                torch.cat([_left_pad(v_old, old_pad), _left_pad(v_new, new_pad)]),
            )
            for (k_old, v_old), (k_new, v_new) in zip(self.layers, layers, strict=True)
        ]
        self.mask = torch.cat([F.pad(self.mask, (old_pad, 0)), F.pad(mask, (new_pad, 0))])
        self.seqs.extend(seqs)

    def keep(self, rows: list[int]) -> None:
        """Keep only ``rows`` and drop cache columns that are now padding for every row."""
        if not rows:
            self.seqs, self.layers, self.mask = [], [], None
            return
        assert self.mask is not None
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        start = int(torch.nonzero(mask.sum(dim=0))[0].item())
        self.mask = mask[:, start:]
        self.layers = [
            (k.index_select(0, index)[:, :, start:], v.index_select(0, index)[:, :, start:])
            for k, v in self.layers
        ]
        self.seqs = [self.seqs[i] for i in rows]


def cache_tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The ``(keys, values)`` tensors of every layer of a filled cache."""
    return [(layer.keys, layer.values) for layer in cache.layers]  # type: ignore[union-attr,misc]


def _plain_greedy(params: SamplingParams) -> bool:
    """True when the next token is just the argmax of the raw logits."""
    return (
        params.greedy
        and params.repetition_penalty == 1.0
        and not params.logit_bias
        and params.top_logprobs is None
    )


def _left_pad(tensor: torch.Tensor, amount: int) -> torch.Tensor:
    """Zero-pad a ``[batch, heads, seq, dim]`` cache tensor by ``amount`` positions on the left."""
    return F.pad(tensor, (0, 0, amount, 0)) if amount else tensor


class GenerationEngine:
    """Owns the chat model on one thread and runs continuous batching over submitted sequences."""

    def __init__(self, chat: ChatModel, max_batch: int = 16) -> None:
        self.chat = chat
        self.max_batch = max(1, max_batch)
        self.stats = EngineStats()
        self.rate = TokenRate()
        self._incoming: queue.Queue[Sequence] = queue.Queue()
        self._batch = _Batch()
        self._held: deque[Sequence] = deque()  # taken from the queue, not admitted yet
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="generation-engine", daemon=True)

    def start(self) -> None:
        """Start the engine thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the engine thread; sequences still running or queued finish with
        ``cancelled`` (:meth:`abort`), then wait for the thread (at most one step)."""
        self.abort()
        self._thread.join(timeout=10)

    def abort(self) -> None:
        """Without waiting (safe in a signal handler): end every sequence, running or queued,
        with ``cancelled`` at the engine's next step, and any submitted from now on at once."""
        self._stopping.set()

    def warm_up(self, prompt_ids: list[int], max_tokens: int = 8, timeout_s: float = 60.0) -> None:
        """Generate ``max_tokens`` for ``prompt_ids`` and wait for the end (at most
        ``timeout_s``): run once before the model is called ready, the first prefill and decode
        steps of a process (allocations, kernel choice, the tokenizer's first use) are not paid
        by the first caller — 2.2 s against 1.5 s for the next one, on the busy 2-core machine."""
        done = threading.Event()

        def sink(event: Event) -> None:
            if isinstance(event, Finished):
                done.set()

        self.submit(self.new_sequence(prompt_ids, SamplingParams(max_tokens=max_tokens), sink))
        done.wait(timeout_s)

    def new_sequence(
        self, prompt_ids: list[int], params: SamplingParams, sink: Callable[[Event], None]
    ) -> Sequence:
        """A sequence bound to this engine's tokenizer (not yet submitted)."""
        return Sequence(prompt_ids, params, sink, IncrementalDetokenizer(self.chat.tokenizer))

    def submit(self, seq: Sequence) -> None:
        """Queue a sequence; it joins the running batch at the next step (or, once the engine
        is stopping, ends ``cancelled``)."""
        self._incoming.put(seq)
        if self._stopping.is_set():
            self._cancel_queued()

    def _fits(self, seq: Sequence, admitted: list[Sequence]) -> bool:
        """Whether ``seq`` may join the running batch beside ``admitted`` (this step's) now;
        an engine with a bounded cache says no when it would over-commit it."""
        return True

    def _next_waiting(self, block: bool) -> Sequence | None:
        """The oldest sequence not yet admitted (one held back first), or None when there is
        none (waiting up to 0.1 s when ``block``)."""
        if self._held:
            return self._held.popleft()
        try:
            return self._incoming.get(block=block, timeout=0.1 if block else None)
        except queue.Empty:
            return None

    def _cancel_queued(self) -> None:
        while self._held:
            self._held.popleft().finish("cancelled")
        while True:
            try:
                self._incoming.get_nowait().finish("cancelled")
            except queue.Empty:
                return

    @property
    def queue_depth(self) -> int:
        """Sequences submitted and not yet prefilled (one held back included)."""
        return self._incoming.qsize() + len(self._held)

    @property
    def batch_size(self) -> int:
        """Sequences in the running batch now."""
        return len(self._batch.seqs)

    # --- engine thread -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._admit()
                if self._batch.seqs:
                    self._decode_step()
            except Exception as exc:  # a model failure must not kill the thread
                log.exception("generation step failed")
                for seq in self._batch.seqs:
                    seq.finish("error", f"generation failed: {exc}")
                self._batch.keep([])
        for seq in self._batch.seqs:
            seq.finish("cancelled")
        self._batch.keep([])
        self._cancel_queued()

    def _admit(self) -> None:
        """Prefill the waiting sequences together (blocking briefly only when idle).

        Takes as many as fit in ``max_batch`` and, beyond the first, in ``PREFILL_TOKEN_BUDGET``
        prompt tokens, and only while the next one :meth:`_fits`; the rest wait for the next
        step, the one that did not fit at the head of the line.
        """
        new: list[Sequence] = []
        budget = PREFILL_TOKEN_BUDGET
        while len(self._batch.seqs) + len(new) < self.max_batch:
            seq = self._next_waiting(block=not self._batch.seqs and not new)
            if seq is None:
                break
            if seq.cancelled:
                seq.finish("cancelled")
                continue
            if not self._fits(seq, new):
                self._held.appendleft(seq)  # first in line at the next step; no one overtakes
                break
            new.append(seq)
            budget -= len(seq.prompt_ids)
            if budget <= 0:
                break
        if not new:
            return
        try:
            self._prefill(new)
        except Exception as exc:
            log.exception("prefill failed")
            for seq in new:
                seq.finish("error", f"prefill failed: {exc}")

    @torch.inference_mode()
    def _prefill(self, seqs: list[Sequence]) -> None:
        """One forward pass over the left-padded prompts; sample each first token (so it
        streams at once) and add the unfinished sequences to the running batch."""
        device = self.chat.spec.device
        width = max(len(seq.prompt_ids) for seq in seqs)
        input_ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            input_ids[row, width - len(seq.prompt_ids) :] = torch.tensor(seq.prompt_ids)
            mask[row, width - len(seq.prompt_ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.chat.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.stats.prefills += 1
        self.stats.sequences += len(seqs)
        self.stats.max_prefill_size = max(self.stats.max_prefill_size, len(seqs))
        keep = [i for i, seq in enumerate(seqs) if self._accept(seq, out.logits[i, -1])]
        self.rate.add(len(seqs))
        if not keep:
            return
        index = torch.tensor(keep, dtype=torch.long, device=device)
        layers = [
            (k.index_select(0, index), v.index_select(0, index)) for k, v in cache_tensors(cache)
        ]
        self._batch.add([seqs[i] for i in keep], layers, mask.index_select(0, index))

    @torch.inference_mode()
    def _decode_step(self) -> None:
        """One forward pass over every active sequence, then sample and retire finished ones."""
        batch = self._batch
        live = [i for i, seq in enumerate(batch.seqs) if not seq.cancelled]
        for seq in batch.seqs:
            if seq.cancelled:
                seq.finish("cancelled")
        if len(live) != len(batch.seqs):
            batch.keep(live)
            if not batch.seqs:
                return
        assert batch.mask is not None
        device = self.chat.spec.device
        size = len(batch.seqs)
        last = torch.tensor([[s.out_ids[-1]] for s in batch.seqs], dtype=torch.long, device=device)
        positions = torch.tensor(
            [[len(s.prompt_ids) + len(s.out_ids) - 1] for s in batch.seqs],
            dtype=torch.long,
            device=device,
        )
        batch.mask = torch.cat(
            [batch.mask, torch.ones((size, 1), dtype=torch.long, device=device)], dim=1
        )
        cache = DynamicCache(ddp_cache_data=batch.layers)
        out = self.chat.model(
            input_ids=last,
            attention_mask=batch.mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
        )
        batch.layers = cache_tensors(cache)
        self.stats.decode_steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, size)
        if size > 1:
            self.stats.batched_steps += 1
        logits = out.logits[:, -1]
        # Plain greedy rows need only an argmax: one batched op and one device sync for all.
        plain = [_plain_greedy(seq.params) for seq in batch.seqs]
        argmax = logits.argmax(dim=-1).tolist() if any(plain) else []
        keep = [
            i
            for i, seq in enumerate(batch.seqs)
            if self._accept(seq, logits[i], TokenChoice(argmax[i]) if plain[i] else None)
        ]
        self.rate.add(size)
        if len(keep) != size:
            batch.keep(keep)

    def _accept(
        self, seq: Sequence, logits: torch.Tensor, choice: TokenChoice | None = None
    ) -> bool:
        """Take the next token of ``seq`` (``choice``, or sampled from ``logits`` when None);
        returns False once the sequence is finished."""
        params = seq.params
        device = self.chat.spec.device
        if choice is None:
            seen = seq.seen_ids(device) if params.repetition_penalty != 1.0 else _EMPTY
            choice = choose_token(logits, seen, params, seq.generator)
        self.stats.tokens_generated += 1
        if choice.token_id in self.chat.eos_token_ids:
            seq.out_ids.append(choice.token_id)
            seq.finish("stop")
            return False
        seq.emit_text(seq.record(choice, self._logprob_entry(choice), device))
        if seq.hit_stop_string:
            seq.finish("stop")
            return False
        total = len(seq.prompt_ids) + len(seq.out_ids)
        if len(seq.out_ids) >= params.max_tokens or total >= self.chat.context_length:
            seq.finish("length")
            return False
        return True

    def _logprob_entry(self, choice: TokenChoice) -> TokenLogprob | None:
        """OpenAI's logprob entry for a sampled token, or None when logprobs were not requested."""
        if choice.logprob is None:
            return None
        token = self._token_text(choice.token_id)
        top = [
            TopLogprob(t, lp, list(t.encode()))
            for t, lp in ((self._token_text(i), v) for i, v in choice.top)
        ]
        return TokenLogprob(token, choice.logprob, list(token.encode()), top)

    def _token_text(self, token_id: int) -> str:
        return str(self.chat.tokenizer.decode([token_id], skip_special_tokens=False))


_EMPTY = torch.empty(0, dtype=torch.long)
