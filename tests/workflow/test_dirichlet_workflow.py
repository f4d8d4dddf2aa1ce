"""The dirichlet partition through the workflow on the test profile: a partition job writes the
seeded file, the runs train on it, and the table reads their users' accuracies."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from fedmgda.data import load_partition

from .conftest import copy_workflow

# over config/test.yaml: the tiny experiment on digits dealt by Dir(0.5), 3 rounds, seed 1
OVERLAY = {
    "seeds": [1],
    "rounds": 3,
    "settings": {"digits_b10": {"dataset": "digits", "partition": "dirichlet",
                                "dataset_options": {"dirichlet_alpha": 0.5}, "batch_size": 10,
                                "local_lr": 0.05, "participation": 0.2, "rounds": 4}},
}


@pytest.mark.slow
def test_a_dirichlet_setting_partitions_trains_and_tabulates(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    (wd / "dirichlet.yaml").write_text(yaml.safe_dump(OVERLAY))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "results/test/tables/table8.csv",
                           "--cores", "2", "--configfile", "config/test.yaml", "dirichlet.yaml"],
                          cwd=wd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    [npz] = (wd / "results/test/partitions").glob("digits-dirichlet*/seed1.npz")
    partition = load_partition(npz)
    assert partition.num_users == 20
    assert min(len(t) + len(v) + len(s) for t, v, s in
               zip(partition.train, partition.val, partition.test, strict=True)) >= 10
    sizes = {len(t) for t in partition.train}
    assert len(sizes) > 1  # unequal users, unlike the shards the profile has by default
    runs = sorted((wd / "results/test/runs").glob("digits-dirichlet*/*/*/clean/seed1"))
    assert len(runs) == 2
    for run in runs:
        per_user = pd.read_csv(run / "per_user_final.csv")
        assert len(per_user) == 20 and np.isfinite(per_user.select_dtypes("number")).all().all()
    table = pd.read_csv(wd / "results/test/tables/table8.csv")
    assert len(table) == 2
