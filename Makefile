# One-command entry points. On a machine without CUDA, `setup` installs the CPU torch wheel first
# (torch==2.13.0; any other torch spec would pull several GB of CUDA packages).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-slow lint format

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install torch==2.13.0; fi
	$(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

# The default suite: tiny offline models, under 10 minutes on 2 CPU cores.
test: $(STAMP)
	$(BIN)/python -m pytest

# Slow tests (real model weights, long runs) and GPU tests, outside the default suite.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m "slow or gpu"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks
