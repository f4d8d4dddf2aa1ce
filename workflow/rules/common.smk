"""Registry -> run keys, partition keys, table / figure / report targets (fedmgda.experiments)."""

import json
import re
import sqlite3
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.io import IOFile

from fedmgda.catalog import DATASETS, OFFLINE_DATASETS, RAW_FOLDERS
from fedmgda.claim_parsing import parse_claims
from fedmgda.devices import job_gpu
from fedmgda.errors import RegistryError
from fedmgda.experiments import Registry, item_spec, validate_runs
from fedmgda.experiments import expand as expand_registry
from fedmgda.jobplan import job_scope, plan_path, target_jobs, write_registry_plan
from fedmgda.packs import assign_packs, pack_resources, pack_rule_name
from fedmgda.packs import run_yaml_text, trained_runs
from fedmgda.report import bare_experiments
from fedmgda.specs import spec_to_json

# A cluster job (Snakemake started again for --target-jobs) of training, partition or download
# jobs reads only its own runs from the plan its main process wrote (fedmgda.jobplan), so its start
# does not grow with the grid; every other Snakemake (and a job without a plan) reads the registry
PLAN_FILE = plan_path(config)
JOB_SCOPE = None
if not workflow.is_main_process:
    JOB_SCOPE = job_scope(PLAN_FILE, target_jobs(sys.argv))

if JOB_SCOPE is not None:
    REGISTRY = Registry(str(config.get("profile", "paper")), JOB_SCOPE.runs, {}, {}, {},
                        JOB_SCOPE.partitions, sorted({s.dataset for s in JOB_SCOPE.runs.values()}),
                        {})
    CLAIMS = []
    _n_runs, _n_parts = len(REGISTRY.runs), len(REGISTRY.partitions)
    print(f"this job reads {_n_runs} run{'s' * (_n_runs != 1)} and {_n_parts} "
          f"partition{'s' * (_n_parts != 1)} from the jobs' plan {PLAN_FILE}", file=sys.stderr)
else:
    try:
        REGISTRY = expand_registry(config)
        validate_runs(REGISTRY)
        CLAIMS = parse_claims(config, REGISTRY)  # claims checked before any job starts
    except (RegistryError, ValueError) as err:
        raise WorkflowError(f"invalid experiment registry: {err}") from None

# a larger registry is refused: planning takes about 1.7 (packed) to 2.7 (`pack: 1`) ms of CPU a
# run at 20 000 runs on an idle 2-core CPU (benchmarks/measurements/cpu-2core_planning_2026-12-02c
# .txt, from benchmarks/bench_planning.py), so 50 000 runs would plan for minutes: split the grid.
# From PLANNING_NOTICE_RUNS runs on, a line says planning has begun
MAX_PLANNED_RUNS = 50_000
PLANNING_NOTICE_RUNS = 2_000

if len(REGISTRY.runs) > MAX_PLANNED_RUNS:
    raise WorkflowError(
        f"the registry asks for {len(REGISTRY.runs)} runs, more than the {MAX_PLANNED_RUNS} one "
        "Snakemake call plans: split the grid, e.g. `--config only=[<experiment>]` per experiment "
        "or `--config seeds=[...]` in batches of seeds")
if len(REGISTRY.runs) >= PLANNING_NOTICE_RUNS:
    print(f"planning {len(REGISTRY.runs)} runs ...", file=sys.stderr, flush=True)

PROFILE = REGISTRY.profile
RESULTS = f"results/{PROFILE}"
RUNS_DIR = f"{RESULTS}/runs"
LOGS = f"logs/{PROFILE}"
RAW_DIR = config["raw_dir"]
# Jobs run the package with PYTHON (workflow/rules/interpreter.smk), which their shell commands
# name as "$FEDMGDA_PYTHON", set by the shell prefix: not a param, since params are a rerun trigger
# and starting Snakemake from another interpreter (venv, conda, a SLURM job) must not retrain
# anything. `train_command: null` (the default): the package's trainer under that Python.
WORKFLOW_CLI = '"$FEDMGDA_PYTHON" -m fedmgda.workflow_cli'
TRAIN = config["train_command"] or '"$FEDMGDA_PYTHON" -m fedmgda train'

CONDA_ENV = "../envs/fedmgda.yaml"  # relative to workflow/rules/
# jobs import the package from src/ (also inside a rule's conda env, where it is not installed)
_prefix_python = PYTHON.replace("{", "{{").replace("}", "}}")  # Snakemake formats the prefix too
shell.prefix("set -euo pipefail; export PYTHONPATH=src${{PYTHONPATH:+:$PYTHONPATH}}; "
             f"FEDMGDA_PYTHON={_prefix_python}; ")

