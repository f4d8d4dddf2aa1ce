"""A broken run folder stops the table built from it, in the workflow (config/test.yaml): a cut
per_user_final.csv or another run's folder at a run's path is one line in the table job's log,
naming the folder; deleting the folder retrains that run alone and gives the same table."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import copy_workflow

TABLE = "results/test/tables/table8.csv"
LOG = "logs/test/tables/table8.log"


def snakemake(wd, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "snakemake", TABLE, *args, "--cores", "2",
                           "--configfile", "config/test.yaml"],
                          cwd=wd, env=env, capture_output=True, text=True, timeout=600)


def refused(wd) -> str:
    """The one line the table job wrote to its log, once Snakemake has failed on it."""
    proc = snakemake(wd, "--forcerun", "table_table8")
    assert proc.returncode != 0, (proc.stdout + proc.stderr)[-3000:]
    lines = (wd / LOG).read_text().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.slow
def test_a_broken_folder_stops_the_table_and_deleting_it_retrains_it_alone(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    proc = snakemake(wd)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = (wd / TABLE).read_bytes()
    runs = wd / "results/test/runs"
    [fedavg] = runs.glob("*/fedavg/*/clean/seed1")
    [other] = runs.glob("*/fedmgda_plus/*/clean/seed1")
    key = str(fedavg.relative_to(wd))

    final = fedavg / "per_user_final.csv"
    users = len(final.read_text().splitlines()) - 1
    final.write_text("".join(final.read_text().splitlines(keepends=True)[:11]))
    line = refused(wd)
    says = (rf"fedmgda: \S*{re.escape(key)}: per_user_final.csv has 10 rows, the run has {users} "
            "users; delete the folder, the workflow retrains it")
    assert re.fullmatch(says, line), line

    shutil.rmtree(fedavg)
    shutil.copytree(other, fedavg)  # another configuration's folder at the FedAvg run's path
    line = refused(wd)
    assert f"{key}: trained with another run config than its run key's in the registry" in line

    trained = {p: p.stat().st_mtime_ns for p in runs.glob("**/summary.json") if p.parent != fedavg}
    shutil.rmtree(fedavg)
    proc = snakemake(wd)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert {p: p.stat().st_mtime_ns for p in trained} == trained  # the other runs: not retrained
    assert (wd / TABLE).read_bytes() == table
