"""Run the authors' F-MNIST code as released, then compare its per-user accuracies with the
package's.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA        # outside this repository
    mkdir -p /tmp/Fed-MGDA/data/fmnist/FashionMNIST/raw && cp resources/raw/fmnist/*.gz "$_" \\
        && gunzip -kf "$_"/*.gz
    pip install quadprog tensorboardX tqdm                            # the authors' imports
    # numpy 2.4 on x86-64: their sort's order (§8.19)
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
    python scripts/run_authors_fmnist.py run --authors /tmp/Fed-MGDA/main --seed 1 \\
        --out results/fmnist/authors -- --epsilon=0 --normalize=0
    python scripts/run_authors_fmnist.py compare --authors-runs results/fmnist/authors \\
        --package-runs results/fmnist/runs/<fmnist_authors_paired's folder>/fedmgda/eps0/clean

``run`` executes the authors' ``main/federated_main.py`` unchanged (``runpy``, in their folder)
with the arguments of their Figure 3 scripts on F-MNIST (``--dataset=fmnist --model=cnn --iid=0
--local_bs=10 --lr=0.01 --local_ep=1 --epochs=200``) plus whatever follows ``--``. Nothing of the
run is changed: every round evaluates every user (``LocalUpdate.inference``), as released. That
matters beyond time: each of those evaluations iterates a ``DataLoader``, and with torch >= 2 every
``DataLoader`` iterator (even ``shuffle=False``) takes one draw from torch's global generator, the
one the local minibatch shuffles and dropout masks draw from; skipping evaluations would give
other trajectories than the released code's. The harness (scripts/authors_code.py, shared with
the lockstep and item-by-item checks) saves time in two ways that leave every number as it is
(``authors_code.speed_up``; ``--exact`` runs without them, and tests/test_authors_harness.py
checks that a transformed dataset gives the same samples): each dataset is transformed once
instead of at every access, and tensorboardX writes no event files.
It records what is computed: every
round's per-user accuracies to ``<out>/seed<S>.csv`` (round, user, accuracy) as the package's
``per_user.csv``, and the per-round training loss (the participants' mean minibatch loss, as the
package's ``metrics.csv`` ``train_loss``) to ``<out>/seed<S>_train_loss.csv``. (torchvision
accepts the Debian package's F-MNIST files only unpacked: their gzip headers differ from
Zalando's, so the ``.gz`` checksums do not match and torchvision would try to download.)

``compare`` pairs the two codes' runs by seed (the same partition and initial model) over a window
of rounds (default 101-200; both codes evaluated in every round of it): per run, the window mean of
the mean user accuracy and its standard error from the run's own rounds (autocorrelation
included); per seed, the difference package - authors; over seeds, the mean difference with a 95 %
interval from the seeds' spread (Student's t), the interval the comparison states, beside the one
from the runs' standard errors alone (the statistics: ``scripts/paired.py``). The package's runs
must store per-user accuracies in every round of the window (``per_user_every: 1``:
config/fmnist.yaml's ``fmnist_authors_paired``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# noqa: E402  (the harness around the authors' code, beside this script)
from authors_code import record_run
from paired import difference_interval, interval_verdict, paired_rows, seed_pairs  # noqa: E402


def compare(authors_runs: Path, package_runs: Path, first: int = 101, last: int = 200,
            markdown: Path | None = None) -> None:
    """The comparison's table and interval (scripts/paired.py), printed and, with ``markdown``,
    written there."""
    for seed, ours in seed_pairs(authors_runs, package_runs)[1]:
        print(f"{seed}: no package run at {ours}; skipped")
    try:
        table = paired_rows(authors_runs, package_runs, first, last)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    result = difference_interval(table)
    shown = table.copy()
    for column in shown.columns:
        if column not in ("seed", "rounds"):
            shown[column] = shown[column].map(lambda v, c=column: f"{v:.3f}" if "loss" in c
                                              else f"{v:.2f}")
    summary = (f"Rounds {first}-{last}, {result['n']} seeds: package - authors = "
               f"{result['mean']:+.2f} pp, "
               f"95 % interval from the seeds' spread [{result['low']:+.2f}, "
               f"{result['high']:+.2f}] ({interval_verdict(result)}); "
               f"from the runs' own window standard errors [{result['low_runs']:+.2f}, "
               f"{result['high_runs']:+.2f}].")
    print(shown.to_string(index=False))
    print(summary)
    if markdown is not None:
        markdown.write_text(
            "# The package beside the authors' code: FedAvg on F-MNIST, every round evaluated\n\n"
            f"Mean user test accuracy (%) averaged over rounds {first}-{last} per run; `se_*`: the "
            "window mean's standard error from the run's own rounds (lag-1 autocorrelation "
            "included); `diff` = package - authors, paired by seed (the same partition and initial "
            "model; the random streams differ); losses: the participants' mean minibatch loss over "
            "the same rounds.\n\n"
            + shown.to_markdown(index=False) + "\n\n" + summary
            + "\n\nMade by `python scripts/run_authors_fmnist.py compare "
            f"--authors-runs {authors_runs} --package-runs {package_runs} --first {first} --last "
            f"{last} --markdown {markdown}`.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--authors", type=Path, required=True, help="the authors' main/ folder")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--exact", action="store_true",
                   help="without speed_up: the datasets transformed at every access, event files "
                   "written")
    r.add_argument("extra", nargs="*", help="more arguments for federated_main.py, after --")
    c = sub.add_parser("compare")
    c.add_argument("--authors-runs", type=Path, required=True)
    c.add_argument("--package-runs", type=Path, required=True)
    c.add_argument("--first", type=int, default=101, help="first round of the window (default 101)")
    c.add_argument("--last", type=int, default=200, help="last round of the window (default 200)")
    c.add_argument("--markdown", type=Path, help="also write the table and the interval here")
    args = parser.parse_args()
    if args.command == "run":
        record_run(args.authors.resolve(), args.seed, args.out, args.extra, args.exact)
    else:
        compare(args.authors_runs, args.package_runs, args.first, args.last, args.markdown)


if __name__ == "__main__":
    main()
