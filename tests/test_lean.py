"""The linear-softmax path (``LinearSoftmaxSteps``, tests/test_backends.py for its trajectory): its
groups of clients sharing a minibatch plan, the scheduler's choice of it, packed runs on it against
the reference path; and the progress lines of ``fedmgda train``."""

import re
from dataclasses import replace

import pytest
import torch
import yaml
from toy_federated import make_toy_federated, toy_config

from fedmgda.cli import main
from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, VmapSteps
from fedmgda.fastpaths import LinearSoftmaxSteps
from fedmgda.fastpaths.linear import plan_groups
from fedmgda.models import build_model
from fedmgda.scheduler import Scheduler, run, run_packed
from fedmgda.simulator import Simulation


def clients(sizes, dim=7, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), dim, generator=g)
    y = torch.randint(0, classes, (sum(sizes),), generator=g)
    starts = torch.tensor([0, *sizes]).cumsum(0)
    return x, y, [torch.arange(int(starts[i]), int(starts[i + 1])) for i in range(len(sizes))]


@pytest.mark.parametrize("classes", [2, 3, 5])
@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_clients_sharing_a_minibatch_sequence_train_as_one_group(mu, classes):
    """Packed runs of one seed give the same user the same minibatch order: such clients share one
    gathered minibatch and one matmul, each with its own start model and scale; groups of unequal
    size (empty slots) and a group that stops early."""
    torch.manual_seed(0)
    flat = FlatModel(build_model("logreg", (7,), classes))
    hparams = LocalHParams(epochs=1, batch_size=4, lr=0.1, momentum=0.5, mu=mu)
    trainer, linear = LocalTrainer(flat, hparams), LinearSoftmaxSteps(flat, hparams)
    x, y, (big, small) = clients([21, 6], classes=classes)
    idx = [big, small, big, big, small]
    seeds = [7, 3, 7, 7, 3]
    # one plan per (samples, generator)
    generators = {seed: torch.Generator().manual_seed(seed) for seed in set(seeds)}
    starts = flat.initial_vector() + 0.3 * torch.randn(len(idx), flat.num_params)
    scales = torch.tensor([1.0, 2.0, 0.5, 1.0, 1.0])
    batched = linear.train(trainer.minibatches.plan(idx, [generators[k] for k in seeds]), starts, x,
                           y, scales)
    plans = [trainer.minibatches.padded_batches(i, torch.Generator().manual_seed(k))
             for i, k in [(big, 7), (small, 3)]]
    sequences, group, slot, members = plan_groups(plans, [0, 1, 0, 0, 1])
    assert sequences.shape == (2, 6, 4) and members == 3
    assert group.tolist() == [0, 1, 0, 0, 1] and slot.tolist() == [0, 0, 1, 2, 1]
    for k, i in enumerate(idx):
        reference = trainer.train(starts[k], x[i], y[i], torch.Generator().manual_seed(seeds[k]),
                                  float(scales[k]))
        assert torch.allclose(batched[k].update, reference.update, rtol=1e-5, atol=1e-6)
        assert torch.allclose(batched[k].train_loss, reference.train_loss, rtol=1e-5)


def test_clients_given_the_same_samples_and_generator_share_one_minibatch_plan():
    """Packed runs pass one (index tensor, generator) per seed and user: drawn once, as if each
    client had its own generator of that seed."""
    torch.manual_seed(0)
    flat = FlatModel(build_model("logreg", (7,), 2))
    hparams = LocalHParams(epochs=1, batch_size=4, lr=0.1, momentum=0.5)
    trainer, linear = LocalTrainer(flat, hparams), LinearSoftmaxSteps(flat, hparams)
    x, y, (big, small) = clients([21, 6], classes=2)
    starts = flat.initial_vector() + 0.3 * torch.randn(4, flat.num_params)
    g_big, g_small = torch.Generator().manual_seed(7), torch.Generator().manual_seed(3)
    shared_plan = trainer.minibatches.plan([big, small, big, big], [g_big, g_small, g_big, g_big])
    own_plans = trainer.minibatches.plan([big, small, big, big],
                                         [torch.Generator().manual_seed(k) for k in (7, 3, 7, 7)])
    assert len(shared_plan.distinct) == 2 and len(own_plans.distinct) == 4
    shared, own = (linear.train(plan, starts, x, y, torch.ones(4))
                   for plan in (shared_plan, own_plans))
    for a, b in zip(shared, own):
        assert torch.allclose(a.update, b.update, rtol=1e-6,
                              atol=1e-7) and torch.allclose(a.train_loss, b.train_loss, rtol=1e-6)


def test_models_that_are_not_linear_softmax_keep_the_vmap_path():
    for name, shape, classes in [("cnn_fmnist", (1, 28, 28), 10), ("mlp_digits", (64,), 10)]:
        flat = FlatModel(build_model(name, shape, classes))
        assert not LinearSoftmaxSteps.eligible(flat)
    assert LinearSoftmaxSteps.eligible(FlatModel(build_model("logreg", (99,), 2)))
    # the scheduler chooses the linear-softmax path for a linear model only
    data = make_toy_federated()
    assert isinstance(Scheduler([Simulation(toy_config(), data=data,
                                            model_name="mlp_digits").inputs]).steps, VmapSteps)
    assert isinstance(Scheduler([Simulation(toy_config(), data=data,
                                            model_name="logreg").inputs]).steps, LinearSoftmaxSteps)


# dim 3, binarised: many equal samples
@pytest.mark.parametrize("classes,dim", [(2, 10), (3, 10), (2, 3)])
@pytest.mark.parametrize("algorithm,hparams",
                         [("qfedavg", {"q": 0.5}), ("fedprox", {"mu": 0.1}),
                          ("fedmgda_plus", {"eta": 1.0})])
def test_packed_linear_softmax_runs_match_the_sequential_reference(algorithm, hparams, classes,
                                                                   dim):
    """Packed runs (their own seeds and attacks) with batched participant losses and evaluation,
    against each run alone on the reference path (batched: false)."""
    data = make_toy_federated(num_users=5, classes=classes, dim=dim)
    # the labels stay those of the real-valued features: equal samples, different labels
    if dim == 3:
        data = replace(data, x=(data.x > 0).float(),
                       global_test={k: ((x > 0).float(), y)
                                    for k, (x, y) in data.global_test.items()})
    data.train_idx[0] = data.train_idx[0][:5]  # unequal clients
    common = dict(algorithm=algorithm, hparams=hparams, rounds=4, participation=1.0, batch_size=4)
    # the seed-2 run reports F_i per sample (a q-FedAvg reading; packed with the other one)
    configs = [toy_config(seed=1, **common),
               toy_config(seed=2, attack={"kind": "scaling", "user": 1, "value": 3.0},
                          qffl_loss="batch_sum_per_sample", **common)]
    packed = run_packed([Simulation(cfg, data=data, model_name="logreg") for cfg in configs],
                        [None, None])
    for cfg, result in zip(configs, packed):
        alone = run(toy_config(**{**cfg.to_dict(), "attack": cfg.attack.__dict__,
                                  "batched": False}), data=data, model_name="logreg")
        assert torch.allclose(result.final_weights, alone.final_weights, rtol=1e-5, atol=1e-6)
        for column in ("train_loss", "improved_loss", "improved_acc", "mean_acc", "worst5_acc",
                       "test_acc_pooled"):
            assert (result.metrics[column].to_numpy()
                    == pytest.approx(alone.metrics[column].to_numpy(), rel=1e-5, nan_ok=True))
        for column in ("accuracy", "loss"):
            assert (result.per_user[column].to_numpy()
                    == pytest.approx(alone.per_user[column].to_numpy(), rel=1e-5))
        assert result.summary["final"] == pytest.approx(alone.summary["final"], rel=1e-6)


def test_training_prints_progress_lines(tmp_path, capsys):
    paths, outs = [], []
    for seed in (1, 2):
        paths.append(tmp_path / f"run{seed}.yaml")
        paths[-1].write_text(yaml.safe_dump({"dataset": "synthetic", "algorithm": "fedavg",
                                             "rounds": 3, "seed": seed, "device": "cpu"}))
        outs.append(str(tmp_path / f"out{seed}"))
    assert main(["train", "--config", str(paths[0]), "--out", outs[0], "--progress-every",
                 "0"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[progress]")]
    assert [re.search(r"round (\d+/\d+)", line)[1] for line in lines] == ["1/3", "2/3", "3/3"]
    assert all(re.search(r"s/round \| ETA [\d.]+ min \| mean user acc [\d.]+ %", line)
               for line in lines)
    # default: first and last
    assert main(["train", "--config", *map(str, paths), "--out", *(o + "p" for o in outs)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[progress]")]
    assert (len(lines) == 2 and "2/2 runs active" in lines[0] and "0/2 runs active" in lines[-1]
            and "min" in lines[-1])


def test_large_products_take_back_the_threads_small_ones_stay_on_one():
    from fedmgda.fastpaths import LARGE_PRODUCT, single_thread_on_cpu, threads_for_product

    cpu = torch.device("cpu")
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with single_thread_on_cpu(cpu):
            assert torch.get_num_threads() == 1
            with threads_for_product(LARGE_PRODUCT - 1):
                assert torch.get_num_threads() == 1
            with threads_for_product(LARGE_PRODUCT):
                assert torch.get_num_threads() == 3  # the count single_thread_on_cpu replaced
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3
        with threads_for_product(LARGE_PRODUCT):  # outside: the threads are as they were
            assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
