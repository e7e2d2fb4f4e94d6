#!/usr/bin/env bash
# `make test`: lint, type checks and the whole suite, on PostgreSQL and Redis. With DATABASE_URL
# and REDIS_URL set (.ci/run) it uses those; otherwise a throw-away PostgreSQL and Redis of its
# own (config.services, in a temporary data directory) that stop, and are deleted, when it ends.
# Arguments go to pytest (`scripts/test.sh tests/billing -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
export ORT_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=.venv/bin/python
if [ -z "${DATABASE_URL:-}" ] || [ -z "${REDIS_URL:-}" ]; then
  data="$(mktemp -d "${TMPDIR:-/tmp}/infrai-test-XXXXXX")"
  trap 'rm -rf "$data"' EXIT
  $PY -m config.services run --throwaway --data-dir "$data" -- bash "$0" "$@"
  exit
fi
$PY -m ruff check .
$PY -m ruff format --check .
$PY -m mypy accounts billing catalog config infra dashboard inference management money vectors batches gpu_backend
exec $PY -m pytest "$@"
