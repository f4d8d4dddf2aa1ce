"""Table statistics on fixture runs: mean ± population std over seeds, verdicts, diverged runs,
best-of rows, paper rows that are not run, tables without a paper reference (reproduced numbers
only)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fedmgda.metrics import STATISTICS, Statistic, display_scale
from fedmgda.results import PER_USER_FINAL, seed_stats
from fedmgda.specs import Row, TableSpec, spec_to_json
from fedmgda.tables import build_table, to_markdown, verdict, write_table

from .conftest import write_run

STATS4 = {"Average": "protocol.mean_acc", "Std": "protocol.std_acc",
          "Worst 5%": "protocol.worst5_acc",
          "Best 5%": "protocol.best5_acc"}


def _row(key, label, algorithm, runs, seeds=None, experiment="table8"):
    return Row(experiment, key, label, algorithm, {}, {"kind": "none"},
               seeds or list(range(len(runs))), runs)


def _spec(name, rows, columns, **kw):
    return TableSpec(name=name, experiments=sorted({r.experiment for r in rows}), columns=columns,
                     rows=rows, **kw)


def test_seed_stats_is_mean_and_population_std():
    mean, std = seed_stats([88.1, 88.0, 88.0, 90.0])
    assert mean == pytest.approx(88.525) and std == pytest.approx(np.std([88.1, 88, 88, 90]))
    # the paper's 88.53 ± 0.85 (docs/protocol.md §6.3)
    assert round(mean, 2) == 88.53 and round(std, 2) == 0.85


def test_verdict():
    assert verdict(70.0, 70.5, 0.6, 4) == "within"
    assert verdict(70.0, 71.0, 0.6, 4) == "outside"
    assert verdict(70.0, 70.1, 0.6, 1) == "within (1 seed)"
    assert verdict(math.nan, 70.1, 0.6, 4) == "n/a"


def test_table_against_paper_values(runs_dir):
    # two seeds of FedAvg: per-user accuracies with known mean / std / percentiles
    a = np.linspace(0.5, 0.9, 100)
    b = np.linspace(0.6, 1.0, 100)
    write_run(runs_dir, "s/fedavg/default/clean/seed1", list(a))
    write_run(runs_dir, "s/fedavg/default/clean/seed2", list(b))
    spec = _spec("table8", [_row("fedavg", "FedAvg", "fedavg", ["s/fedavg/default/clean/seed1",
                                                              "s/fedavg/default/clean/seed2"])],
                 STATS4, paper="table8")
    df = build_table(spec, runs_dir)
    fedavg = df[df["row"] == "fedavg"].iloc[0]
    assert fedavg["Average repro_mean"] == pytest.approx(75.0)
    assert fedavg["Average repro_std"] == pytest.approx(5.0)  # population std of {70, 80}
    assert (fedavg["Worst 5% repro_mean"]
            == pytest.approx(np.mean([np.percentile(a, 5), np.percentile(b, 5)]) * 100))
    # paper: FedAvg 70.11 ± 1.27 -> diff 4.89 -> outside
    assert fedavg["Average paper_mean"] == 70.11 and fedavg["Average paper_std"] == 1.27
    assert fedavg["Average diff"] == pytest.approx(75.0 - 70.11)
    assert fedavg["Average verdict"] == "outside"
    assert fedavg["Average paper"] == "70.11±1.27"
    assert fedavg["Average reproduced"] == "75.00±5.00"
    # every other paper row is listed as not run, never with a reproduced number
    others = df[df["row"] != "fedavg"]
    assert len(others) == 25 and (others["status"].str.startswith("not run")).all()
    assert others["Average repro_mean"].isna().all()


def test_diverged_seeds_are_shown_as_diverged(runs_dir):
    write_run(runs_dir, "r/seed1", [0.5] * 10)
    write_run(runs_dir, "r/seed2", [0.1] * 10, status="diverged")
    spec = _spec("t",
                 [_row("fedmgda_plus decay=0 eta=1", "FedMGDA+", "fedmgda_plus",
                       ["r/seed1", "r/seed2"])],
                 STATS4)
    df = build_table(spec, runs_dir)
    r = df.iloc[0]
    assert r["status"] == "diverged (1/2 seeds)"
    assert r["Average reproduced"] == "diverged (1/2 seeds)"
    assert math.isnan(r["Average repro_mean"])


def test_failed_seeds_are_shown_as_failed(runs_dir):
    write_run(runs_dir, "r/seed1", [0.5] * 10)
    write_run(runs_dir, "r/seed2", [0.1] * 10, status="failed")
    df = build_table(_spec("t", [_row("mine", "Mine", "mine", ["r/seed1", "r/seed2"])], STATS4),
                     runs_dir)
    assert (df.iloc[0]["status"] == "failed (1/2 seeds)"
            and df.iloc[0]["Average reproduced"] == "failed (1/2 seeds)")


def test_a_statistic_added_after_training_fills_the_table(runs_dir, monkeypatch):
    """A statistic registered in fedmgda.metrics after the runs trained (their summary.json does
    not know it) is computed from their stored per-user vectors: the protocol round's and the
    final model's, which differ here."""
    rng = np.random.default_rng(1)
    accs = {seed: rng.random(30) for seed in (1, 2)}
    finals = {seed: rng.random(30) for seed in (1, 2)}
    for seed in (1, 2):
        d = write_run(runs_dir, f"r/seed{seed}", list(accs[seed]))
        pd.DataFrame({"user": range(30), "n_test": 10, "accuracy": finals[seed],
                      "loss": 0.0}).to_csv(d / PER_USER_FINAL, index=False)
    monkeypatch.setitem(STATISTICS, "median_acc", Statistic(lambda acc, n: np.median(acc)))
    columns = {"Median": "protocol.median_acc", "Final median": "final.median_acc",
               "Average": "final.mean_acc"}
    df = build_table(_spec("t", [_row("fedavg", "FedAvg", "fedavg", ["r/seed1", "r/seed2"])],
                           columns), runs_dir)
    row = df.iloc[0]
    assert display_scale("protocol.median_acc") == 100.0
    assert row["Median repro_mean"] == pytest.approx(100 * np.mean([np.median(accs[1]),
                                                                    np.median(accs[2])]))
    assert row["Final median repro_mean"] == pytest.approx(100 * np.mean([np.median(finals[1]),
                                                                          np.median(finals[2])]))
    # a statistic summary.json has is computed from the vector as well, not read from it
    assert row["Average repro_mean"] == pytest.approx(100 * np.mean([finals[1].mean(),
                                                                     finals[2].mean()]))


