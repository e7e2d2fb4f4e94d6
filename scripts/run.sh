#!/usr/bin/env bash
# `make run`: production's processes on this machine (config/supervisor.py) — infrai's own
# PostgreSQL and Redis unless DATABASE_URL / REDIS_URL are set, the GPU backend with the local
# models, the web process (uvicorn), a Celery worker and beat — in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
export INFRAI_MODEL_CACHE_DIR="${INFRAI_MODEL_CACHE_DIR:-${INFRAI_DATA_DIR:-var}/models}"
export ORT_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m config.supervisor --port "${PORT:-8000}" --gpu-port "${GPU_PORT:-8001}"
