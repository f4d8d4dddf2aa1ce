"""The run-config options that follow the q-FFL paper's code (litian96/fair_flearn): each changes
what it should and nothing else; the defaults keep today's runs."""

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from toy_federated import make_toy_federated, toy_config

from fedmgda.fastpaths import LinearSoftmaxEvaluation
from fedmgda.scheduler import run, run_packed
from fedmgda.simulator import Simulation

SIZES = [24, 2, 3, 2, 20, 4, 2, 3]  # two big users (0 and 4) hold 44 of the 60 train samples


def unequal_toy():
    base = make_toy_federated()
    return replace(base, train_idx=[idx[:n] for idx, n in zip(base.train_idx, SIZES)])


def simulation(**overrides) -> Simulation:
    return Simulation(toy_config(**overrides), data=unequal_toy(), model_name="logreg")


def test_size_sampling_picks_big_users_more_often_and_never_twice_in_a_round():
    rounds = 400
    counts = {}
    for sampling in ("uniform", "size"):
        sim = simulation(sampling=sampling, participation=0.25)  # 2 of 8 users per round
        counts[sampling] = np.zeros(len(SIZES))
        for t in range(rounds):
            users = sim.participants(t)
            assert len(users) == len(set(users)) == 2
            counts[sampling][users] += 1
        # derived seeds
        assert sim.participants(7) == simulation(sampling=sampling,
                                                 participation=0.25).participants(7)
    big = [0, 4]
    assert counts["uniform"][big].sum() / (2 * rounds) < 0.4  # 2 of 8 users: a quarter of the draws
    assert counts["size"][big].sum() / (2 * rounds) > 0.7  # 44 of 60 samples
    assert counts["size"][0] > 10 * counts["size"][1]
    # the attacker is still forced into every round
    attacked = simulation(sampling="size", participation=0.25,
                          attack={"kind": "bias", "user": 1, "value": 1.0})
    assert all(1 in attacked.participants(t) and len(set(attacked.participants(t))) == 2
               for t in range(50))


def test_uniform_sampling_is_todays_draw():
    sim = simulation(participation=0.5)
    for t in range(5):
        today = np.random.default_rng([sim.cfg.seed, t]).choice(len(SIZES), 4, replace=False)
        assert sim.participants(t) == [int(u) for u in today]


def test_samples_weighted_fedavg_takes_the_pooled_data_gradient_step():
    """Full batch, one local step, no momentum: every update is -lr * grad f_i(w0), so weighting
    them by n_i / sum n gives -lr * grad of the mean loss over all participants' pooled samples."""
    common = dict(algorithm="fedavg", participation=1.0, batch_size="full", momentum=0.0,
                  local_lr=0.3, rounds=1)
    sim = simulation(**common, aggregation_weights="samples")
    w0 = sim.model.initial_vector().requires_grad_(True)
    data = unequal_toy()
    pooled = torch.cat(data.train_idx)
    loss = F.nll_loss(sim.model(w0, data.x[pooled]), data.y[pooled])
    expected = (w0 - 0.3 * torch.autograd.grad(loss, w0)[0]).detach()
    weighted = run(sim.cfg, data=data, model_name="logreg").final_weights
    assert torch.allclose(weighted, expected, atol=1e-6)
    uniform = run(toy_config(**common), data=data, model_name="logreg").final_weights
    # the mean of the users' steps is another point
    assert not torch.allclose(uniform, expected, atol=1e-3)


def test_afl_uniform_step_equals_fedavg_while_lambda_still_moves():
    common = dict(rounds=4, participation=0.5, final_model="last")
    fedavg = run(toy_config(algorithm="fedavg", **common), data=unequal_toy(), model_name="logreg")
    afl = simulation(algorithm="afl", hparams={"gamma_w": 1.0, "gamma_lambda": 0.5},
                     afl_step_weights="uniform", **common)
    result = run_packed([afl], [None])[0]
    assert torch.allclose(result.final_weights, fedavg.final_weights, atol=1e-6)
    assert not np.allclose(afl.algorithm.lam, 1 / len(SIZES))  # lambda ascended on the losses
    paper = run(toy_config(algorithm="afl", hparams={"gamma_w": 1.0, "gamma_lambda": 0.5},
                           **common), data=unequal_toy(), model_name="logreg")
    assert not torch.allclose(paper.final_weights, fedavg.final_weights, atol=1e-4)


@pytest.mark.parametrize("batched", [False, True])
def test_train_mean_f_is_the_mean_per_sample_loss_in_the_reference_and_packed_paths(batched):
    sim = simulation(algorithm="qfedavg", qffl_loss="train_mean", batched=batched, batch_size=5)
    data = unequal_toy()
    w = sim.model.initial_vector() + 0.3 * torch.randn(sim.model.num_params,
                                                       generator=torch.Generator().manual_seed(1))
    users = [0, 4, 1]
    expected = torch.stack([F.nll_loss(sim.model(w, data.x[data.train_idx[u]]),
                                       data.y[data.train_idx[u]]) for u in users])
    sizes = [len(data.train_idx[u]) for u in users]
    reported = sim.algorithm.reported_loss  # F_i as q-FedAvg reads it from the participants' stats
    reference = reported(sim.inputs.participant_losses(w, users), sizes)
    packed = reported(LinearSoftmaxEvaluation().participant_losses(sim.inputs, [w], users)[0],
                      sizes)
    assert torch.allclose(reference, expected,
                          atol=1e-6) and torch.allclose(packed, expected, atol=1e-6)
    other = simulation(algorithm="qfedavg", batched=batched, batch_size=5)
    batch_sum = other.algorithm.reported_loss(other.inputs.participant_losses(w, users), sizes)
    assert not torch.allclose(batch_sum, expected)  # users 0 and 4 have several batches of 5


def test_train_mean_packed_runs_give_the_runs_alone():
    configs = [dict(algorithm="qfedavg", hparams={"q": 1.0}, qffl_loss="train_mean", seed=s,
                    rounds=5) for s in (3, 4)]
    alone = [run(toy_config(**cfg, batched=False), data=unequal_toy(), model_name="logreg")
             for cfg in configs]
    packed = run_packed([simulation(**cfg) for cfg in configs], [None, None])
    for a, p in zip(alone, packed):
        assert torch.allclose(a.final_weights, p.final_weights, atol=1e-5)
    other = run(toy_config(**{**configs[0], "qffl_loss": "batch_sum"}, batched=False),
                data=unequal_toy(), model_name="logreg")
    assert not torch.allclose(other.final_weights, alone[0].final_weights, atol=1e-4)


def test_glorot_init_is_the_runs_initial_model():
    glorot = simulation(init="glorot")
    w = glorot.model.initial_vector()
    weight, bias = w[: 10 * 3].view(3, 10), w[10 * 3 :]
    assert torch.equal(bias, torch.zeros(3)) and weight.abs().max() <= (6 / 13) ** 0.5
    assert torch.equal(w, simulation(init="glorot").model.initial_vector())  # same seed, same model
    assert not torch.equal(w, simulation(init="glorot", seed=4).model.initial_vector())
    assert not torch.equal(w, simulation().model.initial_vector())
