"""The Python every job runs (PYTHON), and the check that it can run them, before any job.

Jobs run the package with the interpreter that runs Snakemake (`sys.executable`), not with
whatever `python` comes first on PATH: `.venv/bin/snakemake ...` works without activating the
venv, and so do an activated venv and a conda environment. A SLURM job starts Snakemake with that
same interpreter (the executor's `sys.executable` on a shared file system), so its jobs do too.
With `--software-deployment-method conda` (`--sdm conda`, `--use-conda`) every shell rule runs in
its `conda:` environment (workflow/envs/fedmgda.yaml), whose `python` is first on PATH there: the
rules then call `python`; Snakemake's own environment still needs the package's dependencies
(environment.yml), since reading a config can import torch (plug-ins)."""

import importlib.util
import shlex
import sys

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

RULE_CONDA_ENVS = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PYTHON = "python" if RULE_CONDA_ENVS else shlex.quote(sys.executable)


def setup_problem():
    """Why this interpreter cannot run the workflow (None when it can). PyTorch is looked up
    without importing it (a second or two saved on every start)."""
    try:
        import fedmgda.experiments  # noqa: F401  what reading the config needs (numpy, pandas, yaml)
    except ImportError as err:
        return f"the fedmgda package does not import ({err})"
    if importlib.util.find_spec("torch") is None:
        return "PyTorch (torch) is not installed"
    return None


_problem = setup_problem()
if _problem:
    raise WorkflowError(
        f"{_problem} for {sys.executable}, the Python running Snakemake (its jobs run with it). "
        "Set up once with `make setup`, then run `.venv/bin/snakemake ...`, or "
        "`source .venv/bin/activate` and `snakemake ...` (conda: `conda activate fedmgda`).")
