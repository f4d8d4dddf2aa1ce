"""The built-in server rules' arithmetic, each on hand-made updates."""

import numpy as np
import pytest
import torch

from fedmgda.algorithms import RoundContext
from fedmgda.algorithms.averaging import decay_per_100_rounds
from fedmgda.algorithms.linalg import normalise_rows
from fedmgda.algorithms.qp import min_norm_weights
from fedmgda.catalog import BUILTIN_ALGORITHMS, get_algorithm, make_algorithm
from fedmgda.config import ConfigError


def context(n, t=0, T=100, pre=None, train=None, users=None, sizes=None):
    pre = torch.rand(n, dtype=torch.float64) + 0.5 if pre is None else pre
    train = torch.rand(n, dtype=torch.float64) if train is None else train
    return RoundContext(t, T, users or list(range(n)), pre, train, sizes or [10] * n)


@pytest.fixture
def updates():
    g = torch.Generator().manual_seed(0)
    scales = torch.tensor([[1.0], [3.0], [0.2], [5.0], [1.0]], dtype=torch.float64)
    return torch.randn(5, 12, generator=g, dtype=torch.float64) * scales


def test_fedavg_is_the_uniform_mean(updates):
    w = torch.zeros(12, dtype=torch.float64)
    new, info = make_algorithm("fedavg", {}, 100, 10).aggregate(w, updates, context(5))
    assert torch.allclose(new, updates.mean(0))
    assert info["lambda"] == [0.2] * 5


def test_fedprox_aggregates_like_fedavg_and_sets_the_client_prox(updates):
    agg = make_algorithm("fedprox", {"mu": 0.5}, 100, 10)
    assert get_algorithm("fedprox").prox_mu({"mu": 0.5}) == 0.5
    assert (get_algorithm("mgda_prox").prox_mu({}) == 0.1
            and get_algorithm("fedmgda_plus").prox_mu({}) == 0.0)
    new, _ = agg.aggregate(torch.zeros(12, dtype=torch.float64), updates, context(5))
    assert torch.allclose(new, updates.mean(0))


def test_fedavg_n_steps_eta_along_the_mean_normalised_update(updates):
    new, info = make_algorithm("fedavg_n", {"eta": 1.5}, 100,
                               10).aggregate(torch.zeros(12, dtype=torch.float64), updates,
                                             context(5))
    unit = updates / updates.norm(dim=1, keepdim=True)
    assert torch.allclose(new, 1.5 * unit.mean(0))
    assert info["eta"] == 1.5


def test_fedmgda_plus_uses_the_min_norm_weights_of_normalised_updates(updates):
    agg = make_algorithm("fedmgda_plus", {"eta": 1.0, "epsilon": 0.1}, 100, 10)
    new, info = agg.aggregate(torch.zeros(12, dtype=torch.float64), updates, context(5))
    unit = normalise_rows(updates)
    lam = min_norm_weights((unit @ unit.T).numpy(), 0.1)
    assert np.allclose(info["lambda"], lam)
    assert torch.allclose(new, torch.as_tensor(lam) @ unit)
    assert all(0.1 <= x <= 0.3 + 1e-9 for x in info["lambda"])  # the epsilon box around 1/5


def test_fedmgda_vanilla_uses_raw_updates(updates):
    agg = make_algorithm("fedmgda", {}, 100, 10)
    assert (agg.normalised_updates is False and agg.epsilon == 1.0 and agg.eta == 1.0
            and agg.beta == 1.0)
    new, info = agg.aggregate(torch.zeros(12, dtype=torch.float64), updates, context(5))
    lam = min_norm_weights((updates @ updates.T).numpy(), 1.0)
    assert torch.allclose(new, torch.as_tensor(lam) @ updates)


def test_mgda_prox_defaults():
    agg = make_algorithm("mgda_prox", {"eta": 1.0, "decay": 0.1}, 2000, 100)
    assert (get_algorithm("mgda_prox").prox_mu({}) == 0.1 and agg.normalised_updates
            and agg.epsilon == 1.0)


