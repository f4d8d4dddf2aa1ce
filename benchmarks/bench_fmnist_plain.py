"""F-MNIST's CNN on the CPU: the package's packed path beside a plain PyTorch loop, in one process.

    python benchmarks/bench_fmnist_plain.py           # 6 FedAvg runs, 5 rounds, real files
    python benchmarks/bench_fmnist_plain.py --runs 6 --rounds 10 --threads 1
    # paired ratios, their median
    python benchmarks/bench_fmnist_plain.py --runs 6 --rounds 2 --threads 1 --repeat 5

Both train the same clients on the same samples: K FedAvg runs (seeds 1..K) of the paper's F-MNIST
setting (shards, 100 users, 10 per round, one local epoch of minibatch 10 at lr 0.01, momentum 0.5),
for ``--rounds`` rounds, training and aggregation only: no participant losses (FedAvg without
``track_improvement``), and the package's evaluations (every user's test split and the global test
set, after rounds 1 and T and once more for the final statistics: 48 000 forward passes a run, five
times the images a run trains on in 2 rounds) are timed apart and left out of the ratio, since
the plain loop does none; they are printed beside it. The plain loop is what a researcher writes
first: one ``nn.Module`` per client copied from the global model, ``torch.optim.SGD``, a loop over
batches of 10, the mean of the updates. The package's path is ``fedmgda.scheduler.run_packed`` over
K ``Simulation``s: every round's clients of all K runs trained as one vmap-ed step per minibatch;
its reference path (``batched: false``: each run alone, its clients one after another) is timed
too. Every path's simulations are built before its clock starts, and each path first trains one
untimed round (``warm_up``). ``--repeat R`` times the paths in turn R times. It prints run-rounds
per second of each (wall clock, and per second of the process's CPU time, steadier on a shared
machine) and their ratio to the plain loop (the goal, per CPU second on one thread: 6 runs packed at
least 2x, one run at least 1x). Results go to
docs/performance.md with the command. The real files must be in ``--raw-dir``/fmnist/ (without
them it says so and exits).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from fedmgda.config import RunConfig
from fedmgda.data.base import DataError
from fedmgda.models import CNNFashion
from fedmgda.scheduler import Scheduler, run_packed
from fedmgda.simulator import Simulation


def configs(runs: int, rounds: int, raw_dir: str, batched: bool = True) -> list[RunConfig]:
    base = dict(dataset="fmnist", algorithm="fedavg", partition="shards", raw_dir=raw_dir,
                batch_size=10,
                local_lr=0.01, momentum=0.5, participation=0.1, rounds=rounds, device="cpu",
                batched=batched,
                eval_every=10**6, per_user_every=10**6, track_improvement=False, checkpoint_every=0)
    return [RunConfig.from_dict({**base, "seed": seed}) for seed in range(1, runs + 1)]


def plain_round(model: nn.Module, sim: Simulation, t: int, generator: torch.Generator) -> None:
    """One FedAvg round the plain way: a module and an SGD optimiser per client."""
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    updates = []
    for user in sim.participants(t):
        model.load_state_dict(global_state)
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        idx = sim.data.train_idx[user]
        for batch in idx[torch.randperm(len(idx), generator=generator)].split(10):
            optimizer.zero_grad()
            nn.functional.nll_loss(model(sim.data.x[batch]), sim.data.y[batch]).backward()
            optimizer.step()
        updates.append({k: v.detach() - global_state[k] for k, v in model.state_dict().items()})
    model.load_state_dict({k: global_state[k] + torch.stack([u[k] for u in updates]).mean(0)
                           for k in global_state})


class EvaluationClock:
    """Wall-clock and CPU seconds the package spends evaluating models (``Scheduler.evaluate``, the
    rounds' evaluations; ``Simulation.model_stats``, the final statistics), while active."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self.originals = {(cls, name): getattr(cls, name)
                          for cls, name in ((Scheduler, "evaluate"), (Simulation, "model_stats"))}
        for (cls, name), original in self.originals.items():
            setattr(cls, name, self._timed(original))
        return self

    def __exit__(self, *exc):
        for (cls, name), original in self.originals.items():
            setattr(cls, name, original)

    def _timed(self, method):
        def timed_method(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.process_time() - cpu
        return timed_method


def timed(work, sims: list[Simulation]) -> tuple[float, float, float, float]:
    """Wall-clock and process CPU seconds of ``work(sims)`` (the simulations built before) without
    the package's evaluations, and those evaluations' wall-clock and CPU seconds."""
    with EvaluationClock() as evaluation:
        wall, cpu = time.perf_counter(), time.process_time()
        work(sims)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall - evaluation.wall, cpu - evaluation.cpu, evaluation.wall, evaluation.cpu


def plain_runs(sims: list[Simulation], rounds: int) -> None:
    for sim in sims:
        torch.manual_seed(sim.cfg.seed)
        model = CNNFashion(10)
        generator = torch.Generator().manual_seed(sim.cfg.seed)
        for t in range(rounds):
            plain_round(model, sim, t, generator)


def warm_up(raw_dir: str) -> None:
    """One untimed round of one run on each path: a process's first convolutions and products set
    up their kernels and the allocator its pools, which the path timed first, the plain loop, would
    otherwise pay for alone (about a second of its time)."""
    plain_runs([Simulation(configs(1, 1, raw_dir)[0])], 1)
    for batched in (True, False):
        run_packed([Simulation(configs(1, 1, raw_dir, batched)[0])], [None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=6,
                        help="FedAvg runs (seeds 1..RUNS), packed in one job")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--raw-dir", default="resources/raw")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time the three paths in turn this many times; "
                        "then also print the median of each repeat's ratio to the plain loop")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        sims = [Simulation(cfg) for cfg in configs(args.runs, args.rounds, args.raw_dir)]
    except DataError as err:
        raise SystemExit(f"{err}\n(place the four Fashion-MNIST files in "
                         f"{args.raw_dir}/fmnist/)") from None

    def build(batched: bool = True) -> list[Simulation]:
        return [Simulation(cfg) for cfg in configs(args.runs, args.rounds, args.raw_dir, batched)]

    paths = {  # name: (work, the simulations it runs, built untimed)
        "plain PyTorch loop (nn.Module + torch.optim.SGD, batch 10)":
            (lambda s: plain_runs(s, args.rounds), lambda: sims),
        f"package, {args.runs} runs packed (run_packed)":
            (lambda s: run_packed(s, [None] * len(s)), build),
        "package, reference path (batched: false, clients one by one)": (
            lambda s: [run_packed([sim], [None]) for sim in s], lambda: build(batched=False)),
    }
    warm_up(args.raw_dir)
    times: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in paths}
    # the paths in turn, so that a busy spell of the machine hits them alike
    for _ in range(args.repeat):
        for name, (work, make) in paths.items():
            times[name].append(timed(work, make()))
    print(f"F-MNIST CNN, real files, {args.runs} FedAvg runs x {args.rounds} rounds, "
          f"{args.threads} thread(s), "
          f"torch {torch.__version__}, training and aggregation only (the package's evaluations "
          "timed apart), after one untimed round of each path")
    run_rounds = args.runs * args.rounds
    for i in range(args.repeat):
        if args.repeat > 1:
            print(f"repeat {i + 1} of {args.repeat}:")
        plain_wall, plain_cpu, _, _ = next(iter(times.values()))[i]
        for name, measured in times.items():
            wall, cpu, eval_wall, eval_cpu = measured[i]
            evaluation = (f"; evaluations apart: {eval_cpu:.1f} CPU s ({eval_wall:.1f} s)"
                          if eval_cpu else "")
            print(f"{name:66s} {run_rounds / wall:7.3f} run-rounds/s ({wall:6.1f} s, "
                  f"{plain_wall / wall:.2f}x plain); "
                  f"per CPU second {run_rounds / cpu:7.3f} ({cpu:6.1f} s, {plain_cpu / cpu:.2f}x "
                  f"plain){evaluation}")
    if args.repeat > 1:
        plain = next(iter(times.values()))
        for name, measured in list(times.items())[1:]:
            ratios = [p[1] / m[1] for p, m in zip(plain, measured)]
            print(f"median paired ratio to the plain loop per CPU second, {name}: "
                  f"{statistics.median(ratios):.2f}x "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {args.repeat} repeats)")

if __name__ == "__main__":
    main()
