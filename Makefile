# Two entry points: `make run` (quickstart on the embedded default model) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export HF_EVALUATE_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: setup run test test-slow lint bench

setup:
	@./scripts/setup.sh

run: setup
	$(PY) run.py

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .

test-slow: setup
	$(PY) -m pytest -q -m slow -o addopts="-p no:cacheprovider"

bench: setup
	$(PY) scripts/bench_engine.py
