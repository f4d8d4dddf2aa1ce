"""scripts/paired.py: the statistics of the paired comparisons the scripts publish (the package
beside the authors' code by seed, two rows by seed and round, a row before and after a rerun)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedmgda.metrics import paired_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import paired  # noqa: E402  (beside the scripts that publish the comparisons)

WINDOW = range(101, 201)


def per_user(accuracy_of_round, rounds=WINDOW) -> pd.DataFrame:
    rows = [(r, u, accuracy_of_round(r, u)) for r in rounds for u in range(4)]
    return pd.DataFrame(rows, columns=["round", "user", "accuracy"])


def write_pair(authors: Path, package: Path, seed: int, theirs, ours) -> None:
    authors.mkdir(exist_ok=True)
    per_user(theirs).to_csv(authors / f"seed{seed}.csv", index=False)
    (package / f"seed{seed}").mkdir(parents=True)
    per_user(ours).assign(n_test=60).to_csv(package / f"seed{seed}" / "per_user.csv", index=False)


# ----------------------------------------------------------------- one run's window
def test_mean_accuracy_reads_only_the_window():
    table = per_user(lambda r, u: 1.0 if r in (151, 191) else 0.0,
                     rounds=(141, 151, 161, 171, 181, 191, 200))
    assert paired.mean_accuracy(table, 191, 191) == pytest.approx(100.0)
    # 151..191: 5 stored rounds
    assert paired.mean_accuracy(table, 151, 191) == pytest.approx(100 * 2 / 5)
    assert paired.round_means(table, 151, 161).to_dict() == {151: 100.0, 161: 0.0}


def test_mean_train_loss_reads_only_the_window():
    losses = pd.DataFrame({"round": range(1, 201), "train_loss": [0.5] * 100 + [0.3] * 100})
    assert paired.mean_train_loss(losses, 101, 200) == pytest.approx(0.3)
    assert paired.mean_train_loss(losses, 51, 150) == pytest.approx(0.4)


def test_window_standard_error_widens_with_autocorrelation():
    rng = np.random.default_rng(0)
    white = pd.Series(rng.normal(size=2000))
    assert paired.window_standard_error(white) == pytest.approx(1 / np.sqrt(2000), rel=0.1)
    # AR(1) with r = 0.6: the mean's standard error is sqrt(1.6 / 0.4) = 2 times the naive one
    ar = np.zeros(2000)
    for t in range(1, 2000):
        ar[t] = 0.6 * ar[t - 1] + rng.normal()
    naive = ar.std(ddof=1) / np.sqrt(2000)
    assert paired.window_standard_error(pd.Series(ar)) == pytest.approx(2 * naive, rel=0.15)


def test_window_standard_error_of_a_constant_or_alternating_series():
    assert paired.window_standard_error(pd.Series([70.0] * 10)) == 0.0  # no correlation to read
    alternating = pd.Series([1.0, -1.0] * 50)  # r = -1, read as 0: the naive standard error
    assert paired.window_standard_error(alternating) == pytest.approx(alternating.std(ddof=1) / 10)


# ----------------------------------------------------------------- two codes, paired by seed
def three_seeds(tmp_path: Path) -> tuple[Path, Path]:
    """Differences of -2, -4 and -3 points (a per-round swing shared by both codes); seed 9000 has
    no package run."""
    authors, package = tmp_path / "authors", tmp_path / "package"
    wobble = lambda r: 0.01 * np.sin(r)  # noqa: E731
    for seed, gap in ((1, 0.02), (5000, 0.04), (6000, 0.03)):
        write_pair(authors, package, seed,
                   lambda r, u: 0.7 + wobble(r), lambda r, u, g=gap: 0.7 - g + wobble(r))
    per_user(lambda r, u: 0.5).to_csv(authors / "seed9000.csv", index=False)
    return authors, package


def test_seed_pairs_in_seed_order_and_the_seeds_without_a_package_run(tmp_path):
    authors, package = three_seeds(tmp_path)
    pairs, missing = paired.seed_pairs(authors, package)
    # by number, not by name
    assert [seed for seed, _, _ in pairs] == ["seed1", "seed5000", "seed6000"]
    assert missing == [("seed9000", package / "seed9000" / "per_user.csv")]


def test_paired_rows_and_the_interval_from_the_seeds_spread(tmp_path):
    authors, package = three_seeds(tmp_path)
    table = paired.paired_rows(authors, package, 101, 200)
    assert table["seed"].tolist() == [1, 5000, 6000] and set(table["rounds"]) == {"100/100"}
    assert table["diff"].to_numpy() == pytest.approx([-2, -4, -3])
    assert (table["se_diff"] == np.hypot(table["se_authors"], table["se_package"])).all()
    result = paired.difference_interval(table)
    # mean -3, sd 1, t(0.975, 2) = 4.303 -> half-width 2.48: the claims' interval, not a second one
    assert (result["n"], result["mean"]) == (3, pytest.approx(-3))
    assert (result["low"],
            result["high"]) == paired_interval(result["mean"], float(table["diff"].std(ddof=1)), 3)
    assert (result["low"],
            result["high"]) == (pytest.approx(-5.484, abs=1e-3), pytest.approx(-0.516, abs=1e-3))
    half_runs = 1.96 * np.sqrt((table["se_diff"] ** 2).sum()) / 3
    assert (result["low_runs"],
            result["high_runs"]) == (pytest.approx(-3 - half_runs), pytest.approx(-3 + half_runs))
    assert (paired.interval_verdict(result) == "the interval excludes 0: the package is below the "
                                               "authors' code")


def test_paired_rows_add_the_training_loss_over_the_window(tmp_path):
    authors, package = tmp_path / "authors", tmp_path / "package"
    write_pair(authors, package, 1, lambda r, u: 0.7, lambda r, u: 0.7)
    # the authors' loss is 0.5 in rounds 1-100 (outside the window) and 0.3 after; the package's
    # 0.28
    pd.DataFrame({"round": range(1, 201),
                  "train_loss": [0.5] * 100 + [0.3] * 100}).to_csv(authors / "seed1_train_loss.csv",
                                                                   index=False)
    pd.DataFrame({"round": range(1, 201),
                  "train_loss": 0.28}).to_csv(package / "seed1" / "metrics.csv", index=False)
    table = paired.paired_rows(authors, package, 101, 200)
    assert (table.loc[0, "authors_loss"] == pytest.approx(0.3)
            and table.loc[0, "diff_loss"] == pytest.approx(-0.02))
    assert table.loc[0, "rounds"] == "100/100"
    one = paired.difference_interval(table)  # one seed: no spread, no interval from it
    assert np.isnan(one["low"]) and np.isnan(one["high"]) and one["mean"] == pytest.approx(0)


def test_paired_rows_without_a_pair_is_an_error(tmp_path):
    (tmp_path / "authors").mkdir()
    per_user(lambda r, u: 0.5).to_csv(tmp_path / "authors" / "seed1.csv", index=False)
    with pytest.raises(ValueError, match="no seed has both codes' results"):
        paired.paired_rows(tmp_path / "authors", tmp_path / "package", 101, 200)


def test_interval_verdict_reads_the_interval_from_the_seeds_spread():
    assert paired.interval_verdict({"low": -0.1, "high": 0.5,
                                    "mean": 0.2}) == "the interval contains 0"
    assert paired.interval_verdict({"low": 0.1, "high": 0.5,
                                    "mean": 0.3}).endswith("the package is above the authors' code")


# ----------------------------------------------------------------- two rows, paired by seed and
# round
def write_metrics(row: Path, seed: str, mean_acc: list[float], std_acc: list[float]) -> None:
    (row / seed).mkdir(parents=True)
    rounds = range(10, 10 * len(mean_acc) + 1, 10)
    pd.DataFrame({"round": list(rounds) + [len(mean_acc) * 10 + 1], "mean_acc": mean_acc + [np.nan],
                  "std_acc": std_acc + [np.nan]}).to_csv(row / seed / "metrics.csv", index=False)


def test_two_rows_read_round_by_round(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_metrics(a, "seed1", [0.5, 0.6, 0.7], [0.2, 0.2, 0.2])
    write_metrics(a, "seed2", [0.7, 0.8, 0.9], [0.4, 0.4, 0.4])
    write_metrics(b, "seed1", [0.6, 0.5, 0.8], [0.1, 0.3, 0.1])
    write_metrics(b, "seed2", [0.8, 0.8, 0.8], [0.5, 0.3, 0.3])
    columns = ["mean_acc", "std_acc"]
    fa, fb = paired.evaluations(a, columns), paired.evaluations(b, columns)
    assert fa.index.tolist() == [10, 20, 30]  # the rows without an evaluation left out
    assert fa[("seed2", "mean_acc")].tolist() == pytest.approx([70, 80, 90])  # in %
    assert paired.seed_mean_range(fa, "mean_acc", ["seed1", "seed2"]) == {
        "low": pytest.approx(60), "high": pytest.approx(80), "evaluations": 3, "first": 10,
        "last": 30}
    # 10: both; 30: seed1
    assert paired.seed_rounds_better(fa, fb, "mean_acc", ["seed1", "seed2"]) == 3
    assert paired.seed_rounds_better(fa, fb, "std_acc", ["seed1", "seed2"], higher=False) == 4
    with pytest.raises(ValueError, match="no seed"):
        paired.evaluations(tmp_path / "none", columns)


# ----------------------------------------------------------------- a row before and after a rerun
def test_a_rerun_change_is_judged_against_the_larger_seed_std():
    assert paired.rerun_change((70.0, 1.0), (70.8, 0.4)) == (pytest.approx(0.8), 1.0, True)
    assert paired.rerun_change((20.0, 0.5), (21.0, 0.6)) == (pytest.approx(1.0), 0.6, False)
    assert paired.rerun_change((20.0, 0.5), (19.5, 0.0))[2]  # at most the spread: within
