# Two entry points: `make run` (quickstart on the embedded default model) and `make test`; `make report`
# rebuilds the tables and figures of the latest job.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export HF_EVALUATE_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: setup setup-test run report test test-slow lint bench

setup:
	@./scripts/setup.sh

setup-test:
	@./scripts/setup.sh test

run: setup
	$(PY) run.py

# Tables and figures of the latest job or sweep under outputs/ (`specsparse report --help` for more).
report: setup
	@latest=$$(ls -td outputs/runs/* outputs/multirun/* 2>/dev/null | head -n 1); \
	if [ -z "$$latest" ]; then echo "error: no job under outputs/: run make run first" >&2; exit 2; fi; \
	$(VENV)/bin/specsparse report "$$latest"

test: setup-test
	$(PY) -m pytest -q

lint: setup-test
	$(VENV)/bin/ruff check .

test-slow: setup-test
	$(PY) -m pytest -q -m slow -o addopts="-p no:cacheprovider"

bench: setup
	$(PY) scripts/bench_engine.py
