# QueueCore — the two commands are `make run` and `make test`; both build on `make install`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lock run serve migrate bootstrap test test-sdk test-sdk-wheel services lint typecheck openapi bench clean

install: $(STAMP)

# Reinstall only when the dependency list changes; `make install` stays idempotent.
$(STAMP): pyproject.toml sdk/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]' uvloop httptools
	$(BIN)/pip install -q -c constraints.txt -e sdk
	touch $(STAMP)

# Re-resolve every dependency in a scratch virtualenv and pin what it got.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q -e '.[dev]' uvloop httptools -e sdk
	{ grep '^#' constraints.txt; .lock-venv/bin/pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .lock-venv

migrate: install
	$(BIN)/queuecore-server migrate

bootstrap: migrate
	$(BIN)/queuecore-server bootstrap --project demo --demo-user

run: bootstrap
	$(BIN)/queuecore-server serve

services:
	bash infra/services.sh up

# Lint and types, the server suite, then the SDK built as a wheel and tested from a clean virtualenv.
test: install services lint typecheck
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)
	bash sdk/scripts/test_in_clean_venv.sh

test-sdk: install
	$(BIN)/python -m pytest -q sdk/tests $(PYTEST_ARGS)

test-sdk-wheel: install
	bash sdk/scripts/test_in_clean_venv.sh

lint: install
	$(BIN)/ruff check app tests bench sdk
	$(BIN)/ruff format --check app tests bench sdk

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --config-file sdk/pyproject.toml sdk/src/queuecore

openapi: install
	$(BIN)/python -m app.openapi > openapi.yaml

bench: install services
	command -v wrk >/dev/null || apt-get install -y wrk
	$(BIN)/python bench/engine_bench.py
	$(BIN)/python bench/publish_bench.py
	$(BIN)/python bench/limiter_bench.py
	$(BIN)/python bench/consume_bench.py
	$(BIN)/python bench/latency_breakdown.py

clean:
	rm -rf $(VENV) data .pytest_cache