def test_decay_schedule_is_the_papers_total_factor_applied_per_100_rounds():
    # docs/protocol.md §4.4 table: 1/10 at T=2000 -> 0.8913, 1/40 at T=3000 -> 0.8843, 1/3 at T=500
    # -> 0.8027
    assert decay_per_100_rounds(0.1, None, 2000) == pytest.approx(0.8913, abs=1e-4)
    assert decay_per_100_rounds(1 / 40, None, 3000) == pytest.approx(0.8843, abs=1e-4)
    assert decay_per_100_rounds(1 / 3, None, 500) == pytest.approx(0.8027, abs=1e-4)
    assert decay_per_100_rounds(0.0, None, 2000) == 1.0  # the paper's "decay 0" = none
    assert decay_per_100_rounds(0.1, 0.89, 3000) == 0.89  # the code's flag, given directly
    agg = make_algorithm("fedmgda_plus", {"eta": 1.5, "decay": 0.1}, 2000, 100)
    beta = 0.1 ** (100 / 2000)
    assert agg.step_size(0) == agg.step_size(99) == 1.5
    assert agg.step_size(100) == pytest.approx(1.5 * beta)
    assert agg.step_size(1999) == pytest.approx(1.5 * beta**19)
    assert 1.5 * beta**20 == pytest.approx(0.15)  # the total factor over T rounds


def test_qfedavg_follows_the_q_ffl_update(updates):
    q, L = 0.5, 2.0
    pre = torch.tensor([0.5, 1.0, 2.0, 3.0, 0.1], dtype=torch.float64)
    new, _ = make_algorithm("qfedavg", {"q": q, "L": L}, 100,
                            10).aggregate(torch.zeros(12, dtype=torch.float64), updates,
                                          context(5, pre=pre))
    num = sum(pre[i] ** q * L * updates[i] for i in range(5))
    den = sum(q * pre[i] ** (q - 1) * (L * updates[i]).norm() ** 2 + L * pre[i] ** q
              for i in range(5))
    assert torch.allclose(new, num / den)


def test_qfedavg_with_q_zero_and_equal_losses_is_a_scaled_fedavg(updates):
    new, _ = make_algorithm("qfedavg", {"q": 0.0, "L": 1.0}, 100,
                            10).aggregate(torch.zeros(12, dtype=torch.float64), updates,
                                          context(5, pre=torch.ones(5, dtype=torch.float64)))
    assert torch.allclose(new, updates.mean(0))  # sum u_i / (n L) with h_i = L


def test_afl_steps_with_current_lambda_then_ascends_and_projects():
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    agg = make_algorithm("afl", {"gamma_w": 0.5, "gamma_lambda": 0.2}, 100, 2)
    assert get_algorithm("afl").averages_iterates
    new, info = agg.aggregate(torch.zeros(2, dtype=torch.float64), u,
                              context(2, train=torch.tensor([1.0, 0.0], dtype=torch.float64)))
    # old lambda (0.5, 0.5)
    assert torch.allclose(new, torch.tensor([0.25, 0.25], dtype=torch.float64))
    assert np.allclose(info["lambda"], [0.6, 0.4])  # (0.7, 0.5) projected onto the simplex
    assert agg.state_dict() == {"lam": [0.6, 0.4]}


SIZES = [10, 30, 5, 50, 5]


def test_samples_weighted_fedavg_weights_each_update_by_its_train_size(updates):
    """aggregation_weights: samples -> lambda = n_i / sum n (FedAvg as McMahan et al. define it)."""
    for name in ("fedavg", "fedprox"):
        agg = make_algorithm(name, {}, 100, 10, aggregation_weights="samples")
        new, info = agg.aggregate(torch.zeros(12, dtype=torch.float64), updates,
                                  context(5, sizes=SIZES))
        n = torch.tensor(SIZES, dtype=torch.float64)
        assert torch.allclose(new, (n / n.sum()) @ updates)
        assert np.allclose(info["lambda"], np.array(SIZES) / 100)
    # equal sizes: the uniform mean, bit for bit
    start = torch.zeros(12, dtype=torch.float64)
    uniform, _ = make_algorithm("fedavg", {}, 100, 10).aggregate(start, updates,
                                                                 context(5, sizes=SIZES))
    equal, _ = make_algorithm("fedavg", {}, 100, 10, aggregation_weights="samples").aggregate(
        start, updates, context(5, sizes=[7] * 5))
    assert torch.allclose(uniform, equal) and torch.allclose(uniform, updates.mean(0))


