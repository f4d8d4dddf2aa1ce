"""The F-MNIST fairness profile (config/fmnist.yaml) on the real Fashion-MNIST files, cheaply.

Runs only where the four IDX files are: Debian's /usr/share/datasets/fashion-mnist (`apt-get
install dataset-fashion-mnist`; CI installs it) or FEDMGDA_FMNIST_DIR; elsewhere it skips with the
reason. It checks that the partition has the authors' shape (docs/protocol.md §1.2, §1.4: 100
users, 480 / 60 / 60, every user's local test split one class that its train split also holds) and
that the profile's table and claims come out of a few rounds of the CNN through the workflow, as the
README's command runs them (the full 200-round study: docs/fmnist-fairness.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedmgda.data import load_federated

from .conftest import FMNIST, FMNIST_FILES, copy_workflow

FILES = FMNIST_FILES
MISSING = "" if all((FMNIST / f).is_file() for f in FILES) else (
    f"the real Fashion-MNIST files are not in {FMNIST} (set FEDMGDA_FMNIST_DIR, or "
    "`apt-get install dataset-fashion-mnist` on Debian/Ubuntu)")

pytestmark = [pytest.mark.realdata, pytest.mark.skipif(bool(MISSING), reason=MISSING)]


def _raw_dir(root: Path) -> Path:
    """resources/raw with the four files copied into fmnist/, as the README says."""
    raw = root / "resources/raw"
    (raw / "fmnist").mkdir(parents=True)
    for name in FILES:
        shutil.copy(FMNIST / name, raw / "fmnist" / name)
    return raw


@pytest.mark.parametrize("sort", ["stable", "quicksort"])
def test_the_shards_partition_has_the_authors_shape(tmp_path, sort):
    data = load_federated("fmnist", _raw_dir(tmp_path), partition="shards", seed=1,
                          options={"sort": sort})
    assert data.num_users == 100
    assert set(data.train_sizes()) == {480} and set(data.test_sizes()) == {60}
    for train, test in zip(data.train_idx, data.test_idx):
        test_classes = torch.unique(data.y[test])
        assert len(test_classes) == 1  # the tail of the user's third shard
        assert test_classes.item() in set(data.y[train].tolist())
        assert len(torch.unique(data.y[train])) <= 3  # three single-class shards
    users = torch.cat([*data.train_idx, *data.test_idx])
    assert len(torch.unique(users)) == len(users)  # no image is given twice


def test_the_fairness_profile_runs_on_the_real_files(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    _raw_dir(wd)
    cmd = [sys.executable, "-m", "snakemake", "results/fmnist/tables/fmnist_core.md",
           "results/fmnist/claims.md",
           "--cores", "2", "--configfile", "config/fmnist.yaml",
           "--config", "rounds=3", "seeds=[1]", "allow_download=false", "only=[fmnist_core]"]
    proc = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    table = pd.read_csv(wd / "results/fmnist/tables/fmnist_core.csv")
    assert len(table) == 4  # FedAvg, FedMGDA+, FedAvg-n, FedMGDA
    assert table.filter(like="Average").notna().all().all()
    claims = pd.read_csv(wd / "results/fmnist/claims.csv")
    assert len(claims) == 10 and not claims["verdict"].eq("not run").any()
    runs = wd / "results/fmnist/runs"
    metrics = pd.read_csv(next(runs.glob("*/fedavg/default/clean/seed1/metrics.csv")))
    # rounds 1 and 3 evaluated
    assert list(metrics["round"]) == [1, 2, 3] and metrics["mean_acc"].notna().sum() == 2
