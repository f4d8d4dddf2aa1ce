"""benchmarks/flops.py: the counted work of a run (a floor under any round time) and the
matrix-product rate it is divided by; benchmarks/bench_rounds.py --flops, the paper DAG's work."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from flops import (  # noqa: E402
    RunWork,
    SampleFlops,
    evaluation_rounds,
    matmul_rate,
    per_sample,
    run_work,
)


def test_a_linear_model_counts_its_products():
    """Logistic regression 99 -> 2: forward 2 x 99 x 2 FLOPs a sample; backward adds the weight's
    gradient (the input needs none), as much again."""
    assert per_sample("logreg", (99,), 2) == SampleFlops(train=792.0, forward=396.0)


def test_a_cnn_trains_at_two_to_three_forwards():
    """Backward costs up to twice the forward (the weight and the input gradients); the first
    convolution computes no input gradient, so training lies strictly between 2 and 3 forwards."""
    flops = per_sample("cnn_cifar", (3, 32, 32), 10)
    assert 2 * flops.forward < flops.train < 3 * flops.forward
    assert flops.forward == pytest.approx(2 * (3 * 64 * 25 * 28 * 28 + 64 * 64 * 25 * 10 * 10
                                               + 1600 * 384 + 384 * 192 + 192 * 10))


def test_evaluation_rounds_follow_the_simulator():
    """Every eval_every and per_user_every rounds from round 0, and the last round."""
    assert evaluation_rounds(100, 10, 10) == 11
    assert evaluation_rounds(100, 1, 10) == 100
    assert evaluation_rounds(2000, 10, 10) == 201
    assert evaluation_rounds(7, 5, 3) == len({0, 3, 5, 6})


def test_run_work_adds_training_loss_passes_and_evaluation():
    flops = SampleFlops(train=3.0, forward=1.0)
    cfg = {"rounds": 10, "local_epochs": 2, "eval_every": 5, "per_user_every": 10,
           "track_improvement": True}
    work = run_work(flops, cfg, round_samples=100, test_samples=50, pre_round_losses=False)
    assert work == RunWork(training=10 * 100 * 2 * 3.0, losses=10 * 2 * 100 * 1.0,
                           evaluation=3 * 50 * 1.0)
    untracked = run_work(flops, {**cfg, "track_improvement": False}, 100, 50,
                         pre_round_losses=False)
    assert untracked.losses == 0 and untracked.total == work.total - work.losses
    # q-FFL's F_i(w_t)
    assert run_work(flops, {**cfg, "track_improvement": False}, 100, 50,
                    pre_round_losses=True).losses == 10 * 100 * 1.0


def test_matmul_rate_is_measured_and_restores_tf32():
    before = torch.backends.cuda.matmul.allow_tf32
    rate = matmul_rate(torch.device("cpu"), size=128, reps=2, tf32=not before)
    assert rate > 0 and torch.backends.cuda.matmul.allow_tf32 == before
