"""``manage.py gpu_backend``: run the platform's own OpenAI-compatible model server.

A thin wrapper over ``python -m inference.gpu_backend``: the same flags, with the cache directory
taken from ``settings.INFRAI_MODEL_CACHE_DIR`` and the bind address from
``settings.INFRAI_GPU_BACKEND_URL`` unless given on the command line.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from inference.gpu_backend.cli import build_parser, config_from_args, serve


def settings_defaults() -> list[str]:
    """CLI arguments derived from Django settings (host/port from the backend URL, cache dir)."""
    args: list[str] = []
    url = getattr(settings, "INFRAI_GPU_BACKEND_URL", None)
    if url:
        parts = urlsplit(str(url))
        if parts.hostname:
            args += ["--host", parts.hostname]
        if parts.port:
            args += ["--port", str(parts.port)]
    cache_dir = getattr(settings, "INFRAI_MODEL_CACHE_DIR", None)
    if cache_dir:
        args += ["--cache-dir", str(cache_dir)]
    return args


class Command(BaseCommand):
    help = "Serve the local models (chat, embeddings, speech, transcription, moderation) over HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "backend_args",
            nargs="*",
            help="flags of python -m inference.gpu_backend (after --), e.g. -- --threads 2",
        )

    def run_from_argv(self, argv: list[str]) -> None:
        """Pass everything after the command name through to the backend's own parser."""
        self._backend_argv = argv[2:]
        super().run_from_argv(argv[:2])

    def handle(self, *args: Any, **options: Any) -> None:
        from_cli = getattr(self, "_backend_argv", None)
        backend_argv = from_cli or list(options.get("backend_args") or [])
        if "-h" in backend_argv or "--help" in backend_argv:
            build_parser().print_help()
            return
        serve(config_from_args([*settings_defaults(), *backend_argv]))
