"""The composition root: model slots, background loading, and the services behind the routes.

Models load one after another on a background thread (chat first), each logging one progress
line. A request for a model that is still loading waits for it, up to ``--load-wait`` seconds
(60 by default), then gets a 503 ``model_loading`` with ``Retry-After``. ``/health`` reports
every model's state and, while loading, an estimate of the seconds until it is ready (from the
load times of earlier starts kept in the cache dir, else typical times measured here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import (
    CHAT_MODEL_ID,
    EMBEDDING_MODEL_ID,
    MODERATION_MODEL_ID,
    SPEECH_MODEL_ID,
    TRANSCRIPTION_MODEL_ID,
)
from .chat_api import template_prompt
from .chat_model import load_chat_model, load_chat_tokenizer, needs_conversion, prebuilt_dir
from .config import BackendConfig
from .device import DeviceSpec, select_device
from .embeddings import EmbeddingBatcher, load_encoder
from .engine import GenerationEngine
from .errors import APIError, still_loading, unavailable, unknown_model
from .llama_cpp_batch import probe
from .locate import smollm2_gguf
from .moderation import ModerationClassifier
from .speech import Synthesizer, load_synthesizer
from .transcription import Transcriber

log = logging.getLogger("infrai.gpu_backend")

KINDS: dict[str, str] = {
    CHAT_MODEL_ID: "chat",
    EMBEDDING_MODEL_ID: "embeddings",
    MODERATION_MODEL_ID: "moderation",
    TRANSCRIPTION_MODEL_ID: "transcription",
    SPEECH_MODEL_ID: "speech",
}
# Chat first: it is what a newcomer calls first, and the slowest to load when not converted yet.
LOAD_ORDER: tuple[str, ...] = (
    CHAT_MODEL_ID,
    EMBEDDING_MODEL_ID,
    MODERATION_MODEL_ID,
    TRANSCRIPTION_MODEL_ID,
    SPEECH_MODEL_ID,
)
# Seconds each model takes to load on one idle core when no earlier start recorded its own
# (measured 2026-11-30 on the 2-core dev machine); the GGUF conversion adds CONVERSION_S.
TYPICAL_LOAD_S: dict[str, float] = {
    CHAT_MODEL_ID: 2.0,
    EMBEDDING_MODEL_ID: 1.5,
    MODERATION_MODEL_ID: 1.0,
    TRANSCRIPTION_MODEL_ID: 1.0,
    SPEECH_MODEL_ID: 1.0,
}
CONVERSION_S = 25.0
LOAD_TIMES_FILE = "load-seconds.json"
# What a chat model generates for once before it is called ready (Engine.warm_up).
WARM_UP_MESSAGES = [{"role": "user", "content": "Say hi."}]


@dataclass
class ModelSlot:
    """One served model: its loading state and, once ready, the service object."""

    model_id: str
    kind: str
    state: str = "pending"  # pending → loading → ready | failed
    error: str | None = None
    load_seconds: float | None = None
    detail: str | None = None
    value: Any = None
    expected_s: float = 1.0
    loading_since: float | None = None  # time.monotonic() when its load began
    done: threading.Event = field(default_factory=threading.Event)

    def info(self, eta_s: float | None) -> dict[str, Any]:
        """The slot as ``/health`` shows it (``eta_s``: seconds until ready, 0 when ready,
        None when failed)."""
        return {
            "kind": self.kind,
            "state": self.state,
            "ready": self.state == "ready",
            "eta_s": eta_s,
            "load_seconds": self.load_seconds,
            "detail": self.detail,
            "error": self.error,
        }

    def remaining_s(self, now: float) -> float:
        """Estimated seconds of loading left (its own load only; at least 1 while not done)."""
        if self.loading_since is None:  # queued: its whole load (a recorded one may be ~0 s)
            return max(self.expected_s, 1.0)
        return max(self.expected_s - (now - self.loading_since), 1.0)

    async def wait(self, limit_s: float) -> bool:
        """Wait up to ``limit_s`` seconds for the load to end; True when it ended."""
        deadline = time.monotonic() + limit_s
        while not self.done.is_set():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True


@dataclass
class ModerationService:
    """The moderation classifier and the (shared) embedding batcher that feeds it."""

    classifier: ModerationClassifier
    batcher: EmbeddingBatcher


def cpu_engine(requested: str) -> tuple[str, str]:
    """The CPU chat engine to run for ``--cpu-engine requested``, and why: ``auto`` is llama.cpp
    where llama-cpp-python is installed and passes :func:`~.llama_cpp_batch.probe` (one stream
    decodes ~3x faster, docs/performance.md), else transformers."""
    if requested != "auto":
        return requested, "as configured"
    reason = probe(smollm2_gguf())
    if reason is None:
        return "llama-cpp", "auto: llama-cpp-python is installed and decodes"
    return "transformers", f"auto: {reason}"


class Backend:
    """Owns the device choice, the model slots and the worker threads of the server."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.spec: DeviceSpec = select_device(config.device)
        self.started = time.time()
        order = [m for m in LOAD_ORDER if m in config.models]
        self.slots: dict[str, ModelSlot] = {m: ModelSlot(m, KINDS[m]) for m in order}
        self._converting = CHAT_MODEL_ID in self.slots and needs_conversion(config.cache_dir)
        self._estimate_load_times()
        self._loaders: dict[str, Callable[[], tuple[Any, str]]] = {
            CHAT_MODEL_ID: self._load_chat,
            EMBEDDING_MODEL_ID: self._load_embeddings,
            MODERATION_MODEL_ID: self._load_moderation,
            TRANSCRIPTION_MODEL_ID: self._load_transcription,
            SPEECH_MODEL_ID: self._load_speech,
        }
        self._batcher: EmbeddingBatcher | None = None
        self._batcher_lock = threading.Lock()
        self.engine: GenerationEngine | None = None
        self._thread = threading.Thread(target=self._load_all, name="model-loader", daemon=True)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Begin loading every configured model in the background; returns at once."""
        log.info(
            "gpu-backend: device %s/%s, %d thread(s), cache %s; loading %s in the background",
            self.spec.device.type,
            self.spec.dtype_name,
            self.config.threads,
            self.config.cache_dir,
            ", ".join(self.slots),
        )
        self._thread.start()

    def abort_generations(self) -> None:
        """End every generation now (``cancelled``, answered 503): the first step of a stop,
        safe in a signal handler, so open requests finish at once instead of holding the
        server's shutdown for as long as their ``max_tokens``."""
        if self.engine is not None:
            self.engine.abort()

    def shutdown(self) -> None:
        """Stop the worker threads (generation engine, embedding batcher)."""
        if self.engine is not None:
            self.engine.stop()
        if self._batcher is not None:
            self._batcher.stop()

    def _estimate_load_times(self) -> None:
        """Each slot's expected load seconds: the last start's, else the typical time."""
        recorded: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((self.config.cache_dir / LOAD_TIMES_FILE).read_text())
            recorded = loaded if isinstance(loaded, dict) else {}
        for slot in self.slots.values():
            seconds = recorded.get(slot.model_id)
            if isinstance(seconds, int | float) and seconds > 0:
                slot.expected_s = float(seconds)
            else:
                slot.expected_s = TYPICAL_LOAD_S[slot.model_id]
        if self._converting:
            self.slots[CHAT_MODEL_ID].expected_s += CONVERSION_S

    def _record_load_times(self) -> None:
        """Keep this start's load times for the next start's estimates (best effort).

        A chat load that included the GGUF conversion is not a typical start: left out.
        """
        times = {
            m: s.load_seconds
            for m, s in self.slots.items()
            if s.load_seconds is not None and not (m == CHAT_MODEL_ID and self._converting)
        }
        if not times:
            return
        path = self.config.cache_dir / LOAD_TIMES_FILE
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(times, indent=1, sort_keys=True))

    def _load_all(self) -> None:
        for slot in self.slots.values():
            self._load(slot)
        self._record_load_times()

    def _load(self, slot: ModelSlot) -> None:
        """Load one model, recording its state and logging one progress line."""
        slot.loading_since = time.monotonic()
        slot.state = "loading"
        began = time.perf_counter()
        try:
            slot.value, slot.detail = self._loaders[slot.model_id]()
        except Exception as exc:
            slot.state, slot.error = "failed", f"{type(exc).__name__}: {exc}"
            log.error("gpu-backend: model %s (%s) FAILED: %s", slot.model_id, slot.kind, slot.error)
        else:
            slot.state = "ready"
            slot.load_seconds = round(time.perf_counter() - began, 2)
            log.info(
                "gpu-backend: model %s (%s) ready in %.1f s [%s]",
                slot.model_id,
                slot.kind,
                slot.load_seconds,
                slot.detail,
            )
        finally:
            slot.done.set()

    # --- loaders: each returns (service, one-line detail) --------------------------------------

    def _load_chat(self) -> tuple[GenerationEngine, str]:
        if not self.spec.is_cuda:
            engine_name, why = cpu_engine(self.config.cpu_engine)
            log.info("gpu-backend: chat engine %s (%s)", engine_name, why)
            if engine_name == "llama-cpp":
                return self._load_chat_llama_cpp()
        chat = load_chat_model(self.config.cache_dir, self.spec, self.config.cpu_weights)
        chat.default_max_tokens = self.config.default_max_tokens
        engine = GenerationEngine(chat, max_batch=self.config.max_batch)
        engine.start()
        engine.warm_up(template_prompt(chat, WARM_UP_MESSAGES))
        self.engine = engine
        weights = self.spec.dtype_name if self.spec.is_cuda else self.config.cpu_weights
        return (
            engine,
            f"{self.spec.device.type}/{self.spec.dtype_name}, {weights} weights, "
            f"context {chat.context_length}",
        )

    def _load_chat_llama_cpp(self) -> tuple[GenerationEngine, str]:
        from .llama_cpp_engine import LlamaCppEngine

        chat = load_chat_tokenizer(self.config.cache_dir, self.spec)
        chat.default_max_tokens = self.config.default_max_tokens
        engine = LlamaCppEngine(
            chat, smollm2_gguf(), self.config.threads, max_batch=self.config.max_batch
        )
        engine.start()
        engine.warm_up(template_prompt(chat, WARM_UP_MESSAGES))
        self.engine = engine
        return engine, f"cpu/llama.cpp, {smollm2_gguf().name}, context {chat.context_length}"

    def _shared_batcher(self) -> EmbeddingBatcher:
        with self._batcher_lock:
            if self._batcher is None:
                batcher = EmbeddingBatcher(load_encoder(self.spec))
                batcher.start()
                self._batcher = batcher
            return self._batcher

    def _load_embeddings(self) -> tuple[EmbeddingBatcher, str]:
        return self._shared_batcher(), f"{self.spec.device.type}/{self.spec.dtype_name}, 384 dims"

    def _load_moderation(self) -> tuple[ModerationService, str]:
        batcher = self._shared_batcher()
        classifier = ModerationClassifier(batcher.encoder, (self.config.cache_dir, prebuilt_dir()))
        detail = (
            f"{len(classifier.labels)} exemplars, threshold {classifier.threshold:.2f}, "
            f"background {classifier.background:.2f}, LOO F1 {classifier.calibration_f1:.2f}"
        )
        return ModerationService(classifier, batcher), detail

    def _load_transcription(self) -> tuple[Transcriber, str]:
        transcriber = Transcriber(self.config.threads, self.spec)
        return transcriber, f"faster-whisper {transcriber.device}/{transcriber.compute_type}"

    def _load_speech(self) -> tuple[Synthesizer, str]:
        synthesizer = load_synthesizer(self.config.tts_engine, self.config.threads, self.spec)
        return synthesizer, f"engine {synthesizer.name}"

    # --- request side --------------------------------------------------------------------------

    async def service(self, model_id: Any, kind: str) -> Any:
        """The ready service for ``model_id`` on an endpoint of ``kind``.

        404 for an id this server does not serve, 400 for a model of another kind, 503 when it
        failed to load; while it is still loading, waits up to ``config.load_wait_s`` seconds,
        then answers 503 ``model_loading`` with ``Retry-After`` (the estimated seconds left).
        """
        if not isinstance(model_id, str) or not model_id:
            raise APIError(
                400,
                "Missing required parameter: 'model'.",
                code="missing_required_parameter",
                param="model",
            )
        slot = self.slots.get(model_id)
        if slot is None:
            raise unknown_model(model_id)
        if slot.kind != kind:
            raise APIError(
                400,
                f"The model `{model_id}` is a {slot.kind} model; it does not serve this endpoint.",
                code="model_not_supported",
                param="model",
            )
        if not await slot.wait(self.config.load_wait_s):
            raise still_loading(model_id, self.etas().get(model_id))
        if slot.state != "ready":
            raise unavailable(f"The model `{model_id}` failed to load: {slot.error}")
        return slot.value

    def etas(self) -> dict[str, float | None]:
        """Estimated seconds until each model is ready: 0 when ready, None when failed, else its
        own remaining load time plus that of every model loading before it (one loader thread).
        """
        now, ahead = time.monotonic(), 0.0
        result: dict[str, float | None] = {}
        for model_id, slot in self.slots.items():
            if slot.state == "ready":
                result[model_id] = 0.0
            elif slot.state == "failed":
                result[model_id] = None
            else:
                ahead += slot.remaining_s(now)
                result[model_id] = round(ahead, 1)
        return result

    def health(self) -> dict[str, Any]:
        """Readiness per model (with ETAs) plus device facts and batching counters."""
        etas = self.etas()
        states = {m: s.info(etas[m]) for m, s in self.slots.items()}
        all_ready = all(s.state == "ready" for s in self.slots.values())
        pending = [e for e in etas.values() if e]
        return {
            "status": "ok" if all_ready else "loading",
            "ready": all_ready,
            "ready_models": [m for m, s in self.slots.items() if s.state == "ready"],
            "eta_s": max(pending) if pending else (None if not all_ready else 0.0),
            "device": self.spec.device.type,
            "dtype": self.spec.dtype_name,
            "threads": self.config.threads,
            "uptime_s": round(time.time() - self.started, 1),
            "models": states,
            "stats": self.stats(),
        }

    @property
    def embedding_batcher(self) -> EmbeddingBatcher | None:
        """The batcher shared by embeddings and moderation, once either has loaded."""
        return self._batcher

    def stats(self) -> dict[str, Any]:
        """Batching counters: generation engine and embedding batcher."""
        return {
            "chat": asdict(self.engine.stats) if self.engine else None,
            "embeddings": asdict(self._batcher.stats) if self._batcher else None,
        }
