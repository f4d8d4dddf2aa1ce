"""Packed Adult round time: the runs of the paper's Table 7 (config/config.yaml, experiment
``table7``: 23 rows x 5 seeds = 115 runs of 500 rounds) trained packed, on the real UCI files.

    python benchmarks/bench_adult_pack.py --raw-dir /tmp/lean_raw            # all 115 runs packed
    python benchmarks/bench_adult_pack.py --raw-dir /tmp/lean_raw --runs 23 --rounds 20

It trains the first ``--runs`` runs of Table 7 for ``--rounds`` rounds with the real simulator
(``run_packed``: client updates, pre/post-round participant losses, aggregation, evaluation every
``eval_every`` rounds, no output files), prints seconds per packed round, and projects the time of
all 115 runs x 500 rounds packed (round time x 115/runs x 500). The real files are needed
(``raw_dir/adult/adult.data`` and ``adult.test``); without them it says so and exits.

``--profile`` runs it under cProfile and adds a breakdown of the packed round (seconds per round
in training, participant losses, evaluation, aggregation, the rest); cProfile slows Python-heavy
parts more than torch calls, so the total is above the unprofiled one. With 10 rounds the round
is evaluated 2 times in 10 plus the final model (a 500-round run: 1 in 10): evaluation weighs
more here than in the real run.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

from fedmgda.config import RunConfig
from fedmgda.experiments import expand, load_config
from fedmgda.scheduler import run_packed
from fedmgda.simulator import Simulation

# parts of a packed round: (label, function names whose cumulative times are summed); the rest is
# the per-run Python of the rounds (sampling, bookkeeping, metrics rows)
PARTS = [
    ("training (train_packed)", ["train_packed"]),
    ("participant losses", ["losses_packed"]),
    ("evaluation (per user, global, final model)", ["evaluate_users", "evaluate_global", "evaluate_packed"]),
    ("aggregation (incl. QP)", ["aggregate"]),
    ("  of which the min-norm QP", ["min_norm_weights"]),
]


def breakdown(profile: cProfile.Profile, rounds: int) -> None:
    stats = pstats.Stats(profile).stats  # (file, line, function) -> (calls, ..., tottime, cumtime, callers)
    total = sum(cum for (_, _, name), (*_, cum, _callers) in stats.items() if name == "run_packed")
    print(f"breakdown under cProfile, s per round ({total / rounds:.3f} in all):")
    counted = 0.0
    for label, names in PARTS:
        part = sum(cum for (_, _, name), (*_, cum, _callers) in stats.items() if name in names)
        if not label.startswith(" "):
            counted += part
        print(f"  {label:<45} {part / rounds:.3f}")
    print(f"  {'the rest (per-run Python)':<45} {(total - counted) / rounds:.3f}")


def table7_configs(raw_dir: str, runs: int, rounds: int, batched: bool) -> list[RunConfig]:
    registry = expand(load_config("config/config.yaml"))
    keys = registry.runs_of(["table7"])[:runs]
    configs = []
    for key in keys:
        raw = dict(registry.runs[key].config, raw_dir=raw_dir, rounds=rounds, device="cpu", batched=batched, checkpoint_every=0)
        configs.append(RunConfig.from_dict(raw))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raw-dir", default="resources/raw", help="folder holding adult/adult.data and adult/adult.test")
    parser.add_argument("--runs", type=int, default=115, help="pack the first RUNS runs of Table 7")
    parser.add_argument("--rounds", type=int, default=20, help="rounds to train (eval_every = 10 as in the paper)")
    parser.add_argument("--sequential", action="store_true", help="the reference path (batched: false)")
    parser.add_argument("--profile", action="store_true", help="under cProfile, with a breakdown of the round")
    args = parser.parse_args()
    missing = [name for name in ("adult.data", "adult.test") if not (Path(args.raw_dir) / "adult" / name).is_file()]
    if missing:
        print(f"the real Adult files are absent ({', '.join(missing)} not in {args.raw_dir}/adult/): nothing measured", file=sys.stderr)
        sys.exit(1)
    configs = table7_configs(args.raw_dir, args.runs, args.rounds, batched=not args.sequential)
    start = time.perf_counter()
    sims = [Simulation(cfg) for cfg in configs]
    print(f"{len(sims)} runs built in {time.perf_counter() - start:.1f} s; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    profile = cProfile.Profile() if args.profile else None
    start, cpu_start = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    run_packed(sims, [None] * len(sims))
    if profile is not None:
        profile.disable()
    per_round = (time.perf_counter() - start) / args.rounds
    cpu_per_round = (time.process_time() - cpu_start) / args.rounds
    projected = per_round * 115 / len(sims) * 500
    print(f"{per_round:.3f} s per packed round of {len(sims)} runs ({cpu_per_round:.3f} s of CPU time; {args.rounds} rounds, evaluation included); "
          f"projected 115 runs x 500 rounds: {projected / 60:.1f} min", flush=True)
    if profile is not None:
        breakdown(profile, args.rounds)


if __name__ == "__main__":
    main()
