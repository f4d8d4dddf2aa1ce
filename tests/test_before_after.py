"""scripts/before_after.py: two window_stats tables side by side, each change against the seed
spread."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def table(rows: dict[str, tuple[str, str]]) -> str:
    lines = ["mean ± std over seeds of the evaluations of the last 50 rounds, %",
             "| row | seeds | mean_acc | std_acc |", "|---|---|---|---|"]
    lines += [f"| {row} | 3 | {a} | {s} |" for row, (a, s) in rows.items()]
    return "\n".join(lines) + "\n"


def test_changes_are_judged_against_the_larger_seed_std(tmp_path):
    (tmp_path / "b.md").write_text(table({"s/fedavg": ("70.00 ± 1.00", "20.00 ± 0.50"),
                                          "s/gone": ("1.00 ± 0.10", "1.00 ± 0.10")}))
    (tmp_path / "a.md").write_text(table({"s/fedavg": ("70.80 ± 0.40", "21.00 ± 0.60")}))
    out = subprocess.run([sys.executable, str(REPO / "scripts/before_after.py"),
                          str(tmp_path / "b.md"),
                          str(tmp_path / "a.md")], capture_output=True, text=True,
                         check=True).stdout
    assert ("| s/fedavg | mean_acc | 70.00 ± 1.00 (3) | 70.80 ± 0.40 (3) | +0.80 | yes "
            "(larger std 1.00) |" in out)
    assert ("| s/fedavg | std_acc | 20.00 ± 0.50 (3) | 21.00 ± 0.60 (3) | +1.00 | no "
            "(larger std 0.60) |" in out)
    assert "s/gone" not in out and "1 of 2 changes within the seed spread." in out


def test_several_tables_in_one_file_are_merged(tmp_path):
    both = table({"s/fedavg": ("70.00 ± 1.00", "20.00 ± 0.50")}) + "\n" + (
        "| row | seeds | improved_loss |\n|---|---|---|\n| s/fedavg | 3 | 71.00 ± 1.00 |\n")
    (tmp_path / "b.md").write_text(both)
    (tmp_path / "a.md").write_text(both.replace("71.00 ± 1.00", "73.50 ± 1.00"))
    out = subprocess.run([sys.executable, str(REPO / "scripts/before_after.py"),
                          str(tmp_path / "b.md"),
                          str(tmp_path / "a.md")], capture_output=True, text=True,
                         check=True).stdout
    assert "| s/fedavg | mean_acc | 70.00 ± 1.00 (3) | 70.00 ± 1.00 (3) | +0.00 | yes" in out
    assert "| s/fedavg | improved_loss | 71.00 ± 1.00 (3) | 73.50 ± 1.00 (3) | +2.50 | no" in out


def test_window_stats_reads_the_rows_asked_for(tmp_path):
    from tests.workflow.conftest import write_run

    for setting in ("fmnist_ev10", "fmnist_pu1"):
        for seed in (1, 2):
            write_run(tmp_path, f"{setting}/fedavg/default/clean/seed{seed}", [0.5, 0.7, 0.9],
                      rounds=20, seed=seed)
    out = subprocess.run([sys.executable, str(REPO / "scripts/window_stats.py"), str(tmp_path),
                          "--last", "5",
                          "--rows", "*_ev10/*"], capture_output=True, text=True, check=True).stdout
    assert "| fmnist_ev10/fedavg/default/clean | 2 |" in out and "fmnist_pu1" not in out
