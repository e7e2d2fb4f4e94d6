"""Install-time step: convert the SmolLM2 GGUF to the transformers copy the server loads, and
embed the moderation exemplars (CPU, fp32) so the moderation model loads in a second.

``python -m gpu_backend.prepare [--dir DIR]`` (run by ``scripts/install.sh``). Without
``--dir`` the copy goes to :func:`~gpu_backend.chat_model.prebuilt_dir` inside the
virtualenv, where every server of that environment finds it whatever its ``--cache-dir``. Does
nothing when a current copy is already there; exits 1 with one line when the model package is
missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """Convert (or confirm) the copy; print one line saying which and where."""
    parser = argparse.ArgumentParser(prog="python -m gpu_backend.prepare")
    parser.add_argument("--dir", type=Path, default=None, help="target root (default: the venv's)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF de-quantisation's progress bar

    from transformers.utils import logging as transformers_logging

    from .chat_model import prebuilt_dir, prepare
    from .device import select_device
    from .embeddings import load_encoder
    from .locate import ModelFilesMissing
    from .moderation import exemplar_cache_name, exemplar_embeddings

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    began = time.perf_counter()
    try:
        target, converted = prepare(args.dir or prebuilt_dir())
    except ModelFilesMissing as exc:
        print(f"gpu-backend prepare: {exc}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - began
    if converted:
        print(f"gpu-backend prepare: converted SmolLM2 GGUF to {target} in {seconds:.1f} s")
    else:
        print(f"gpu-backend prepare: {target} is current")
    root = args.dir or prebuilt_dir()
    encoder = load_encoder(select_device("cpu"))
    if not (root / exemplar_cache_name(encoder)).exists():
        began = time.perf_counter()
        exemplar_embeddings(encoder, [root])
        seconds = time.perf_counter() - began
        print(f"gpu-backend prepare: embedded the moderation exemplars in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
