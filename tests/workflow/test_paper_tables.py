"""The paper's published numbers, stored once in src/fedmgda/reference/paper_tables.csv."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pandas as pd
import pytest

from fedmgda.tables import paper_reference

from .conftest import REPO

SCRIPT = REPO / "scripts/paper_reference.py"  # the maintainer script that writes the CSV
_spec = importlib.util.spec_from_file_location("paper_reference", SCRIPT)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)
MD = script.DEFAULT_MD


def test_reference_has_every_table_and_row_count():
    ref = paper_reference()
    counts = ref.groupby("table")["row"].nunique().to_dict()
    assert counts == {"table6": 7, "table7": 18, "table8": 26, "table9": 27, "table10": 26,
                      "table11": 26, "table12": 26, "table13": 26, "table14": 18}
    assert set(ref[ref["table"] == "table8"]["column"]) == {"Average", "Std", "Worst 5%", "Best 5%"}


def test_reference_values_spot_checks():
    ref = paper_reference().set_index(["table", "row", "column"])
    assert ref.loc[("table8", "fedmgda_plus decay=0.1 eta=1.5", "Average"), ["mean", "std"]].tolist() == [71.15, 0.62]
    assert ref.loc[("table11", "fedmgda_plus decay=0 eta=1", "Best 5%"), ["mean", "std"]].tolist() == [75.0, 43.3]
    assert ref.loc[("table7", "qfedavg L=1 q=5 bias=10000", "PhD"), ["mean", "std"]].tolist() == [73.48, 0.78]
    assert ref.loc[("table7", "fedmgda_plus decay=0.333333 eta=1 bias=*", "Uniform"), "mean"] == 83.24
    assert ref.loc[("table14", "fedavg local_lr=0.8 momentum=0", "Avg (data)"), "mean"] == 49.95
    assert ref.loc[("table14", "fedprox local_lr=0.25 momentum=0.5 mu=0.001", "Std"), "mean"] == 5.75
    # Table 12's duplicated '1.0 1/2' FedMGDA+ row is read as decay 1/5 (docs/protocol.md §8.16)
    assert ref.loc[("table12", "fedmgda_plus decay=0.2 eta=1", "Average"), "mean"] == 84.95
    assert ref.loc[("table6", "fedmgda_plus", "Average"), "mean"] == 87.60


@pytest.mark.skipif(not MD.is_file(), reason="the shared transcription is not available here")
def test_reference_csv_matches_the_transcribed_markdown():
    parsed = pd.DataFrame(script.parse(MD))
    ref = paper_reference()
    assert len(parsed) == len(ref)
    merged = parsed.merge(ref, on=["table", "row", "column"], suffixes=("_md", "_csv"))
    assert len(merged) == len(ref)
    assert (merged["mean_md"].round(2) == merged["mean_csv"]).all()
    assert (merged["std_md"].round(2) == merged["std_csv"]).all()


def test_script_rewrites_the_csv_byte_for_byte(tmp_path):
    if not MD.is_file():
        pytest.skip("the shared transcription is not available here")
    out = tmp_path / "paper_tables.csv"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(MD), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == (REPO / "src/fedmgda/reference/paper_tables.csv").read_bytes()


def test_script_names_the_missing_markdown(tmp_path):
    missing = tmp_path / "paper_tables.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(missing), "--out", str(tmp_path / "x.csv")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and str(missing) in proc.stderr and "PAPER_TABLES=" in proc.stderr
    assert not (tmp_path / "x.csv").exists()
