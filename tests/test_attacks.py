import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.attacks import force_attacker, loss_bias, loss_scale
from fedmgda.config import AttackConfig
from fedmgda.scheduler import run, run_packed
from fedmgda.simulator import Simulation


def one_round(algorithm, attack, hparams=None, **overrides):
    cfg = toy_config(algorithm=algorithm, hparams=hparams or {}, rounds=1, attack=attack,
                     **overrides)
    return run(cfg, data=make_toy_federated(), model_name="logreg").final_weights


def test_attacker_joins_every_round_and_the_round_size_is_unchanged():
    assert force_attacker([4, 2, 7], 2) == [4, 7, 2]
    assert force_attacker([4, 2, 7], 5) == [4, 2, 5]
    sim = Simulation(toy_config(attack={"kind": "bias", "user": 6, "value": 1.0}),
                     data=make_toy_federated(), model_name="logreg")
    for t in range(10):
        users = sim.participants(t)
        assert users[-1] == 6 and len(users) == 4 and len(set(users)) == 4


def test_only_the_attacker_is_affected():
    attack = AttackConfig("scaling", 3, 10.0)
    assert (loss_scale(attack, 3) == 10.0 and loss_scale(attack, 2) == 1.0
            and loss_bias(attack, 3) == 0.0)
    bias = AttackConfig("bias", 1, 5.0)
    assert loss_bias(bias, 1) == 5.0 and loss_bias(bias, 0) == 0.0 and loss_scale(bias, 1) == 1.0


def test_bias_leaves_fedmgda_plus_unchanged_but_moves_qfedavg():
    honest = {"kind": "bias", "user": 0, "value": 0.0}
    biased = {"kind": "bias", "user": 0, "value": 1000.0}
    hp = {"eta": 1.0}
    assert torch.equal(one_round("fedmgda_plus", honest, hp), one_round("fedmgda_plus", biased, hp))
    q = {"q": 2.0, "L": 1.0}
    assert not torch.allclose(one_round("qfedavg", honest, q), one_round("qfedavg", biased, q))


def test_bias_moves_afls_lambda():
    cfg = dict(algorithm="afl", hparams={"gamma_w": 1.0, "gamma_lambda": 0.1}, rounds=1,
               participation=1.0)
    data = make_toy_federated()
    sims = {}
    for value in (0.0, 1.0):
        sims[value] = Simulation(toy_config(attack={"kind": "bias", "user": 0, "value": value},
                                            **cfg), data=data, model_name="logreg")
        run_packed([sims[value]], [None])
    lam_honest, lam_biased = sims[0.0].algorithm.lam, sims[1.0].algorithm.lam
    assert lam_biased[0] > lam_honest[0] + 0.05  # the attacker's weight grows


def test_scaling_cancels_for_normalised_fedmgda_plus_with_one_full_batch_step():
    full = dict(batch_size="full", momentum=0.5)
    honest = {"kind": "scaling", "user": 0, "value": 1.0}
    scaled = {"kind": "scaling", "user": 0, "value": 50.0}
    hp = {"eta": 1.0}
    a = one_round("fedmgda_plus", honest, hp, **full)
    b = one_round("fedmgda_plus", scaled, hp, **full)
    assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(one_round("fedavg", honest, **full),
                              one_round("fedavg", scaled, **full), atol=1e-3)