ALL_RUNS = [f"{RUNS_DIR}/{k}/summary.json" for k in REGISTRY.runs]
TABLE_FILES = [f"{RESULTS}/tables/{t}.{ext}" for t in REGISTRY.tables for ext in ("csv", "md")]
FIGURE_FILES = [f"{RESULTS}/figures/{f}.{ext}" for f in REGISTRY.figures for ext in ("pdf", "png")]
CLAIM_FILES = [f"{RESULTS}/claims.csv", f"{RESULTS}/claims.md"] if CLAIMS else []
REPORT_FILES = [f"{RESULTS}/report/report.ipynb", f"{RESULTS}/report/report.html"]


# `snakemake --report`: captions (workflow/report/*.rst, relative to workflow/rules/) are Jinja
# templates rendered per job, so one generic caption per kind reads the item's title from params.
CAPTIONS = {kind: f"../report/{kind}.rst" for kind in ("table", "figure", "claims", "notebook")}


def caption_title(spec, name):
    """The registry title of a table / figure as caption text: reStructuredText markup characters
    escaped, so a title shows literally."""
    return re.sub(r"([\\`*_|])", r"\\\1", str(spec.title or name))


# the rule that makes each run's summary.json (workflow/rules/train.smk: `train` or the run's pack
# rule): a rule reading the file names its producer, so Snakemake matches no rule's outputs
# against it. A trained run's summary.json is read as it is (before_update: no rule makes it)
SUMMARY_PRODUCERS = {}


def run_summaries(keys):
    files = []
    for k in keys:
        path = f"{RUNS_DIR}/{k}/summary.json"
        producer = SUMMARY_PRODUCERS.get(k)
        if producer is not None:
            files.append(IOFile(path, rule=producer))
        elif k in TRAINED:
            files.append(before_update(path))
        else:
            files.append(path)
    return files


def download_marker(folder):
    """Written by the download job of one raw folder (rule download's wildcard `dataset`)."""
    return f"{RAW_DIR}/{folder}/.fedmgda-download.done"


def raw_files_marker(dataset):
    """The download a dataset waits on: its raw folder's (fmnist3 reads fmnist's files)."""
    return download_marker(DATASETS[dataset].raw_folder)


wildcard_constraints:
    run=r"[^/]+/[^/]+/[^/]+/[^/]+/seed\d+",
    part=r"[^/]+/(seed\d+|fixed)",
    dataset="|".join(RAW_FOLDERS),


def write_json(path, data):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True))


def partition_input(wildcards):
    info = REGISTRY.partitions[wildcards.part]
    if info["dataset"] in OFFLINE_DATASETS:
        return []
    return [raw_files_marker(info["dataset"])]


def run_inputs(key):
    spec = REGISTRY.runs[key]
    if spec.partition is not None:
        return [f"{RESULTS}/partitions/{spec.partition}.npz"]
    if spec.dataset not in OFFLINE_DATASETS:
        return [raw_files_marker(spec.dataset)]
    return []


def train_inputs(wildcards):
    return run_inputs(wildcards.run)


# each run's run.yaml text, made once: the trained-run check, the pack rules and the train jobs
RUN_CONFIG_TEXTS = {k: run_yaml_text(spec, f"{RESULTS}/partitions")
                    for k, spec in REGISTRY.runs.items()}


def run_config_text(key):
    return RUN_CONFIG_TEXTS[key]


# runs already trained with today's config: no job makes their files, since a pack job would
# retrain its finished members (fedmgda.packs.trained_runs); delete a run's folder to retrain it
if JOB_SCOPE is not None:
    TRAINED = set()  # a job's trainer leaves a run another one finished as it is
    PACKS = JOB_SCOPE.packs  # the main process's packs: its jobs' outputs
else:
    TRAINED = trained_runs(RUNS_DIR, RUN_CONFIG_TEXTS)
    try:
        # runs trained together, one job per pack (resources.<dataset>.pack; fedmgda.packs)
        PACKS = assign_packs(REGISTRY.runs, trained=TRAINED)
    except ValueError as err:
        raise WorkflowError(f"invalid experiment registry: {err}") from None
# the runs that `train` (one job per run) may make: neither trained nor in a pack
SINGLE_RUNS = sorted(set(REGISTRY.runs) - TRAINED - {k for keys in PACKS.values() for k in keys})


onstart:
    # before the first job is submitted to a cluster: the plan its jobs read (fedmgda.jobplan)
    if workflow.non_local_exec and JOB_SCOPE is None:
        try:
            write_registry_plan(PLAN_FILE, REGISTRY, PACKS)
        except (OSError, sqlite3.Error) as err:
            print(f"the jobs' plan {PLAN_FILE} could not be written ({err}): each job reads the "
                  "whole registry", file=sys.stderr)


def run_yaml(wildcards):
    return run_config_text(wildcards.run)
