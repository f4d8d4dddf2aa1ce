"""A new algorithm from one file plus config lines: the example plug-in (examples/fedavgm.py)
trains through Snakemake on the test profile and gets its row in the table and its curve."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from .conftest import REPO, copy_workflow


def _run_with_plugin(tmp_path, profile: str, plugin: str, grid_line: dict, settings: dict | None = None):
    """The test profile plus the config lines docs/plugins.md asks for (the plug-in, its grid
    line, any setting it needs), through Snakemake to table8 and fig1a; returns the work dir."""
    wd = copy_workflow(tmp_path / "wf")
    shutil.copytree(REPO / "examples", wd / "examples")
    cfg = yaml.safe_load((REPO / "config/test.yaml").read_text())
    cfg["plugins"] = [plugin]
    cfg["grids"]["tiny"].append(grid_line)
    for name, values in (settings or {}).items():
        cfg["settings"][name].update(values)
    cfg.update(profile=profile, seeds=[1])
    (wd / f"config/{profile}.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True))
    targets = [f"results/{profile}/tables/table8.md", f"results/{profile}/figures/fig1a.png"]
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "2", "--configfile", f"config/{profile}.yaml"],
                          cwd=wd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert (wd / f"results/{profile}/figures/fig1a.png").stat().st_size > 0
    return wd, cfg


@pytest.mark.slow
def test_plugin_gets_its_row_in_a_table(tmp_path):
    wd, cfg = _run_with_plugin(tmp_path, "plugin", "examples/fedavgm.py:FedAvgM",
                               {"algorithm": "fedavgm", "hparams": {"beta": 0.5}})
    runs = list((wd / "results/plugin/runs").glob("*/fedavgm/beta0.5/clean/seed1/summary.json"))
    assert len(runs) == 1
    metrics = pd.read_csv(runs[0].parent / "metrics.csv")
    assert len(metrics) == 4 and metrics["mean_acc"].notna().all()
    table = (wd / "results/plugin/tables/table8.md").read_text()
    assert "FedAvgM β=0.5" in table and "FedMGDA+" in table
    # `paper: null`: one's own numbers only, one column per statistic
    header = next(line for line in table.splitlines() if line.startswith("| Row |"))
    assert sorted(header.strip("| ").split(" | ")) == sorted(["Row", "Seeds", *cfg["tables"]["table8"]["columns"]])
    assert "paper |" not in table and "n/a" not in table


@pytest.mark.slow
def test_client_side_plugin_gets_its_row_and_curve(tmp_path):
    """SCAFFOLD (examples/scaffold.py: a local term, per-client state, reports) beside FedMGDA+,
    with plain local SGD (momentum 0) as it requires."""
    wd, _ = _run_with_plugin(tmp_path, "scaffold", "examples/scaffold.py:Scaffold", {"algorithm": "scaffold"},
                             settings={"digits_b10": {"momentum": 0.0}})
    [summary] = (wd / "results/scaffold/runs").glob("*/scaffold/*/clean/seed1/summary.json")
    metrics = pd.read_csv(summary.parent / "metrics.csv")
    assert len(metrics) == 4 and metrics["mean_acc"].notna().all()
    assert "do not serve its local_term" in (summary.parent / "train.log").read_text()
    table = (wd / "results/scaffold/tables/table8.md").read_text()
    assert "SCAFFOLD" in table and "FedMGDA+" in table
