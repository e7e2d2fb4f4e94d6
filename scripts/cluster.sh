#!/usr/bin/env bash
# The production topology on this machine, on loopback ports, in the foreground until SIGTERM or
# Ctrl-C (docs/deploy.md):
#
#   nginx (Debian's, deploy/nginx/) :BASE_PORT
#     -> WEB_PROCESSES x python -m config.server   :BASE_PORT+1 ...   (deploy/systemd/infrai-web@)
#   Celery worker + beat on Redis                                       (infrai-worker, infrai-beat)
#   the GPU backend as its own node with its token :BASE_PORT+50        (infrai-gpu@)
#   PostgreSQL and Redis: the machine's (DATABASE_URL, REDIS_URL)
#
# Each process runs the ExecStart of its systemd unit under deploy/systemd (with /opt/infrai, the
# state and runtime directories and the instance replaced), and nginx the files of deploy/nginx.
# Environment: DATABASE_URL and REDIS_URL (required), DJANGO_SETTINGS_MODULE (default
# config.settings.production, which needs its secrets), BASE_PORT (8100), WEB_PROCESSES (2),
# CLUSTER_DIR (var/cluster), GPU_MODELS (all), INFRAI_GPU_BACKEND_TOKEN (generated when unset),
# CLUSTER_MIGRATE (1: migrate first), CLUSTER_COLLECTSTATIC (1), NO_GPU (1: no GPU backend).
# It prints "cluster ready: http://127.0.0.1:PORT" once every web process is ready (/readyz)
# behind nginx, and writes each process's pid to $CLUSTER_DIR/pids/NAME.pid.
#
# Several hosts (docs/deploy.md "Two hosts under test"): CLUSTER_ROLE picks a part of the
# topology (default "all", the above):
#   host   one host of several: the web processes on BIND_ADDRESS:BASE_PORT+1 ..., the Celery
#          worker (named worker@CLUSTER_HOSTNAME) and beat unless CLUSTER_BEAT=0 (exactly one
#          host of a deployment runs it); no nginx, no GPU backend, no migration (unless
#          CLUSTER_MIGRATE=1) nor collectstatic. Prints "cluster ready: URL URL ..." (its web
#          processes) once each answers /readyz.
#   nginx  nginx alone on 127.0.0.1:BASE_PORT in front of UPSTREAMS ("ADDR:PORT ADDR:PORT ...",
#          the hosts' web processes); STATIC_ROOT may be given (else read from the settings).
# BIND_ADDRESS (127.0.0.1): the address the web processes listen on; CLUSTER_HOSTNAME (the
# machine's hostname): the %H of the units.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
ROLE="${CLUSTER_ROLE:-all}"
case "$ROLE" in
  all | host) ;;
  nginx) : "${UPSTREAMS:?UPSTREAMS must list the web processes (ADDR:PORT ...)}" ;;
  *) echo "cluster: CLUSTER_ROLE must be all, host or nginx" >&2 && exit 2 ;;
esac
if [ "$ROLE" != nginx ] || [ -z "${STATIC_ROOT:-}" ]; then
  : "${DATABASE_URL:?DATABASE_URL must point at PostgreSQL}" "${REDIS_URL:?REDIS_URL must point at Redis}"
fi
BIND="${BIND_ADDRESS:-127.0.0.1}"
BASE_PORT="${BASE_PORT:-8100}"
WEB_PROCESSES="${WEB_PROCESSES:-2}"
DIR="$(mkdir -p "${CLUSTER_DIR:-var/cluster}" && cd "${CLUSTER_DIR:-var/cluster}" && pwd)"
GPU_PORT=$((BASE_PORT + 50))
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-config.settings.production}"
export INFRAI_GPU_BACKEND_TOKEN="${INFRAI_GPU_BACKEND_TOKEN:-$(head -c 24 /dev/urandom | base64 | tr -d '/+=')}"
export INFRAI_GPU_BACKEND_URL="${INFRAI_GPU_BACKEND_URL:-http://127.0.0.1:${GPU_PORT}/v1}"
export INFRAI_PUBLIC_BASE_URL="${INFRAI_PUBLIC_BASE_URL:-http://127.0.0.1:${BASE_PORT}/v1}"
export PROMETHEUS_MULTIPROC_DIR="$DIR/run/metrics"
export ORT_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY="$ROOT/.venv/bin/python"

# Fresh runtime state: metric files restart with the processes (tmpfiles' "D" on a host).
rm -rf "$DIR/run" "$DIR/pids" "$DIR/nginx"
mkdir -p "$PROMETHEUS_MULTIPROC_DIR" "$DIR/state" "$DIR/pids" "$DIR/logs" "$DIR/nginx"

