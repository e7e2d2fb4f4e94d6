#!/usr/bin/env bash
# `make run`: embedded defaults (SQLite, in-memory layers, eager Celery), the gpu-backend with the
# local models beside the web server (uvicorn), in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8000}"
GPU_PORT="${GPU_PORT:-8001}"
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-config.settings.local}"
export INFRAI_GPU_BACKEND_URL="${INFRAI_GPU_BACKEND_URL:-http://127.0.0.1:${GPU_PORT}/v1}"
export INFRAI_PUBLIC_BASE_URL="${INFRAI_PUBLIC_BASE_URL:-http://127.0.0.1:${PORT}/v1}"
export INFRAI_MODEL_CACHE_DIR="${INFRAI_MODEL_CACHE_DIR:-${INFRAI_DATA_DIR:-var}/models}"
export ORT_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=.venv/bin/python
STARTED="$(date +%s.%N)"
mkdir -p var

# The gpu-backend first: its start (imports, then model loads in the background) overlaps the
# migrations. A program of its own (no Django): its settings come from the INFRAI_GPU_BACKEND_*
# and INFRAI_MODEL_CACHE_DIR variables. The chat model's GGUF was converted at install time, so
# it loads in seconds.
$PY -m gpu_backend --host 127.0.0.1 --port "$GPU_PORT" &
GPU_PID=$!
trap 'kill "$GPU_PID" 2>/dev/null || true' EXIT INT TERM

# Migrations, the demo organization and key, and the probe of the local backend, in one Django
# process (each Django start costs seconds on a busy machine). The probe marks the local models
# routable before the gateway starts, so its first catalog snapshot has them: the backend's
# /v1/models lists loading models too, and a call to one of them waits in the backend until it is
# ready (bounded, then 503 with Retry-After).
$PY manage.py shell --no-imports -c '
import io
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
call_command("bootstrap")
try:
    call_command("catalog", "probe", "--vendor", "infrai-gpu", "--wait", "120", stdout=io.StringIO())
except Exception:
    pass  # the backend is not up: the periodic probe marks it later
'
# Once the gateway answers (started earlier they only slow its start): the other vendors' probe,
# then periodic work (hold expiry, vendor probes, auto-recharge sweep). Embedded mode runs Celery
# eagerly, so beat executes each task itself; production runs beat and workers on Redis.
(
    until curl -fsS "http://127.0.0.1:${PORT}/healthz" >/dev/null 2>&1; do sleep 0.5; done
    ( $PY manage.py catalog probe --wait 300 >/dev/null 2>&1 || true ) &
    exec .venv/bin/celery -A config beat --schedule var/celerybeat-schedule --loglevel WARNING
) &
BEAT_PID=$!
# Say when the platform can answer, and which local models are ready (readiness lines).
$PY -m gpu_backend.readiness --backend "http://127.0.0.1:${GPU_PORT}" \
    --gateway "http://127.0.0.1:${PORT}" --public-url "$INFRAI_PUBLIC_BASE_URL" --since "$STARTED" &
READY_PID=$!
trap 'kill "$GPU_PID" "$BEAT_PID" "$READY_PID" 2>/dev/null || true' EXIT INT TERM

echo "serving on http://127.0.0.1:${PORT} (Ctrl-C stops)"
# The production web server: uvicorn (streams request bodies to the app, so oversized bodies
# are refused unread; see docs/security.md), draining calls in flight on Ctrl-C.
$PY -m config.server --host 127.0.0.1 --port "$PORT"
