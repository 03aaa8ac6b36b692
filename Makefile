# The two commands of the README:
#   make all   -- create .venv, install, run the whole pipeline (snakemake --cores all)
#   make test  -- create/update .venv, run the unit tier (both cores, one file per worker; the slow tier apart)
#   make test-e2e -- the end-to-end and integration tier (marked slow); .ci/run runs both
#   make extended -- the default target plus the long experiments outside it (planner_compile, planner_paired:
#                    about 100 minutes alone on a 2-core CPU; planner_pipeline: gloo ranks, under a minute), then the
#                    findings and reports re-judged with them
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NOT_IMPORTED := (py312_intrinsics\.py|/tests?/.*|/site-packages/pip/.*|/transformers/models/(?!(auto|llama|mistral|mixtral|qwen2|gemma|gpt2|bert|t5)/|__init__).*)$$

.PHONY: all extended test test-e2e pipeline clean gpu gpu-smoke

all: $(STAMP)
	@# remat's own sources byte-compiled once (where PYTHONDONTWRITEBYTECODE is set every job would compile them anew)
	$(BIN)/python -m compileall -q -j 0 src > /dev/null
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores all

extended: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores all results/planner/paired/cpu.csv \
		results/planner/pipeline/cpu.csv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores all

test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow" --durations=15

test-e2e: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n 2 --dist loadfile -m slow --durations=15

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev,hf]'
	@# byte-compile on every core (pip compiles one file at a time: ~15 s more on 2 cores), leaving out what no job
	@# imports (~5,800 of ~15,400 files, 10 s on 2 cores): packages' test folders, pip, transformers' model families
	@# other than those remat builds; and torch's one test file in Python 3.12 syntax (pip skips it silently)
	$(BIN)/python -m compileall -q -j 0 -x '$(NOT_IMPORTED)' $(VENV)/lib > /dev/null
	touch $@

# The GPU half in one command (remat.gpu_run): on a GPU node with Python, torch (CUDA), numpy, pandas, scipy,
# matplotlib — no install, no Snakemake. QUICK=1: the 2-minute subset. gpu-smoke: the same path on this CPU.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu:
	PYTHONPATH="$(CURDIR)/src" $(GPU_PYTHON) -m remat.gpu_run $(if $(QUICK),--quick)

gpu-smoke:
	PYTHONPATH="$(CURDIR)/src" $(GPU_PYTHON) -m remat.gpu_run --smoke

clean:
	rm -rf results figures/*.png figures/*.svg reports/*.html .snakemake/metadata
