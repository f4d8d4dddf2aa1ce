"""benchmarks/bench_rounds.py --bound and --profile (issue 42, item 2): each setting's round beside
a lower bound of the same steps, and one line on where a profiled round's time goes."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_rounds", ROOT / "benchmarks" / "bench_rounds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rounds"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_bound_shape_is_the_longest_clients_steps_on_the_rounds_batch(bench):
    by_name = {s.name: s for s in bench.SETTINGS}
    assert bench.bound_shape(by_name["cifar10_b10_p0.1"]) == (40, 100, 4000)  # 400 samples / b 10; 10 clients x 10
    assert bench.bound_shape(by_name["cifar10_b10_p0.2"]) == (40, 200, 8000)
    assert bench.bound_shape(by_name["shakespeare_b10_equal"]) == (300, 310, 93000)
    assert bench.bound_shape(by_name["shakespeare_b10"]) == (2870, 310, 92969)  # the longest role: 28 698 samples
    assert bench.bound_shape(by_name["cifar10_b400_p0.1"]) == (1, 4000, 4000)  # a full batch: one step of every sample
    femnist = by_name["femnist_b20"]
    mean = round(sum(femnist.train_sizes) / len(femnist.train_sizes))
    assert bench.bound_shape(femnist) == (-(-max(femnist.train_sizes) // 20), 200, 10 * mean)


def test_the_bound_step_is_an_sgd_step_that_learns(bench):
    """The timed step really trains: on one fixed batch its loss falls."""
    setting = next(s for s in bench.SETTINGS if s.name == "fmnist_b10_p0.1")
    step, inputs, _ = bench.bound_step(setting, 20, torch.device("cpu"))
    losses = [step(*inputs)[0].item() for _ in range(30)]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.1  # 2.3 -> 2.0 (dropout: not monotone)


def test_round_bound_on_the_cpu_is_eager_and_steps_times_step(bench):
    setting = next(s for s in bench.SETTINGS if s.name == "adult_b10")
    bound = bench.round_bound(setting, torch.device("cpu"), reps=2)
    assert (bound.steps, bound.batch, bound.timed_as) == (2572, 20, "eager")
    assert bound.step_s > 0 and bound.losses_s > 0 and bound.seconds == pytest.approx(2572 * bound.step_s + bound.losses_s)


def test_a_loss_pass_covers_every_sample_in_chunks(bench):
    """10 samples in chunks of 4: the summed loss of the chunk's samples twice and of its first
    two once (the chunk's samples reused), the model in eval mode (no dropout)."""
    setting = next(s for s in bench.SETTINGS if s.name == "adult_b10")
    _, _, model = bench.bound_step(setting, 20, torch.device("cpu"))
    torch.manual_seed(3)
    total = bench.loss_pass(setting, model, 10, torch.device("cpu"), chunk=4)()
    torch.manual_seed(3)
    x, y = bench.random_batch(setting, 4, torch.device("cpu"))
    per_sample = torch.nn.functional.nll_loss(model.eval()(x), y, reduction="none")
    assert total.item() == pytest.approx((2 * per_sample.sum() + per_sample[:2].sum()).item(), rel=1e-5)


def test_print_bounds_counts_the_settings_within_3x(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "round_bound", lambda setting, device: bench.Bound(10, 100, 0.009, 0.01, "CUDA graph"))
    bench.print_bounds({"cifar10_b10_p0.1": (0.25, 0.0), "fmnist_b10_p0.1": (0.35, 0.0)}, torch.device("cpu"))
    out = capsys.readouterr().out
    assert "cifar10_b10_p0.1" in out and "2.5x" in out and "3.5x" in out
    assert out.rstrip().endswith("within 3x of the bound: 1 of 2 settings (cifar10_b10_p0.1)")


def test_profile_shares_splits_kernels_copies_launches_and_syncs(bench):
    events = [("volta_sgemm", True, 300.0), ("void elementwise_kernel", True, 100.0), ("Memcpy HtoD (Pageable -> Device)", True, 50.0),
              ("cudaLaunchKernel", False, 5.0), ("cudaLaunchKernel", False, 5.0), ("cudaGraphLaunch", False, 20.0),
              ("cudaStreamSynchronize", False, 1000.0), ("cudaMemcpyAsync", False, 200.0), ("aten::mm", False, 40.0)]
    line = bench.profile_shares(events, wall=0.004)
    assert line == ("round 0.004 s (profiled): GPU kernels 0.000 s (10 %), copies 0.000 s; 2 kernel launches, "
                    "1 graph launches; 2 host syncs or copies (0.001 s)")
    assert bench.profile_shares([("aten::mm", False, 40.0)], wall=0.5) == "round 0.500 s, all on the CPU (no GPU events)"


def test_shakespeare_sizes_have_the_q_ffl_papers_statistics(bench):
    """31 roles; train + test (train / 0.8) with q-FFL Table 4's mean 3 749 and stdev 6 912 per
    device; 92 972 training samples (FedMGDA+ Table 1: 92 959)."""
    import statistics

    sizes = bench.shakespeare_sizes()
    totals = [s / 0.8 for s in sizes]
    assert len(sizes) == 31 and abs(sum(sizes) - 92_959) < 50
    assert statistics.fmean(totals) == pytest.approx(3749, rel=1e-3) and statistics.pstdev(totals) == pytest.approx(6912, rel=1e-3)
    assert max(sizes) == 28_698 and min(sizes) >= 1


def test_a_stand_in_setting_is_a_labelled_lower_bound_until_the_real_one_is_measured(bench):
    """The paper's Shakespeare runs match the real-size setting when it is measured, else the
    equal-size one, whose note says the projection is a lower bound."""
    cfg = {"dataset": "shakespeare", "batch_size": 10, "participation": 1.0}
    chosen, per_round, note = bench.match_setting(cfg, {"shakespeare_b10", "shakespeare_b10_equal"})
    assert (chosen.name, per_round, note) == ("shakespeare_b10", 31, None)
    chosen, _, note = bench.match_setting(cfg, {"shakespeare_b10_equal"})
    assert chosen.name == "shakespeare_b10_equal" and note.startswith("shakespeare: a lower bound, shakespeare_b10_equal stands in (")
