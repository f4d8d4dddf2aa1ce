"""Fixtures of the workflow tests: run folders in the exact format ``fedmgda train`` writes
(metrics.csv, per_user.csv, per_user_final.csv, summary.json) -- test data only, generated in
tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
# the real Fashion-MNIST files: Debian's dataset-fashion-mnist, or FEDMGDA_FMNIST_DIR
FMNIST = Path(os.environ.get("FEDMGDA_FMNIST_DIR", "/usr/share/datasets/fashion-mnist"))
FMNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def write_run(root: Path, key: str, accs: list[float], *, rounds: int = 10, status: str = "ok",
              final: dict | None = None, seed: int = 0) -> Path:
    """One fake run: per-user accuracies ``accs`` at every stored round, simple curves."""
    d = root / key
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    acc = np.asarray(accs, dtype=float)
    rows = []
    for r in range(1, rounds + 1):
        rows.append({"round": r, "eta": 1.0, "train_loss": 2.0 / r + 0.01 * rng.random(),
                     "improved_loss": 0.5 + 0.05 * rng.random(), "improved_acc": 0.5,
                     "mean_acc": acc.mean() * r / rounds, "std_acc": acc.std(),
                     "worst5_acc": np.percentile(acc, 5), "best5_acc": np.percentile(acc, 95),
                     "weighted_acc": acc.mean(), "test_acc_test": acc.mean() * r / rounds})
    pd.DataFrame(rows).to_csv(d / "metrics.csv", index=False)
    users = [{"round": r, "user": u, "n_test": 10, "accuracy": a, "loss": 1.0 - a}
             for r in (1, rounds - 9 if rounds > 10 else 1, rounds) for u, a in enumerate(acc)]
    pd.DataFrame(users).drop_duplicates(["round", "user"]).to_csv(d / "per_user.csv", index=False)
    pd.DataFrame({"user": range(len(acc)), "n_test": 10, "accuracy": acc,
                  "loss": 1.0 - acc}).to_csv(d / "per_user_final.csv", index=False)
    tenth = max(1, len(acc) // 10)
    stats = {"mean_acc": float(acc.mean()), "std_acc": float(acc.std()),
             "worst5_acc": float(np.percentile(acc, 5)), "best5_acc": float(np.percentile(acc, 95)),
             "weighted_acc": float(acc.mean()), "worst10_acc": float(np.sort(acc)[:tenth].mean()),
             "best10_acc": float(np.sort(acc)[-tenth:].mean()), "var_acc": float(acc.var())}
    summary = {"config": {}, "status": status,
               "diverged_round": 3 if status == "diverged" else None,
               "rounds_completed": rounds, "runtime_s": 1.5, "device": "cpu",
               "final": final if final is not None else dict(stats),
               "protocol": {**stats, "round": 1}}
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def copy_workflow(wd: Path) -> Path:
    """A copy of the workflow (Snakefile, workflow/, config/, notebooks/) in ``wd``, the library
    linked as src/: Snakemake runs there without touching the checkout's results/."""
    wd.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "Snakefile", wd / "Snakefile")
    for d in ("workflow", "config", "notebooks"):
        shutil.copytree(REPO / d, wd / d)
    (wd / "src").symlink_to(REPO / "src")
    return wd


def git_clone_copy(wd: Path) -> Path:
    """The repository as a fresh clone has it: its git-tracked files copied into ``wd``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    for name in filter(None, listed.stdout.split("\0")):
        src = REPO / name
        if src.exists() or src.is_symlink():  # tracked but deleted in the checkout: not copied
            (wd / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, wd / name, follow_symlinks=False)
    return wd


DECOYS = ("python", "python3", "fedmgda", "papermill", "jupyter")


def unactivated_env(tmp: Path) -> tuple[dict[str, str], Path]:
    """The environment of a shell where no virtualenv / conda env is active: PATH is
    /usr/bin:/bin behind decoy ``python``, ``python3``, ``fedmgda``, ``papermill`` and ``jupyter``
    commands that fail and write their name to the returned file, so a job that runs whatever comes
    first on PATH instead of the interpreter running Snakemake fails and is named."""
    bin_dir, called = tmp / "decoy-bin", tmp / "decoys-called.txt"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in DECOYS:
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} >> '{called}'\nexit 97\n")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    return env, called


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"
