"""Round-time benchmark: batched (torch.func.vmap) against sequential client training.

    python benchmarks/bench_rounds.py                  # every dataset setting, this machine's device
    python benchmarks/bench_rounds.py --device cuda --fraction 1 --rounds 3
    python benchmarks/bench_rounds.py --only cifar10_b10_p0.1 fmnist_b10_p0.1
    python benchmarks/bench_rounds.py --device cuda --pack 8    # also 8 runs trained packed

For each setting of the paper it builds a federated dataset of random tensors with the real shapes
and per-user sizes (no download needed), runs a few rounds of the real simulator (client updates,
pre/post-round participant losses, aggregation with the min-norm QP), once with the sequential
reference path and once batched, in the same process, and prints seconds per round, rounds per
second and their ratio. ``--fraction f`` keeps only a fraction f of every client's training samples
(so a CPU finishes in minutes) and scales the measured round time by 1/f; the table says when a
time is extrapolated this way. The evaluation of every user's test split is timed separately.
``--pack K`` also times K runs (seeds 1..K) trained packed (``fedmgda.scheduler.run_packed``) and
prints their throughput against the same K runs trained one after another.

Finally the wall time of the whole paper DAG (config/config.yaml, every training run) is projected
from the measured round times: sum over runs of T x (round time + evaluation time / eval_every),
every run on this device, one after another. On a GPU it is followed by the plan's makespan
(``print_plan``): the workflow's jobs (packs and single runs) on the device ``device: auto`` gives
each (``fedmgda.devices``: Adult's logistic regression on a CPU core), list-scheduled on ``--gpus``
GPUs beside ``--cores`` CPU cores (``fedmgda.makespan``), with the CPU round times of the committed
table (src/fedmgda/reference/round_times.csv). ``--plan`` measures nothing and projects from that
table alone:

    python benchmarks/bench_rounds.py --plan --cores 16 --gpus 1

``--csv PATH --source FILE`` also writes the measured round times as rows of that table, to add to
it once the run's output is committed as FILE (the rows' ``source``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from fedmgda.config import RunConfig
from fedmgda.data import DATASET_SPECS
from fedmgda.data.base import FederatedDataset
from fedmgda.scheduler import Scheduler
from fedmgda.simulator import Simulation


@dataclass(frozen=True)
class Setting:
    name: str
    dataset: str
    batch_size: int | str
    per_round: int
    train_sizes: tuple[int, ...]  # per-user training samples
    test_size: int  # per-user test samples
    lr: float = 0.01


def femnist_sizes(users: int = 100, seed: int = 0) -> tuple[int, ...]:
    """Per-writer training sizes like FEMNIST's (mean ~209, long tail)."""
    rng = np.random.default_rng(seed)
    return tuple(int(s) for s in np.clip(rng.lognormal(np.log(190), 0.45, users), 20, 700))


SETTINGS = [
    Setting("cifar10_b10_p0.1", "cifar10", 10, 10, (400,) * 100, 50),
    Setting("cifar10_b10_p0.2", "cifar10", 10, 20, (400,) * 100, 50),
    Setting("cifar10_b400_p0.1", "cifar10", "full", 10, (400,) * 100, 50, lr=0.1),
    Setting("fmnist_b10_p0.1", "fmnist", 10, 10, (480,) * 100, 60),
    Setting("femnist_b20", "femnist", 20, 10, femnist_sizes(), 23, lr=0.1),
    Setting("femnist_full", "femnist", "full", 10, femnist_sizes(), 23, lr=0.1),
    Setting("shakespeare_b10", "shakespeare", 10, 31, (3000,) * 31, 750, lr=0.8),
    Setting("adult_b10", "adult", 10, 2, (330, 25718), 3215),
]


