# The two commands of the README: `make run` and `make test`.
SHELL := /bin/bash
PY := .venv/bin/python
PORT ?= 8000
GPU_PORT ?= 8001
INSTALL_INPUTS := pyproject.toml scripts/install.sh
STAMP := .venv/.installed-$(shell cat $(INSTALL_INPUTS) 2>/dev/null | sha256sum | cut -c1-16)

.PHONY: run test install lint clean bench

$(STAMP): $(INSTALL_INPUTS)
	bash scripts/install.sh
	touch $(STAMP)

install: $(STAMP)

## Serve the platform on embedded defaults (SQLite, in-memory layers) with the local models.
run: install
	PORT=$(PORT) GPU_PORT=$(GPU_PORT) bash scripts/run.sh

## Lint, type-check and run the whole suite.
test: install
	bash scripts/install_test_tools.sh
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy accounts billing catalog config dashboard inference management money vectors gpu_backend
	bash scripts/test.sh

## The gateway beside LiteLLM and direct in one run, then idle streams' memory and daphne
## against uvicorn (about 15 minutes in all; both write their tables into docs/performance.md).
bench: install
	$(PY) bench/compare.py --write-doc
	$(PY) bench/servers.py --write-doc

lint:
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf .venv var
