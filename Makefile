# fedmgda-repro: two commands on a fresh machine.
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
# the transcription of the paper's Tables 6-14 (kept outside the repository)
PAPER_TABLES ?= ../shared/reference/paper_tables.md

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

.PHONY: setup lock quick paper target report test test-fast lint dry-run benchmark device-check device-carry device-ingest device-wheels fresh-clone-ci config-docs docs paper-reference clean

setup: $(SETUP_STAMP)

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
lock:
	test -x $(LOCK_VENV)/bin/pip-compile || { python3 -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install -q $(PIP_TOOLS); }
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe \
	  --strip-extras --extra workflow --extra dev --no-emit-index-url --no-emit-find-links \
	  -c requirements/constraints.txt -o $(LOCK) $(LOCK_ARGS) pyproject.toml
	$(LOCK_VENV)/bin/python scripts/lockfile.py stamp

quick: setup
	$(PY) -m snakemake --cores $(CORES) --configfile config/quick.yaml $(SNAKEMAKE_ARGS)
	@echo "quick profile done: results/quick/{tables,figures,report}"

paper: setup
	$(PY) -m snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

target: setup
	$(PY) -m snakemake $(T) --cores $(CORES) $(SNAKEMAKE_ARGS)

report: setup
	$(PY) -m snakemake --report $(REPORT) $(SNAKEMAKE_ARGS)

dry-run: setup
	$(PY) -m snakemake -n --quiet rules $(SNAKEMAKE_ARGS)

# Two pytest sessions: every test but the Slurm ones on TEST_WORKERS workers, then the Slurm ones.
# They install Slurm's clients and stop their cluster, after which every Snakemake start waits
# ~9 s on scontrol (tests/conftest.py); exit 5 = no test selected (PYTEST_ARGS named other tests).
test: setup
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk 2 -m "not slurm" $(PYTEST_ARGS)
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -m slurm $(PYTEST_ARGS) || test $$? -eq 5

# .ci/run in a fresh clone of HEAD, as CI runs it; a passed run's times become a row of
# benchmarks/measurements/test_runs.csv (docs/running.md). FRESH_CLONE_ARGS='--conditions "..."'
fresh-clone-ci: setup
	$(PY) scripts/fresh_clone_ci.py $(FRESH_CLONE_ARGS)

test-fast: setup
	FEDMGDA_LOCK_CHECK=1 $(PY) -m pytest -q -m "not slow and not slurm and not realdata" $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check src tests scripts
	$(PY) -m snakemake --lint

benchmark: setup
	$(PY) benchmarks/bench_rounds.py $(BENCH_ARGS)

# the one-shot GPU check (docs/performance.md, "Device check"): OUT=DIR (default $OUT, else
# results/device-check), DEVICE_CHECK_ARGS="--dry" for the same parts on the CPU. No setup step: on a
# GPU machine the package runs from src/ under the Python found there (DEVICE_PY).
DEVICE_CHECK_ARGS ?=
DEVICE_PY ?= $(if $(VIRTUAL_ENV)$(CONDA_PREFIX),python,$(if $(wildcard .venv/bin/python),.venv/bin/python,python3))

# Where this Python lacks cvxopt (the GPU image), the wheels in DEVICE_WHEELS (make device-wheels)
# are installed first into a folder of their own, put on the path. Before that, what DEVICE_CARRY
# holds (make device-carry) is unpacked: the raw files into resources/raw/, the wheels into DEVICE_WHEELS.
DEVICE_WHEELS ?= .whl
DEVICE_CARRY ?= .carry
device-check:
	@if [ -d $(DEVICE_CARRY) ]; then $(DEVICE_PY) scripts/device_carry.py unpack --packed $(DEVICE_CARRY) --wheels $(DEVICE_WHEELS) || exit 1; fi; \
	site=; if [ -d $(DEVICE_WHEELS) ] && ! $(DEVICE_PY) -c "import cvxopt" 2>/dev/null; then \
	  site=$${TMPDIR:-/tmp}/fedmgda-device-site; echo "device-check: cvxopt from $(DEVICE_WHEELS)/ into $$site"; \
	  $(DEVICE_PY) -m pip install -q --no-index --no-deps --no-compile --target $$site $(DEVICE_WHEELS)/*.whl || exit 1; fi; \
	PYTHONPATH=src$${site:+:$$site}$${PYTHONPATH:+:$$PYTHONPATH} $(DEVICE_PY) scripts/device_check.py $(if $(OUT),--out $(OUT)) $(DEVICE_CHECK_ARGS)

# Here, before a GPU session: cvxopt's wheel at the lock's version for the GPU image's Python, into
# DEVICE_WHEELS (.whl/, gitignored), then it and the raw F-MNIST and Adult files packed as xz into
# DEVICE_CARRY (.carry/, gitignored; device-check unpacks it there): carry .carry alone,
# docs/performance.md "Device check".
device-carry: device-wheels
	$(PY) scripts/device_carry.py pack --packed $(DEVICE_CARRY) --wheels $(DEVICE_WHEELS)

# Afterwards, here: the check's output folder (FROM) into benchmarks/measurements/NAME/, its round
# times into src/fedmgda/reference/round_times.csv, the plan files made again (scripts/device_ingest.py)
device-ingest: setup
	$(PY) scripts/device_ingest.py $(FROM) $(NAME)

DEVICE_PYTHON ?= 3.12
device-wheels:
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version $(DEVICE_PYTHON) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d $(DEVICE_WHEELS) \
	  cvxopt==$$(sed -n 's/^cvxopt==\([^ ]*\).*/\1/p' requirements/lock.txt)

# config/README.md's key tables from src/fedmgda/config.schema.yaml (fedmgda.schema)
config-docs: setup
	$(PY) -m fedmgda.schema config/README.md

# re-render the numbers, verdict tables and table blocks of the pages in fedmgda.docnumbers.PAGES
# from their committed files (tests/test_docnumbers.py fails where they differ);
# DOCS_ARGS=--check changes nothing and exits 1 where a page differs or a block does not parse
DOCS_ARGS ?=
docs: setup
	$(PY) -m fedmgda.docnumbers $(DOCS_ARGS)

# rewrite the package's copy of the paper's numbers (src/fedmgda/reference/paper_tables.csv)
paper-reference: setup
	$(PY) scripts/paper_reference.py $(PAPER_TABLES)

clean:
	rm -rf .venv $(LOCK_VENV) .setup-stamp-env .snakemake