def test_samples_weights_are_the_centre_of_the_epsilon_box(updates):
    """FedMGDA+ (eq. 25): lambda within epsilon of lambda0 = n_i / sum n; epsilon = 0 is lambda0."""
    unit = normalise_rows(updates)
    lambda0 = np.array(SIZES) / 100
    agg = make_algorithm("fedmgda_plus", {"eta": 1.0, "epsilon": 0.1}, 100, 10,
                         aggregation_weights="samples")
    new, info = agg.aggregate(torch.zeros(12, dtype=torch.float64), updates,
                              context(5, sizes=SIZES))
    assert np.allclose(info["lambda"], min_norm_weights((unit @ unit.T).numpy(), 0.1, lambda0))
    assert all(lo - 1e-9 <= x <= hi + 1e-9
               for x, lo, hi in zip(info["lambda"], lambda0 - 0.1, lambda0 + 0.1))
    # not the uniform box
    assert not np.allclose(info["lambda"], min_norm_weights((unit @ unit.T).numpy(), 0.1))
    _, info = make_algorithm("fedmgda_plus", {"eta": 1.0, "epsilon": 0.0}, 100, 10,
                             aggregation_weights="samples").aggregate(
        torch.zeros(12, dtype=torch.float64), updates, context(5, sizes=SIZES))
    assert np.allclose(info["lambda"], lambda0)


def test_afl_uniform_step_is_the_mean_update_while_lambda_still_moves():
    """afl_step_weights: uniform (the q-FFL code's AFL): the model step ignores lambda."""
    u = torch.tensor([[1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    losses = torch.tensor([1.0, 0.0], dtype=torch.float64)
    plain = make_algorithm("afl", {"gamma_w": 0.5, "gamma_lambda": 0.2}, 100, 2,
                           afl_step_weights="uniform")
    paper = make_algorithm("afl", {"gamma_w": 0.5, "gamma_lambda": 0.2}, 100, 2)
    for _ in range(3):  # lambda drifts from uniform, the uniform step does not follow it
        new, info = plain.aggregate(torch.zeros(2, dtype=torch.float64), u,
                                    context(2, train=losses))
        assert torch.allclose(new, 0.5 * u.mean(0))
        ref, ref_info = paper.aggregate(torch.zeros(2, dtype=torch.float64), u,
                                        context(2, train=losses))
        assert info["lambda"] == ref_info["lambda"]
    assert np.allclose(info["lambda"], [0.8, 0.2])  # + (0.2, 0) per round, projected: 0.6, 0.7, 0.8
    # the paper's step: lambda (0.7, 0.3)
    assert torch.allclose(ref, 0.5 * torch.tensor([0.7, 0.3 * 3.0], dtype=torch.float64))


def test_unknown_algorithm_and_bad_hparams_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown algorithm 'fedsgd'"):
        get_algorithm("fedsgd").resolve({})
    with pytest.raises(ConfigError, match="unknown hyper-parameter"):
        get_algorithm("fedavg").resolve({"eta": 2.0})
    with pytest.raises(ConfigError, match="epsilon = 1.5 is out of range"):
        get_algorithm("fedmgda_plus").resolve({"epsilon": 1.5})
    with pytest.raises(ConfigError, match="eta = -1"):
        get_algorithm("fedavg_n").resolve({"eta": -1.0})
    with pytest.raises(ConfigError, match="must be a number"):
        get_algorithm("qfedavg").resolve({"q": "high"})
    assert set(BUILTIN_ALGORITHMS) == {"fedavg", "fedavg_n", "fedprox", "qfedavg", "afl", "fedmgda",
                                       "fedmgda_plus", "mgda_prox"}
