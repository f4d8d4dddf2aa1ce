"""A plug-in with a client side (docs/plugins.md §3): SCAFFOLD (examples/scaffold.py) — a local
term, per-client state kept across rounds and in checkpoints, and values sent beside the update."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.checkpoints import CHECKPOINT
from fedmgda.config import ConfigError
from fedmgda.scheduler import Scheduler, batched_training, run, run_packed, training_path
from fedmgda.simulator import Simulation, TrainRequest

REPO = Path(__file__).resolve().parents[1]
SCAFFOLD = f"{REPO}/examples/scaffold.py:Scaffold"


def scaffold(**overrides):
    return toy_config(**{"algorithm": "scaffold", "plugin": SCAFFOLD, "momentum": 0.0, **overrides})


def test_first_round_is_fedavg_and_later_rounds_are_not():
    """c = c_i = 0 in round 1: the local term vanishes and eta_g = 1 takes the mean update
    (FedAvg)."""
    data = make_toy_federated()
    for rounds, same in ((1, True), (4, False)):
        fedavg = run(toy_config(algorithm="fedavg", momentum=0.0, rounds=rounds, batched=False),
                     data=data, model_name="logreg")
        ours = run(scaffold(rounds=rounds), data=data, model_name="logreg")
        assert torch.allclose(ours.final_weights, fedavg.final_weights, atol=1e-6) == same


def test_control_variates_follow_option_ii():
    """After one round with every client: c_i = -u_i / (K lr) and c = mean_i c_i (|S| = N)."""
    data = make_toy_federated(num_users=4)
    sim = Simulation(scaffold(rounds=1, participation=1.0, batch_size=5), data=data,
                     model_name="logreg")
    start = sim.model.initial_vector()
    run_packed([sim], [None])
    steps = -(-24 // 5)  # one epoch of 24 samples in batches of 5
    states = torch.stack([sim.client_states[u] for u in range(4)])
    fedavg = Simulation(toy_config(algorithm="fedavg", momentum=0.0, rounds=1, participation=1.0,
                                   batch_size=5, batched=False), data=data, model_name="logreg")
    updates = []
    for u in range(4):  # each client's update, trained as in the run (the same minibatch order)
        request = TrainRequest(fedavg.inputs, start, 0, [u], [(fedavg.cfg.seed, 0, u)], [1.0])
        updates.append(Scheduler([fedavg.inputs]).serve([request])[0][0][0])
    assert torch.allclose(states, -torch.stack(updates) / (steps * 0.1), atol=1e-5)
    assert torch.allclose(sim.algorithm.c, states.mean(dim=0), atol=1e-6)


def test_resume_from_a_checkpoint_is_exact(tmp_path):
    """Checkpoint after round 3, stop, resume in a new process state: the metrics and the model of
    the uninterrupted run (the clients' c_i and the server's c come back from the checkpoint)."""
    data = make_toy_federated()
    cfg = scaffold(rounds=6, checkpoint_every=3)
    uninterrupted = run(cfg, data=data, model_name="logreg")
    out = tmp_path / "run"
    sim = Simulation(cfg, data=data, model_name="logreg")
    steps, scheduler_ = sim.steps(out), Scheduler([sim.inputs])
    request = next(steps)
    while not (out / CHECKPOINT).exists():
        request = steps.send(scheduler_.serve([request])[0])
    steps.close()  # stopped after round 3, its checkpoint on disk
    resumed = run(cfg, out, data=data, model_name="logreg")
    assert torch.equal(resumed.final_weights, uninterrupted.final_weights)
    pd.testing.assert_frame_equal(resumed.metrics, uninterrupted.metrics)
    pd.testing.assert_frame_equal(resumed.per_user, uninterrupted.per_user)


def test_scaffold_trains_on_the_batched_path_and_no_fallback_is_said(capsys):
    """Its term is vmap-ed with the step (tests/test_plugin_terms.py compares it with the
    reference path); nothing is logged about a fall-back."""
    data = make_toy_federated()
    sim = Simulation(scaffold(), data=data, model_name="logreg")
    run_packed([sim], [None])
    assert batched_training(sim.inputs) and training_path(sim.inputs) == "vmap, local_term vmap-ed"
    assert "not vmap-ed" not in capsys.readouterr().out
    assert not batched_training(Simulation(scaffold(batched=False), data=data,
                                           model_name="logreg").inputs)


def test_scaffold_rejects_momentum():
    with pytest.raises(ConfigError, match="scaffold: its clients run plain SGD.*momentum: 0"):
        scaffold(momentum=0.5)


def test_packed_beside_fedavg_each_run_keeps_its_path():
    """In one pack, SCAFFOLD's clients take the vmap path with its term and FedAvg's the
    linear-softmax one; each run gives what it gives alone."""
    data = make_toy_federated()
    configs = [scaffold(seed=1), toy_config(algorithm="fedavg", momentum=0.0, seed=2)]
    packed = run_packed([Simulation(cfg, data=data, model_name="logreg") for cfg in configs],
                        [None, None])
    for cfg, result in zip(configs, packed):
        alone = run(cfg, data=data, model_name="logreg")
        assert torch.allclose(result.final_weights, alone.final_weights, rtol=1e-5, atol=1e-6)
