#!/usr/bin/env bash
# What only the tests need beyond .venv: Debian's chromium for the browser tests (Playwright's
# own browser download does not work offline), the official `openai` npm package for the
# JavaScript SDK check and Deque's `axe-core` for the accessibility checks (tests/axe.py);
# Debian's nginx for the production topology test (scripts/cluster.sh); Debian's PgBouncer for
# the transaction-mode pooler test (tests/inference/test_pgbouncer.py); Debian's redis-server and
# redis-cli for the Redis Cluster tests (tests/redis_cluster.py); iproute2's ip for the hosts of the
# two-host test (tests/hosts.py: network namespaces, veths, a bridge).
# Idempotent and quick when everything is there. `make test` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
command -v nginx >/dev/null || (apt-get update -qq && apt-get install -y -qq nginx)
[ -x /usr/sbin/pgbouncer ] || (apt-get update -qq && apt-get install -y -qq pgbouncer)
command -v ip >/dev/null || (apt-get update -qq && apt-get install -y -qq iproute2)
{ command -v redis-server && command -v redis-cli; } >/dev/null ||
  (apt-get update -qq && apt-get install -y -qq redis-server)
if command -v npm >/dev/null; then
  stamp=tests/js/node_modules/.installed-$(sha256sum tests/js/package-lock.json | cut -c1-16)
  [ -f "$stamp" ] || { (cd tests/js && npm ci --silent --no-audit --no-fund) && touch "$stamp"; }
fi
