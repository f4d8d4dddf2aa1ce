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


def _run_with_plugin(tmp_path, profile: str, plugin: str, grid_line: dict,
                     settings: dict | None = None, **config):
    """The test profile plus the config lines docs/plugins.md asks for (the plug-in, its grid
    line, any setting it needs) and any other top-level ``config``, through Snakemake to table8,
    fig1a and fig3a; returns the work dir."""
    wd = copy_workflow(tmp_path / "wf")
    shutil.copytree(REPO / "examples", wd / "examples")
    cfg = yaml.safe_load((REPO / "config/test.yaml").read_text())
    cfg["plugins"] = [plugin]
    cfg["grids"]["tiny"].append(grid_line)
    for name, values in (settings or {}).items():
        cfg["settings"][name].update(values)
    cfg.update(profile=profile, seeds=[1], **config)
    (wd / f"config/{profile}.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True))
    targets = [f"results/{profile}/tables/table8.md", f"results/{profile}/figures/fig1a.png",
               f"results/{profile}/figures/fig3a.png"]
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "2",
                           "--configfile", f"config/{profile}.yaml"],
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
    assert sorted(header.strip("| ").split(" | ")) == sorted(["Row", "Seeds",
                                                              *cfg["tables"]["table8"]["columns"]])
    assert "paper |" not in table and "n/a" not in table


@pytest.mark.slow
def test_client_side_plugin_gets_its_row_and_curve(tmp_path):
    """SCAFFOLD (examples/scaffold.py: a local term, per-client state, reports) beside FedMGDA+,
    with plain local SGD (momentum 0) as it requires."""
    wd, _ = _run_with_plugin(tmp_path, "scaffold", "examples/scaffold.py:Scaffold",
                             {"algorithm": "scaffold"},
                             settings={"digits_b10": {"momentum": 0.0}})
    [summary] = (wd / "results/scaffold/runs").glob("*/scaffold/*/clean/seed1/summary.json")
    metrics = pd.read_csv(summary.parent / "metrics.csv")
    assert len(metrics) == 4 and metrics["mean_acc"].notna().all()
    # its term trains on the batched path
    assert "not vmap-ed" not in (summary.parent / "train.log").read_text()
    table = (wd / "results/scaffold/tables/table8.md").read_text()
    assert "SCAFFOLD" in table and "FedMGDA+" in table


@pytest.mark.slow
def test_a_broken_plugin_fails_alone_in_its_pack(tmp_path):
    """A plug-in whose aggregate forgets the mean over the updates, packed into one job with FedAvg
    and FedMGDA+: the job succeeds, the plug-in's run is recorded as failed with the one error,
    the other two finish, and the table and figures are built."""
    plugin = tmp_path / "forgetful.py"
    plugin.write_text("from fedmgda.algorithms import Algorithm\n\n\n"
                      "class Forgetful(Algorithm):\n    name = 'forgetful'\n\n"
                      "    def aggregate(self, w, updates, ctx):\n        return w + updates, "
                      "{'eta': 1.0}\n")
    pack = {"default": {"gpu": 0, "mem_mb": 1000, "runtime": 5, "threads": 1, "pack": 3}}
    wd, _ = _run_with_plugin(tmp_path, "broken", f"{plugin}:Forgetful", {"algorithm": "forgetful"},
                             resources=pack)
    logs = list((wd / "logs/broken/packs").glob("**/pack*.log"))
    assert len(logs) == 1  # the three runs shared one job
    runs = wd / "results/broken/runs"
    [failed] = runs.glob("*/forgetful/*/clean/seed1/summary.json")
    summary = yaml.safe_load(failed.read_text())
    assert summary["status"] == "failed" and summary["failed_round"] == 1
    assert summary["error"].startswith(f"plug-in 'forgetful' ({plugin}:Forgetful), hook aggregate: "
                                       "returned as its model a tensor of shape (")
    assert "failed at round 1" in (failed.parent / "train.log").read_text()
    for other in ("fedavg", "fedmgda_plus"):
        [ok] = runs.glob(f"*/{other}/*/clean/seed1/summary.json")
        assert yaml.safe_load(ok.read_text())["status"] == "ok"
    table = (wd / "results/broken/tables/table8.md").read_text()
    columns = yaml.safe_load((REPO / "config/test.yaml").read_text())["tables"]["table8"]["columns"]
    assert "failed (1/1 seeds)" in table and table.count("failed") == 1 + len(columns)
