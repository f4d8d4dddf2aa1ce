"""One round against a window of rounds: two rows' per-user statistics at every evaluation, per
seed.

    python scripts/reading_window.py results/fmnist/runs \\
        fmnist-shards_b10_lr0.01_p0.1_T200_ev10/fedavg/default/clean \\
        fmnist-shards_b10_lr0.01_p0.1_T200_ev10/fedmgda_plus/decay0.1_eta1.5/clean --after 100

Prints, for rows A and B (run folders under the runs folder, seeds paired by name), every
evaluation round after ``--after``: each seed's average, std and worst 5 % of A and B (%, from
metrics.csv, the columns the ``_late`` claims average), then the range of A's and B's seed means
over those rounds and the number of seed-rounds in which B has the higher average, the lower std
and the higher worst 5 %. docs/fmnist-fairness.md ("What real F-MNIST shows") reads it; the figure
``fmnist_reading_window`` draws the same series.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import evaluations, seed_mean_range, seed_rounds_better  # noqa: E402  (beside it)

STATS = {"mean_acc": "average", "std_acc": "std", "worst5_acc": "worst 5 %"}


def series(row_dir: Path):
    """Evaluated rounds x (seed, stat) of one row, in % (paired.evaluations)."""
    try:
        return evaluations(row_dir, list(STATS))
    except ValueError as err:
        raise SystemExit(str(err)) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="a profile's runs folder, e.g. results/fmnist/runs")
    parser.add_argument("a",
                        help="row A: a row folder under the runs folder "
                        "(setting/algorithm/hparams/attack)")
    parser.add_argument("b", help="row B, as A")
    parser.add_argument("--after", type=int, default=100,
                        help="only the evaluations after this round")
    args = parser.parse_args()
    a, b = series(args.runs / args.a), series(args.runs / args.b)
    seeds = sorted(set(a.columns.get_level_values(0)) & set(b.columns.get_level_values(0)),
                   key=lambda s: int(s[4:]))
    a, b = a[a.index > args.after], b[b.index > args.after]
    print(f"A = {args.a}\nB = {args.b}\nper-user statistics at each evaluation after round "
          f"{args.after}, %\n")
    head = " | ".join(f"{s} {STATS[k]} A / B" for s in seeds for k in STATS)
    print(f"| round | {head} |\n|---" + "|---" * (len(seeds) * len(STATS)) + "|")
    for rnd in a.index:
        cells = " | ".join(f"{a.loc[rnd, (s, k)]:.2f} / {b.loc[rnd, (s, k)]:.2f}" for s in seeds
                           for k in STATS)
        print(f"| {rnd} | {cells} |")
    print()
    for name, df in (("A", a), ("B", b)):
        for k in STATS:
            m = seed_mean_range(df, k, seeds)
            print(f"{name} {STATS[k]}, mean over {len(seeds)} seeds: {m['low']:.2f} to "
                  f"{m['high']:.2f} over "
                  f"{m['evaluations']} evaluations (rounds {m['first']}-{m['last']})")
    n = len(a.index) * len(seeds)
    higher = seed_rounds_better(a, b, "mean_acc", seeds)
    lower = seed_rounds_better(a, b, "std_acc", seeds, higher=False)
    worst = seed_rounds_better(a, b, "worst5_acc", seeds)
    print(f"of {n} seed-rounds: B has the higher average in {higher}, the lower std in {lower}, "
          f"the higher worst 5 % in {worst}")


if __name__ == "__main__":
    main()
