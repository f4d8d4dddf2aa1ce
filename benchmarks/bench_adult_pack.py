"""Packed Adult round time: the runs of the paper's Table 7 (config/config.yaml, experiment
``table7``: 23 rows x 5 seeds = 115 runs of 500 rounds) trained packed, on the real UCI files.

    python benchmarks/bench_adult_pack.py --raw-dir /tmp/lean_raw            # all 115 runs packed
    python benchmarks/bench_adult_pack.py --raw-dir /tmp/lean_raw --runs 23 --rounds 20

It trains the first ``--runs`` runs of Table 7 for ``--rounds`` rounds with the real simulator
(``run_packed``: client updates, pre/post-round participant losses, aggregation, evaluation every
``eval_every`` rounds, no output files), prints seconds per packed round, and projects the time of
all 115 runs x 500 rounds packed (round time x 115/runs x 500). The real files are needed
(``raw_dir/adult/adult.data`` and ``adult.test``); without them it says so and exits.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from fedmgda.config import RunConfig
from fedmgda.experiments import expand, load_config
from fedmgda.simulator import Simulation, run_packed


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
    args = parser.parse_args()
    missing = [name for name in ("adult.data", "adult.test") if not (Path(args.raw_dir) / "adult" / name).is_file()]
    if missing:
        print(f"the real Adult files are absent ({', '.join(missing)} not in {args.raw_dir}/adult/): nothing measured", file=sys.stderr)
        sys.exit(1)
    configs = table7_configs(args.raw_dir, args.runs, args.rounds, batched=not args.sequential)
    start = time.perf_counter()
    sims = [Simulation(cfg) for cfg in configs]
    print(f"{len(sims)} runs built in {time.perf_counter() - start:.1f} s; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    run_packed(sims, [None] * len(sims))
    per_round = (time.perf_counter() - start) / args.rounds
    cpu_per_round = (time.process_time() - cpu_start) / args.rounds
    projected = per_round * 115 / len(sims) * 500
    print(f"{per_round:.3f} s per packed round of {len(sims)} runs ({cpu_per_round:.3f} s of CPU time; {args.rounds} rounds, evaluation included); "
          f"projected 115 runs x 500 rounds: {projected / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