def test_runs_trained_before_the_final_vector_was_stored(runs_dir, monkeypatch):
    """Older runs have no per_user_final.csv: a last-iterate run's final model is per_user.csv's
    last round; an averaged one keeps summary.json's statistics, and a new one reads n/a."""
    monkeypatch.setitem(STATISTICS, "median_acc", Statistic(lambda acc, n: np.median(acc)))
    for key, final_model in (("last", "last iterate"), ("avg", "average of all iterates")):
        d = write_run(runs_dir, f"{key}/seed1", [0.2, 0.4, 0.9], final={"mean_acc": 0.123})
        (d / PER_USER_FINAL).unlink()
        summary = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**summary, "final_model": final_model}))
    columns = {"Average": "final.mean_acc", "Median": "final.median_acc"}
    rows = [_row("last", "Last", "fedavg", ["last/seed1"]),
            _row("avg", "Average", "afl", ["avg/seed1"])]
    df = build_table(_spec("t", rows, columns), runs_dir).set_index("row")
    assert (df.loc["last", "Average repro_mean"] == pytest.approx(50.0)
            and df.loc["last", "Median repro_mean"] == pytest.approx(40.0))
    assert (df.loc["avg", "Average repro_mean"] == pytest.approx(12.3)
            and df.loc["avg", "Median reproduced"] == "n/a")


