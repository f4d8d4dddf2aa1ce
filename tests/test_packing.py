"""Run packing: several runs trained in lockstep, their clients as one batched computation."""

import json
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest
import torch
import yaml
from toy_federated import make_toy_federated, toy_config

from fedmgda.config import ConfigError
from fedmgda.scheduler import run, run_packed
from fedmgda.simulator import Simulation

RUNS = [  # different algorithms, seeds, rounds and partitions; the same samples and local training
    dict(algorithm="fedavg", rounds=5, seed=3),
    dict(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1}, rounds=7, seed=4),
    dict(algorithm="qfedavg", hparams={"q": 0.5}, rounds=6, seed=3,
         attack={"kind": "scaling", "user": 0, "value": 10.0}),
]


def datasets():
    base = make_toy_federated()
    other_partition = replace(base, train_idx=base.train_idx[::-1], test_idx=base.test_idx[::-1])
    return [base, make_toy_federated(), other_partition]


def test_packed_runs_give_the_results_of_the_runs_alone(tmp_path):
    alone = [run(toy_config(**cfg), data=data, model_name="logreg")
             for cfg, data in zip(RUNS, datasets())]
    sims = [Simulation(toy_config(**cfg), data=data, model_name="logreg")
            for cfg, data in zip(RUNS, datasets())]
    packed = run_packed(sims, [tmp_path / str(i) for i in range(len(sims))])
    for i, (a, p) in enumerate(zip(alone, packed)):
        assert len(p.metrics) == RUNS[i]["rounds"]
        assert torch.allclose(a.final_weights, p.final_weights, atol=1e-5)
        pd.testing.assert_frame_equal(a.metrics, p.metrics, atol=1e-5)
        summary = json.loads((tmp_path / str(i) / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["config"]["algorithm"] == RUNS[i]["algorithm"]
    assert sims[1].data.x is sims[0].data.x  # one copy of the samples for the pack


def test_a_diverged_run_leaves_the_pack_and_the_others_finish():
    diverging = toy_config(algorithm="fedavg_n", hparams={"eta": 1e39}, rounds=10)
    healthy = toy_config(algorithm="fedavg", rounds=10, seed=4)
    results = run_packed([Simulation(cfg, data=make_toy_federated(), model_name="logreg")
                          for cfg in (diverging, healthy)], [None, None])
    assert results[0].summary["status"] == "diverged"
    assert results[1].summary["status"] == "ok" and results[1].summary["rounds_completed"] == 10


@pytest.mark.parametrize("change,message", [
    ({"batch_size": 4}, "local training"),
    ({"batched": False}, "batched"),
])
def test_runs_that_cannot_share_a_batch_are_refused(change, message):
    sims = [Simulation(toy_config(**cfg), data=make_toy_federated(), model_name="logreg")
            for cfg in ({}, change)]
    with pytest.raises(ConfigError, match=message):
        run_packed(sims, [None, None])
    other_samples = Simulation(toy_config(), data=make_toy_federated(seed=5), model_name="logreg")
    with pytest.raises(ConfigError, match="pooled samples"):
        run_packed([sims[0], other_samples], [None, None])


def test_cli_packs_several_configs(tmp_path):
    paths, outs = [], []
    for i, algorithm in enumerate(("fedavg", "fedmgda_plus")):
        paths.append(tmp_path / f"run{i}.yaml")
        paths[-1].write_text(yaml.safe_dump({"dataset": "synthetic", "algorithm": algorithm,
                                             "rounds": 2, "seed": i + 1, "device": "cpu"}))
        outs.append(tmp_path / f"out{i}")
    result = subprocess.run([sys.executable, "-m", "fedmgda", "train", "--config", *map(str, paths),
                             "--out", *map(str, outs)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for i, out in enumerate(outs):
        summary = json.loads((out / "summary.json").read_text())
        assert summary["rounds_completed"] == 2 and summary["config"]["seed"] == i + 1
    mismatched = subprocess.run([sys.executable, "-m", "fedmgda", "train", "--config",
                                 *map(str, paths), "--out", str(outs[0])],
                                capture_output=True, text=True, timeout=300)
    assert mismatched.returncode == 2 and "2 run(s) but --out 1 folder(s)" in mismatched.stderr


def test_a_killed_pack_resumes_each_run_from_its_checkpoint(tmp_path, monkeypatch):
    configs = [toy_config(**cfg, checkpoint_every=2) for cfg in RUNS[:2]]
    alone = [run(cfg, data=make_toy_federated(), model_name="logreg") for cfg in configs]
    outs = [tmp_path / "a", tmp_path / "b"]
    original = Simulation._round

    # the 5th round (t = 4): both runs have a checkpoint at 4
    def killed_at_round_5(self, w, t, state):
        if t == 4:
            raise KeyboardInterrupt("killed")
        return (yield from original(self, w, t, state))

    monkeypatch.setattr(Simulation, "_round", killed_at_round_5)
    with pytest.raises(KeyboardInterrupt):
        run_packed([Simulation(cfg, data=make_toy_federated(), model_name="logreg")
                    for cfg in configs], outs)
    assert all((out / "checkpoint.pt").exists() for out in outs)
    monkeypatch.setattr(Simulation, "_round", original)
    resumed = run_packed([Simulation(cfg, data=make_toy_federated(), model_name="logreg")
                          for cfg in configs], outs)
    for a, r in zip(alone, resumed):
        pd.testing.assert_frame_equal(a.metrics, r.metrics, atol=1e-5)
        assert torch.allclose(a.final_weights, r.final_weights, atol=1e-5)


def test_full_batch_packs_share_one_plan_per_user_and_match_the_runs_alone(tmp_path, monkeypatch):
    """q-FFL Table 2's packs: one full-batch gradient step per device, every device each round in
    an order drawn per seed (sampling: size). A full batch is not shuffled, so the clients of every
    seed share one plan per user; the pre-round losses of runs whose participants come in another
    order are one product, handed back in each run's order. Packed = alone, up to float rounding."""
    from fedmgda.minibatches import Minibatches

    common = dict(participation=1.0, batch_size="full", momentum=0.0, local_lr=0.1, sampling="size",
                  rounds=6)
    cfgs = [dict(algorithm="qfedavg", hparams={"q": 2.0, "L": 10.0}, seed=s, **common)
            for s in (1, 2, 3)]
    cfgs.append(dict(algorithm="afl", hparams={"gamma_w": 0.1, "gamma_lambda": 0.1},
                     afl_gamma_w="local_lr",
                     afl_step_weights="uniform", seed=4, **common))
    data = make_toy_federated(num_users=5)
    alone = [run(toy_config(**cfg), data=data, model_name="logreg") for cfg in cfgs]
    sims = [Simulation(toy_config(**cfg), data=data, model_name="logreg") for cfg in cfgs]
    # the seeds order the devices differently
    assert len({tuple(sim.participants(0)) for sim in sims}) > 1
    plans = []
    drawn = Minibatches.plan

    def spy(self, client_idx, generators, dropout_generators=None):
        plan = drawn(self, client_idx, generators, dropout_generators)
        plans.append(len(plan.distinct))
        return plan

    monkeypatch.setattr(Minibatches, "plan", spy)
    packed = run_packed(sims, [tmp_path / str(i) for i in range(len(sims))])
    assert plans and set(plans) == {5}  # 4 runs x 5 devices, one plan per device
    for a, p in zip(alone, packed):
        assert torch.allclose(a.final_weights, p.final_weights, atol=1e-5)
        pd.testing.assert_frame_equal(a.metrics, p.metrics, atol=1e-5)


def image_toy():
    """The toy users' samples as 28 x 28 one-channel images, for the F-MNIST CNN."""
    data = make_toy_federated(dim=784, n_train=6, n_test=2)
    images = {name: (x.reshape(-1, 1, 28, 28), y) for name, (x, y) in data.global_test.items()}
    return replace(data, x=data.x.reshape(-1, 1, 28, 28), global_test=images)


def test_runs_with_other_convolutions_are_not_packed_and_train_alike():
    """``conv: im2col`` is another forward of the same function: its runs get the numbers of
    torch's convolution up to float rounding, and a pack never mixes the two."""
    configs = [toy_config(rounds=2, batched=False, batch_size=3),
               toy_config(rounds=2, batched=False, batch_size=3, conv="im2col")]
    sims = [Simulation(cfg, data=image_toy(), model_name="cnn_fmnist") for cfg in configs]
    with pytest.raises(ConfigError, match="differ in conv"):
        run_packed(sims, [None, None])
    torch_conv, im2col = (run(cfg, data=image_toy(), model_name="cnn_fmnist") for cfg in configs)
    assert torch.allclose(torch_conv.final_weights, im2col.final_weights, atol=1e-5)
    start = Simulation(configs[0], data=image_toy(), model_name="cnn_fmnist").model.initial_vector()
    assert (torch_conv.final_weights - start).abs().max() > 1e-3  # the runs trained
