"""Round time of client-side algorithms beside FedAvg's, in one process, on the same config.

    python benchmarks/bench_plugins.py               # quick profile's digits shards, 30 rounds
    python benchmarks/bench_plugins.py --rounds 10 --repeats 5 --reference-terms --pack

FedAvg, FedProx (built-ins), SCAFFOLD (examples/scaffold.py) and FedDyn (examples/feddyn.py)
train the quick profile's setting ``--setting`` (config/quick.yaml: its ``run_defaults`` and
setting, momentum 0 for all four because SCAFFOLD's option II needs plain SGD) with the real
simulator and scheduler (``fedmgda.scheduler.run``: client updates, participant losses,
aggregation, evaluation; no output files). The algorithms take turns, ``--repeats`` times, so that
load from other processes on a shared machine falls on all of them alike; it prints each one's
median seconds per round (the whole run's wall time / rounds, and this process's CPU time, which
other processes disturb less), the path its clients trained on, and the ratios to FedAvg's.
``--reference-terms`` adds SCAFFOLD and FedDyn with their terms on the reference path
(``vmap_local_term = False``: the engine before terms were vmap-ed). Beside the whole round it
prints the CPU time spent in the clients' local training (``Scheduler.train``). ``--pack`` also
trains FedAvg, SCAFFOLD and FedDyn as one pack (FedProx's mu is part of its local training, so it
packs with FedProx runs only) and prints its time against the sum of the three alone.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import yaml

from fedmgda.config import RunConfig
from fedmgda.scheduler import Scheduler, run_packed, training_path
from fedmgda.simulator import Simulation, load_dataset

REPO = Path(__file__).resolve().parents[1]
ALGORITHMS = {  # label -> run-config fields
    "FedAvg": {"algorithm": "fedavg"},
    "FedProx": {"algorithm": "fedprox", "hparams": {"mu": 0.01}},
    "SCAFFOLD": {"algorithm": "scaffold", "plugin": f"{REPO}/examples/scaffold.py:Scaffold"},
    "FedDyn": {"algorithm": "feddyn", "hparams": {"alpha": 0.01},
               "plugin": f"{REPO}/examples/feddyn.py:FedDyn"},
}


def configs(setting: str, rounds: int, batched: bool) -> dict[str, RunConfig]:
    """Each algorithm's run config: the quick profile's run defaults and ``setting``, momentum 0."""
    quick = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())
    base = {**quick["run_defaults"], **quick["settings"][setting], "rounds": rounds,
            "momentum": 0.0,
            "seed": 1, "device": "cpu", "batched": batched,
            "raw_dir": str(REPO / "resources" / "raw")}
    return {label: RunConfig.from_dict({**base, **fields}) for label, fields in ALGORITHMS.items()}


TRAINING = [0.0]  # CPU seconds spent in Scheduler.train (the clients' local training), summed
COLUMNS = ("wall", "CPU", "training CPU")  # seconds per round, each beside its ratio to FedAvg's


def clocked(train):
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return train(*args, **kwargs)
        finally:
            TRAINING[0] += time.process_time() - start
    return wrapper


def timed(cfgs: list[RunConfig], data, model_name: str,
          reference_terms: bool = False) -> tuple[dict[str, float], list[Simulation]]:
    """Seconds (``COLUMNS``: wall, this process's CPU, its CPU in the clients' training) of the
    runs ``cfgs`` trained as one pack (one run: alone). ``reference_terms``: local terms on the
    reference path, as before they were vmap-ed (``vmap_local_term = False``)."""
    sims = [Simulation(cfg, data=data, model_name=model_name) for cfg in cfgs]
    classes = ({type(sim.algorithm) for sim in sims if sim.algorithm.has_local_term()}
               if reference_terms else set())
    for cls in classes:
        cls.vmap_local_term = False
    try:
        TRAINING[0] = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        run_packed(sims, [None] * len(sims))
        return (dict(zip(COLUMNS,
                         (time.perf_counter() - wall, time.process_time() - cpu, TRAINING[0]))),
                sims)
    finally:
        for cls in classes:
            del cls.vmap_local_term  # back to the inherited True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", default="digits_b10_p0.2",
                        help="a setting of config/quick.yaml")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3, help="turns of every algorithm (median)")
    parser.add_argument("--pack", action="store_true",
                        help="also train FedAvg, SCAFFOLD and FedDyn as one pack")
    parser.add_argument("--sequential", action="store_true",
                        help="batched: false for all (the reference path)")
    parser.add_argument("--reference-terms", action="store_true",
                        help="also time SCAFFOLD and FedDyn with their local terms on the "
                        "reference path (as before they were vmap-ed)")
    args = parser.parse_args()
    cfgs = configs(args.setting, args.rounds, batched=not args.sequential)
    data, model_name = load_dataset(next(iter(cfgs.values())))
    print(f"{args.setting}: {model_name}, {data.num_users} users, {args.rounds} rounds, momentum "
          f"0; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); median of {args.repeats} turns")
    rows = [(label, cfg, False) for label, cfg in cfgs.items()]
    if args.reference_terms:
        rows += [(f"{label} (ref.)", cfgs[label], True) for label in ("SCAFFOLD", "FedDyn")]
    times: dict[str, dict[str, list[float]]] = {label: {column: [] for column in COLUMNS}
                                                for label, _, _ in rows}
    paths: dict[str, str] = {}
    Scheduler.train = clocked(Scheduler.train)
    timed([cfgs["FedAvg"]], data, model_name)  # warm-up: first calls, allocations
    for _ in range(args.repeats):
        for label, cfg, reference in rows:
            seconds, (sim,) = timed([cfg], data, model_name, reference)
            for column in COLUMNS:
                times[label][column].append(seconds[column] / args.rounds)
            paths[label] = ("reference (as before: vmap_local_term = False)" if reference
                            else training_path(sim.inputs))
    median = {label: {column: statistics.median(values) for column, values in by_column.items()}
              for label, by_column in times.items()}
    print(f"{'algorithm':16} "
          + " ".join(f"{column + ' s/round':>20} {'x FedAvg':>8}"
                     for column in COLUMNS) + "  clients' path")
    for label, row in median.items():
        print(f"{label:16} "
              + " ".join(f"{row[column]:>20.4f} {row[column] / median['FedAvg'][column]:>7.2f}x"
                         for column in COLUMNS) + f"  {paths[label]}")
    if args.pack:  # FedProx's mu is part of its local training: it packs with FedProx runs only
        packable = [label for label in cfgs if label != "FedProx"]
        alone = sum(median[label]["wall"] for label in packable) * args.rounds
        packed = timed([cfgs[label] for label in packable], data, model_name)[0]["wall"]
        print(f"{', '.join(packable)} packed: {packed / args.rounds:.3f} s per round of all "
              f"{len(packable)} (wall); alone one "
              f"after another {alone / args.rounds:.3f} (packed throughput {alone / packed:.2f}x)")


if __name__ == "__main__":
    main()