def test_a_table_without_a_paper_reference_shows_only_the_reproduced_numbers(runs_dir, tmp_path):
    # paper: null -- an offline profile, or a researcher's own experiment (docs/plugins.md)
    write_run(runs_dir, "r/seed1", [0.5, 0.7])
    write_run(runs_dir, "r/seed2", [0.7, 0.9])
    spec = _spec("mine", [_row("fedavg", "FedAvg", "fedavg", ["r/seed1", "r/seed2"])],
                 {"Average": "protocol.mean_acc", "Std": "protocol.std_acc"}, title="my runs")
    df = write_table(spec, runs_dir, tmp_path / "t.csv", tmp_path / "t.md")
    assert list(df.columns) == ["table", "row", "label", "seeds", "status",
                                "Average reproduced", "Average repro_mean", "Average repro_std",
                                "Std reproduced", "Std repro_mean", "Std repro_std"]
    assert df.iloc[0]["Average repro_mean"] == pytest.approx(70.0)
    md = (tmp_path / "t.md").read_text()
    assert "| Row | Seeds | Average | Std |" in md.splitlines()
    assert "| FedAvg | 2 | 70.00±10.00 | 10.00±0.00 |" in md.splitlines()
    assert "paper |" not in md and "n/a" not in md and "verdict" not in md.lower()
    back = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    assert list(back["row"]) == ["fedavg"] and list(back.columns) == list(df.columns)


def test_a_table_with_a_paper_reference_keeps_its_paper_columns(runs_dir, tmp_path):
    write_run(runs_dir, "s/seed1", [0.7] * 10)
    spec = _spec("table8", [_row("fedavg", "FedAvg", "fedavg", ["s/seed1"])],
                 {"Average": "protocol.mean_acc"},
                 paper="table8", title="T8")
    df = write_table(spec, runs_dir, tmp_path / "t.csv", tmp_path / "t.md")
    assert list(df.columns) == ["table", "row", "label", "seeds", "status", "Average paper",
                                "Average paper_mean",
                                "Average paper_std", "Average reproduced", "Average repro_mean",
                                "Average repro_std", "Average diff", "Average verdict"]
    lines = (tmp_path / "t.md").read_text().splitlines()
    assert lines[2] == ("Mean ± population std over seeds, in %. Verdict: *within* when "
                        "|reproduced − paper| ≤ the paper's std.")
    assert lines[4] == "| Row | Seeds | Average paper | Average reproduced | Average Δ (verdict) |"
    # paper: FedAvg 70.11 ± 1.27 (Table 8)
    assert lines[6] == "| FedAvg | 1 | 70.11±1.27 | 70.00±0.00 | -0.11 (within (1 seed)) |"


def test_best_of_picks_the_best_row_per_algorithm(runs_dir):
    write_run(runs_dir, "a/seed1", [0.80] * 5)
    write_run(runs_dir, "b/seed1", [0.86] * 5)
    write_run(runs_dir, "c/seed1", [0.70] * 5)
    rows = [_row("fedmgda_plus decay=0 eta=1", "FedMGDA+ η=1", "fedmgda_plus", ["a/seed1"]),
            _row("fedmgda_plus decay=0.2 eta=2", "FedMGDA+ η=2, decay=1/5", "fedmgda_plus",
                 ["b/seed1"]),
            _row("fedavg", "FedAvg", "fedavg", ["c/seed1"])]
    spec = _spec("table6", rows, {"Average": "protocol.mean_acc", "Std": "protocol.std_acc"},
                 kind="best_of",
                 paper="table6", rank_by="Average")
    df = build_table(spec, runs_dir).set_index("row")
    assert df.loc["fedmgda_plus", "Average repro_mean"] == pytest.approx(86.0)
    assert "η=2" in df.loc["fedmgda_plus", "label"]
    assert df.loc["fedmgda_plus", "Average paper_mean"] == 87.60
    assert df.loc["fedmgda_plus", "Average verdict"] == "outside (1 seed)"
    assert df.loc["mgda_prox", "status"] == "not run"


