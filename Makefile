# borg-orchestrator: the two commands are `make run` and `make test`.
# Everything installs itself idempotently; caches live outside git in $(BORG_CACHE).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export BORG_CACHE ?= $(HOME)/.cache/borg-orchestrator
export PIP_CACHE_DIR ?= $(BORG_CACHE)/pip
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: run test lint venv stack stack-down bench schemas unit load soak compose-smoke

$(STAMP): pyproject.toml
	@test -x $(PY) || { echo "creating virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing Python dependencies (cached in $(PIP_CACHE_DIR))"
	@$(PY) -m pip install -q --upgrade pip setuptools wheel
	@$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

## run: the main job on the embedded local stack (Kafka, Jaeger, Kubernetes API, all services),
## replays bundled sample traffic and shows live decisions.
run: venv
	@bash scripts/run.sh

## test: the whole suite; starts Kafka, Jaeger and the Kubernetes API it needs.
test: venv
	@bash scripts/test.sh $(PYTEST_ARGS)

unit: venv
	@$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

lint: venv
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/mypy contracts services borgctl training featurelib simulator loadtests tests
	@$(VENV)/bin/lint-imports

stack: venv
	@$(VENV)/bin/borgctl up --no-services

stack-down: venv
	@$(VENV)/bin/borgctl down

bench: venv
	@mkdir -p bench
	@$(VENV)/bin/borgctl bench all --quick --out bench/results.json

schemas: venv
	@$(PY) -m contracts.schemagen

## load: a quick ramped load scenario (results.json + PNG plots in load/ramp-quick)
load: venv
	@$(VENV)/bin/borgctl load ramp --steps 1k,5k,10k,20k --quick --out load/ramp-quick

## soak: 10 minutes at a steady rate; fails on any lost message or memory growth
soak: venv
	@$(VENV)/bin/borgctl load soak --rate 600 --minutes 10 --out load/soak

## compose-smoke: docker-compose.yml for real (podman + Docker Compose v2), load, checks, down -v
compose-smoke: venv
	@bash scripts/compose-smoke.sh
