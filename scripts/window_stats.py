"""Per-user statistics of every run of a profile averaged over a window of late rounds.

    python scripts/window_stats.py results/fmnist/runs --last 50   # rounds 151-200 of T = 200
    python scripts/window_stats.py results/fmnist/runs --last 50 --per-seed --rows '*_ev10/*'
    # Figure 4's share
    python scripts/window_stats.py results/fmnist/runs --last 200 --stats improved_loss

The tables read one per-user vector (round T - 9, docs/protocol.md §6.3). On a partition whose
users' local test sets are one class each, one round's statistics swing widely, so
docs/fmnist-fairness.md also reads them averaged over the evaluations of the last ``--last`` rounds
(the same aggregation as the claims' ``window: {last: N}``, ``fedmgda.results.metrics_value``).
Prints, per row (setting / algorithm / hyper-parameters / attack) present under the runs folder,
the mean ± population std over its seeds of mean_acc, std_acc and worst5_acc (or the metrics.csv
columns given with ``--stats``); accuracies and shares in %, losses as they are.
"""

from __future__ import annotations

import argparse
import fnmatch
from collections import defaultdict
from pathlib import Path

from fedmgda.results import metrics_value, seed_stats

DEFAULT_STATS = ("mean_acc", "std_acc", "worst5_acc")


def scale(stat: str) -> float:
    """metrics.csv keeps accuracies and shares as fractions; losses are printed unscaled."""
    return 1.0 if "loss" in stat and not stat.startswith("improved") else 100.0


def digits(stat: str) -> int:
    return 3 if scale(stat) == 1 else 2


def mean_std(values: list[float], digits: int) -> str:
    """Mean ± population std over seeds (fedmgda.results.seed_stats: the tables' ±, NaN left
    out)."""
    mean, std = seed_stats(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="a profile's runs folder, e.g. results/fmnist/runs")
    parser.add_argument("--last", type=int, default=50,
                        help="the window: the evaluations of the last N rounds")
    parser.add_argument("--per-seed", action="store_true", help="also print every seed's values")
    parser.add_argument("--stats", nargs="+", default=list(DEFAULT_STATS),
                        help="metrics.csv columns to average")
    parser.add_argument("--rows", nargs="+", default=["*"], metavar="PATTERN",
                        help="fnmatch patterns on the row paths (default: every row)")
    args = parser.parse_args()
    stats = args.stats
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for metrics in sorted(args.runs.glob("*/*/*/*/seed*/metrics.csv")):
        run = metrics.parent
        row = str(run.parent.relative_to(args.runs))
        if not any(fnmatch.fnmatchcase(row, p) for p in args.rows):
            continue
        for stat in stats:
            rows[row][stat].append(scale(stat) * metrics_value(run, stat, {"last": args.last}))
        if args.per_seed:
            print(f"{row} {run.name}: "
                  + ", ".join(f"{s} {rows[row][s][-1]:.{digits(s)}f}" for s in stats))
    print(f"\nmean ± std over seeds of the evaluations of the last {args.last} rounds (accuracies "
          "and shares in %)")
    print("| row | seeds | " + " | ".join(stats) + " |\n|---|---|" + "---|" * len(stats))
    for row, values in rows.items():
        cells = " | ".join(mean_std(values[s], digits(s)) for s in stats)
        print(f"| {row} | {len(values[stats[0]])} | {cells} |")


if __name__ == "__main__":
    main()
