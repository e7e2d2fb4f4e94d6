"""Runtime configuration of the backend: where to listen, which models, threads, cache dir."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import ALL_MODEL_IDS

ENV_HOST = "INFRAI_GPU_BACKEND_HOST"
ENV_PORT = "INFRAI_GPU_BACKEND_PORT"
ENV_THREADS = "INFRAI_GPU_BACKEND_THREADS"
ENV_MODELS = "INFRAI_GPU_BACKEND_MODELS"
ENV_MAX_BATCH = "INFRAI_GPU_BACKEND_MAX_BATCH"
ENV_DEVICE = "INFRAI_GPU_BACKEND_DEVICE"
ENV_TTS_ENGINE = "INFRAI_GPU_BACKEND_TTS_ENGINE"
ENV_CACHE_DIR = "INFRAI_MODEL_CACHE_DIR"
ENV_LOAD_WAIT = "INFRAI_GPU_BACKEND_LOAD_WAIT_S"
ENV_TOKEN = "INFRAI_GPU_BACKEND_TOKEN"
ENV_CPU_WEIGHTS = "INFRAI_GPU_BACKEND_CPU_WEIGHTS"
CPU_WEIGHTS = ("fp32", "int8")
ENV_CPU_ENGINE = "INFRAI_GPU_BACKEND_CPU_ENGINE"
ENV_DEFAULT_MAX_TOKENS = "INFRAI_GPU_BACKEND_DEFAULT_MAX_TOKENS"
DEFAULT_MAX_TOKENS = 512  # the catalog's default output limit of the local chat model
CPU_ENGINES = ("auto", "transformers", "llama-cpp")
DEFAULT_LOAD_WAIT_S = 60.0


def default_cache_dir() -> Path:
    """``$INFRAI_MODEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/infrai/models`` (``~/.cache/...``)."""
    explicit = os.environ.get(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "infrai" / "models"


def default_threads() -> int:
    """``$INFRAI_GPU_BACKEND_THREADS``, else the number of CPUs this process may use."""
    explicit = os.environ.get(ENV_THREADS)
    if explicit:
        return max(1, int(explicit))
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def parse_model_list(raw: str | None) -> tuple[str, ...]:
    """A comma-separated list of model ids (``all`` or empty: every model), validated."""
    if not raw or raw.strip() == "all":
        return ALL_MODEL_IDS
    wanted = tuple(m.strip() for m in raw.split(",") if m.strip())
    unknown = [m for m in wanted if m not in ALL_MODEL_IDS]
    if unknown:
        raise ValueError(
            f"unknown model id(s): {', '.join(unknown)}; known: {', '.join(ALL_MODEL_IDS)}"
        )
    return wanted


@dataclass(frozen=True)
class BackendConfig:
    """Everything the server needs to start; built from CLI flags falling back to env vars."""

    host: str = "127.0.0.1"
    port: int = 8001
    threads: int = 1
    cache_dir: Path = field(default_factory=default_cache_dir)
    models: tuple[str, ...] = ALL_MODEL_IDS
    max_batch: int = 16
    device: str = "auto"
    tts_engine: str = "auto"
    log_level: str = "info"
    load_wait_s: float = DEFAULT_LOAD_WAIT_S  # how long a request waits for a loading model
    cpu_weights: str = "fp32"  # the chat model's linear layers on the CPU: fp32 or int8
    # The chat engine on the CPU: auto (llama-cpp where installed and working), transformers or
    # llama-cpp.
    cpu_engine: str = "auto"
    default_max_tokens: int = DEFAULT_MAX_TOKENS  # output tokens of a request without max_tokens
    # The bearer token every request but /health must carry ("" = none: loopback binds only).
    token: str = field(default="", repr=False)
