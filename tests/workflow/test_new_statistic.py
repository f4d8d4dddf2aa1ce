"""A statistic added to fedmgda.metrics after the runs trained fills a table without retraining:
the tables compute it from the per-user vectors the runs stored (fedmgda.results)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from .conftest import REPO, copy_workflow

TABLE = "results/test/tables/table8.csv"
NEW_STATISTIC = '''

STATISTICS["median_acc"] = Statistic(lambda acc, n: np.median(acc))  # added after training
'''


def _snakemake(wd, env, *args):
    proc = subprocess.run([sys.executable, "-m", "snakemake", TABLE, *args, "--cores", "2",
                           "--configfile", "config/test.yaml"],
                          cwd=wd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_statistic_added_after_training_fills_the_table_and_retrains_nothing(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    (wd / "src").unlink()  # a library of its own, whose metrics.py the test edits as a user would
    shutil.copytree(REPO / "src", wd / "src", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(wd / "src"), "OMP_NUM_THREADS": "1"}
    _snakemake(wd, env)
    summaries = sorted((wd / "results/test/runs").glob("**/summary.json"))
    assert len(summaries) == 4
    trained = {p: p.stat().st_mtime_ns for p in summaries}

    with open(wd / "src/fedmgda/metrics.py", "a") as fh:
        fh.write(NEW_STATISTIC)
    config = yaml.safe_load((wd / "config/test.yaml").read_text())
    config["tables"]["table8"]["columns"].update({"Median": "protocol.median_acc",
                                                  "Final median": "final.median_acc"})
    (wd / "config/test.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))

    planned = _snakemake(wd, env, "-n", "--quiet", "rules")
    jobs = [line.split()[0] for line in planned.splitlines() if len(line.split()) == 2
            and line.split()[1].isdigit()]
    assert "table_table8" in jobs and not [j for j in jobs
                                           if j.startswith(("train", "partition"))], planned
    _snakemake(wd, env)
    assert {p: p.stat().st_mtime_ns for p in summaries} == trained  # no run retrained

    table = pd.read_csv(wd / TABLE)
    assert (len(table) == 2 and table["Median repro_mean"].notna().all()
            and table["Final median repro_mean"].notna().all())
    # the medians of the runs' stored vectors, mean over seeds, in %
    for _, row in table.iterrows():
        runs = [p.parent for p in summaries if f"/{row['row'].split()[0]}/" in str(p)]
        users = [pd.read_csv(r / "per_user.csv") for r in runs]
        # per_user_every 2: the protocol round is 3 of 4
        stored = [u[(u["round"] - 1) % 2 == 0] for u in users]
        medians = [np.median(u.loc[u["round"] == u["round"].max(), "accuracy"]) for u in stored]
        assert len(runs) == 2 and row["Median repro_mean"] == pytest.approx(100 * np.mean(medians))
        finals = [np.median(pd.read_csv(r / "per_user_final.csv")["accuracy"]) for r in runs]
        assert row["Final median repro_mean"] == pytest.approx(100 * np.mean(finals))
