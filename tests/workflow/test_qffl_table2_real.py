"""q-FFL's Table 2 on the real Adult and Fashion-MNIST files, through the workflow as a user runs
it.

Runs only where both are: the UCI Adult files in FEDMGDA_ADULT_DIR (else ``resources/raw/adult/``),
the four Fashion-MNIST IDX files in Debian's /usr/share/datasets/fashion-mnist
(``apt-get install dataset-fashion-mnist``, or FEDMGDA_FMNIST_DIR); a checkout without them skips
with the reason.

Two tests. The default one (CI) runs the whole workflow on the real files with Adult's full
protocol (600 rounds, about 2 min) and F-MNIST's first FEDMGDA_QFFL_ROUNDS rounds (default 20):
it checks Adult's three columns against the paper's band and that every row comes out of five
seeds. F-MNIST's full protocol is 6 000 full-batch rounds of 20 runs over 18 000 samples x 785
features: about 10^13 multiply-adds, 19 min on 2 cores (docs/performance.md), so its band check
runs only with FEDMGDA_QFFL_FULL=1. A band check fails on any cell outside max(paper ±, one test
sample of the dataset's smallest device) except the misses measured under the code's readings
and listed below with the variant that explains each (docs/results/qffl_table2_variants.md); it
also fails when one of those comes within the band, so that docs/results.md is updated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from .conftest import FMNIST, FMNIST_FILES, REPO, copy_workflow

ADULT = Path(os.environ.get("FEDMGDA_ADULT_DIR", REPO / "resources/raw/adult"))
ADULT_FILES = ("adult.data", "adult.test")
ROUNDS = int(os.environ.get("FEDMGDA_QFFL_ROUNDS", "20"))
FULL = os.environ.get("FEDMGDA_QFFL_FULL") == "1"
# cells outside the band under the readings of the authors' code (measured 2026-11-23, seeds 1-5);
# docs/results/qffl_table2_variants.md shows them under the paper's readings
KNOWN_MISSES = {
    # the code's q = 0 (q-FedSGD) averages the two devices uniformly; the paper's data-weighted
    # reading (variant qffl_q0_weights: samples) lands within the band on all three columns
    ("qffl_q0", "Adult average"), ("qffl_q0", "PhD"), ("qffl_q0", "non-PhD"),
    # AFL's uniform step (fair_flearn with sampling 2): shirt 63.4 vs 71.4 ± 4.2; the
    # lambda-weighted reading (variant afl_step_weights: lambda) fits shirt but not the other
    # columns
    ("afl", "shirt"),
}
ADULT_COLUMNS = ("Adult average", "PhD", "non-PhD")
COLUMNS = (*ADULT_COLUMNS, "F-MNIST average", "shirt", "pullover", "T-shirt")


def _missing() -> str:
    why = []
    if not all((ADULT / f).is_file() for f in ADULT_FILES):
        why.append(f"the real UCI Adult files are not in {ADULT} (set FEDMGDA_ADULT_DIR)")
    if not all((FMNIST / f).is_file() for f in FMNIST_FILES):
        why.append(f"the real Fashion-MNIST files are not in {FMNIST} (set FEDMGDA_FMNIST_DIR, or "
                   "`apt-get install dataset-fashion-mnist` on Debian/Ubuntu)")
    return "; ".join(why)


pytestmark = [pytest.mark.realdata, pytest.mark.skipif(bool(_missing()), reason=_missing())]


def _run_table2(tmp_path: Path, fmnist_rounds: int | None) -> pd.DataFrame:
    """The table through the workflow: Adult's full protocol, F-MNIST's ``fmnist_rounds`` rounds
    (None: its full protocol)."""
    wd = copy_workflow(tmp_path / "wf")
    for folder, source, names in (("adult", ADULT, ADULT_FILES), ("fmnist", FMNIST, FMNIST_FILES)):
        raw = wd / "resources/raw" / folder
        raw.mkdir(parents=True)
        for name in names:  # as the data README says: copy them into resources/raw/<dataset>/
            shutil.copy(source / name, raw / name)
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "results/paper/tables/qffl_table2.md",
           "--config", "device=cpu", "allow_download=false"]
    if fmnist_rounds:
        cmd.append(f"experiment_overrides={{qffl_table2_fmnist: {{rounds: {fmnist_rounds}}}}}")
    proc = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=5400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    table = pd.read_csv(wd / "results/paper/tables/qffl_table2.csv", keep_default_na=False)
    print((wd / "results/paper/tables/qffl_table2.md").read_text())
    # the paper's four rows, all run
    assert list(table["row"]) == ["qffl_q0", "afl", "qffl_q1", "qffl_q2"]
    assert (table["status"] == "ok").all() and set(table["seeds"]) == {5}
    return table


def _check_band(table: pd.DataFrame, columns: tuple[str, ...]) -> None:
    outside = {(r["row"], c): f"{r['label']}: {c} {float(r[f'{c} repro_mean']):.2f} vs paper "
               f"{r[f'{c} paper']} "
                              f"({float(r[f'{c} diff']):+.2f})"
               for _, r in table.iterrows() for c in columns
               if not r[f"{c} verdict"].startswith("within")}
    new = [text for key, text in outside.items() if key not in KNOWN_MISSES]
    assert not new, ("rows outside max(paper ±, one test sample of the dataset's smallest device: "
                     "Adult 0.56, F-MNIST 0.1):\n" + "\n".join(new))
    fixed = sorted(key for key in KNOWN_MISSES - set(outside) if key[1] in columns)
    assert not fixed, f"now within the band (update KNOWN_MISSES and docs/results.md): {fixed}"


@pytest.mark.slow
def test_qffl_table2_adult_within_the_papers_band_and_every_row_produced(tmp_path):
    _check_band(_run_table2(tmp_path, ROUNDS), ADULT_COLUMNS)


@pytest.mark.slow
@pytest.mark.skipif(not FULL,
                    reason="F-MNIST's full protocol takes about 22 min on 2 cores; set "
                    "FEDMGDA_QFFL_FULL=1")
def test_qffl_table2_on_the_real_files_is_within_the_papers_band(tmp_path):
    _check_band(_run_table2(tmp_path, None), COLUMNS)
