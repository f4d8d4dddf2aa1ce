# fedmgda-repro: two commands on a fresh machine (`make` alone lists every target).
#   make quick   set up, then reproduce every experiment type of the paper offline (results/quick/)
#   make test    set up, then run the test suite
# Both install requirements/lock.txt (every package, exact version and hash; `make lock` remakes it
# from pyproject.toml). With a virtualenv or conda environment active, that environment is used;
# otherwise .venv is created, isolated from the system's packages so it holds the lock and nothing else.
#
# Then, without activating anything (CORES=N and SNAKEMAKE_ARGS="..." apply to each):
#   make paper                                     the whole paper (config/config.yaml) -> results/paper/
#   make target T=results/paper/tables/table7.md   one table, figure or other output, and only the runs it needs
#   make report                                    after a run: Snakemake's report -> $(REPORT)
#   make dry-run                                   what would run, job counts per rule
#   make lock                                      re-resolve requirements/lock.txt after editing pyproject.toml
#                                                  (keeps the other pins; LOCK_ARGS=--upgrade: newest of everything)
# Another profile: SNAKEMAKE_ARGS="--configfile config/quick.yaml" (report: REPORT=results/quick/snakemake-report.zip).
# Or enter the environment once, `source .venv/bin/activate`, and type the README's `snakemake ...`
# commands as written: the workflow's jobs run with the Python that runs Snakemake.

LOCK := requirements/lock.txt
# pip-compile's own environment, apart from the project's (pip-tools pinned: its output format)
LOCK_VENV := .venv-lock
PIP_TOOLS := pip-tools==7.6.2
LOCK_ARGS ?=
CORES ?= 2
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for make test (one per core); TEST_WORKERS=0 runs the tests in one process
TEST_WORKERS ?= $(CORES)
T ?=
REPORT ?= results/paper/snakemake-report.zip
BENCH_ARGS ?= --only cifar10_b10_p0.1 fmnist_b10_p0.1 --rounds 1

ifneq ($(filter target,$(MAKECMDGOALS)),)
ifeq ($(T),)
$(error name the output: make target T=results/paper/tables/table7.md)
endif
endif

ifneq ($(VIRTUAL_ENV)$(CONDA_PREFIX),)
PY := python
SETUP_STAMP := .setup-stamp-env
else
PY := .venv/bin/python
SETUP_STAMP := .venv/.setup-stamp
endif

.DEFAULT_GOAL := help
.PHONY: help setup lock quick paper target report test test-fast test-cuda lint dry-run benchmark config-docs docs clean

# `make` alone: one line per target a user runs (the text after each target's `##`)
help:  ## this list
	@awk -F':.*## ' '/^[a-z-]+:.*## /{printf "  make %-12s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))

setup: $(SETUP_STAMP)  ## install requirements/lock.txt and the package (.venv unless an environment is active)

# The lock's exact files (hash-checked), then the package itself without its dependencies (hash
# mode refuses an editable line; built with the lock's setuptools), then a check that this Python
# holds the lock's versions; in .venv, nothing else either (pip install -r never removes a package).
$(SETUP_STAMP): pyproject.toml $(LOCK)
ifeq ($(VIRTUAL_ENV)$(CONDA_PREFIX),)
	test -x .venv/bin/python || python3 -m venv .venv
endif
	$(PY) -m pip install -q --require-hashes -r $(LOCK)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) scripts/lockfile.py check $(if $(VIRTUAL_ENV)$(CONDA_PREFIX),,--exact)
	touch $@

# pip-compile resolves as pip does here (pip's configuration: indexes, find-links); hashes of every
# file of each pinned release; setuptools pinned too (--allow-unsafe: torch needs it). pip is not.
lock:  ## re-resolve requirements/lock.txt after editing pyproject.toml (LOCK_ARGS=--upgrade)
	test -x $(LOCK_VENV)/bin/pip-compile || { python3 -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install -q $(PIP_TOOLS); }
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe \
	  --strip-extras --extra workflow --extra dev --no-emit-index-url --no-emit-find-links \
	  -c requirements/constraints.txt -o $(LOCK) $(LOCK_ARGS) pyproject.toml
	$(LOCK_VENV)/bin/python scripts/lockfile.py stamp

quick: setup  ## every experiment type of the paper offline, small -> results/quick/
	$(PY) -m snakemake --cores $(CORES) --configfile config/quick.yaml $(SNAKEMAKE_ARGS)
	@echo "quick profile done: results/quick/{tables,figures,report}"

paper: setup  ## the whole paper (config/config.yaml) -> results/paper/
	$(PY) -m snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

target: setup  ## one output and only the runs it needs: T=results/paper/tables/table7.md
	$(PY) -m snakemake $(T) --cores $(CORES) $(SNAKEMAKE_ARGS)

report: setup  ## Snakemake's report of a finished run (REPORT=path.zip)
	$(PY) -m snakemake --report $(REPORT) $(SNAKEMAKE_ARGS)

dry-run: setup  ## what would run, job counts per rule
	$(PY) -m snakemake -n --quiet rules $(SNAKEMAKE_ARGS)

# Two pytest sessions: every test but the Slurm ones on TEST_WORKERS workers, then the Slurm ones.
# While their cluster is up, Slurm's clients make every Snakemake start call scontrol
# (tests/conftest.py); their teardown (tests/slurm/cluster.sh stop) removes what they installed.
# Exit 5 = no test selected (PYTEST_ARGS named other tests).
test: setup  ## the whole test suite (TEST_WORKERS=N, PYTEST_ARGS=...)
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk 2 -m "not slurm" $(PYTEST_ARGS)
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -m slurm $(PYTEST_ARGS) || test $$? -eq 5

# the tests marked `cuda` (pyproject.toml): each skips where torch sees no CUDA device
test-cuda: setup  ## the CUDA tests (on a GPU machine; they skip without one)
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -m cuda $(PYTEST_ARGS)

test-fast: setup  ## the tests without the slow, SLURM and real-data ones
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -m "not slow and not slurm and not realdata" $(PYTEST_ARGS)

lint: setup  ## ruff on src, tests, scripts, benchmarks and tools; snakemake --lint
	$(PY) -m ruff check src tests scripts benchmarks tools
	$(PY) -m snakemake --lint

benchmark: setup  ## round times and the projected paper wall time (BENCH_ARGS=...)
	$(PY) benchmarks/bench_rounds.py $(BENCH_ARGS)

# config/README.md's key tables from src/fedmgda/config.schema.yaml (fedmgda.schema)
config-docs: setup  ## config/README.md's key tables from the schema
	$(PY) -m fedmgda.schema config/README.md

# re-render the numbers, verdict tables and table blocks of the pages in tools/docnumbers.py's PAGES
# from their committed files (tests/test_docnumbers.py fails where they differ);
# DOCS_ARGS=--check changes nothing and exits 1 where a page differs or a block does not parse
DOCS_ARGS ?=
docs: setup  ## re-render the docs' numbers from their committed files (DOCS_ARGS=--check)
	$(PY) tools/docnumbers.py $(DOCS_ARGS)

clean:  ## remove .venv, the lock's environment and .snakemake
	rm -rf .venv $(LOCK_VENV) .setup-stamp-env .snakemake
