"""The work of a run in floating-point operations: a floor under any round time, on any device.

``benchmarks/bench_rounds.py --flops`` adds it up over the paper DAG and divides it by measured
round times (the rate each setting reaches); ``--bound`` divides it by the device's measured
matrix-product rate (:func:`matmul_rate`), so no implementation of the same work can be faster.

What is counted (:func:`per_sample`, ``torch.utils.flop_counter.FlopCounterMode``, 2 FLOPs per
multiply-add): the matrix products and convolutions of the model's forward pass and of its
backward pass, per sample. These are nearly all of a CNN's or an LSTM's arithmetic and the only
part that runs at the hardware's peak rate; pooling, LRN, activations, the loss and the optimiser's
element-wise updates are left out, so the floor stays a floor.

A run's work (:func:`run_work`) is, per round: training (the round's clients' samples, forward
and backward, ``local_epochs`` times), the participant-loss passes (a forward pass over the same
samples before the round where the algorithm or ``track_improvement`` needs it, and after it with
``track_improvement``), and, on its evaluation rounds, a forward pass over every user's test split.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SampleFlops:
    train: float  # forward + backward of one sample
    forward: float


@functools.cache
def per_sample(model_name: str, input_shape: tuple[int, ...], num_classes: int,
               symbols: int = 0) -> SampleFlops:
    """The model's counted FLOPs per sample (see the module): one forward and backward on a batch
    of 4 random inputs of ``input_shape`` (``symbols`` > 0: integer inputs below it, e.g. the
    Shakespeare LSTM's characters), divided by 4."""
    from torch.utils.flop_counter import FlopCounterMode

    from fedmgda.models import build_model

    model = build_model(model_name, input_shape, num_classes)
    g = torch.Generator().manual_seed(0)
    x = (torch.randint(0, symbols, (4, *input_shape), generator=g) if symbols
         else torch.randn(4, *input_shape, generator=g))
    counted = []
    for backward in (True, False):
        counter = FlopCounterMode(display=False)
        with counter, torch.set_grad_enabled(backward):
            out = model(x)
            if backward:
                out.sum().backward()
        counted.append(counter.get_total_flops() / 4)
    return SampleFlops(train=counted[0], forward=counted[1])


@dataclass(frozen=True)
class RunWork:
    training: float
    losses: float
    evaluation: float

    @property
    def total(self) -> float:
        return self.training + self.losses + self.evaluation


def evaluation_rounds(rounds: int, eval_every: int, per_user_every: int) -> int:
    """How many of a run's rounds evaluate its model (``fedmgda.simulator.evaluate_round``: every
    ``eval_every`` and every ``per_user_every`` rounds from round 0, and the last)."""
    return sum(1 for t in range(rounds) if t % eval_every == 0 or t % per_user_every == 0
               or t == rounds - 1)


def run_work(flops: SampleFlops, cfg: dict, round_samples: float, test_samples: int,
             pre_round_losses: bool) -> RunWork:
    """The FLOPs of one run of config ``cfg`` (a registry run's config: rounds, local_epochs,
    eval_every, per_user_every, track_improvement), whose rounds train ``round_samples`` samples in
    all (the round's clients', on average) and whose users hold ``test_samples`` test samples.
    ``pre_round_losses``: the algorithm asks for its participants' losses before each round."""
    rounds, track = int(cfg["rounds"]), bool(cfg["track_improvement"])
    passes = int(pre_round_losses or track) + int(track)
    evaluations = evaluation_rounds(rounds, int(cfg["eval_every"]), int(cfg["per_user_every"]))
    return RunWork(training=rounds * round_samples * int(cfg["local_epochs"]) * flops.train,
                   losses=rounds * passes * round_samples * flops.forward,
                   evaluation=evaluations * test_samples * flops.forward)


def matmul_rate(device: torch.device, size: int = 4096, reps: int = 10,
                tf32: bool = False) -> float:
    """Measured FLOP/s of square float32 matrix products of ``size`` on ``device`` (median of
    ``reps``; ``tf32``: CUDA's TF32 tensor cores allowed, as ``tf32: true`` allows them)."""
    a, b = (torch.randn(size, size, device=device) for _ in range(2))
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        times = []
        for _ in range(reps + 1):  # the first: warm-up
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            a @ b
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    times = sorted(times[1:])
    return 2 * size**3 / times[len(times) // 2]