def test_final_sources_and_wildcard_paper_rows(runs_dir):
    final = {"mean_acc": 0.8, "test_acc_uniform": 0.8324, "test_acc_phd": 0.7658,
             "test_acc_non_phd": 0.8332}
    write_run(runs_dir, "adult/seed1", [0.7, 0.9], final=final)
    spec = _spec("table7",
                 [_row("fedmgda_plus decay=0.333333 eta=1 bias=1000", "FedMGDA+ [bias 1000]",
                                 "fedmgda_plus", ["adult/seed1"])],
                 {"Uniform": "final.test_acc_uniform", "PhD": "final.test_acc_phd",
                  "Non-PhD": "final.test_acc_non_phd", "Attacker": "final_user.0",
                  "Others": "final_others.0"},
                 paper="table7")
    df = build_table(spec, runs_dir)
    r = df[df["row"].str.contains("bias=1000")].iloc[0]
    assert (r["Uniform repro_mean"] == pytest.approx(83.24)
            and r["Uniform verdict"] == "within (1 seed)")
    # matched through the paper's "bias=*" (Arbitrary) row
    assert r["Uniform paper"] == "83.24±0.02"
    assert (r["Attacker repro_mean"] == pytest.approx(70.0)
            and r["Others repro_mean"] == pytest.approx(90.0))
    assert "83.24" in to_markdown(df, spec)


def test_a_spec_longer_than_one_shell_argument_reaches_the_table_command(runs_dir, tmp_path):
    """The table rule pipes its spec in (Table 7's variants table: ~1 MB of run paths; Linux caps
    one argument at 128 KB); the same shell line as workflow/rules/tables.smk."""
    import shlex
    import subprocess
    import sys

    write_run(runs_dir, "s/fedavg/default/clean/seed1", [0.5, 0.7])
    rows = [_row(f"r{i}", f"row {i} " + "x" * 200, "fedavg", ["s/fedavg/default/clean/seed1"])
            for i in range(1000)]
    text = spec_to_json(_spec("big", rows, STATS4))
    assert len(text) > 300_000
    line = (f"printf '%s' {shlex.quote(text)} | {sys.executable} -m fedmgda.workflow_cli table "
            f"--spec - --runs-dir {runs_dir} --csv {tmp_path / 'big.csv'} --md "
            f"{tmp_path / 'big.md'}")
    script = tmp_path / "rule.sh"  # Snakemake too runs a rule's shell line from a script file
    script.write_text(line)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(pd.read_csv(tmp_path / "big.csv")) == 1000


