"""Run the authors' F-MNIST code as released, then compare its per-user accuracies with the package's.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA        # outside this repository
    mkdir -p /tmp/Fed-MGDA/data/fmnist/FashionMNIST/raw && cp resources/raw/fmnist/*.gz "$_" && gunzip -kf "$_"/*.gz
    pip install quadprog tensorboardX tqdm                            # the authors' imports
    python scripts/run_authors_fmnist.py run --authors /tmp/Fed-MGDA/main --seed 1 \\
        --out results/fmnist/authors -- --epsilon=0 --normalize=0
    python scripts/run_authors_fmnist.py compare --authors-runs results/fmnist/authors \\
        --package-runs results/fmnist/runs/fmnist-shards_b10_lr0.01_p0.1_T200_ev10/fedavg/default/clean

``run`` executes the authors' ``main/federated_main.py`` unchanged (``runpy``, in their folder) with
the arguments of their Figure 3 scripts on F-MNIST (``--dataset=fmnist --model=cnn --iid=0
--local_bs=10 --lr=0.01 --local_ep=1 --epochs=200``) plus whatever follows ``--``. One thing is
changed from outside, for time only: their per-user evaluation (``LocalUpdate.inference`` on every
user's test split after every round, about 100 data loaders a round) runs only in the rounds whose
vectors their script keeps (``epoch % 10 == 0``: rounds 1, 11, ..., 191); it reads the model and
draws no random number, so the training is the released code's. Those per-user accuracies are
written to ``<out>/seed<S>.csv`` (round, user, accuracy) as the package's ``per_user.csv``, and
their per-round training loss (the participants' mean minibatch loss, as the package's
``metrics.csv`` ``train_loss``) to ``<out>/seed<S>_train_loss.csv``. (torchvision accepts the
Debian package's F-MNIST files only unpacked: their gzip headers differ from Zalando's, so the
``.gz`` checksums do not match and torchvision would try to download.)

``compare`` prints, per seed and over seeds, the mean user accuracy of both codes at round 191 (the
paper's reading) and averaged over the stored rounds 151-191, the mean training loss over rounds
101-200, and the differences.
"""

from __future__ import annotations

import argparse
import csv
import os
import runpy
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

FIGURE3_ON_FMNIST = ["--dataset=fmnist", "--model=cnn", "--iid=0", "--local_bs=10", "--lr=0.01",
                     "--local_ep=1", "--epochs=200", "--frac=0.1", "--num_users=100"]
STORED_EVERY = 10  # federated_main.py keeps user_test_accuracy when epoch % 10 == 0


def run(authors: Path, seed: int, out: Path, extra: list[str]) -> None:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(authors)  # their paths ('../data/fmnist/', '../logs') are relative to main/
    sys.path.insert(0, str(authors))
    import update  # the authors' module, from their folder

    rows: list[tuple[int, int, float]] = []
    state = {"round": 0, "user": 0}
    train, infer = update.LocalUpdate.update_weights, update.LocalUpdate.inference

    def update_weights(self, model, global_round):
        if global_round != state["round"]:
            state["round"], state["user"] = global_round, 0
        return train(self, model, global_round)

    def inference(self, model):
        if state["round"] % STORED_EVERY:
            return float("nan"), float("nan")
        accuracy, loss = infer(self, model)
        rows.append((state["round"] + 1, state["user"], accuracy))
        state["user"] += 1
        return accuracy, loss

    update.LocalUpdate.update_weights, update.LocalUpdate.inference = update_weights, inference
    sys.argv = ["federated_main.py", *FIGURE3_ON_FMNIST, f"--seed={seed}", *extra]
    start = time.time()
    finished = runpy.run_path(str(authors / "federated_main.py"), run_name="__main__")
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
    """Mean over users, then over the stored rounds in [first, last], in percent."""
    rounds = per_user[(per_user["round"] >= first) & (per_user["round"] <= last)]
    return 100 * float(rounds.groupby("round")["accuracy"].mean().mean())


def compare(authors_runs: Path, package_runs: Path) -> None:
    rows = []
    for theirs in sorted(authors_runs.glob("seed*[0-9].csv")):
        seed = theirs.stem
        ours = package_runs / seed / "per_user.csv"
        if not ours.exists():
            print(f"{seed}: no package run at {ours}; skipped")
            continue
        a, p = pd.read_csv(theirs), pd.read_csv(ours)
        row = {"seed": seed[4:],
               "authors@191": mean_accuracy(a, 191, 191), "package@191": mean_accuracy(p, 191, 191),
               "authors 151-191": mean_accuracy(a, 151, 191), "package 151-191": mean_accuracy(p, 151, 191)}
        their_loss = authors_runs / f"{seed}_train_loss.csv"
        if their_loss.exists():
            row["authors loss 101-200"] = mean_train_loss(pd.read_csv(their_loss), 101, 200)
            row["package loss 101-200"] = mean_train_loss(pd.read_csv(ours.with_name("metrics.csv")), 101, 200)
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        raise SystemExit("no seed has both codes' results")
    table["diff@191"] = table["package@191"] - table["authors@191"]
    table["diff 151-191"] = table["package 151-191"] - table["authors 151-191"]
    if "authors loss 101-200" in table:
        table["diff loss"] = table["package loss 101-200"] - table["authors loss 101-200"]
    digits = {k: 3 if "loss" in k else 2 for k in table.columns}  # accuracies in %, losses in nats
    print(table.to_string(index=False, formatters={k: (lambda v, d=d: f"{v:.{d}f}") for k, d in digits.items() if k != "seed"}))
    means = table.drop(columns="seed").mean()
    spread = table.drop(columns="seed").std(ddof=1) if len(table) > 1 else means * np.nan
    print("mean over seeds:  " + ", ".join(f"{k} {v:.{digits[k]}f}" for k, v in means.items()))
    print("std over seeds:   " + ", ".join(f"{k} {v:.{digits[k]}f}" for k, v in spread.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--authors", type=Path, required=True, help="the authors' main/ folder")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("extra", nargs="*", help="more arguments for federated_main.py, after --")
    c = sub.add_parser("compare")
    c.add_argument("--authors-runs", type=Path, required=True)
    c.add_argument("--package-runs", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "run":
        run(args.authors.resolve(), args.seed, args.out, args.extra)
    else:
        compare(args.authors_runs, args.package_runs)


if __name__ == "__main__":
    main()
