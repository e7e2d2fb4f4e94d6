# The two commands of the README: `make run` and `make test`.
SHELL := /bin/bash
PY := .venv/bin/python
PORT ?= 8000
GPU_PORT ?= 8001
INSTALL_INPUTS := pyproject.toml scripts/install.sh
STAMP := .venv/.installed-$(shell cat $(INSTALL_INPUTS) 2>/dev/null | sha256sum | cut -c1-16)

.PHONY: run test install lint clean bench bench-scale

$(STAMP): $(INSTALL_INPUTS)
	bash scripts/install.sh
	touch $(STAMP)

install: $(STAMP)

## Serve the platform as production runs it (config.supervisor: PostgreSQL and Redis of its own
## unless DATABASE_URL / REDIS_URL are set, the web process, a Celery worker and beat, the GPU
## backend with the local models) until Ctrl-C.
run: install
	PORT=$(PORT) GPU_PORT=$(GPU_PORT) bash scripts/run.sh

## Lint, type-check and run the whole suite (on a throw-away PostgreSQL and Redis of its own
## unless DATABASE_URL / REDIS_URL are set).
test: install
	bash scripts/install_test_tools.sh
	bash scripts/test.sh

## The gateway beside direct, LiteLLM and Portkey's gateway in one run; idle streams' memory
## and uvicorn against daphne and Granian; our HTTP layer against Starlette's; where a call's
## CPU goes (py-spy, perf, pg_stat_statements on a PostgreSQL of its own); the hot path's
## Redis client against redis-py, coredis and valkey-glide. Each writes its
## tables into docs/performance.md; about 25 minutes in all on a quiet 2-core machine. The
## peers and Granian install into /tmp once (pip, npm), never into the project.
bench: install
	$(PY) bench/compare.py --write-doc
	$(PY) bench/servers.py --write-doc
	$(PY) bench/http_layer.py --write-doc
	$(PY) bench/hot_path.py --write-doc
	$(PY) bench/redis_clients.py --write-doc

## The request log's usage reads and the money audit at scale: each loads millions of rows into
## a scratch database of its own (~7 and ~9 minutes, ~16 GB of disk at the peak); apart from
## `make bench` for that reason.
bench-scale: install
	$(PY) bench/usage_scale.py --write-doc
	$(PY) bench/audit_scale.py --write-doc

lint:
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf .venv var