PIDS=()
stop_all() {
  trap - EXIT INT TERM
  # Web processes first: they drain (calls in flight finish, then are ended and billed).
  for f in "$DIR"/pids/web*.pid; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true; done
  for f in "$DIR"/pids/web*.pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  done
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all EXIT INT TERM

# The command line of a unit's ExecStart, for this checkout and these directories.
exec_start() {  # unit instance
  sed -n 's/^ExecStart=//p' "deploy/systemd/$1" | sed \
    -e "s#/opt/infrai/#$ROOT/#g" -e "s#/var/lib/infrai#$DIR/state#g" -e "s#/run/infrai#$DIR/run#g" \
    -e "s#%i#${2:-}#g" -e "s#%H#${CLUSTER_HOSTNAME:-$(hostname)}#g" \
    -e "s#--host 127.0.0.1#--host $BIND#" -e "s#--host 0.0.0.0#--host 127.0.0.1#" \
    -e "s#--models all#--models ${GPU_MODELS:-all}#"
}

start() {  # name unit [instance]
  local -a cmd
  read -r -a cmd <<<"$(exec_start "$2" "${3:-}")"
  "${cmd[@]}" >>"$DIR/logs/$1.log" 2>&1 &
  echo $! >"$DIR/pids/$1.pid"
  PIDS+=("$!")
}

wait_url() {  # url seconds [header]
  for _ in $(seq $(($2 * 5))); do
    if curl -fsS -o /dev/null ${3:+-H "$3"} "$1" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "cluster: $1 did not answer in $2 s" >&2
  return 1
}

if [ "$ROLE" = all ] && [ "${NO_GPU:-0}" != 1 ]; then
  start gpu "infrai-gpu@.service" "$GPU_PORT"   # first: its model loads overlap the rest
fi
# Migrations run once per deployment: by default only where the whole topology starts.
MIGRATE="${CLUSTER_MIGRATE:-1}"
[ "$ROLE" = all ] || MIGRATE="${CLUSTER_MIGRATE:-0}"
if [ "$MIGRATE" = 1 ]; then
  "$PY" manage.py migrate --noinput -v 0
fi

SERVERS="" WEB_URLS=""
if [ "$ROLE" != nginx ]; then
  for i in $(seq "$WEB_PROCESSES"); do
    port=$((BASE_PORT + i))
    start "web$i" "infrai-web@.service" "$port"
    SERVERS+="server ${BIND}:${port};"$'\n    '
    WEB_URLS+=" http://${BIND}:${port}"
  done
  start worker infrai-worker.service
  if [ "${CLUSTER_BEAT:-1}" = 1 ]; then start beat infrai-beat.service; fi
fi
if [ "$ROLE" = host ]; then
  for url in $WEB_URLS; do wait_url "$url/readyz" 120; done
  echo "cluster ready:$WEB_URLS"
  wait
  exit
fi

if [ "$ROLE" = nginx ]; then
  for upstream in $UPSTREAMS; do SERVERS+="server ${upstream};"$'\n    '; done
fi
if [ "${CLUSTER_COLLECTSTATIC:-1}" = 1 ]; then
  "$PY" manage.py collectstatic --noinput -v 0
fi
STATIC_ROOT="${STATIC_ROOT:-$("$PY" -c 'import django; django.setup(); from django.conf import settings; print(settings.STATIC_ROOT)')}"

sed -e "s#@WEB_SERVERS@#${SERVERS//$'\n'/\\n}#" -e "s#@LISTEN@#127.0.0.1:${BASE_PORT}#" \
  -e "s#@STATIC_ROOT@#${STATIC_ROOT%/}#" deploy/nginx/infrai.conf >"$DIR/nginx/infrai.conf"
sed -e "s#@PREFIX@#$DIR/nginx#g" -e "s#@USER@#$(id -un)#" deploy/nginx/nginx.conf >"$DIR/nginx/nginx.conf"
nginx -t -q -c "$DIR/nginx/nginx.conf" -p "$DIR/nginx"
nginx -c "$DIR/nginx/nginx.conf" -p "$DIR/nginx" -g 'daemon off;' >>"$DIR/logs/nginx.log" 2>&1 &
echo $! >"$DIR/pids/nginx.pid"
PIDS+=("$!")

for url in $WEB_URLS; do wait_url "$url/readyz" 120; done
wait_url "http://127.0.0.1:${BASE_PORT}/readyz" 30
if [ "$ROLE" = all ] && [ "${NO_GPU:-0}" != 1 ]; then wait_url "http://127.0.0.1:${GPU_PORT}/health" 120; fi
echo "cluster ready: http://127.0.0.1:${BASE_PORT}"

# Until told to stop. A process that dies stays dead (on a host, systemd's Restart=always brings
# it back): the rest keep serving, as when one web process is stopped for a rolling restart.
wait
