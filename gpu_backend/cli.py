"""Command line: ``python -m gpu_backend [--host H] [--port P] [--threads N] ...``.

Every flag falls back to an environment variable (see ``config``), so the Django management
command and ``make run`` can start the same server.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from .config import (
    CPU_ENGINES,
    CPU_WEIGHTS,
    DEFAULT_LOAD_WAIT_S,
    DEFAULT_MAX_TOKENS,
    ENV_CPU_ENGINE,
    ENV_CPU_WEIGHTS,
    ENV_DEFAULT_MAX_TOKENS,
    ENV_DEVICE,
    ENV_HOST,
    ENV_LOAD_WAIT,
    ENV_MAX_BATCH,
    ENV_MODELS,
    ENV_PORT,
    ENV_TOKEN,
    ENV_TTS_ENGINE,
    BackendConfig,
    default_cache_dir,
    default_threads,
    parse_model_list,
)

# The longest a stop waits for requests still open once the generations are ended (a speech
# synthesis or a transcription in flight), before uvicorn closes their connections.
SHUTDOWN_GRACE_S = 5


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (defaults read from the environment)."""
    parser = argparse.ArgumentParser(
        prog="python -m gpu_backend",
        description="infrai's OpenAI-compatible server over local models (CUDA if present).",
    )
    from_env = _env_flag(parser)
    from_env("--host", ENV_HOST, "127.0.0.1", "bind address")
    from_env("--port", ENV_PORT, "8001", "port", type=int)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of torch, ctranslate2, onnxruntime ($INFRAI_GPU_BACKEND_THREADS)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="converted model copies ($INFRAI_MODEL_CACHE_DIR; default ~/.cache/infrai/models)",
    )
    from_env("--models", ENV_MODELS, "all", "comma-separated model ids to serve, or 'all'")
    from_env("--max-batch", ENV_MAX_BATCH, "16", "most sequences decoded together", type=int)
    from_env(
        "--device", ENV_DEVICE, "auto", "auto: CUDA when available", choices=("auto", "cpu", "cuda")
    )
    from_env(
        "--tts-engine",
        ENV_TTS_ENGINE,
        "auto",
        "speech engine; auto: piper if installed, else espeak-ng",
        choices=("auto", "piper", "espeak"),
    )
    from_env(
        "--load-wait",
        ENV_LOAD_WAIT,
        str(DEFAULT_LOAD_WAIT_S),
        "seconds a request for a loading model waits before a 503 with Retry-After",
        type=float,
    )
    from_env(
        "--cpu-weights",
        ENV_CPU_WEIGHTS,
        "fp32",
        "the chat model's linear layers on the CPU: fp32, or int8 (faster decoding; a batched "
        "sequence may then differ from its solo run in rare tokens)",
        choices=CPU_WEIGHTS,
    )
    from_env(
        "--cpu-engine",
        ENV_CPU_ENGINE,
        "auto",
        "the chat engine on the CPU: auto (llama-cpp where llama-cpp-python is installed and "
        "passes a decode probe, else transformers), transformers, or llama-cpp (the Q4_1 GGUF "
        "through llama-cpp-python, the optional llama-cpp extra)",
        choices=CPU_ENGINES,
    )
    from_env(
        "--default-max-tokens",
        ENV_DEFAULT_MAX_TOKENS,
        str(DEFAULT_MAX_TOKENS),
        "output tokens a chat request without max_tokens gets (never the whole context)",
        type=int,
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    return parser


def _env_flag(parser: argparse.ArgumentParser) -> Callable[..., None]:
    """``add(flag, variable, default, help, **options)``: a flag of ``parser`` whose default is
    ``$variable``, else ``default`` (a string, which argparse converts with the flag's ``type``),
    its help ending with the variable's name."""

    def add(flag: str, variable: str, default: str, text: str, **options: Any) -> None:
        parser.add_argument(
            flag, default=os.environ.get(variable, default), help=f"{text} (${variable})", **options
        )

    return add


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def config_from_args(argv: Sequence[str] | None = None) -> BackendConfig:
    """Parse ``argv`` into a ``BackendConfig`` (exits with a usage message on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        models = parse_model_list(args.models)
    except ValueError as exc:
        parser.error(str(exc))
    token = os.environ.get(ENV_TOKEN, "")
    if not token and not is_loopback(args.host):
        parser.error(
            f"binding to {args.host} exposes the models beyond this machine: set ${ENV_TOKEN} "
            "(the bearer token the gateway's infrai-gpu vendor sends) or bind to 127.0.0.1"
        )
    return BackendConfig(
        token=token,
        host=args.host,
        port=args.port,
        threads=args.threads if args.threads is not None else default_threads(),
        cache_dir=args.cache_dir if args.cache_dir is not None else default_cache_dir(),
        models=models,
        max_batch=args.max_batch,
        device=args.device,
        tts_engine=args.tts_engine,
        log_level=args.log_level,
        load_wait_s=max(0.0, args.load_wait),
        cpu_weights=args.cpu_weights,
        cpu_engine=args.cpu_engine,
        default_max_tokens=max(1, args.default_max_tokens),
    )


def serve(config: BackendConfig) -> None:
    """Pin thread counts, build the app and run uvicorn until interrupted."""
    from .device import configure_threads

    configure_threads(config.threads)

    import uvicorn
    from transformers.utils import logging as transformers_logging

    from .app import create_app
    from .backend import Backend

    transformers_logging.disable_progress_bar()
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s"
    )
    backend = Backend(config)

    class Server(uvicorn.Server):
        """uvicorn whose SIGINT/SIGTERM first ends the generations in flight (they would
        otherwise hold its graceful shutdown for minutes), then stops as uvicorn does."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            backend.abort_generations()
            super().handle_exit(sig, frame)

    server = Server(
        uvicorn.Config(
            create_app(backend),
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            access_log=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    )
    server.run()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m gpu_backend``."""
    serve(config_from_args(argv))
