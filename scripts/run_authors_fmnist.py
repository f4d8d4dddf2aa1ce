"""Run the authors' F-MNIST code as released, then compare its per-user accuracies with the package's.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA        # outside this repository
    mkdir -p /tmp/Fed-MGDA/data/fmnist/FashionMNIST/raw && cp resources/raw/fmnist/*.gz "$_" && gunzip -kf "$_"/*.gz
    pip install quadprog tensorboardX tqdm                            # the authors' imports
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"  # numpy 2.4 on x86-64: their sort's order (§8.19)
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
other trajectories than the released code's. The harness saves time in two ways that leave every number as it is (``speed_up``; ``--exact``
runs without them, and tests/test_authors_harness.py checks both give the same outputs): each
dataset is transformed once instead of at every access, and tensorboardX writes no event files.
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
from the runs' standard errors alone. The package's runs must store per-user accuracies in every
round of the window (``per_user_every: 1``: config/fmnist.yaml's ``fmnist_authors_paired``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import runpy
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedmgda.claims import paired_interval
from fedmgda.data.legacy_sort import numpy_1_17_argsort

FIGURE3_ON_FMNIST = ["--dataset=fmnist", "--model=cnn", "--iid=0", "--local_bs=10", "--lr=0.01",
                     "--local_ep=1", "--epochs=200", "--frac=0.1", "--num_users=100"]


class Transformed:
    """A torchvision dataset with every sample transformed once: ``dataset[i]`` is the same
    (tensor, label) as the wrapped dataset's, bit for bit; only the per-access PIL conversion is
    saved. No random number is drawn by either."""

    def __init__(self, dataset):
        self.samples = [dataset[i] for i in range(len(dataset))]
        self.targets = dataset.targets

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


class NullWriter:
    """tensorboardX's ``SummaryWriter`` without the event files (their ``add_scalar`` per step)."""

    def __init__(self, *args, **kwargs):
        pass

    def add_scalar(self, *args, **kwargs):
        pass


def speed_up(utils, tensorboardX) -> None:
    """Two changes of time only, the numbers unchanged (``--exact`` leaves them out): the datasets
    transformed once (``Transformed``) and no event files (``NullWriter``)."""
    get_dataset = utils.get_dataset

    def transformed_once(args):
        train_dataset, test_dataset, user_groups = get_dataset(args)
        return Transformed(train_dataset), Transformed(test_dataset), user_groups

    utils.get_dataset = transformed_once
    tensorboardX.SummaryWriter = NullWriter


def require_authors_sort() -> None:
    """Stop unless this numpy's default ``argsort`` leaves equal labels in the order the authors'
    numpy (1.17) did: their ``main/sampling.py`` sorts with it, and only then is their partition
    the package's ``sort: quicksort`` (docs/protocol.md §8.19). Current numpy gets there with its
    SIMD sorts switched off before it is imported."""
    labels = np.random.RandomState(0).randint(0, 10, 5000)
    if not np.array_equal(np.argsort(labels), numpy_1_17_argsort(labels)):
        umath = getattr(np, "_core", getattr(np, "core", None))._multiarray_umath
        targets = " ".join(getattr(umath, "__cpu_dispatch__", []))
        raise SystemExit(f"numpy {np.__version__} on this CPU sorts equal labels otherwise than the authors' numpy 1.17, "
                         f"so their code would build another partition; rerun with NPY_DISABLE_CPU_FEATURES=\"{targets}\" "
                         "(docs/protocol.md §8.19)")


@contextlib.contextmanager
def authors_modules(authors: Path):
    """The authors' ``main/`` on the import path and as working directory (their data paths,
    '../data/fmnist/' and '../logs', are relative to it); their modules forgotten afterwards, so a
    second use imports them afresh. Stops first if their label sort would not be numpy 1.17's."""
    require_authors_sort()
    cwd, path = os.getcwd(), list(sys.path)
    os.chdir(authors)
    sys.path.insert(0, str(authors))
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        for name in ("update", "models", "utils", "sampling", "options"):
            sys.modules.pop(name, None)


def run_federated_main(authors: Path, argv: list[str]) -> dict:
    """The authors' ``federated_main.py`` run as a script with ``argv`` (inside
    :func:`authors_modules`, after the caller's patches); its module globals when it finishes."""
    sys.argv = ["federated_main.py", *argv]
    return runpy.run_path(str(authors / "federated_main.py"), run_name="__main__")