def test_a_table_over_two_experiments_joins_its_rows_by_key(runs_dir, tmp_path):
    """q-FFL's Table 2: Adult columns from one experiment, F-MNIST columns from another, one row
    per shared row name (the variance in %^2: its display scale)."""
    for seed, (phd, avg) in enumerate([(0.695, 0.832), (0.703, 0.833)], start=1):
        write_run(runs_dir, f"a/q0/seed{seed}", [phd, 0.83],
                  final={"test_acc_uniform": avg, "test_acc_phd": phd})
        write_run(runs_dir, f"a/afl/seed{seed}", [0.73, 0.82],
                  final={"test_acc_uniform": 0.825, "test_acc_phd": 0.73})
        # var 0.0081
        write_run(runs_dir, f"f/q0/seed{seed}", [0.66, 0.84], final={"test_acc_all": 0.788})
    write_run(runs_dir, "f/afl/seed1", [0.71, 0.81],
              final={"test_acc_all": 0.70, "var_acc": 0.0025})
    write_run(runs_dir, "f/afl/seed2", [0.71, 0.81], final={"test_acc_all": 0.70},
              status="diverged")

    def row(exp, key, label, runs):
        return _row(key, label, "qfedavg", runs, experiment=exp)

    rows = [row("adult", "qffl_q0", "q-FFL q=0", ["a/q0/seed1", "a/q0/seed2"]),
            row("adult", "afl", "AFL γ_w=0.1", ["a/afl/seed1", "a/afl/seed2"]),
            row("fmnist", "qffl_q0", "q-FFL q=0", ["f/q0/seed1", "f/q0/seed2"]),
            row("fmnist", "afl", "AFL γ_w=0.001", ["f/afl/seed1", "f/afl/seed2"])]
    spec = _spec("qffl_table2", rows,
                 {"Adult average": "final.test_acc_uniform", "PhD": "final.test_acc_phd",
                  "F-MNIST average": "final.test_acc_all", "Variance": "final.var_acc"},
                 paper="qffl_table2",
                 column_experiment={"Adult average": "adult", "PhD": "adult",
                                    "F-MNIST average": "fmnist",
                                    "Variance": "fmnist"},
                 tolerance={"Adult average": 0.56, "PhD": 0.56})
    df = write_table(spec, runs_dir, tmp_path / "t.csv", tmp_path / "t.md").set_index("row")
    # the paper's rows not run follow
    assert list(df.index) == ["qffl_q0", "afl", "qffl_q1", "qffl_q2"]
    q0 = df.loc["qffl_q0"]
    assert q0["label"] == "q-FFL q=0" and q0["status"] == "ok" and q0["seeds"] == 2
    assert q0["PhD repro_mean"] == pytest.approx(69.9) and q0["PhD paper_mean"] == 69.9
    # 83.25 vs 83.2, band 0.56
    assert q0["PhD verdict"] == "within" and q0["Adult average verdict"] == "within"
    assert (q0["F-MNIST average repro_mean"] == pytest.approx(78.8)
            and q0["F-MNIST average paper_mean"] == 78.8)
    assert (q0["Variance repro_mean"] == pytest.approx(81.0)
            and q0["Variance paper"] == "not in paper")
    afl = df.loc["afl"]
    assert afl["label"] == "AFL γ_w=0.1 / AFL γ_w=0.001"
    assert afl["status"] == "fmnist: diverged (1/2 seeds)" and afl["PhD verdict"] == "within"
    assert afl["F-MNIST average verdict"] == "diverged"
    assert df.loc["qffl_q2", "status"] == "not run"
    assert (math.isnan(df.loc["qffl_q2", "PhD repro_mean"])
            and df.loc["qffl_q2", "PhD paper_mean"] == 74.4)
    back = pd.read_csv(tmp_path / "t.csv")
    assert {"PhD paper_mean", "PhD paper_std", "PhD repro_mean",
            "F-MNIST average verdict"} <= set(back.columns)
    assert "AFL γ_w=0.1 / AFL γ_w=0.001" in (tmp_path / "t.md").read_text()


def test_a_two_experiment_table_without_a_paper_shows_reproduced_numbers_only(runs_dir):
    write_run(runs_dir, "a/seed1", [0.6, 0.8], final={"test_acc_phd": 0.6})
    write_run(runs_dir, "f/seed1", [0.7, 0.9], final={"test_acc_all": 0.8})
    rows = [_row("afl", "AFL", "afl", ["a/seed1"], experiment="adult"),
            _row("afl", "AFL", "afl", ["f/seed1"], experiment="fmnist"),
            _row("extra", "only F-MNIST", "fedavg", ["f/seed1"], experiment="fmnist")]
    spec = _spec("mine", rows, {"PhD": "final.test_acc_phd", "all": "final.test_acc_all"},
                 column_experiment={"PhD": "adult", "all": "fmnist"})
    df = build_table(spec, runs_dir).set_index("row")
    assert (df.loc["afl", "PhD repro_mean"] == pytest.approx(60.0)
            and df.loc["afl", "all repro_mean"] == pytest.approx(80.0))
    assert not any(c.endswith((" paper", " verdict", " diff")) for c in df.columns)
    assert (df.loc["extra", "status"] == "adult: not in its grid"
            and df.loc["extra", "PhD reproduced"] == "not run")


