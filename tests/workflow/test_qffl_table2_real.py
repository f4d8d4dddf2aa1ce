"""q-FFL's Table 2 on the real Adult and Fashion-MNIST files, through the workflow as a user runs it.

Runs only where both are: the UCI Adult files in ``../shared/data/adult/`` beside the checkout (or
FEDMGDA_ADULT_DIR), the four Fashion-MNIST IDX files in Debian's /usr/share/datasets/fashion-mnist
(``apt-get install dataset-fashion-mnist``, or FEDMGDA_FMNIST_DIR); a checkout without them skips
with the reason. The protocol's rounds (Adult 600, F-MNIST 6 000) and seeds 1-5 are the default;
FEDMGDA_QFFL_ROUNDS=N runs N rounds instead and then only checks that every row is produced (the
paper's band is a statement about the full protocol).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from .conftest import REPO, copy_workflow

ADULT = Path(os.environ.get("FEDMGDA_ADULT_DIR", REPO.parent / "shared/data/adult"))
FMNIST = Path(os.environ.get("FEDMGDA_FMNIST_DIR", "/usr/share/datasets/fashion-mnist"))
ADULT_FILES = ("adult.data", "adult.test")
FMNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
ROUNDS = os.environ.get("FEDMGDA_QFFL_ROUNDS")
COLUMNS = ("Adult average", "PhD", "non-PhD", "F-MNIST average", "shirt", "pullover", "T-shirt")


def _missing() -> str:
    why = []
    if not all((ADULT / f).is_file() for f in ADULT_FILES):
        why.append(f"the real UCI Adult files are not in {ADULT} (set FEDMGDA_ADULT_DIR)")
    if not all((FMNIST / f).is_file() for f in FMNIST_FILES):
        why.append(f"the real Fashion-MNIST files are not in {FMNIST} (set FEDMGDA_FMNIST_DIR, or "
                   "`apt-get install dataset-fashion-mnist` on Debian/Ubuntu)")
    return "; ".join(why)


pytestmark = [pytest.mark.realdata, pytest.mark.skipif(bool(_missing()), reason=_missing())]


def test_qffl_table2_on_the_real_files_is_within_the_papers_band(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    for folder, source, names in (("adult", ADULT, ADULT_FILES), ("fmnist", FMNIST, FMNIST_FILES)):
        raw = wd / "resources/raw" / folder
        raw.mkdir(parents=True)
        for name in names:  # as the data README says: copy them into resources/raw/<dataset>/
            shutil.copy(source / name, raw / name)
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "results/paper/tables/qffl_table2.md",
           "--config", "device=cpu", "allow_download=false"]
    if ROUNDS:
        cmd.append(f"rounds={int(ROUNDS)}")
    proc = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]

    table = pd.read_csv(wd / "results/paper/tables/qffl_table2.csv", keep_default_na=False)
    print((wd / "results/paper/tables/qffl_table2.md").read_text())
    assert list(table["row"]) == ["qffl_q0", "afl", "qffl_q1", "qffl_q2"]  # the paper's four rows, all run
    assert (table["status"] == "ok").all() and set(table["seeds"]) == {5}
    if ROUNDS:
        return
    misses = [f"{r['label']}: {c} {float(r[f'{c} repro_mean']):.2f} vs paper {r[f'{c} paper']} "
              f"({float(r[f'{c} diff']):+.2f})"
              for _, r in table.iterrows() for c in COLUMNS if not r[f"{c} verdict"].startswith("within")]
    assert not misses, ("rows outside max(paper ±, one test sample of the dataset's smallest device: "
                        "Adult 0.56, F-MNIST 0.1):\n" + "\n".join(misses))
