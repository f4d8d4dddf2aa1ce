"""The README's commands as a newcomer types them after `make quick`: the venv's `snakemake`
without activating the venv, on a fresh copy of the repository. Jobs run the package with the
interpreter that runs Snakemake (workflow/rules/interpreter.smk), never with whatever `python`
comes first on PATH; an interpreter that cannot run them stops before any job, with one message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import copy_workflow, git_clone_copy, unactivated_env


@pytest.mark.slow
def test_venv_snakemake_builds_a_table_without_activating_the_venv(tmp_path):
    # as the README's "More commands" write it, with this interpreter's environment as the venv
    snakemake = Path(sys.executable).parent / "snakemake"
    if not snakemake.is_file():
        pytest.skip(f"no snakemake script beside {sys.executable}")
    wd = git_clone_copy(tmp_path / "clone")
    env, decoys_called = unactivated_env(tmp_path)
    proc = subprocess.run([str(snakemake), "results/test/tables/table8.md", "--cores", "2",
                           "--configfile", "config/test.yaml"], cwd=wd, env=env,
                          capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert not decoys_called.exists(), decoys_called.read_text()
    table = (wd / "results/test/tables/table8.md").read_text()
    assert "FedMGDA+" in table and "FedAvg" in table
    assert len(list((wd / "results/test/runs").rglob("summary.json"))) == 4


MISSING = {
    "torch": "PyTorch (torch) is not installed",
    "fedmgda": "the fedmgda package does not import",
}


@pytest.mark.parametrize("module", sorted(MISSING))
def test_an_interpreter_that_cannot_run_the_jobs_stops_before_any_job_with_one_message(tmp_path,
                                                                                       module):
    wd = copy_workflow(tmp_path / "wf")
    # this interpreter with `module` made unimportable (a None entry in sys.modules: find_spec
    # answers None and import fails), as if it were not installed
    run_without = (f"import sys; sys.modules[{module!r}] = None; sys.argv[0] = 'snakemake'; "
                   "from snakemake.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", run_without, "results/test/tables/table8.md",
                           "--cores", "1",
                           "--configfile", "config/test.yaml"], cwd=wd, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert out.count(MISSING[module]) == 1 and out.count("make setup") == 1, out[-3000:]
    assert ".venv/bin/snakemake" in out and "source .venv/bin/activate" in out
    assert "Traceback" not in out and not (wd / "results").exists() and not (wd / "logs").exists()