def random_dataset(setting: Setting, fraction: float, seed: int = 0) -> FederatedDataset:
    spec = DATASET_SPECS[setting.dataset]
    g = torch.Generator().manual_seed(seed)
    train = [max(1, math.ceil(fraction * n)) for n in setting.train_sizes]
    total = sum(train) + setting.test_size * len(train)
    if setting.dataset == "shakespeare":
        x = torch.randint(0, 80, (total, *spec.input_shape), generator=g)
    else:
        x = torch.randn(total, *spec.input_shape, generator=g)
    y = torch.randint(0, spec.num_classes, (total,), generator=g)
    train_idx, test_idx, start = [], [], 0
    for n in train:
        train_idx.append(torch.arange(start, start + n))
        test_idx.append(torch.arange(start + n, start + n + setting.test_size))
        start += n + setting.test_size
    return FederatedDataset(setting.dataset, x, y, train_idx, test_idx, spec.num_classes)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_config(setting: Setting, device: str, batched: bool, seed: int = 1) -> RunConfig:
    return RunConfig(dataset=setting.dataset, algorithm="fedmgda_plus", hparams={"eta": 1.0}, batch_size=setting.batch_size,
                     local_lr=setting.lr, clients_per_round=setting.per_round, rounds=10**6, eval_every=10**9,
                     per_user_every=10**9, device=device, batched=batched, seed=seed)


def packed_rounds(setting: Setting, data: FederatedDataset, batched: bool, device: str, pack: int = 1):
    """``pack`` runs of the setting (seeds 1..pack), their start models, and a function that
    trains one round of all of them, packed (the real simulator's round, less per-user evaluation)."""
    sims = [Simulation(bench_config(setting, device, batched, seed), data=data, model_name=DATASET_SPECS[setting.dataset].model) for seed in range(1, pack + 1)]
    scheduler = Scheduler([sim.inputs for sim in sims])  # checks that the runs can be packed
    for sim in sims[1:]:
        sim.share_samples(sims[0])  # as run_packed: one copy of the samples
    ws = [sim.model.initial_vector().to(sim.device) for sim in sims]

    def one_round(t: int) -> None:
        steps = [sim.round(w, t) for sim, w in zip(sims, ws)]
        pending = {i: next(step) for i, step in enumerate(steps)}
        while pending:  # training and participant-loss requests, until the round's end
            order = list(pending)
            for i, answer in zip(order, scheduler.serve([pending[i] for i in order])):
                try:
                    pending[i] = steps[i].send(answer)
                except StopIteration:  # the round's end: metrics row, next model
                    del pending[i]

    one_round(1)  # warm-up (allocations, first calls)
    if scheduler.vmap.graphs is not None:
        one_round(1)  # a client group's second sight is captured as a CUDA graph
    return sims, ws, one_round


def time_rounds(setting: Setting, data: FederatedDataset, batched: bool, rounds: int, device: str, pack: int = 1) -> tuple[float, float]:
    """Median seconds per round (training part, of all ``pack`` runs together) and seconds for one
    evaluation of every user."""
    sims, ws, one_round = packed_rounds(setting, data, batched, device, pack)
    times = []
    for t in range(2, 2 + rounds):
        sync(sims[0].device)
        start = time.perf_counter()
        one_round(t)
        sync(sims[0].device)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    sims[0].inputs.evaluate_users(ws[0])
    sync(sims[0].device)
    return statistics.median(times), time.perf_counter() - start


