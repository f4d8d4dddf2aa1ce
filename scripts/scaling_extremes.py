"""The extreme-scaling table: a scaling attacker of growing factor against FedMGDA+ and FedAvg on
the quick profile's digits shards (batch 10, local lr 0.05, momentum 0.5, participation 1.0, 20
rounds, attacker = user 0 forced into every round), every run packed into one job.

    python scripts/scaling_extremes.py [--values 0,10,1e6,1e12,1e20,1e30] [--seeds 1,2,3] \\
        [--rounds 20]

Prints a markdown table: per algorithm and factor, the final model's mean user accuracy (mean ±
std over seeds, % ; "-" where every seed diverged), each seed's status, and the participants left
out over the run for a non-finite report (docs/protocol-choices.md, "Non-finite reports").
"""

from __future__ import annotations

import argparse
import time

from fedmgda.config import RunConfig
from fedmgda.results import seed_stats
from fedmgda.scheduler import run_packed
from fedmgda.simulator import Simulation

ALGORITHMS = {"fedmgda_plus": {"eta": 1.0, "decay": 0.1}, "fedavg": {}}
SETTING = dict(dataset="digits", partition="shards", batch_size=10, local_lr=0.05, momentum=0.5,
               local_epochs=1, participation=1.0, device="cpu", raw_dir="resources/raw",
               per_user_every=5)


def run_config(algorithm: str, value: float, seed: int, rounds: int) -> RunConfig:
    attack = {"kind": "none"} if value == 0 else {"kind": "scaling", "user": 0, "value": value}
    return RunConfig.from_dict(dict(SETTING, rounds=rounds, seed=seed, algorithm=algorithm,
                                    hparams=ALGORITHMS[algorithm], attack=attack))


def cell(results) -> tuple[str, str, int]:
    """Accuracy text, status text and participants left out, over one row's seeds."""
    accs = [100 * r.summary["final"]["mean_acc"] for r in results if r.summary["final"]]
    mean, std = seed_stats(accs)  # the tables' mean ± population std over seeds
    acc = f"{mean:.1f} ± {std:.1f}" if accs else "-"
    status = ", ".join(r.summary["status"]
                       + (f" at round {r.summary['diverged_round']}"
                          if r.summary["diverged_round"] else "")
                       for r in results)
    return acc, status, sum(int(r.metrics["dropped"].sum()) for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", default="0,10,1e6,1e12,1e20,1e30",
                        help="scaling factors; 0 = no attack")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    values = [float(v) for v in args.values.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    keys = [(a, v, s) for a in ALGORITHMS for v in values for s in seeds]
    start = time.perf_counter()
    results = run_packed([Simulation(run_config(a, v, s, args.rounds)) for a, v, s in keys],
                         [None] * len(keys))
    by_key = dict(zip(keys, results))
    print(f"| algorithm | scaling | mean user accuracy (%, {len(seeds)} seeds) | status per seed | "
          "participants left out |")
    print("|---|---|---|---|---|")
    for a in ALGORITHMS:
        for v in values:
            acc, status, dropped = cell([by_key[a, v, s] for s in seeds])
            print(f"| {a} | {'none' if v == 0 else f'{v:g}'} | {acc} | {status} | {dropped} |")
    print(f"\n{len(keys)} runs of {args.rounds} rounds in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
