"""Round-time benchmark: batched (torch.func.vmap) against sequential client training.

    python benchmarks/bench_rounds.py           # every dataset setting, this machine's device
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
GPUs beside ``--cores`` CPU cores (``benchmarks/makespan.py``), with the CPU round times of the
committed table (src/fedmgda/reference/round_times.csv). ``--plan`` measures nothing and projects
from that table alone:

    python benchmarks/bench_rounds.py --plan --cores 16 --gpus 1

``--bound`` then prints each setting's batched round beside a lower bound of the same work: the
longest client's local steps, each one SGD step of one model on all the round's clients' samples of
that step as one batch, replayed as a CUDA graph on a GPU (the Shakespeare LSTM through cuDNN),
and the ratio (the goal: within 3x, or the reason measured). ``--profile`` ends with one profiled
round per setting: its costliest operators and one line on where its time went (GPU kernels,
copies, kernel and graph launches, host synchronisations).

``--flops`` measures nothing: each setting's work (``benchmarks/flops.py``: the matrix products and
convolutions of its forward and backward passes), the rate its committed GPU round times reach on
it, and the paper DAG's work, with the sustained rate 8 h would take. With ``--bound`` the run
also measures this device's float32 matrix-product rate and prints the DAG's work at it: a floor.

``--csv PATH --source FILE`` also writes the measured round times as rows of that table, to add to
it once the run's output is committed as FILE (the rows' ``source``); the file is rewritten after
each setting, so a run stopped early keeps the rows of the settings it measured.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedmgda.config import RunConfig
from fedmgda.data import DATASET_SPECS
from fedmgda.data.base import FederatedDataset
from fedmgda.scheduler import Scheduler, batched_path
from fedmgda.simulator import Simulation

sys.path.insert(0, str(Path(__file__).resolve().parent))  # makespan.py, flops.py: beside it


@dataclass
class TimeLimit:
    """``--time-limit``: the benchmark's stages start only while their share of it is left, so a
    run under a hard limit (a job's time limit on a GPU machine) ends with the stages it had time
    for instead of being killed in one: the settings' timings before ``SETTINGS_SHARE`` of it, the
    lower bounds before ``BOUNDS_SHARE``, the profiles before ``PROFILES_SHARE``. None: no limit."""

    seconds: float | None
    start: float = field(default_factory=lambda: time.monotonic())

    SETTINGS_SHARE = 0.6
    BOUNDS_SHARE = 0.8
    PROFILES_SHARE = 0.95

    def allows(self, share: float, what: str, need: float = 0.0) -> bool:
        """Whether a stage that takes about ``need`` seconds may start and end within ``share``."""
        used = time.monotonic() - self.start
        if self.seconds is None or used + need < share * self.seconds:
            return True
        print(f"time limit: {what} skipped ({used:.0f} s used of {self.seconds:.0f})", flush=True)
        return False


@dataclass(frozen=True)
class Setting:
    name: str
    dataset: str
    batch_size: int | str
    per_round: int
    train_sizes: tuple[int, ...]  # per-user training samples
    test_size: int  # per-user test samples
    lr: float = 0.01
    sampling: str = "uniform"  # how a round's clients are drawn (RunConfig.sampling)
    # the dataset option ``sizes`` of the runs it times, where the dataset has one
    sizes_option: str = ""
    # non-empty: why this setting's round is only a lower bound of its dataset's real round; it
    # stands in for the dataset in projections until a real setting is measured, and is not
    # measured unless named by --only
    stand_in: str = ""


def femnist_sizes(users: int = 100, seed: int = 0) -> tuple[int, ...]:
    """Per-writer training sizes like FEMNIST's (mean ~209, long tail)."""
    rng = np.random.default_rng(seed)
    return tuple(int(s) for s in np.clip(rng.lognormal(np.log(190), 0.45, users), 20, 700))


def shakespeare_sizes(users: int = 31, mean: float = 3749, stdev: float = 6912,
                      total: int = 116_214, train_fraction: float = 0.8) -> tuple[int, ...]:
    """Per-role training sizes like the Shakespeare of q-FFL / FedMGDA+ (no RNG): the q-FFL
    paper's Table 4 gives 31 devices, 116 214 samples, mean 3 749 and stdev 6 912 per device
    (train and test); LEAF cuts each role 80 / 20 (``-tf 0.8 -t sample``; FedMGDA+ Table 1: 92 959
    training samples). The sizes are the ``users`` mid-quantiles of a log-normal whose spread is
    solved so that their population stdev / mean is Table 4's, scaled to ``total``, then 80 %."""
    from statistics import NormalDist, fmean, pstdev

    z = [NormalDist().inv_cdf((i + 0.5) / users) for i in range(users)]

    def spread(sigma: float) -> float:
        values = [math.exp(sigma * q) for q in z]
        return pstdev(values) / fmean(values)

    low, high = 0.1, 5.0
    for _ in range(100):  # bisection: the spread grows with sigma
        mid = (low + high) / 2
        low, high = (mid, high) if spread(mid) < stdev / mean else (low, mid)
    values = [math.exp(low * q) for q in z]
    scale = total / sum(values)
    return tuple(max(1, round(train_fraction * v * scale)) for v in values)


def synthetic_sizes(sizes_option: str = "table4", users: int = 100, data_seed: int = 0,
                    train_fraction: float = 0.8) -> tuple[int, ...]:
    """Per-device training sizes of q-FFL's Synthetic(1, 1) as config/config.yaml draws them
    (``fedmgda.data.synthetic.generate``, data seed 0; Table 11 with sizes ``table4``, its variant
    with ``script``), 80 % for training."""
    from fedmgda.data.synthetic import SIZE_FLOOR, size_lognormal

    draws = np.random.RandomState(data_seed).lognormal(*size_lognormal(sizes_option), users)
    sizes = draws.astype(int) + SIZE_FLOOR
    return tuple(max(1, int(train_fraction * n)) for n in sizes)


SETTINGS = [
    Setting("cifar10_b10_p0.1", "cifar10", 10, 10, (400,) * 100, 50),
    Setting("cifar10_b10_p0.2", "cifar10", 10, 20, (400,) * 100, 50),
    Setting("cifar10_b400_p0.1", "cifar10", "full", 10, (400,) * 100, 50, lr=0.1),
    Setting("fmnist_b10_p0.1", "fmnist", 10, 10, (480,) * 100, 60),
    Setting("femnist_b20", "femnist", 20, 10, femnist_sizes(), 23, lr=0.1),
    Setting("femnist_full", "femnist", "full", 10, femnist_sizes(), 23, lr=0.1),
    Setting("shakespeare_b10", "shakespeare", 10, 31, shakespeare_sizes(), 750, lr=0.8),
    # the setting of round_times.csv's H200 Shakespeare rows: equal client sizes, not the real ones
    Setting("shakespeare_b10_equal", "shakespeare", 10, 31, (3000,) * 31, 750, lr=0.8,
            stand_in="equal client sizes, 300 local steps each; the real roles' heavy tail "
                     "(q-FFL Table 4: stdev 6 912 per device, mean 3 749) gives the longest client "
                     "2 000+ steps a round"),
    Setting("adult_b10", "adult", 10, 2, (330, 25718), 3215),
    # q-FFL Table 2 (3 devices, one class each: F-MNIST's 6 000 train and 1 000 t10k images per
    # class, full batch) and Table 11 (Synthetic, 100 devices, 10 a round, minibatch 10); timed with
    # FedMGDA+'s round like the rest: the same local steps as q-FedAvg's, whose server step is as
    # cheap
    Setting("fmnist3_full", "fmnist3", "full", 3, (6000,) * 3, 1000, lr=0.001),
    Setting("synthetic_b10", "synthetic", 10, 10, synthetic_sizes("table4"), 13, lr=0.1,
            sampling="size", sizes_option="table4"),
    Setting("synthetic_b10_script", "synthetic", 10, 10, synthetic_sizes("script"), 41, lr=0.1,
            sampling="size", sizes_option="script"),
]


def random_batch(setting: Setting, n: int, device: torch.device,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random samples of the setting's shapes (Shakespeare: symbol ids) and labels."""
    spec = DATASET_SPECS[setting.dataset]
    if setting.dataset == "shakespeare":
        x = torch.randint(0, 80, (n, *spec.input_shape), generator=generator, device=device)
    else:
        x = torch.randn(n, *spec.input_shape, generator=generator, device=device)
    return x, torch.randint(0, spec.num_classes, (n,), generator=generator, device=device)


def random_dataset(setting: Setting, fraction: float, seed: int = 0) -> FederatedDataset:
    spec = DATASET_SPECS[setting.dataset]
    g = torch.Generator().manual_seed(seed)
    train = [max(1, math.ceil(fraction * n)) for n in setting.train_sizes]
    x, y = random_batch(setting, sum(train) + setting.test_size * len(train), torch.device("cpu"),
                        g)
    train_idx, test_idx, start = [], [], 0
    for n in train:
        train_idx.append(torch.arange(start, start + n))
        test_idx.append(torch.arange(start + n, start + n + setting.test_size))
        start += n + setting.test_size
    return FederatedDataset(setting.dataset, x, y, train_idx, test_idx, spec.num_classes)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_config(setting: Setting, device: str, batched: bool,
                 seed: int = 1, **overrides) -> RunConfig:
    return RunConfig(**overrides, dataset=setting.dataset, algorithm="fedmgda_plus",
                     hparams={"eta": 1.0}, batch_size=setting.batch_size, local_lr=setting.lr,
                     clients_per_round=setting.per_round, sampling=setting.sampling, rounds=10**6,
                     eval_every=10**9, per_user_every=10**9, device=device, batched=batched,
                     seed=seed)


def packed_rounds(setting: Setting, data: FederatedDataset, batched: bool, device: str,
                  pack: int = 1, max_padding: float | None = None, overrides: dict | None = None):
    """``pack`` runs of the setting (seeds 1..pack), their start models, and a function that
    trains one round of all of them, packed (the real simulator's round, less per-user evaluation);
    ``max_padding``: the scheduler's size-group padding, if not its default; ``overrides``: run
    config fields (e.g. ``deterministic``)."""
    sims = [Simulation(bench_config(setting, device, batched, seed, **(overrides or {})), data=data,
                       model_name=DATASET_SPECS[setting.dataset].model)
            for seed in range(1, pack + 1)]
    scheduler = Scheduler([sim.inputs for sim in sims])  # checks that the runs can be packed
    if max_padding is not None:
        scheduler.max_padding = max_padding
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

    sync(sims[0].device)
    start = time.perf_counter()
    one_round(1)  # warm-up (allocations, first calls)
    if scheduler.vmap.graphs is not None:
        one_round(1)  # a client group's second sight is captured as a CUDA graph
    sync(sims[0].device)
    one_round.warm_up_s = time.perf_counter() - start  # what a run pays once (time_rounds' warm_up)
    return sims, ws, one_round


def time_rounds(setting: Setting, data: FederatedDataset, batched: bool, rounds: int, device: str,
                pack: int = 1, max_padding: float | None = None, overrides: dict | None = None,
                warm_up: list | None = None) -> tuple[float, float]:
    """Median seconds per round (training part, of all ``pack`` runs together) and seconds for one
    evaluation of every user; the untimed warm-up rounds' seconds appended to ``warm_up``, if
    given."""
    sims, ws, one_round = packed_rounds(setting, data, batched, device, pack, max_padding,
                                        overrides)
    if warm_up is not None:
        warm_up.append(one_round.warm_up_s)
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
    """torch.profiler over one batched round after a warm-up: the costliest operators and where
    the round's time goes (``profile_shares``: kernels, copies, launches, host syncs)."""
    from torch.profiler import ProfilerActivity, profile

    sims, _, one_round = packed_rounds(setting, data, True, device)
    on_gpu = sims[0].device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        one_round(2)
        sync(sims[0].device)
        wall = time.perf_counter() - start
    key = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    print(f"\nprofile of one batched round of {setting.name}:")
    print(prof.key_averages().table(sort_by=key, row_limit=rows))
    events = [(e.name, e.device_type == torch.autograd.DeviceType.CUDA, e.time_range.elapsed_us())
              for e in prof.events()]
    print(f"{setting.name}: {profile_shares(events, wall)}", flush=True)


# CUDA runtime calls on the host, by what they do (names as the profiler records them)
LAUNCH_CALLS = {"cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"}
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}
COPY_CALLS = {"cudaMemcpy", "cudaMemcpyAsync"}


def profile_shares(events: list[tuple[str, bool, float]], wall: float) -> str:
    """Where a profiled round's ``wall`` seconds went, in one line, from its events (name, on the
    GPU, microseconds): GPU time in kernels and in copies (summed, so concurrent kernels count
    twice), kernel and graph launches, and the host's synchronisations and copies (each waits for
    the GPU). On a CPU (no GPU events) it says so."""
    device = [(name, us) for name, on_gpu, us in events if on_gpu]
    if not device:
        return f"round {wall:.3f} s, all on the CPU (no GPU events)"
    copy_us = sum(us for name, us in device if "memcpy" in name.lower() or "memset" in name.lower())
    kernel_us = sum(us for _, us in device) - copy_us
    host = [(name, us) for name, on_gpu, us in events if not on_gpu]
    launches = sum(name in LAUNCH_CALLS for name, _ in host)
    graphs = sum(name == "cudaGraphLaunch" for name, _ in host)
    syncs = [us for name, us in host if name in SYNC_CALLS or name in COPY_CALLS]
    return (f"round {wall:.3f} s (profiled): GPU kernels {kernel_us / 1e6:.3f} s "
            f"({100 * kernel_us / 1e6 / wall:.0f} %), copies {copy_us / 1e6:.3f} s; {launches} "
            f"kernel launches, {graphs} graph launches; {len(syncs)} host syncs or copies "
            f"({sum(syncs) / 1e6:.3f} s)")


# --------------------------------------------------------------------------- lower bounds
@dataclass(frozen=True)
class Bound:
    """A round's lower bound: ``steps`` SGD steps of one model on ``batch`` samples each, one step
    taking ``step_s`` seconds as ``timed_as`` (CUDA graph or eager), and the pre- and post-round
    participant losses (two forward passes over the participants' samples) in ``losses_s``."""
    steps: int
    batch: int
    step_s: float
    losses_s: float
    timed_as: str

    @property
    def seconds(self) -> float:
        return self.steps * self.step_s + self.losses_s


def bound_shape(setting: Setting) -> tuple[int, int, int]:
    """The bound's sequential steps, their batch, and the samples of one participant-loss pass:
    the longest client's steps of one local epoch (every client's whole data, not ``--fraction``'s),
    each on all the round's clients' samples of a step as one batch (clients x b; a full batch:
    one step of clients x the mean client size); the losses over clients x the mean client size."""
    samples = setting.per_round * round(statistics.mean(setting.train_sizes))
    if setting.batch_size == "full":
        return 1, samples, samples
    steps = math.ceil(max(setting.train_sizes) / setting.batch_size)
    return steps, setting.per_round * setting.batch_size, samples


def bound_step(setting: Setting, batch: int, device: torch.device):
    """One SGD step (momentum 0.5, foreach updates) of the setting's model on ``batch`` random
    samples, as a function of (x, y), its inputs, and the model. The Shakespeare LSTM runs through
    nn.LSTM's fused kernels (``forward_fused``: cuDNN on a GPU), the same function."""
    import torch.nn.functional as F

    from fedmgda.models import build_model

    spec = DATASET_SPECS[setting.dataset]
    torch.manual_seed(0)
    model = build_model(spec.model, spec.input_shape, spec.num_classes).to(device).train()
    forward = getattr(model, "forward_fused", model)
    params = list(model.parameters())
    momenta = [torch.zeros_like(p) for p in params]

    def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        loss = F.nll_loss(forward(x), y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            torch._foreach_mul_(momenta, 0.5)
            torch._foreach_add_(momenta, grads)
            torch._foreach_add_(params, momenta, alpha=-setting.lr)
        return (loss.detach(),)

    return step, random_batch(setting, batch, device), model


def loss_pass(setting: Setting, model: torch.nn.Module, samples: int, device: torch.device,
              chunk: int = 8192):
    """One participant-loss pass: the summed NLL of ``samples`` random samples, forward only, in
    chunks of at most ``chunk`` (the model in eval mode)."""
    import torch.nn.functional as F

    forward = getattr(model, "forward_fused", model)
    x, y = random_batch(setting, min(samples, chunk), device)
    sizes = [chunk] * (samples // chunk) + ([samples % chunk] if samples % chunk else [])

    @torch.no_grad()
    def run() -> torch.Tensor:
        model.eval()
        total = sum(F.nll_loss(forward(x[:n]), y[:n], reduction="sum") for n in sizes)
        model.train()
        return total

    return run


def timed(call, device: torch.device, reps: int) -> float:
    """Seconds per call, over ``reps`` calls (the device synchronised around them)."""
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        call()
    sync(device)
    return (time.perf_counter() - start) / reps


def round_bound(setting: Setting, device: torch.device, reps: int | None = None) -> Bound:
    """The setting's lower bound (``bound_shape``): its step timed over ``reps`` calls after two
    (the second captures it as a CUDA graph on a GPU: ``fedmgda.fastpaths.CudaGraphs``), its
    loss pass after one."""
    from fedmgda.fastpaths import CudaGraphs

    steps, batch, samples = bound_shape(setting)
    step, inputs, model = bound_step(setting, batch, device)
    graphs = CudaGraphs(capacity=1) if device.type == "cuda" else None
    call = ((lambda: graphs("bound", step, inputs)) if graphs is not None
            else (lambda: step(*inputs)))
    call()
    call()
    timed_as = ("eager" if graphs is None else "CUDA graph" if "bound" in graphs.graphs
                else "eager (capture failed)")
    reps = reps or (20 if device.type == "cuda" else 2)
    step_s = timed(call, device, reps)
    losses = loss_pass(setting, model, samples, device)
    losses()
    return Bound(steps, batch, step_s, 2 * timed(losses, device, max(1, reps // 4)), timed_as)


def print_bounds(measured: dict[str, tuple[float, float]], device: torch.device,
                 within: float = 3.0, limit: TimeLimit | None = None) -> None:
    """Each measured setting's batched round beside its lower bound (``round_bound``) and their
    ratio; the last line counts the settings within ``within`` x their bound."""
    print("\nlower bounds: the longest client's local steps, each one SGD step of one model on all "
          "the round's clients' samples of that step as one batch, and two forward passes over the "
          "participants' samples (the pre- and post-round losses)")
    print(f"{'setting':20} {'batched s/round':>15} {'steps':>6} {'batch':>6} {'step ms':>8} "
          f"{'timed as':>12} {'losses s':>9} {'bound s/round':>13} {'ratio':>7}")
    ratios = {}
    for setting in SETTINGS:
        if setting.name not in measured:
            continue
        if limit and not limit.allows(limit.BOUNDS_SHARE,
                                      f"the bounds of {setting.name} and the settings after it"):
            break
        try:
            bound = round_bound(setting, device)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
            print(f"{setting.name:20} bound failed: {type(error).__name__}: "
                  f"{str(error).splitlines()[0][:200]}", flush=True)
            continue
        batched = measured[setting.name][0]
        ratios[setting.name] = batched / bound.seconds
        print(f"{setting.name:20} {batched:>15.3f} {bound.steps:>6} {bound.batch:>6} "
              f"{1e3 * bound.step_s:>8.3f} {bound.timed_as:>12} {bound.losses_s:>9.4f} "
              f"{bound.seconds:>13.4f} {ratios[setting.name]:>6.1f}x", flush=True)
    if ratios:
        inside = sorted(name for name, r in ratios.items() if r <= within)
        print(f"within {within:g}x of the bound: {len(inside)} of {len(ratios)} settings "
              f"({', '.join(inside) or 'none'})")


def match_setting(cfg: dict, names: set[str] | dict) -> tuple[Setting, int, str | None] | None:
    """The measured setting (of ``names``) nearest a run config: its dataset, the same kind of
    batch (full or minibatch), the nearest clients per round; with the run's clients per round and
    a note when the match is not exact (its times are scaled by the clients per round). None when
    no setting of the run's dataset is measured."""
    dataset, batch = cfg["dataset"], cfg.get("batch_size", 10)
    sizes_option = (cfg.get("dataset_options") or {}).get("sizes", "")
    candidates = [s for s in SETTINGS if s.dataset == dataset and s.name in names
                  and s.sizes_option in ("", sizes_option)]
    # a real setting where measured
    candidates = [s for s in candidates if not s.stand_in] or candidates
    if not candidates:
        return None
    # the dataset's (every setting of a dataset has its users)
    users = len(candidates[0].train_sizes)
    per_round = (cfg.get("clients_per_round")
                 or max(1, int(cfg.get("participation", 0.1) * users + 1e-9)))
    full_batch = batch in ("full", 400)  # CIFAR-10's b = 400 is its clients' full batch
    same_kind = [s for s in candidates if (s.batch_size == "full") == full_batch] or candidates
    chosen = min(same_kind, key=lambda s: abs(s.per_round - per_round))
    notes = []
    if chosen.stand_in:
        notes.append(f"{dataset}: a lower bound, {chosen.name} stands in ({chosen.stand_in})")
        real = [s for s in SETTINGS if s.dataset == dataset and not s.stand_in
                and s.batch_size == chosen.batch_size]
        if real:
            ratio = grouped_steps(real[0]) / grouped_steps(chosen)
            notes.append(f"{dataset}: a round of {real[0].name} takes {grouped_steps(real[0])} "
                         f"sequential local steps in size groups ({longest_steps(real[0])} in one, "
                         f"--max-padding inf), the stand-in's {grouped_steps(chosen)}; if a step "
                         "cost the same at any width (bound by kernel launches), its rounds would "
                         f"take up to {ratio:.1f}x the stand-in's (not measured)")
    if (chosen.batch_size == "full") != full_batch or chosen.per_round != per_round:
        notes.append(f"{dataset} b={batch} n={per_round} ~ {chosen.name} x "
                     f"{per_round}/{chosen.per_round}")
    return chosen, per_round, "; ".join(notes) or None


def paper_runs(measured, config: str = "config/config.yaml"
               ) -> tuple[list[tuple[dict, Setting, float, str]], int]:
    """The paper DAG's training runs, each matched to one of the ``measured`` settings (names):
    (run config, setting, its steps per round, the approximation note or ''), and the count of
    runs of settings not measured."""
    from fedmgda.experiments import expand, load_config

    matched, skipped = [], 0
    for spec in expand(load_config(config)).runs.values():
        match = match_setting(spec.config, measured)
        if match is None:
            skipped += 1
        else:
            matched.append((spec.config, *match))
    return matched, skipped


def project_paper(per_setting: dict[str, tuple[float, float]],
                  config: str = "config/config.yaml") -> tuple[dict[str, float], int, list[str]]:
    """Projected seconds per dataset for every training run of config/config.yaml, the run count,
    and the settings that had to be approximated by the nearest measured one."""
    matched, skipped = paper_runs(per_setting, config)
    seconds: dict[str, float] = {}
    approximated = {note for *_, note in matched if note}
    for cfg, chosen, per_round, _ in matched:
        round_s, eval_s = per_setting[chosen.name]
        round_s *= per_round / chosen.per_round
        run_s = cfg["rounds"] * (round_s + eval_s / cfg.get("eval_every", 1))
        seconds[cfg["dataset"]] = seconds.get(cfg["dataset"], 0.0) + run_s
    if skipped:
        approximated.add(f"{skipped} runs of datasets not measured here are left out of the total")
    return seconds, len(matched) + skipped, sorted(approximated)


def plan_jobs(rows, gpus: int = 1, config: str = "config/config.yaml"):
    """The paper DAG as the workflow's training jobs (``fedmgda.packs.assign_packs``: one job per
    pack, one per run outside packs), each a ``makespan.Job`` on the device
    ``device: auto`` gives it (``fedmgda.devices.choose_device`` over ``rows``; cpu with no GPU)
    and lasting its rounds x the pack's round time (``makespan.pack_round_seconds`` from the
    rows of its matched setting and device) plus each run's evaluations. Returns the jobs, the runs
    per dataset, and notes (approximations, runs left out)."""
    from makespan import Job, pack_round_seconds

    from fedmgda.devices import choose_device, split_variants
    from fedmgda.experiments import expand, load_config
    from fedmgda.packs import assign_packs, pack_resources

    rows, variants = split_variants(rows)
    registry = expand(load_config(config))
    packs = assign_packs(registry.runs)
    in_pack = {k for keys in packs.values() for k in keys}
    groups = list(packs.items()) + [(k, [k]) for k in registry.runs if k not in in_pack]
    jobs, notes, skipped, runs, untimed = [], set(), {}, {}, 0
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
        factor, timed = variant_factor(variants, mine, cfg)
        untimed += 0 if timed or cfg["track_improvement"] else len(keys)
        pack_s = pack_round_seconds({r.runs: r.s_per_round for r in mine}, len(keys))
        round_s = pack_s * per_round / setting.per_round * factor
        eval_s = max(r.eval_s for r in mine)
        seconds = (max(s.config["rounds"] for s in specs) * round_s
                   + sum(s.config["rounds"] * eval_s / s.config.get("eval_every", 1)
                         for s in specs))
        jobs.append(Job(name, dataset, device, seconds, pack_resources(specs)["threads"]))
        runs[dataset] = runs.get(dataset, 0) + len(keys)
    for (dataset, device), n in sorted(skipped.items()):
        notes.add(f"{n} {dataset} runs ({device}) left out: no {device} round time measured "
                  f"for {dataset}")
    if untimed:  # bench_config's rounds track it: their times include the passes
        notes.add(f"{untimed} runs do not record the improved fraction (track_improvement: false), "
                  "but their rounds are timed with its two participant-loss passes, as the "
                  "benchmark runs them (not measured without)")
    if any(r.also for r in variants):
        notes.add("a run whose config has a field as a --also row of its setting has (e.g. "
                  "track_improvement=false): its pack's round time x that row's ratio to the "
                  "setting's single run")
    return jobs, runs, sorted(notes)


def variant_factor(variants, mine, cfg: dict) -> tuple[float, bool]:
    """The ratio by which a run's round time differs from its setting's as the benchmark times
    it: the product, over the ``--also`` rows of the setting and device (``variants``) whose
    KEY=VALUE the run config has, of each row's time over the setting's single run (``mine``,
    runs = 1); and whether a track_improvement row was among them."""
    single = next((r.s_per_round for r in mine if r.runs == 1), None)
    factor, timed = 1.0, False
    for r in variants:
        key, value = parse_override(r.also)
        if (single and (r.setting, r.device) == (mine[0].setting, mine[0].device)
                and cfg.get(key) == value):
            factor *= r.s_per_round / single
            timed = timed or key == "track_improvement"
    return factor, timed


def run_rows(measured: dict[str, tuple[float, float]], packed: dict[str, dict[int, float]],
             device: str, machine: str, threads: int = 1, source: str = "this run",
             also: dict[str, dict[str, float]] | None = None):
    """This run's round times as rows of the round-time table (fedmgda.devices.RoundTime): per
    setting, 1 run batched, each pack size timed ({setting: {runs packed: s/round}}) and each
    --also variant (1 run, {setting: {KEY=VALUE: s/round}}, its ``also`` column set)."""
    from fedmgda.devices import RoundTime

    by_name = {s.name: s for s in SETTINGS}
    rows = []
    for setting_name, (batched, eval_s) in measured.items():
        setting = by_name[setting_name]
        model = DATASET_SPECS[setting.dataset].model
        rows.append(RoundTime(setting_name, setting.dataset, model, device, machine, threads, 1,
                              batched, eval_s, source))
        for runs, seconds in sorted(packed.get(setting_name, {}).items()):
            rows.append(RoundTime(setting_name, setting.dataset, model, device, machine, threads,
                                  runs, seconds, eval_s, source))
        for item, seconds in (also or {}).get(setting_name, {}).items():
            rows.append(RoundTime(setting_name, setting.dataset, model, device, machine, threads, 1,
                                  seconds, eval_s, source, item))
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
            writer.writerow([f"{v:.3f}" if isinstance(v, float) else v
                             for v in dataclasses.astuple(r)])


def measured_rows(measured: dict[str, tuple[float, float]], packed: dict[str, dict[int, float]],
                  machine: str, also: dict[str, dict[str, float]] | None = None):
    """This run's GPU round times as rows of the round-time table (1 run, each pack size timed,
    each --also variant), with the committed table's CPU rows (fedmgda.devices)."""
    from fedmgda.devices import round_time_variants, round_times

    committed = [r for r in round_times() + round_time_variants() if r.device == "cpu"]
    return committed + run_rows(measured, packed, "cuda", machine, also=also)


def print_choices(rows) -> None:
    """Per measured setting: seconds per run-round (evaluation included) on each device, alone and
    in the best measured pack, and the device ``device: auto`` takes on a GPU machine, before
    (always the GPU) and now (fedmgda.devices.choose_device over ``rows``)."""
    from fedmgda.devices import choose_device, split_variants

    rows, _ = split_variants(rows)
    print(f"\n{'setting':22} {'GPU 1 run':>10} {'GPU packed':>11} {'CPU':>9}  auto before  auto "
          "now   (s per run-round)")
    for setting in SETTINGS:
        mine = [r for r in rows if r.setting == setting.name]
        if not mine:
            continue

        def best(device, runs=None, mine=mine):
            times = [r.per_run_round() for r in mine if r.device == device
                     and (runs is None or r.runs == runs)]
            return f"{min(times):.4f}" if times else "-"

        packed = [r for r in mine if r.device == "cuda" and r.runs > 1]
        model = mine[0].model
        now = choose_device(setting.dataset, model, cuda_available=True, table=rows)
        label = (f"{best('cuda', max(r.runs for r in packed))} x{max(r.runs for r in packed)}"
                 if packed else "-")
        print(f"{setting.name:22} {best('cuda', 1):>10} {label:>11} {best('cpu'):>9}  "
              f"{'cuda':11}  {now}")


def print_plan(rows, cores: int, gpus: int, config: str = "config/config.yaml") -> None:
    """The paper DAG's makespan as the workflow would run it on ``gpus`` GPUs and ``cores`` CPU
    cores (makespan.schedule), per dataset and in all, beside today's projection: every run
    on the GPU, batched, one after another (:func:`project_paper`)."""
    from makespan import makespan_by_dataset, schedule

    from fedmgda.devices import split_variants

    singles = {r.setting: (r.s_per_round, r.eval_s) for r in split_variants(rows)[0]
               if r.device == "cuda" and r.runs == 1}
    back, total_runs, back_notes = project_paper(singles, config) if singles else ({}, 0, [])
    jobs, runs, notes = plan_jobs(rows, gpus, config)
    alone = makespan_by_dataset(jobs, cores, gpus)
    together = schedule(jobs, cores, gpus)
    print(f"\nplan: the paper DAG's training jobs on {gpus} GPU(s) and {cores} CPU cores "
          f"(snakemake --cores {cores} --resources gpu={gpus}), list-scheduled longest first; a "
          "projection from round times")
    print(f"{'dataset':12} {'runs':>5} {'jobs':>5} {'device':>7} {'back to back h':>15} "
          f"{'plan alone h':>13} {'ends in plan h':>15}")
    for dataset in sorted(runs, key=lambda d: -alone[d]):
        mine = [j for j in jobs if j.dataset == dataset]
        devices = "/".join(sorted({j.device for j in mine}))
        back_h = f"{back[dataset] / 3600:.1f}" if dataset in back else "-"
        print(f"{dataset:12} {runs[dataset]:>5} {len(mine):>5} {devices:>7} {back_h:>15} "
              f"{alone[dataset] / 3600:>13.2f} {together.finish(mine) / 3600:>15.2f}")
    gpu_busy = sum(j.seconds for j in jobs if j.device == "cuda")
    print(f"{'all':12} {sum(runs.values()):>5} {len(jobs):>5} {'':>7} "
          f"{sum(back.values()) / 3600:>15.1f} {alone['all'] / 3600:>13.2f} "
          f"{together.makespan / 3600:>15.2f}")
    print(f"  back to back: every run on the GPU, batched, one after another ({total_runs} runs; "
          f"the projection above); GPU busy in the plan: {gpu_busy / 3600:.2f} h")
    for line in sorted(notes):
        print(f"  note: {line}")
    for line in (n for n in back_notes if "left out" in n):
        print(f"  note: back to back: {line} (no GPU round time: '-')")
    short, long_ = any("a lower bound" in line
                       for line in notes), any("not measured without" in line for line in notes)
    if short and long_:
        print("  note: the totals are no bound either way: a stand-in setting's round is shorter "
              "than its dataset's, and rounds timed with passes their runs skip are longer")
    elif short:
        print("  note: the totals are lower bounds too: a stand-in setting's round is shorter than "
              "its dataset's")


def setting_flops(setting: Setting):
    """The setting's model's counted FLOPs per sample (``flops.per_sample``)."""
    from flops import per_sample

    spec = DATASET_SPECS[setting.dataset]
    return per_sample(spec.model, tuple(spec.input_shape), spec.num_classes,
                      80 if setting.dataset == "shakespeare" else 0)


def round_samples(setting: Setting, per_round: int | None = None) -> float:
    """The training samples of a round of ``per_round`` clients (default the setting's), on
    average: every client's where all take part, else per_round x the mean size, or x the
    size-weighted mean (sum n^2 / sum n) where clients are drawn by size (as if with
    replacement)."""
    sizes, per_round = setting.train_sizes, per_round or setting.per_round
    if per_round >= len(sizes):
        return float(sum(sizes))
    mean = (sum(n * n for n in sizes) / sum(sizes) if setting.sampling == "size"
            else statistics.fmean(sizes))
    return per_round * mean


def bench_round_flops(setting: Setting) -> float:
    """FLOPs of one round as this benchmark times it: training and the two participant-loss passes
    (FedMGDA+ with ``track_improvement``), one run."""
    flops = setting_flops(setting)
    return round_samples(setting) * (flops.train + 2 * flops.forward)


def paper_work(config: str = "config/config.yaml"):
    """The paper DAG's FLOPs per dataset (``flops.RunWork`` summed over its runs, each with
    the sizes of its matched setting) and the runs counted."""
    from flops import RunWork, run_work

    from fedmgda.catalog import get_algorithm

    work: dict[str, RunWork] = {}
    matched, _ = paper_runs({s.name for s in SETTINGS if not s.stand_in}, config)
    for cfg, setting, per_round, _ in matched:
        pre = get_algorithm(cfg["algorithm"], cfg.get("plugin")).needs_pre_round_losses
        run = run_work(setting_flops(setting), cfg, round_samples(setting, per_round),
                       setting.test_size * len(setting.train_sizes), pre)
        before = work.get(cfg["dataset"], RunWork(0.0, 0.0, 0.0))
        work[cfg["dataset"]] = RunWork(before.training + run.training, before.losses + run.losses,
                                       before.evaluation + run.evaluation)
    return work, len(matched)


def print_work_floor(measured: dict[str, tuple[float, float]], device: torch.device,
                     config: str = "config/config.yaml") -> None:
    """With --bound: this device's measured float32 matrix-product rate (``flops.matmul_rate``;
    on CUDA also with TF32), the rate each measured setting's batched round reaches on the counted
    work (``bench_round_flops``) and its share of that rate, and the paper DAG's counted work at
    that rate: a floor under any float32 implementation on this device."""
    from flops import matmul_rate

    size = 4096 if device.type == "cuda" else 1024
    fp32 = matmul_rate(device, size)
    tf32 = (f"; with TF32 {matmul_rate(device, size, tf32=True) / 1e12:.1f}"
            if device.type == "cuda" else "")
    print(f"\nwork floor: float32 products of {size}x{size} matrices on this device: "
          f"{fp32 / 1e12:.2f} TFLOP/s{tf32}")
    print(f"{'setting':22} {'round GFLOP':>11} {'batched TFLOP/s':>15} {'share of products':>17}")
    for setting in (s for s in SETTINGS if s.name in measured):
        reached = bench_round_flops(setting) / measured[setting.name][0]
        print(f"{setting.name:22} {bench_round_flops(setting) / 1e9:>11.1f} "
              f"{reached / 1e12:>15.2f} {reached / fp32:>16.1%}")
    work, counted = paper_work(config)
    total = sum(w.total for w in work.values())
    print(f"the paper DAG's counted work ({total / 1e15:.0f} PFLOP, {counted} runs) at that rate: "
          f"{total / fp32 / 3600:.2f} h")


def print_flops(rows, config: str = "config/config.yaml") -> None:
    """--flops: each setting's counted work and the rate its committed GPU round times reach; the
    paper DAG's work per dataset and the sustained rate that 8 h (and 4 h) would take."""
    from fedmgda.devices import split_variants

    print("work: the matrix products and convolutions of forward and backward passes "
          "(benchmarks/flops.py), 2 FLOPs per multiply-add")
    print(f"\n{'setting':22} {'train MFLOP':>11} {'fwd MFLOP':>9} {'round GFLOP':>11} "
          f"{'GPU 1 run':>10} {'GPU packed':>11}   (per sample; a round as timed; TFLOP/s reached)")
    for setting in SETTINGS:
        flops, work = setting_flops(setting), bench_round_flops(setting)
        mine = [r for r in split_variants(rows)[0] if r.setting == setting.name
                and r.device == "cuda"]
        single = [work / r.s_per_round / 1e12 for r in mine if r.runs == 1]
        packed = {r.runs: r.runs * work / r.s_per_round / 1e12 for r in mine if r.runs > 1}
        best = max(packed, key=packed.get) if packed else None
        print(f"{setting.name:22} {flops.train / 1e6:>11.2f} {flops.forward / 1e6:>9.2f} "
              f"{work / 1e9:>11.1f} {f'{single[0]:.2f}' if single else '-':>10} "
              f"{f'{packed[best]:.2f} x{best}' if packed else '-':>11}")
    work, counted = paper_work(config)
    print(f"\npaper DAG ({counted} runs of the config): PFLOP")
    print(f"{'dataset':12} {'training':>9} {'loss passes':>11} {'evaluation':>10} {'total':>9}")
    for dataset, w in sorted(work.items(), key=lambda kv: -kv[1].total):
        print(f"{dataset:12} {w.training / 1e15:>9.1f} {w.losses / 1e15:>11.1f} "
              f"{w.evaluation / 1e15:>10.1f} {w.total / 1e15:>9.1f}")
    total = sum(w.total for w in work.values())
    print(f"{'all':12} {sum(w.training for w in work.values()) / 1e15:>9.1f} "
          f"{sum(w.losses for w in work.values()) / 1e15:>11.1f} "
          f"{sum(w.evaluation for w in work.values()) / 1e15:>10.1f} {total / 1e15:>9.1f}")
    print(f"  the whole paper in 8 h takes {total / 8 / 3600 / 1e12:.1f} TFLOP/s sustained, in 4 h "
          f"{total / 4 / 3600 / 1e12:.1f} (the counted work only: a floor)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rounds", type=int, default=2,
                        help="timed rounds per setting and path (median)")
    parser.add_argument("--fraction", type=float, default=1.0,
                        help=("keep this fraction of each client's samples and scale round times "
                              "by 1/fraction (approximate: fixed per-round costs are scaled too)"))
    parser.add_argument("--fraction-of", nargs="*", default=[], metavar="SETTING=F",
                        help=("a fraction for one setting (e.g. shakespeare_b10=0.05, whose "
                              "sequential path is slow)"))
    parser.add_argument("--only", nargs="*", help="setting names, measured in this order")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one batched round of each setting (after the rest)")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help=f"start the settings' timings only in the first "
                        f"{TimeLimit.SETTINGS_SHARE:.0%}% of S seconds, the bounds in the first "
                        f"{TimeLimit.BOUNDS_SHARE:.0%}%, the profiles in the first "
                        f"{TimeLimit.PROFILES_SHARE:.0%}% (TimeLimit)")
    parser.add_argument("--bound", action="store_true",
                        help="also time each setting's lower bound (its steps as one model's "
                             "large-batch steps, a CUDA graph on a GPU) and print the batched "
                             "round's ratio to it")
    parser.add_argument("--pack", type=int, nargs="+", default=[1], metavar="K",
                        help="also time K runs (seeds 1..K) trained packed, for each K given "
                             "(e.g. --pack 4 8 16), and print their throughput against K batched "
                             "runs one after another")
    parser.add_argument("--max-padding", type=float, nargs="*", default=[], metavar="P",
                        help="also time each setting whose clients all take part and differ in "
                             "size with size groups of at most this padding (inf: one group; the "
                             "default is fedmgda.client.MAX_PADDING)")
    parser.add_argument("--also", nargs="*", default=[], metavar="KEY=VALUE",
                        help="also time each setting (one run, batched) with this run-config "
                             "field changed, for each one given: e.g. deterministic=false (cuDNN "
                             "may choose faster algorithms with atomics; reruns differ by float "
                             "rounding) or tf32=true (TF32 tensor cores)")
    parser.add_argument("--no-sequential", action="store_true",
                        help="do not time the sequential reference path (its columns print '-'; "
                             "it is the slow part on a GPU and feeds no projection)")
    add_plan_arguments(parser)
    args = parser.parse_args()
    for item in args.also:
        parse_override(item)  # a bad one stops here, before any measurement
    unknown = [name for name in args.only or () if name not in {s.name for s in SETTINGS}]
    if unknown:
        parser.error(f"--only: unknown setting(s) {', '.join(unknown)}; known: "
                     f"{', '.join(s.name for s in SETTINGS)}")
    return args


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that measure nothing (--sizes, --plan, --flops) and those of the round-time
    table's rows (--csv, --source)."""
    parser.add_argument("--sizes", action="store_true",
                        help="measure nothing: print each setting's client sizes and "
                        "the sequential local steps they cost a round")
    parser.add_argument("--plan", action="store_true",
                        help=("measure nothing: project the paper DAG's makespan on --cores and "
                              "--gpus from the committed round times "
                              "(src/fedmgda/reference/round_times.csv)"))
    parser.add_argument("--flops", action="store_true",
                        help="measure nothing: each setting's counted work (benchmarks/flops.py), "
                             "the TFLOP/s its committed GPU round times reach, the paper DAG's "
                             "work and the rate 8 h would take")
    parser.add_argument("--cores", type=int, default=16,
                        help="CPU cores of the machine the plan is projected on")
    parser.add_argument("--gpus", type=int, default=1,
                        help="GPUs of the machine the plan is projected on")
    parser.add_argument("--csv", metavar="PATH",
                        help=("also write this run's round times as rows of "
                              "src/fedmgda/reference/round_times.csv (source: --source)"))
    parser.add_argument("--source", default="this run",
                        help=("the source column of --csv's rows: the measurement file they will "
                              "be committed as"))


def local_steps(setting: Setting) -> list[int]:
    """Each client's local steps a round (one epoch)."""
    return [1 if setting.batch_size == "full" else math.ceil(n / setting.batch_size)
            for n in setting.train_sizes]


def longest_steps(setting: Setting) -> int:
    """The longest client's local steps a round: the least sequential steps of a round."""
    return max(local_steps(setting))


def grouped_steps(setting: Setting) -> int:
    """A round's sequential local steps where every client takes part: the sum over the size
    groups ``fedmgda.client.size_groups`` trains one after another (each as long as its longest
    client); else the longest client's."""
    from fedmgda.client import size_groups

    steps = local_steps(setting)
    if setting.per_round != len(steps):
        return max(steps)
    return sum(max(steps[i] for i in group) for group in size_groups(list(setting.train_sizes)))


def print_sizes() -> None:
    """--sizes: each setting's clients and what they cost a round in sequential local steps: the
    longest client's (a round's least, whatever the batching) and, where every client takes part,
    the sum over the groups ``fedmgda.client.size_groups`` trains one after another (each as long
    as its longest client)."""
    print(f"{'setting':22} {'clients':>7} {'per round':>9} {'train samples':>13} {'mean':>7} "
          f"{'largest':>7} {'longest steps':>13} {'grouped steps':>13}")
    for setting in SETTINGS:
        sizes = list(setting.train_sizes)
        grouped = str(grouped_steps(setting)) if setting.per_round == len(sizes) else "-"
        print(f"{setting.name:22} {len(sizes):>7} {setting.per_round:>9} {sum(sizes):>13} "
              f"{statistics.fmean(sizes):>7.0f} {max(sizes):>7} {longest_steps(setting):>13} "
              f"{grouped:>13}")


def show_committed_plan(args: argparse.Namespace) -> None:
    """--plan: the projection from the committed round times, nothing measured."""
    from fedmgda.devices import round_time_variants, round_times

    rows = round_times() + round_time_variants()
    print("round times: src/fedmgda/reference/round_times.csv")
    for source in sorted({(r.device, r.machine, r.source) for r in rows}):
        print(f"  {source[0]:5} {source[1]}: {source[2]}")
    print_choices(rows)
    print_plan(rows, args.cores, args.gpus)


def main() -> None:
    args = parse_args()
    if args.sizes:
        print_sizes()
        return
    if args.plan:
        show_committed_plan(args)
        return
    if args.flops:
        from fedmgda.devices import round_times

        print_flops(round_times())
        return
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else f"CPU ({torch.get_num_threads()} threads)")
    print(f"device: {name}; torch {torch.__version__}; CUDA graphs: {device.type == 'cuda'}")
    threads = 1 if device.type == "cuda" else torch.get_num_threads()

    # after each setting: a time-out keeps the rows measured
    def save_rows(measured, packed_s, also_s) -> None:
        if args.csv:
            write_rows(run_rows(measured, packed_s, device.type, name,
                                threads, args.source, also_s), args.csv)

    limit = TimeLimit(args.time_limit)
    measured, packed_s, also_s = measure_settings(args, device, save_rows, limit)
    if measured:
        print_projection(measured, packed_s, args, device, name, also_s)
    if measured and args.bound:
        print_bounds(measured, device, limit=limit)
        print_work_floor(measured, device)
    if args.profile:  # last: the longest output
        for setting in (s for s in SETTINGS if s.name in measured):
            if not limit.allows(limit.PROFILES_SHARE,
                                f"the profiles of {setting.name} and the settings after it"):
                break
            profile_round(setting, random_dataset(setting, setting_fraction(args, setting)),
                          str(device))


def setting_fraction(args: argparse.Namespace, setting: Setting) -> float:
    """The fraction of its clients' samples a setting keeps: its --fraction-of, else --fraction."""
    fractions = {name: float(f) for name, f in (item.split("=") for item in args.fraction_of)}
    return fractions.get(setting.name, args.fraction)


def chosen_settings(only: list[str] | None) -> list[Setting]:
    """The settings to measure: those named by --only, in its order (what a time limit must not
    skip comes first), else every setting that is no stand-in, in SETTINGS' order."""
    if not only:
        return [s for s in SETTINGS if not s.stand_in]
    by_name = {s.name: s for s in SETTINGS}
    return [by_name[name] for name in dict.fromkeys(only) if name in by_name]


def measure_settings(args: argparse.Namespace, device: torch.device, measured_so_far=None,
                     limit: TimeLimit | None = None):
    """Time every chosen setting (sequential unless --no-sequential, batched, packed by each
    --pack size, with each --also change): {setting: (batched s/round, eval s)}, {setting: {runs
    packed: s/round}} and {setting: {KEY=VALUE: s/round}}, printing a row per setting as it is
    measured and passing the three to ``measured_so_far`` after each setting."""
    print(f"{'setting':22} {'clients':>7} {'samples kept':>12} {'sequential s/round':>19} "
          f"{'batched s/round':>16} {'speed-up':>9} {'batched rounds/s':>17} {'eval s':>7}")
    measured: dict[str, tuple[float, float]] = {}
    packed_s: dict[str, dict[int, float]] = {}
    also_s: dict[str, dict[str, float]] = {}
    for setting in chosen_settings(args.only):
        if limit and not limit.allows(limit.SETTINGS_SHARE,
                                      f"{setting.name} and the settings after it"):
            break
        fraction = setting_fraction(args, setting)
        torch.manual_seed(0)
        data = random_dataset(setting, fraction)
        try:
            seq = (None if args.no_sequential
                   else time_rounds(setting, data, batched=False,
                                    rounds=args.rounds, device=str(device))[0] / fraction)
            # before the default timings: each run sets the CUDA backend flags, so they end as the
            # defaults set them
            also = time_variants(setting, data, args, device, fraction, limit)
            warm_up: list[float] = []
            bat, eval_s = time_rounds(setting, data, batched=True, rounds=args.rounds,
                                      device=str(device), warm_up=warm_up)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:  # report it, measure the rest
            print(f"{setting.name:22} failed: {type(error).__name__}: "
                  f"{str(error).splitlines()[0][:200]}", flush=True)
            continue
        bat /= fraction
        measured[setting.name] = (bat, eval_s)
        kept = "all" if fraction == 1 else f"{fraction:g} (x1/f)"
        seq_cols = (f"{'-':>19} {bat:>16.3f} {'-':>9}" if seq is None
                    else f"{seq:>19.3f} {bat:>16.3f} {seq / bat:>8.2f}x")
        print(f"{setting.name:22} {setting.per_round:>7} {kept:>12} {seq_cols} {1 / bat:>17.3f} "
              f"{eval_s:>7.3f}", flush=True)
        # once per run: first calls and, on a GPU, the captures of the recurring CUDA-graph keys
        if warm_up:
            print(f"{'':22} warm-up: {warm_up[0]:.3f} s for the untimed rounds before (as run: not "
                  "scaled by 1/f)", flush=True)
        packs = time_packs(setting, data, args, device, fraction, bat, warm_up, limit)
        if packs:
            packed_s[setting.name] = packs
        time_paddings(setting, data, args, device, fraction)
        for item, seconds in also.items():
            print(f"{'':22} with {item}: {seconds:.3f} s per round ({bat / seconds:.2f}x the "
                  "default round's speed)", flush=True)
        also_s[setting.name] = also
        if measured_so_far:
            measured_so_far(measured, packed_s, also_s)
    return measured, packed_s, also_s


def time_variants(setting: Setting, data: FederatedDataset, args: argparse.Namespace,
                  device: torch.device, fraction: float,
                  limit: TimeLimit | None) -> dict[str, float]:
    """Batched seconds per round of the setting with each --also change that applies to it."""
    also = {}
    for item in args.also:
        if not applies(setting, item):
            continue
        if limit and not limit.allows(limit.SETTINGS_SHARE, f"{setting.name} with {item}"):
            break
        also[item] = time_rounds(setting, data, batched=True, rounds=args.rounds,
                                 device=str(device),
                                 overrides=dict([parse_override(item)]))[0] / fraction
    return also


def time_packs(setting: Setting, data: FederatedDataset, args: argparse.Namespace,
               device: torch.device, fraction: float, bat: float, warm_up: list[float],
               limit: TimeLimit | None) -> dict[int, float]:
    """Seconds per round of k runs trained packed, for each --pack size k > 1, printed as timed;
    ``bat``: the single batched run's seconds per round (scaled by 1/fraction)."""
    packed_s = {}
    for k in sorted(k for k in set(args.pack) if k > 1):
        # about k rounds' time for each timed round, and the single run's warm-up at least (on a
        # GPU launch-bound: first calls and captures cost about as much at any width)
        warm_up_s = warm_up[0] if warm_up else 0.0
        need = max(warm_up_s, 2 * k * bat * fraction) + k * bat * fraction * args.rounds
        if limit and not limit.allows(limit.SETTINGS_SHARE, f"{setting.name} {k} runs packed",
                                      need=need):
            break
        packed = time_rounds(setting, data, batched=True, rounds=args.rounds,
                             device=str(device), pack=k)[0] / fraction
        print(f"{'':22} {k} runs packed: {packed:.3f} s per round of all {k} "
              f"(throughput {k * bat / packed:.2f}x that of the runs one after another)",
              flush=True)
        packed_s[k] = packed
    return packed_s


def applies(setting: Setting, item: str) -> bool:
    """False for an --also change its setting's model ignores (``conv`` where it has no
    convolution): not timed."""
    from fedmgda.models import build_model, convolution

    key, _ = parse_override(item)
    if key != "conv":
        return True
    dataset = DATASET_SPECS[setting.dataset]
    return convolution(build_model(dataset.model,
                                   dataset.input_shape, dataset.num_classes)) is not None


def parse_override(item: str) -> tuple[str, object]:
    """--also's KEY=VALUE as a run-config field and its value (YAML: true, false, numbers)."""
    import yaml

    key, sep, text = item.partition("=")
    if not sep or key not in RunConfig.__dataclass_fields__:
        raise SystemExit("bench_rounds: --also takes run-config fields as KEY=VALUE (e.g. "
                         f"deterministic=false), got {item!r}")
    return key, yaml.safe_load(text)


def time_paddings(setting: Setting, data: FederatedDataset, args: argparse.Namespace,
                  device: torch.device, fraction: float) -> None:
    """A setting of unequal clients, timed again (one run) with each --max-padding: how much padding
    a size group may carry (``fedmgda.client.size_groups``; inf: every client in one group)."""
    from fedmgda.client import size_groups

    if (len(set(setting.train_sizes)) == 1 or setting.per_round != len(setting.train_sizes)
            or not args.max_padding):
        return  # equal clients, or a round's clients drawn anew: one group count would not say much
    sim = Simulation(bench_config(setting, str(device), True), data=data,
                     model_name=DATASET_SPECS[setting.dataset].model)
    if not batched_path(sim.inputs).groups_by_size:
        return  # a path that does not pad (the linear models'): no size groups
    sizes = [len(idx) for idx in data.train_idx]
    for padding in args.max_padding:
        seconds = time_rounds(setting, data, batched=True, rounds=args.rounds,
                              device=str(device), max_padding=padding)[0] / fraction
        print(f"{'':22} max padding {padding:g}: {seconds:.3f} s per round "
              f"({len(size_groups(sizes, padding))} size groups)", flush=True)


def print_projection(measured: dict[str, tuple[float, float]],
                     packed_s: dict[str, dict[int, float]], args: argparse.Namespace,
                     device: torch.device, name: str,
                     also_s: dict[str, dict[str, float]] | None = None) -> None:
    """The paper DAG back to back from these round times; on a GPU also the plan's makespan."""
    seconds, runs, approximated = project_paper(measured)
    print(f"\nprojected wall time of the paper DAG ({runs} training runs, batched path, one "
          f"device, runs back to back): {sum(seconds.values()) / 3600:.1f} h")
    print("  by dataset: " + ", ".join(f"{dataset} {s / 3600:.1f} h" for dataset,
                                       s in sorted(seconds.items(), key=lambda kv: -kv[1])))
    for line in approximated:
        print(f"  approximated: {line}")
    if device.type == "cuda":  # the plan: these GPU times, the committed CPU times (one core each)
        print_plan(measured_rows(measured, packed_s, name, also_s), args.cores, args.gpus)

if __name__ == "__main__":
    main()
