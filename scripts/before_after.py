"""Two outputs of scripts/window_stats.py side by side: what a rerun changed, row by row.

    python scripts/before_after.py BEFORE.md AFTER.md [--rows PATTERN ...]

Reads the "| row | seeds | stat ... |" table of each file (mean ± population std over seeds) and
prints, for every row and statistic in both, before, after, the change and whether the change is
within the seed spread (at most the larger of the two stds), as
docs/results/fmnist/before_after_*.md show it. ``--rows``: fnmatch patterns on the row paths
(default: every row in both). ``--per-seed``: the seeds both files list (window_stats.py
``--per-seed``), one line per row, seed and statistic, the change beside the seed spread of the
before file's table.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import rerun_change  # noqa: E402  (beside this script)

CELL = re.compile(r"^\s*(-?[0-9.]+) ± ([0-9.]+)\s*$")
SEED_LINE = re.compile(r"^(\S+) seed(\d+): (.+)$")


def window_table(path: Path) -> tuple[list[str], dict[str, dict[str, tuple[float, float, int]]]]:
    """The stats named by the table header and {row: {stat: (mean, std, seeds)}}."""
    stats: list[str] = []  # the current table's
    # every table's, in order (a file may hold several, e.g. --last 50 and --last 200)
    every: list[str] = []
    rows: dict[str, dict[str, tuple[float, float, int]]] = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["row", "seeds"]:
            stats = cells[2:]
            every += [s for s in stats if s not in every]
            continue
        if not stats or len(cells) != 2 + len(stats) or not cells[1].isdigit():
            continue
        values = {}
        for stat, cell in zip(stats, cells[2:], strict=True):
            m = CELL.match(cell)
            if m:
                values[stat] = (float(m[1]), float(m[2]), int(cells[1]))
        rows.setdefault(cells[0], {}).update(values)
    if not rows:
        raise SystemExit(f"{path}: no '| row | seeds | ... |' table of scripts/window_stats.py")
    return every, rows


def per_seed_values(path: Path) -> dict[tuple[str, int], dict[str, float]]:
    """{(row, seed): {stat: value}} of the per-seed lines of scripts/window_stats.py."""
    values = {}
    for line in path.read_text().splitlines():
        m = SEED_LINE.match(line.strip())
        if m:
            pairs = (item.rsplit(" ", 1) for item in m[3].split(", "))
            values[(m[1], int(m[2]))] = {stat: float(v) for stat, v in pairs}
    if not values:
        raise SystemExit(f"{path}: no per-seed line of scripts/window_stats.py --per-seed")
    return values


def print_per_seed(before_path: Path, after_path: Path, patterns: list[str]) -> None:
    """Per seed in both files: before, after, the change, and the before table's seed std."""
    _, spread = window_table(before_path)
    before, after = per_seed_values(before_path), per_seed_values(after_path)
    print("| row | seed | statistic | before | after | change | seed std (before) |")
    print("|---|---|---|---|---|---|---|")
    unchanged = total = 0
    for (row, seed), values in sorted(before.items()):
        if (row, seed) not in after or not any(fnmatch.fnmatchcase(row, p) for p in patterns):
            continue
        for stat, b in values.items():
            a = after[(row, seed)].get(stat)
            if a is None:
                continue
            std = spread.get(row, {}).get(stat, (0.0, float("nan"), 0))[1]
            unchanged += a == b
            total += 1
            print(f"| {row} | {seed} | {stat} | {b:.2f} | {a:.2f} | {a - b:+.2f} | {std:.2f} |")
    print(f"\n{unchanged} of {total} values unchanged (to the two decimals shown).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rows", nargs="+", default=["*"],
                        help="fnmatch patterns on the row paths")
    parser.add_argument("--per-seed", action="store_true",
                        help="compare the seeds both files list, one by one")
    args = parser.parse_args()
    if args.per_seed:
        print_per_seed(args.before, args.after, args.rows)
        return
    stats, before = window_table(args.before)
    _, after = window_table(args.after)
    print("| row | statistic | before | after | change | within the seed spread |")
    print("|---|---|---|---|---|---|")
    within = total = 0
    for row in before:
        if row not in after or not any(fnmatch.fnmatchcase(row, p) for p in args.rows):
            continue
        for stat in stats:
            if stat not in before[row] or stat not in after[row]:
                continue
            (bm, bs, bn), (am, as_, an) = before[row][stat], after[row][stat]
            change, spread, ok = rerun_change((bm, bs), (am, as_))
            within += ok
            total += 1
            print(f"| {row} | {stat} | {bm:.2f} ± {bs:.2f} ({bn}) | "
                  f"{am:.2f} ± {as_:.2f} ({an}) | {change:+.2f} | "
                  f"{'yes' if ok else 'no'} (larger std {spread:.2f}) |")
    print(f"\n{within} of {total} changes within the seed spread.")


if __name__ == "__main__":
    main()