def test_a_tables_markdown_ends_with_where_its_runs_were_made(tmp_path):
    """Each distinct environment stamp of the table's runs with its number of runs (a run in two
    rows counts once), and the runs trained before stamping; the csv is left as it was."""
    runs = tmp_path / "runs"
    stamp = {"fedmgda": "0.1.0", "commit": "0123456789abcdef", "dirty": True, "python": "3.11.7",
             "torch": "2.14.1",
             "numpy": "2.4.6", "cvxopt": "1.3.3", "device": "cpu", "cuda": None, "gpu": None,
             "cpu": "AMD EPYC",
             "isa": "x86-64-v4", "torch_isa": "AVX512", "threads": 2,
             "partition_hash": "c0ffee" * 10}
    stamps = {"a/seed0": stamp, "a/seed1": stamp,
              "b/seed0": {**stamp, "device": "cuda:0", "gpu": "NVIDIA H100",
                                                            "cuda": "13.0"}, "b/seed1": None}
    for key, env in stamps.items():
        folder = write_run(runs, key, [0.8, 0.7])
        summary = json.loads((folder / "summary.json").read_text())
        (folder / "summary.json").write_text(json.dumps({**summary,
                                                         **({"environment": env} if env else {})}))
    rows = [_row("a", "A", "fedavg", ["a/seed0", "a/seed1"]),
            _row("b", "B", "fedavg", ["b/seed0", "b/seed1"]),
            _row("a again", "A'", "fedavg", ["a/seed0"])]
    spec = _spec("t", rows, {"Average": "final.mean_acc"})
    df = write_table(spec, runs, tmp_path / "t.csv", tmp_path / "t.md")
    md = (tmp_path / "t.md").read_text()
    footer = md.split("\n---\n", 1)[1]
    assert md.startswith(to_markdown(df, spec))
    assert "Made in 2 environments:" in footer
    assert ("- fedmgda 0.1.0 (0123456, modified), Python 3.11.7, torch 2.14.1, numpy 2.4.6, cvxopt "
            "1.3.3 on cpu, AMD EPYC (x86-64-v4), 2 torch threads (2 runs)") in footer
    assert ("on cuda:0 (NVIDIA H100, CUDA 13.0), AMD EPYC (x86-64-v4), 2 torch threads (1 run)"
            in footer)
    assert "Partitions (sha256): 1 distinct: c0ffeec0ffee." in footer
    assert "1 run carries no environment stamp (trained before stamping)." in footer
    assert "environment" not in (tmp_path / "t.csv").read_text()


def test_a_tables_footer_says_which_qp_its_runs_with_one_used(tmp_path, monkeypatch):
    """The QP line counts the runs whose rule solves the min-norm QP (FedMGDA+, FedMGDA with
    epsilon above 0), not FedAvg's or FedMGDA's at epsilon 0 (lambda0 itself)."""
    from fedmgda import provenance
    from fedmgda.tables import solves_qp

    monkeypatch.setattr(provenance, "_qp_at_commit",
                        lambda commit: "pre-exact" if commit == "old" else "exact")
    runs = tmp_path / "runs"
    configs = {"avg/seed0": {"algorithm": "fedavg"},
               "plus/seed0": {"algorithm": "fedmgda_plus", "hparams": {"eta": 1.5}},
               "plus/seed1": {"algorithm": "fedmgda_plus", "hparams": {"eta": 1.5}},
               "eps0/seed0": {"algorithm": "fedmgda", "hparams": {"epsilon": 0.0}}}
    for key, config in configs.items():
        folder = write_run(runs, key, [0.8, 0.7])
        summary = json.loads((folder / "summary.json").read_text())
        env = {"commit": "old" if key == "plus/seed1" else "new", "fedmgda": "0.1.0"}
        (folder / "summary.json").write_text(json.dumps({**summary, "config": config,
                                                         "environment": env}))
    assert [solves_qp(c) for c in configs.values()] == [False, True, True, False]
    rows = [_row(k.split("/")[0], k, c["algorithm"], [k]) for k, c in configs.items()]
    write_table(_spec("t", rows, {"Average": "final.mean_acc"}), runs, tmp_path / "t.csv",
                tmp_path / "t.md")
    last = (tmp_path / "t.md").read_text().rstrip("\n").split("\n\n")[-1]
    assert last.startswith("The min-norm QP of its 2 runs that solve one: 1 run exact (")
    assert "; 1 run cvxopt's answer as it stopped (" in last
    rows = [r for r in rows if r.algorithm == "fedavg"]
    write_table(_spec("t", rows, {"Average": "final.mean_acc"}), runs, tmp_path / "t.csv",
                tmp_path / "t.md")
    assert "min-norm QP" not in (tmp_path / "t.md").read_text()