def run(authors: Path, seed: int, out: Path, extra: list[str], exact: bool = False) -> None:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    with authors_modules(authors):
        run_patched(authors, seed, out, extra, exact)


def run_patched(authors: Path, seed: int, out: Path, extra: list[str], exact: bool) -> None:
    import tensorboardX
    import update  # the authors' modules, from their folder
    import utils

    if not exact:
        speed_up(utils, tensorboardX)

    rows: list[tuple[int, int, float]] = []
    state = {"round": 0, "user": 0}
    train, infer = update.LocalUpdate.update_weights, update.LocalUpdate.inference

    def update_weights(self, model, global_round):
        if global_round != state["round"]:
            state["round"], state["user"] = global_round, 0
        return train(self, model, global_round)

    def inference(self, model):
        accuracy, loss = infer(self, model)
        rows.append((state["round"] + 1, state["user"], accuracy))
        state["user"] += 1
        return accuracy, loss

    update.LocalUpdate.update_weights, update.LocalUpdate.inference = update_weights, inference
    start = time.time()
    finished = run_federated_main(authors, [*FIGURE3_ON_FMNIST, f"--seed={seed}", *extra])
    with open(out / f"seed{seed}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["round", "user", "accuracy"])
        writer.writerows(rows)
    write_train_loss(finished["train_loss"], out / f"seed{seed}_train_loss.csv")
    print(f"authors' code, seed {seed}: {time.time() - start:.0f} s; per-user accuracies -> {out}")


def write_train_loss(train_loss: list[float], path: Path) -> None:
    """federated_main.py's ``train_loss``: one value per round, the participants' mean local loss."""
    pd.DataFrame({"round": range(1, len(train_loss) + 1), "train_loss": [float(v) for v in train_loss]}).to_csv(path, index=False)


def mean_train_loss(per_round: pd.DataFrame, first: int, last: int) -> float:
    return float(per_round[(per_round["round"] >= first) & (per_round["round"] <= last)]["train_loss"].mean())


def mean_accuracy(per_user: pd.DataFrame, first: int, last: int) -> float:
    """Mean over users, then over the rounds in [first, last], in percent."""
    return float(round_means(per_user, first, last).mean())


def round_means(per_user: pd.DataFrame, first: int, last: int) -> pd.Series:
    """The mean user accuracy (%) of every round in [first, last] that has per-user accuracies."""
    rounds = per_user[(per_user["round"] >= first) & (per_user["round"] <= last)]
    return 100 * rounds.groupby("round")["accuracy"].mean()


def window_standard_error(series: pd.Series) -> float:
    """The standard error of a run's window mean from its own rounds: sd / sqrt(n), widened by
    sqrt((1 + r) / (1 - r)) for the lag-1 autocorrelation r of the series (an AR(1) reading of
    neighbouring rounds' dependence; r < 0 is read as 0)."""
    x = series.to_numpy(dtype=float)
    r = float(np.corrcoef(x[:-1], x[1:])[0, 1]) if len(x) > 2 and x[:-1].std() > 0 and x[1:].std() > 0 else 0.0
    r = min(max(r, 0.0), 0.95)  # a constant series: no correlation to read
    return float(x.std(ddof=1) / np.sqrt(len(x)) * np.sqrt((1 + r) / (1 - r)))


def paired_rows(authors_runs: Path, package_runs: Path, first: int, last: int) -> pd.DataFrame:
    """Per seed with both codes' runs: each code's window mean of the mean user accuracy, its
    standard error from its own rounds (``window_standard_error``), the difference package - authors
    and the mean training losses over the window."""
    rows = []
    for theirs in sorted(authors_runs.glob("seed*[0-9].csv"), key=lambda f: int(f.stem[4:])):
        seed = theirs.stem
        ours = package_runs / seed / "per_user.csv"
        if not ours.exists():
            print(f"{seed}: no package run at {ours}; skipped")
            continue
        a, p = round_means(pd.read_csv(theirs), first, last), round_means(pd.read_csv(ours), first, last)
        row = {"seed": int(seed[4:]), "rounds": f"{len(a)}/{len(p)}",
               "authors": a.mean(), "se_authors": window_standard_error(a),
               "package": p.mean(), "se_package": window_standard_error(p)}
        row["diff"] = row["package"] - row["authors"]
        row["se_diff"] = float(np.hypot(row["se_authors"], row["se_package"]))
        their_loss = authors_runs / f"{seed}_train_loss.csv"
        if their_loss.exists():
            row["authors_loss"] = mean_train_loss(pd.read_csv(their_loss), first, last)
            row["package_loss"] = mean_train_loss(pd.read_csv(ours.with_name("metrics.csv")), first, last)
            row["diff_loss"] = row["package_loss"] - row["authors_loss"]
        rows.append(row)
    if not rows:
        raise SystemExit("no seed has both codes' results")
    return pd.DataFrame(rows)


def difference_interval(table: pd.DataFrame) -> dict[str, float]:
    """The mean difference package - authors over seeds with two 95 % intervals: from the seeds'
    spread (Student's t with n - 1 degrees of freedom; what the comparison states) and from the
    runs' own window standard errors (normal; it ignores how trajectories differ between seeds)."""
    d, n = table["diff"].to_numpy(), len(table)
    mean = float(d.mean())
    low, high = paired_interval(mean, float(d.std(ddof=1)) if n > 1 else 0.0, n)
    half_runs = float(1.96 * np.sqrt((table["se_diff"] ** 2).sum()) / n)
    return {"n": n, "mean": mean, "low": low, "high": high,
            "low_runs": mean - half_runs, "high_runs": mean + half_runs}


def compare(authors_runs: Path, package_runs: Path, first: int = 101, last: int = 200, markdown: Path | None = None) -> None:
    table = paired_rows(authors_runs, package_runs, first, last)
    result = difference_interval(table)
    shown = table.copy()
    for column in shown.columns:
        if column not in ("seed", "rounds"):
            shown[column] = shown[column].map(lambda v, c=column: f"{v:.3f}" if "loss" in c else f"{v:.2f}")
    verdict = ("the interval contains 0" if result["low"] <= 0 <= result["high"]
               else f"the interval excludes 0: the package is {'above' if result['mean'] > 0 else 'below'} the authors' code")
    summary = (f"Rounds {first}-{last}, {result['n']} seeds: package - authors = {result['mean']:+.2f} pp, "
               f"95 % interval from the seeds' spread [{result['low']:+.2f}, {result['high']:+.2f}] ({verdict}); "
               f"from the runs' own window standard errors [{result['low_runs']:+.2f}, {result['high_runs']:+.2f}].")
    print(shown.to_string(index=False))
    print(summary)
    if markdown is not None:
        markdown.write_text(
            "# The package beside the authors' code: FedAvg on F-MNIST, every round evaluated\n\n"
            f"Mean user test accuracy (%) averaged over rounds {first}-{last} per run; `se_*`: the window "
            "mean's standard error from the run's own rounds (lag-1 autocorrelation included); `diff` = "
            "package - authors, paired by seed (the same partition and initial model; the random streams "
            "differ); losses: the participants' mean minibatch loss over the same rounds.\n\n"
            + shown.to_markdown(index=False) + "\n\n" + summary + "\n\nMade by `python scripts/run_authors_fmnist.py compare "
            f"--authors-runs {authors_runs} --package-runs {package_runs} --first {first} --last {last} --markdown {markdown}`.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--authors", type=Path, required=True, help="the authors' main/ folder")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--exact", action="store_true", help="without speed_up: the datasets transformed at every access, event files written")
    r.add_argument("extra", nargs="*", help="more arguments for federated_main.py, after --")
    c = sub.add_parser("compare")
    c.add_argument("--authors-runs", type=Path, required=True)
    c.add_argument("--package-runs", type=Path, required=True)
    c.add_argument("--first", type=int, default=101, help="first round of the window (default 101)")
    c.add_argument("--last", type=int, default=200, help="last round of the window (default 200)")
    c.add_argument("--markdown", type=Path, help="also write the table and the interval here")
    args = parser.parse_args()
    if args.command == "run":
        run(args.authors.resolve(), args.seed, args.out, args.extra, args.exact)
    else:
        compare(args.authors_runs, args.package_runs, args.first, args.last, args.markdown)


if __name__ == "__main__":
    main()
