#!/usr/bin/env bash
# Runs the test suite. Uses PostgreSQL / Redis when DATABASE_URL / REDIS_URL are set.
set -euo pipefail
cd "$(dirname "$0")/.."
export ORT_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