def profile_round(setting: Setting, data: FederatedDataset, device: str, rows: int = 15) -> None:
    """torch.profiler over one batched round after a warm-up: the costliest operators and the
    number of kernel launches (a launch-bound round shows many cheap kernels)."""
    from torch.profiler import ProfilerActivity, profile

    sims, _, one_round = packed_rounds(setting, data, True, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if sims[0].device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        one_round(2)
        sync(sims[0].device)
    key = "self_cuda_time_total" if sims[0].device.type == "cuda" else "self_cpu_time_total"
    print(f"\nprofile of one batched round of {setting.name}:")
    print(prof.key_averages().table(sort_by=key, row_limit=rows))
    if sims[0].device.type == "cuda":
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(f"kernel launches in the round: {len(kernels)}")


def match_setting(cfg: dict, names: set[str] | dict) -> tuple[Setting, int, str | None] | None:
    """The measured setting (of ``names``) nearest a run config: its dataset, the same kind of
    batch (full or minibatch), the nearest clients per round; with the run's clients per round and
    a note when the match is not exact (its times are scaled by the clients per round). None when
    no setting of the run's dataset is measured."""
    dataset, batch = cfg["dataset"], cfg.get("batch_size", 10)
    per_round = cfg.get("clients_per_round") or max(1, int(cfg.get("participation", 0.1) * (2 if dataset == "adult" else 31 if dataset == "shakespeare" else 100) + 1e-9))
    candidates = [s for s in SETTINGS if s.dataset == dataset and s.name in names]
    if not candidates:
        return None
    full_batch = batch in ("full", 400)  # CIFAR-10's b = 400 is its clients' full batch
    same_kind = [s for s in candidates if (s.batch_size == "full") == full_batch] or candidates
    chosen = min(same_kind, key=lambda s: abs(s.per_round - per_round))
    note = None
    if (chosen.batch_size == "full") != full_batch or chosen.per_round != per_round:
        note = f"{dataset} b={batch} n={per_round} ~ {chosen.name} x {per_round}/{chosen.per_round}"
    return chosen, per_round, note


def project_paper(per_setting: dict[str, tuple[float, float]], config: str = "config/config.yaml") -> tuple[dict[str, float], int, list[str]]:
    """Projected seconds per dataset for every training run of config/config.yaml, the run count,
    and the settings that had to be approximated by the nearest measured one."""
    from fedmgda.experiments import expand, load_config

    registry = expand(load_config(config))
    seconds: dict[str, float] = {}
    approximated, skipped = set(), 0
    for spec in registry.runs.values():
        cfg = spec.config
        match = match_setting(cfg, per_setting)
        if match is None:
            skipped += 1
            continue
        chosen, per_round, note = match
        if note:
            approximated.add(note)
        round_s, eval_s = per_setting[chosen.name]
        round_s *= per_round / chosen.per_round
        seconds[cfg["dataset"]] = seconds.get(cfg["dataset"], 0.0) + cfg["rounds"] * (round_s + eval_s / cfg.get("eval_every", 1))
    if skipped:
        approximated.add(f"{skipped} runs of datasets not measured here are left out of the total")
    return seconds, len(registry.runs), sorted(approximated)


def plan_jobs(rows, gpus: int = 1, config: str = "config/config.yaml"):
    """The paper DAG as the workflow's training jobs (``fedmgda.packs.assign_packs``: one job per
    pack, one per run outside packs), each a ``fedmgda.makespan.Job`` on the device
    ``device: auto`` gives it (``fedmgda.devices.choose_device`` over ``rows``; cpu with no GPU)
    and lasting its rounds x the pack's round time (``fedmgda.makespan.pack_round_seconds`` from the
    rows of its matched setting and device) plus each run's evaluations. Returns the jobs, the runs
    per dataset, and notes (approximations, runs left out)."""
    from fedmgda.devices import choose_device
    from fedmgda.experiments import expand, load_config
    from fedmgda.makespan import Job, pack_round_seconds
    from fedmgda.packs import assign_packs, pack_resources

    registry = expand(load_config(config))
    packs = assign_packs(registry.runs)
    in_pack = {k for keys in packs.values() for k in keys}
    groups = list(packs.items()) + [(k, [k]) for k in registry.runs if k not in in_pack]
    jobs, notes, skipped, runs = [], set(), {}, {}
    for name, keys in groups:
        specs = [registry.runs[k] for k in keys]
        cfg = specs[0].config
        dataset = cfg["dataset"]
        device = str(cfg.get("device") or "auto")
        if device == "auto":
            device = choose_device(dataset, cfg.get("model"), cuda_available=gpus > 0, table=rows)
        device = "cpu" if device == "cpu" else "cuda"
        match = match_setting(cfg, {r.setting for r in rows if r.device == device})
        if match is None:
            skipped[(dataset, device)] = skipped.get((dataset, device), 0) + len(keys)
            continue
        setting, per_round, note = match
        if note:
            notes.add(note)
        mine = [r for r in rows if r.setting == setting.name and r.device == device]
        round_s = pack_round_seconds({r.runs: r.s_per_round for r in mine}, len(keys)) * per_round / setting.per_round
        eval_s = max(r.eval_s for r in mine)
        seconds = max(s.config["rounds"] for s in specs) * round_s + sum(s.config["rounds"] * eval_s / s.config.get("eval_every", 1) for s in specs)
        jobs.append(Job(name, dataset, device, seconds, pack_resources(specs)["threads"]))
        runs[dataset] = runs.get(dataset, 0) + len(keys)
    for (dataset, device), n in sorted(skipped.items()):
        notes.add(f"{n} {dataset} runs ({device}) left out: no {device} round time measured for {dataset}")
    return jobs, runs, sorted(notes)


def run_rows(measured: dict[str, tuple[float, float]], packed: dict[str, float], pack: int, device: str, machine: str,
             threads: int = 1, source: str = "this run"):
    """This run's round times as rows of the round-time table (fedmgda.devices.RoundTime): per
    setting, 1 run batched, and ``pack`` runs packed where timed."""
    from fedmgda.devices import RoundTime

    by_name = {s.name: s for s in SETTINGS}
    rows = []
    for setting_name, (batched, eval_s) in measured.items():
        setting = by_name[setting_name]
        model = DATASET_SPECS[setting.dataset].model
        rows.append(RoundTime(setting_name, setting.dataset, model, device, machine, threads, 1, batched, eval_s, source))
        if setting_name in packed:
            rows.append(RoundTime(setting_name, setting.dataset, model, device, machine, threads, pack, packed[setting_name], eval_s, source))
    return rows


def write_rows(rows, path: str) -> None:
    """Rows in the format of src/fedmgda/reference/round_times.csv (to add to it, naming the
    committed measurement file in ``source``)."""
    import csv
    import dataclasses

    from fedmgda.devices import RoundTime

    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([field.name for field in dataclasses.fields(RoundTime)])
        for r in rows:
            writer.writerow([f"{v:.3f}" if isinstance(v, float) else v for v in dataclasses.astuple(r)])


def measured_rows(measured: dict[str, tuple[float, float]], packed: dict[str, float], pack: int, machine: str):
    """This run's GPU round times as rows of the round-time table (1 run, and ``pack`` runs where
    timed), with the committed table's CPU rows (fedmgda.devices.round_times)."""
    from fedmgda.devices import round_times

    return [r for r in round_times() if r.device == "cpu"] + run_rows(measured, packed, pack, "cuda", machine)


def print_choices(rows) -> None:
    """Per measured setting: seconds per run-round (evaluation included) on each device, alone and
    in the best measured pack, and the device ``device: auto`` takes on a GPU machine, before
    (always the GPU) and now (fedmgda.devices.choose_device over ``rows``)."""
    from fedmgda.devices import choose_device

    print(f"\n{'setting':20} {'GPU 1 run':>10} {'GPU packed':>11} {'CPU':>9}  auto before  auto now   (s per run-round)")
    for setting in SETTINGS:
        mine = [r for r in rows if r.setting == setting.name]
        if not mine:
            continue

        def best(device, runs=None, mine=mine):
            times = [r.per_run_round() for r in mine if r.device == device and (runs is None or r.runs == runs)]
            return f"{min(times):.4f}" if times else "-"

        packed = [r for r in mine if r.device == "cuda" and r.runs > 1]
        model = mine[0].model
        now = choose_device(setting.dataset, model, cuda_available=True, table=rows)
        label = f"{best('cuda', max(r.runs for r in packed))} x{max(r.runs for r in packed)}" if packed else "-"
        print(f"{setting.name:20} {best('cuda', 1):>10} {label:>11} {best('cpu'):>9}  {'cuda':11}  {now}")


def print_plan(rows, cores: int, gpus: int, config: str = "config/config.yaml") -> None:
    """The paper DAG's makespan as the workflow would run it on ``gpus`` GPUs and ``cores`` CPU
    cores (fedmgda.makespan.schedule), per dataset and in all, beside today's projection: every run
    on the GPU, batched, one after another (:func:`project_paper`)."""
    from fedmgda.makespan import makespan_by_dataset, schedule

    singles = {r.setting: (r.s_per_round, r.eval_s) for r in rows if r.device == "cuda" and r.runs == 1}
    back, total_runs, back_notes = project_paper(singles, config) if singles else ({}, 0, [])
    jobs, runs, notes = plan_jobs(rows, gpus, config)
    alone = makespan_by_dataset(jobs, cores, gpus)
    together = schedule(jobs, cores, gpus)
    print(f"\nplan: the paper DAG's training jobs on {gpus} GPU(s) and {cores} CPU cores "
          f"(snakemake --cores {cores} --resources gpu={gpus}), list-scheduled longest first; a projection from round times")
    print(f"{'dataset':12} {'runs':>5} {'jobs':>5} {'device':>7} {'back to back h':>15} {'plan alone h':>13} {'ends in plan h':>15}")
    for dataset in sorted(runs, key=lambda d: -alone[d]):
        mine = [j for j in jobs if j.dataset == dataset]
        devices = "/".join(sorted({j.device for j in mine}))
        print(f"{dataset:12} {runs[dataset]:>5} {len(mine):>5} {devices:>7} {back.get(dataset, float('nan')) / 3600:>15.1f} "
              f"{alone[dataset] / 3600:>13.2f} {together.finish(mine) / 3600:>15.2f}")
    gpu_busy = sum(j.seconds for j in jobs if j.device == "cuda")
    print(f"{'all':12} {sum(runs.values()):>5} {len(jobs):>5} {'':>7} {sum(back.values()) / 3600:>15.1f} {alone['all'] / 3600:>13.2f} "
          f"{together.makespan / 3600:>15.2f}")
    print(f"  back to back: every run on the GPU, batched, one after another ({total_runs} runs; the projection above); "
          f"GPU busy in the plan: {gpu_busy / 3600:.2f} h")
    for line in sorted(set(notes) | {n for n in back_notes if "left out" in n}):
        print(f"  note: {line}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per setting and path (median)")
    parser.add_argument("--fraction", type=float, default=1.0, help="keep this fraction of each client's samples and scale round times by 1/fraction (approximate: fixed per-round costs are scaled too)")
    parser.add_argument("--fraction-of", nargs="*", default=[], metavar="SETTING=F", help="a fraction for one setting (e.g. shakespeare_b10=0.05, whose sequential path is slow)")
    parser.add_argument("--only", nargs="*", help="setting names")
    parser.add_argument("--profile", action="store_true", help="also profile one batched round of each setting")
    parser.add_argument("--pack", type=int, default=1, help="also time K runs (seeds 1..K) trained packed, and print their throughput against K batched runs one after another")
    parser.add_argument("--plan", action="store_true", help="measure nothing: project the paper DAG's makespan on --cores and --gpus from the committed round times (src/fedmgda/reference/round_times.csv)")
    parser.add_argument("--cores", type=int, default=16, help="CPU cores of the machine the plan is projected on")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of the machine the plan is projected on")
    parser.add_argument("--csv", metavar="PATH", help="also write this run's round times as rows of src/fedmgda/reference/round_times.csv (source: --source)")
    parser.add_argument("--source", default="this run", help="the source column of --csv's rows: the measurement file they will be committed as")
    return parser.parse_args()


def show_committed_plan(args: argparse.Namespace) -> None:
    """--plan: the projection from the committed round times, nothing measured."""
    from fedmgda.devices import round_times

    rows = round_times()
    print("round times: src/fedmgda/reference/round_times.csv")
    for source in sorted({(r.device, r.machine, r.source) for r in rows}):
        print(f"  {source[0]:5} {source[1]}: {source[2]}")
    print_choices(rows)
    print_plan(rows, args.cores, args.gpus)


def main() -> None:
    args = parse_args()
    if args.plan:
        show_committed_plan(args)
        return
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto" else args.device))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"device: {name}; torch {torch.__version__}; CUDA graphs: {device.type == 'cuda'}")
    measured, packed_s = measure_settings(args, device)
    if measured and args.csv:
        write_rows(run_rows(measured, packed_s, args.pack, device.type, name, 1 if device.type == "cuda" else torch.get_num_threads(), args.source), args.csv)
    if measured:
        print_projection(measured, packed_s, args, device, name)


def measure_settings(args: argparse.Namespace, device: torch.device) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """Time every chosen setting (sequential, batched, packed): {setting: (batched s/round, eval s)}
    and {setting: packed s/round}, printing a row per setting as it is measured."""
    fractions = {name: float(f) for name, f in (item.split("=") for item in args.fraction_of)}
    print(f"{'setting':22} {'clients':>7} {'samples kept':>12} {'sequential s/round':>19} {'batched s/round':>16} {'speed-up':>9} {'batched rounds/s':>17} {'eval s':>7}")
    measured: dict[str, tuple[float, float]] = {}
    packed_s: dict[str, float] = {}
    for setting in SETTINGS:
        if args.only and setting.name not in args.only:
            continue
        fraction = fractions.get(setting.name, args.fraction)
        torch.manual_seed(0)
        data = random_dataset(setting, fraction)
        try:
            seq, eval_s = time_rounds(setting, data, batched=False, rounds=args.rounds, device=str(device))
            bat, _ = time_rounds(setting, data, batched=True, rounds=args.rounds, device=str(device))
        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:  # report it, measure the rest
            print(f"{setting.name:22} failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}", flush=True)
            continue
        seq, bat = seq / fraction, bat / fraction
        measured[setting.name] = (bat, eval_s)
        kept = "all" if fraction == 1 else f"{fraction:g} (x1/f)"
        print(f"{setting.name:22} {setting.per_round:>7} {kept:>12} {seq:>19.3f} {bat:>16.3f} {seq / bat:>8.2f}x {1 / bat:>17.3f} {eval_s:>7.3f}", flush=True)
        if args.pack > 1:
            packed = time_rounds(setting, data, batched=True, rounds=args.rounds, device=str(device), pack=args.pack)[0] / fraction
            print(f"{'':22} {args.pack} runs packed: {packed:.3f} s per round of all {args.pack} "
                  f"(throughput {args.pack * bat / packed:.2f}x that of the runs one after another)", flush=True)
            packed_s[setting.name] = packed
        if args.profile:
            profile_round(setting, data, str(device))
    return measured, packed_s


def print_projection(measured: dict[str, tuple[float, float]], packed_s: dict[str, float], args: argparse.Namespace, device: torch.device, name: str) -> None:
    """The paper DAG back to back from these round times; on a GPU also the plan's makespan."""
    seconds, runs, approximated = project_paper(measured)
    print(f"\nprojected wall time of the paper DAG ({runs} training runs, batched path, one device, runs back to back): "
          f"{sum(seconds.values()) / 3600:.1f} h")
    print("  by dataset: " + ", ".join(f"{dataset} {s / 3600:.1f} h" for dataset, s in sorted(seconds.items(), key=lambda kv: -kv[1])))
    for line in approximated:
        print(f"  approximated: {line}")
    if device.type == "cuda":  # the plan: these GPU times, the committed CPU times (one core each)
        print_plan(measured_rows(measured, packed_s, args.pack, name), args.cores, args.gpus)

if __name__ == "__main__":
    main()
