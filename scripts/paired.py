"""Paired comparisons of runs: the statistics behind the comparison pages the scripts write.

- **Two codes, paired by seed** (``scripts/run_authors_fmnist.py compare``,
  docs/results/fmnist/authors_paired.md): per run, the window mean of the mean user accuracy and
  its standard error from the run's own rounds (:func:`window_standard_error`, autocorrelation
  included); per seed, the difference package - authors (:func:`paired_rows`); over seeds, the
  mean difference with a 95 % interval from the seeds' spread
  (:func:`fedmgda.metrics.paired_interval`, the claims' Student's t interval) beside a normal one
  from the runs' standard errors alone (:func:`difference_interval`).
- **Two rows, paired by seed and round** (``scripts/reading_window.py``,
  docs/results/fmnist/reading_window.md): every seed's per-user statistics at every evaluation
  (:func:`evaluations`), the range of their means over seeds (:func:`seed_mean_range`) and the
  seed-rounds in which B is on the better side (:func:`seed_rounds_better`).
- **One row before and after a rerun** (``scripts/before_after.py``,
  docs/results/fmnist/before_after_*.md): the change of a mean over seeds against the larger seed
  spread (:func:`rerun_change`).

The over-seeds mean ± std of ``scripts/window_stats.py`` and ``scripts/scaling_extremes.py`` is the
tables' :func:`fedmgda.results.seed_stats`. Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedmgda.metrics import paired_interval


# ----------------------------------------------------------------- one run's window of rounds
def round_means(per_user: pd.DataFrame, first: int, last: int) -> pd.Series:
    """The mean user accuracy (%) of every round in [first, last] that has per-user accuracies
    (a ``per_user.csv``: round, user, accuracy as a fraction)."""
    rounds = per_user[(per_user["round"] >= first) & (per_user["round"] <= last)]
    return 100 * rounds.groupby("round")["accuracy"].mean()


def mean_accuracy(per_user: pd.DataFrame, first: int, last: int) -> float:
    """Mean over users, then over the rounds in [first, last], in percent."""
    return float(round_means(per_user, first, last).mean())


def mean_train_loss(per_round: pd.DataFrame, first: int, last: int) -> float:
    """The mean ``train_loss`` (a ``metrics.csv``'s column) over the rounds in [first, last]."""
    window = (per_round["round"] >= first) & (per_round["round"] <= last)
    return float(per_round[window]["train_loss"].mean())


def window_standard_error(series: pd.Series) -> float:
    """The standard error of a run's window mean from its own rounds: sd / sqrt(n), widened by
    sqrt((1 + r) / (1 - r)) for the lag-1 autocorrelation r of the series (an AR(1) reading of
    neighbouring rounds' dependence; r < 0 is read as 0, r above 0.95 as 0.95)."""
    x = series.to_numpy(dtype=float)
    r = (float(np.corrcoef(x[:-1], x[1:])[0, 1]) if len(x) > 2 and x[:-1].std() > 0
         and x[1:].std() > 0 else 0.0)
    r = min(max(r, 0.0), 0.95)  # a constant series: no correlation to read
    return float(x.std(ddof=1) / np.sqrt(len(x)) * np.sqrt((1 + r) / (1 - r)))


# ----------------------------------------------------------------- two codes, paired by seed
def seed_pairs(authors_runs: Path,
               package_runs: Path) -> tuple[list[tuple[str, Path, Path]], list[tuple[str, Path]]]:
    """The authors' runs (``<authors_runs>/seed<S>.csv``, by seed) with the package's run of the
    same seed (``<package_runs>/seed<S>/per_user.csv``): ([(seed<S>, theirs, ours)], and the
    seeds whose package run is missing, [(seed<S>, the path looked for)])."""
    pairs, missing = [], []
    for theirs in sorted(Path(authors_runs).glob("seed*[0-9].csv"), key=lambda f: int(f.stem[4:])):
        ours = Path(package_runs) / theirs.stem / "per_user.csv"
        if ours.exists():
            pairs.append((theirs.stem, theirs, ours))
        else:
            missing.append((theirs.stem, ours))
    return pairs, missing


def paired_row(seed: str, theirs: Path, ours: Path, first: int, last: int) -> dict:
    """One seed's row of :func:`paired_rows`; the training losses where the authors' run has
    ``seed<S>_train_loss.csv`` (the package's from the run's metrics.csv)."""
    a, p = (round_means(pd.read_csv(theirs), first, last),
            round_means(pd.read_csv(ours), first, last))
    row = {"seed": int(seed[4:]), "rounds": f"{len(a)}/{len(p)}",
           "authors": a.mean(), "se_authors": window_standard_error(a),
           "package": p.mean(), "se_package": window_standard_error(p)}
    row["diff"] = row["package"] - row["authors"]
    row["se_diff"] = float(np.hypot(row["se_authors"], row["se_package"]))
    their_loss = theirs.with_name(f"{seed}_train_loss.csv")
    if their_loss.exists():
        row["authors_loss"] = mean_train_loss(pd.read_csv(their_loss), first, last)
        row["package_loss"] = mean_train_loss(pd.read_csv(ours.with_name("metrics.csv")), first,
                                              last)
        row["diff_loss"] = row["package_loss"] - row["authors_loss"]
    return row


def paired_rows(authors_runs: Path, package_runs: Path, first: int, last: int) -> pd.DataFrame:
    """Per seed with both codes' runs (:func:`seed_pairs`): each code's window mean of the mean
    user accuracy, its standard error from its own rounds (:func:`window_standard_error`), the
    difference package - authors and the mean training losses over the window. ValueError when no
    seed has both."""
    rows = [paired_row(seed, theirs, ours, first, last)
            for seed, theirs, ours in seed_pairs(authors_runs, package_runs)[0]]
    if not rows:
        raise ValueError("no seed has both codes' results")
    return pd.DataFrame(rows)


def difference_interval(table: pd.DataFrame) -> dict[str, float]:
    """The mean difference package - authors over seeds with two 95 % intervals: from the seeds'
    spread (:func:`fedmgda.metrics.paired_interval`: Student's t with n - 1 degrees of freedom; what
    the comparison states; NaN for one seed) and from the runs' own window standard errors (normal;
    it ignores how trajectories differ between seeds)."""
    d, n = table["diff"].to_numpy(), len(table)
    mean = float(d.mean())
    low, high = paired_interval(mean, float(d.std(ddof=1)) if n > 1 else 0.0, n)
    half_runs = float(1.96 * np.sqrt((table["se_diff"] ** 2).sum()) / n)
    return {"n": n, "mean": mean, "low": low, "high": high,
            "low_runs": mean - half_runs, "high_runs": mean + half_runs}


def interval_verdict(result: dict[str, float]) -> str:
    """What :func:`difference_interval`'s interval from the seeds' spread says about 0."""
    if result["low"] <= 0 <= result["high"]:
        return "the interval contains 0"
    return (f"the interval excludes 0: the package is {'above' if result['mean'] > 0 else 'below'} "
            "the authors' code")


# ----------------------------------------------------------------- two rows, paired by seed and
# round
def evaluations(row_dir: Path, columns: list[str]) -> pd.DataFrame:
    """A row's ``columns`` of metrics.csv (fractions) in %, evaluated rounds x (seed<S>, column);
    ValueError when the folder has no ``seed*/metrics.csv``."""
    frames = {}
    for metrics in sorted(Path(row_dir).glob("seed*/metrics.csv")):
        table = pd.read_csv(metrics).set_index("round")
        frames[metrics.parent.name] = table[list(columns)].dropna() * 100.0
    if not frames:
        raise ValueError(f"{row_dir}: no seed*/metrics.csv; give a row folder under the runs "
                         "folder")
    return pd.concat(frames, axis=1)


def seed_mean_range(frame: pd.DataFrame, column: str, seeds: list[str]) -> dict[str, float]:
    """The mean over ``seeds`` of ``column`` at each evaluation of ``frame`` (:func:`evaluations`):
    its lowest and highest value, the number of evaluations and their first and last round."""
    m = frame.xs(column, axis=1, level=1)[seeds].mean(axis=1)
    return {"low": m.min(), "high": m.max(), "evaluations": len(m), "first": m.index.min(),
            "last": m.index.max()}


def seed_rounds_better(a: pd.DataFrame, b: pd.DataFrame, column: str, seeds: list[str],
                       higher: bool = True) -> int:
    """In how many (evaluation of A, seed) B's ``column`` is higher than A's (``higher`` False:
    lower)."""
    if higher:
        return sum(int(b.loc[r, (s, column)] > a.loc[r, (s, column)]) for r in a.index
                   for s in seeds)
    return sum(int(b.loc[r, (s, column)] < a.loc[r, (s, column)]) for r in a.index for s in seeds)


# ----------------------------------------------------------------- one row before and after a rerun
def rerun_change(before: tuple[float, float],
                 after: tuple[float, float]) -> tuple[float, float, bool]:
    """A statistic's (mean, std) over seeds before and after a rerun: the change of the mean, the
    larger of the two stds and whether the change is within it."""
    (bm, bs), (am, as_) = before, after
    change, spread = am - bm, max(bs, as_)
    return change, spread, abs(change) <= spread
