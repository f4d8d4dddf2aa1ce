"""The paper's published numbers, stored once in src/fedmgda/reference/paper_tables.csv."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fedmgda.tables import paper_reference

from .conftest import REPO

SCRIPT = REPO / "scripts/paper_reference.py"  # the maintainer script that writes the CSV
_spec = importlib.util.spec_from_file_location("paper_reference", SCRIPT)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)
# the transcription of the paper's Tables 6-14 (not in the repository), where it is available
MD = Path(os.environ.get("FEDMGDA_PAPER_TABLES") or "/nonexistent/paper_tables.md")
NO_MD = f"the transcription is not in {MD} (set FEDMGDA_PAPER_TABLES to its path)"


def test_reference_has_every_table_and_row_count():
    ref = paper_reference()
    counts = ref.groupby("table")["row"].nunique().to_dict()
    assert counts == {"table6": 7, "table7": 18, "table8": 26, "table9": 27, "table10": 26,
                      "table11": 26, "table12": 26, "table13": 26, "table14": 18,
                      "qffl_table2": 4, "qffl_table11": 5}
    assert set(ref[ref["table"] == "table8"]["column"]) == {"Average", "Std", "Worst 5%", "Best 5%"}


def test_reference_values_spot_checks():
    ref = paper_reference().set_index(["table", "row", "column"])
    assert ref.loc[("table8", "fedmgda_plus decay=0.1 eta=1.5",
                    "Average"), ["mean", "std"]].tolist() == [71.15, 0.62]
    assert ref.loc[("table11", "fedmgda_plus decay=0 eta=1",
                    "Best 5%"), ["mean", "std"]].tolist() == [75.0, 43.3]
    assert ref.loc[("table7", "qfedavg L=1 q=5 bias=10000",
                    "PhD"), ["mean", "std"]].tolist() == [73.48, 0.78]
    assert ref.loc[("table7", "fedmgda_plus decay=0.333333 eta=1 bias=*",
                    "Uniform"), "mean"] == 83.24
    assert ref.loc[("table14", "fedavg local_lr=0.8 momentum=0", "Avg (data)"), "mean"] == 49.95
    assert ref.loc[("table14", "fedprox local_lr=0.25 momentum=0.5 mu=0.001",
                    "Std"), "mean"] == 5.75
    # Table 12's duplicated '1.0 1/2' FedMGDA+ row is read as decay 1/5 (docs/protocol.md §8.16)
    assert ref.loc[("table12", "fedmgda_plus decay=0.2 eta=1", "Average"), "mean"] == 84.95
    assert ref.loc[("table6", "fedmgda_plus", "Average"), "mean"] == 87.60
    # the q-FFL paper's Table 2 (shared row names over both datasets) and Table 11 (row_key keys)
    assert ref.loc[("qffl_table2", "afl", "PhD"), ["mean", "std"]].tolist() == [73.0, 2.2]
    assert ref.loc[("qffl_table2", "qffl_q2", "shirt"), ["mean", "std"]].tolist() == [74.7, 0.9]
    assert ref.loc[("qffl_table11", "qfedavg L=10 q=0",
                    "Variance"), ["mean", "std"]].tolist() == [724.0, 72.0]
    assert ref.loc[("qffl_table11", "qfedavg L=10 q=1", "KL(a‖u)"), "mean"] == 0.049


def test_the_qffl_rows_are_the_in_repository_transcription():
    """src/fedmgda/reference/qffl_tables.md (in the repository) parses to exactly the CSV's q-FFL
    rows, and the CSV keeps the FedMGDA+ rows first."""
    parsed = pd.DataFrame(script.parse_qffl(script.DEFAULT_QFFL_MD))
    ref = paper_reference()
    qffl = ref[ref["table"].str.startswith("qffl_")].reset_index(drop=True)
    assert len(parsed) == len(qffl) == 4 * 7 + 5 * 6
    assert (parsed[["table", "row", "column"]] == qffl[["table", "row", "column"]]).all().all()
    assert ((parsed["mean"].round(3) == qffl["mean"]).all()
            and (parsed["std"].round(3) == qffl["std"]).all())
    assert not ref["table"].iloc[: len(ref) - len(qffl)].str.startswith("qffl_").any()


def test_a_malformed_qffl_block_is_one_clear_error(tmp_path):
    bad = tmp_path / "q.md"
    bad.write_text("## qffl_table2 — x\n\n```text\nrow | label | A\nafl | AFL | 1.0±0.1 | "
                   "2.0±0.1\n```\n")
    with pytest.raises(ValueError, match="qffl_table2: 4 cells, header has 3"):
        script.parse_qffl(bad)
    (tmp_path / "none.md").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no '## qffl_tableN' block"):
        script.parse_qffl(tmp_path / "none.md")


@pytest.mark.skipif(not MD.is_file(), reason=NO_MD)
def test_reference_csv_matches_the_transcribed_markdown():
    parsed = pd.DataFrame(script.parse(MD))
    ref = paper_reference()
    ref = ref[~ref["table"].str.startswith("qffl_")]  # the q-FFL paper's rows: the test above
    assert len(parsed) == len(ref)
    merged = parsed.merge(ref, on=["table", "row", "column"], suffixes=("_md", "_csv"))
    assert len(merged) == len(ref)
    assert (merged["mean_md"].round(2) == merged["mean_csv"]).all()
    assert (merged["std_md"].round(2) == merged["std_csv"]).all()


def test_script_rewrites_the_csv_byte_for_byte(tmp_path):
    if not MD.is_file():
        pytest.skip(NO_MD)
    out = tmp_path / "paper_tables.csv"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(MD), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == (REPO / "src/fedmgda/reference/paper_tables.csv").read_bytes()


def test_script_names_the_missing_markdown(tmp_path):
    missing = tmp_path / "paper_tables.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(missing), "--out",
                           str(tmp_path / "x.csv")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and str(missing) in proc.stderr and "pass its path" in proc.stderr
    assert not (tmp_path / "x.csv").exists()
