"""The composition root: model slots, background loading, and the services behind the routes.

Models load one after another on a background thread, each logging one progress line; requests
for a model that is still loading wait for it, and ``/health`` reports every model's state.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import (
    ALL_MODEL_IDS,
    CHAT_MODEL_ID,
    EMBEDDING_MODEL_ID,
    MODERATION_MODEL_ID,
    SPEECH_MODEL_ID,
    TRANSCRIPTION_MODEL_ID,
)
from .chat_model import load_chat_model
from .config import BackendConfig
from .device import DeviceSpec, select_device
from .embeddings import EmbeddingBatcher, load_encoder
from .engine import GenerationEngine
from .errors import APIError, unavailable, unknown_model
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
LOAD_WAIT_S = 600.0


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
    done: threading.Event = field(default_factory=threading.Event)

    def info(self) -> dict[str, Any]:
        """The slot as ``/health`` shows it."""
        return {
            "kind": self.kind,
            "state": self.state,
            "ready": self.state == "ready",
            "load_seconds": self.load_seconds,
            "detail": self.detail,
            "error": self.error,
        }

    async def wait(self, limit_s: float = LOAD_WAIT_S) -> Any:
        """The service once loaded; a 503 if loading failed or took longer than ``limit_s``."""
        deadline = time.monotonic() + limit_s
        while not self.done.is_set():
            if time.monotonic() > deadline:
                raise unavailable(
                    f"The model `{self.model_id}` is still loading; try again shortly."
                )
            await asyncio.sleep(0.05)
        if self.state != "ready":
            raise unavailable(f"The model `{self.model_id}` failed to load: {self.error}")
        return self.value


@dataclass
class ModerationService:
    """The moderation classifier and the (shared) embedding batcher that feeds it."""

    classifier: ModerationClassifier
    batcher: EmbeddingBatcher


class Backend:
    """Owns the device choice, the model slots and the worker threads of the server."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.spec: DeviceSpec = select_device(config.device)
        self.started = time.time()
        order = [m for m in ALL_MODEL_IDS if m in config.models]
        self.slots: dict[str, ModelSlot] = {m: ModelSlot(m, KINDS[m]) for m in order}
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

    def shutdown(self) -> None:
        """Stop the worker threads (generation engine, embedding batcher)."""
        if self.engine is not None:
            self.engine.stop()
        if self._batcher is not None:
            self._batcher.stop()

    def _load_all(self) -> None:
        for slot in self.slots.values():
            self._load(slot)

    def _load(self, slot: ModelSlot) -> None:
        """Load one model, recording its state and logging one progress line."""
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
        chat = load_chat_model(self.config.cache_dir, self.spec)
        engine = GenerationEngine(chat, max_batch=self.config.max_batch)
        engine.start()
        self.engine = engine
        return (
            engine,
            f"{self.spec.device.type}/{self.spec.dtype_name}, context {chat.context_length}",
        )

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
        classifier = ModerationClassifier(batcher.encoder)
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
        failed to load; waits while it is still loading.
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
        return await slot.wait()

    def health(self) -> dict[str, Any]:
        """Readiness per model plus device facts and batching counters."""
        states = {m: s.info() for m, s in self.slots.items()}
        all_ready = all(s.state == "ready" for s in self.slots.values())
        return {
            "status": "ok" if all_ready else "loading",
            "ready": all_ready,
            "device": self.spec.device.type,
            "dtype": self.spec.dtype_name,
            "threads": self.config.threads,
            "uptime_s": round(time.time() - self.started, 1),
            "models": states,
            "stats": self.stats(),
        }

    def stats(self) -> dict[str, Any]:
        """Batching counters: generation engine and embedding batcher."""
        return {
            "chat": self.engine.stats.as_dict() if self.engine else None,
            "embeddings": self._batcher.stats.as_dict() if self._batcher else None,
        }
