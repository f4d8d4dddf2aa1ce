"""Packed round time of one experiment's runs on the real files, at one or several thread counts.

    python benchmarks/bench_pack.py                     # Table 7 (Adult), 115 runs packed
    python benchmarks/bench_pack.py --runs 23 --rounds 20
    python benchmarks/bench_pack.py --experiment qffl_table2_fmnist --rounds 20 --threads 1 2

It trains the first ``--runs`` runs (default: all) of the experiment (config/config.yaml) for
``--rounds`` rounds with the real simulator (``run_packed``: client updates, pre/post-round
participant losses, aggregation, evaluation at the experiment's ``eval_every``, scaled down to
at least twice in the rounds; no output files), once per thread count of ``--threads`` in the same
process, prints seconds per packed round and their ratio to the first count, and projects the time
of all the experiment's runs x its rounds packed. The real raw files must be in ``--raw-dir``;
without them it says so and exits.

The thread count is the job's (``resources: threads``, OMP_NUM_THREADS): linear models' small
operations stay on one thread, products of at least ``fastpaths.LARGE_PRODUCT`` multiply-adds use
them all (``fastpaths.threads_for_product``).

``--profile`` runs it under cProfile and adds a breakdown of the packed round (seconds per round
in training, participant losses, evaluation, the rest); cProfile slows Python-heavy parts more
than torch calls, so the total is above the unprofiled one.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import torch

from fedmgda.config import RunConfig
from fedmgda.data.base import DataError
from fedmgda.data.registry import ensure_raw_files
from fedmgda.experiments import expand, load_config
from fedmgda.scheduler import Scheduler, run_packed
from fedmgda.simulator import Simulation

# parts of a packed round: (label, the Scheduler method whose cumulative time it is); the rest is
# the per-run Python of the rounds (sampling, aggregation, bookkeeping, metrics rows)
PARTS = [("training", Scheduler.train), ("participant losses", Scheduler.losses),
         ("evaluation", Scheduler.evaluate)]


def breakdown(profile: cProfile.Profile, rounds: int) -> None:
    # (file, line, function) -> (calls, ..., tottime, cumtime, callers)
    stats = pstats.Stats(profile).stats

    def cumulative(fn) -> float:
        code = fn.__code__
        return sum(cum for (file, line, name), (*_, cum, _callers) in stats.items()
                   if (file, line, name) == (code.co_filename, code.co_firstlineno, code.co_name))

    total = cumulative(run_packed)
    print(f"breakdown under cProfile, s per round ({total / rounds:.3f} in all):")
    counted = 0.0
    for label, fn in PARTS:
        part = cumulative(fn)
        counted += part
        print(f"  {label:<20} {part / rounds:.3f}")
    print(f"  {'the rest':<20} {(total - counted) / rounds:.3f}")


def experiment_configs(experiment: str, raw_dir: str, runs: int | None,
                       rounds: int) -> tuple[list[RunConfig], int, int]:
    """The first ``runs`` runs of ``experiment`` shortened to ``rounds``; with the experiment's
    number of runs and rounds."""
    registry = expand(load_config("config/config.yaml"))
    keys = registry.runs_of([experiment])
    full_rounds = int(registry.runs[keys[0]].config["rounds"])
    configs = []
    for key in keys[:runs]:
        base = registry.runs[key].config
        every = max(1, min(int(base.get("eval_every", 10)), rounds // 2))
        raw = dict(base, raw_dir=raw_dir, rounds=rounds, device="cpu", checkpoint_every=0,
                   eval_every=every, per_user_every=every)
        configs.append(RunConfig.from_dict(raw))
    return configs, len(keys), full_rounds


def time_pack(configs: list[RunConfig], rounds: int, threads: int,
              profile: cProfile.Profile | None) -> float:
    """Seconds per packed round of ``configs`` on ``threads`` threads."""
    torch.set_num_threads(threads)
    sims = [Simulation(cfg) for cfg in configs]
    start, cpu_start = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    run_packed(sims, [None] * len(sims))
    if profile is not None:
        profile.disable()
    per_round = (time.perf_counter() - start) / rounds
    print(f"{threads} thread(s): {per_round:.3f} s per packed round of {len(sims)} runs "
          f"({(time.process_time() - cpu_start) / rounds:.3f} s of CPU time; {rounds} rounds, "
          "evaluation included)", flush=True)
    return per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="table7",
                        help="an experiment of config/config.yaml")
    parser.add_argument("--raw-dir", default="resources/raw",
                        help="the raw files' folder (resources/raw/<dataset>/)")
    parser.add_argument("--runs", type=int, default=None,
                        help="pack the first RUNS runs (default: all)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds to train")
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()],
                        help="thread counts to time, one after another")
    parser.add_argument("--profile", action="store_true",
                        help="under cProfile, with a breakdown of the round (first thread count)")
    args = parser.parse_args()
    configs, all_runs, full_rounds = experiment_configs(args.experiment, args.raw_dir, args.runs,
                                                        args.rounds)
    try:
        ensure_raw_files(configs[0].dataset, args.raw_dir, allow_download=False)
    except DataError as error:
        print(f"nothing measured: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"{args.experiment}: {len(configs)} of {all_runs} runs, torch {torch.__version__}",
          flush=True)
    profile = cProfile.Profile() if args.profile else None
    times = [time_pack(configs, args.rounds, threads, profile if i == 0 else None)
             for i, threads in enumerate(args.threads)]
    for threads, per_round in zip(args.threads, times):
        projected = per_round * all_runs / len(configs) * full_rounds
        print(f"{threads} thread(s): {times[0] / per_round:.2f}x the first count; projected "
              f"{all_runs} runs x {full_rounds} rounds: {projected / 60:.1f} min")
    if profile is not None:
        breakdown(profile, args.rounds)


if __name__ == "__main__":
    main()
