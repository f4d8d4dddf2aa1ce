"""Extreme and non-finite client reports (docs/protocol-choices.md, "Non-finite reports"):
a scaling attacker of any factor, or a NaN / Inf update, never stops a run by itself; a participant
with a non-finite update is left out of the round (never turned into zeros) and counted; the
normalising rules give every finite update its own direction; the QP never sees a non-finite
Gram entry; a run resumed after such a round ends exactly as an uninterrupted one."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from toy_federated import killed_then_resumed, make_toy_federated, toy_config

import fedmgda.algorithms.qp
from fedmgda.algorithms.linalg import gram_matrix, normalise_rows
from fedmgda.algorithms.qp import min_norm_weights, project_to_simplex
from fedmgda.scheduler import Scheduler, run, run_packed
from fedmgda.screening import finite_mean, screen_reports
from fedmgda.simulator import Simulation

FEDAVGM = str(Path(__file__).resolve().parents[1] / "examples/fedavgm.py") + ":FedAvgM"
ALGORITHMS = {  # every built-in algorithm and a plug-in
    "fedavg": {}, "fedavg_n": {"eta": 1.0}, "fedprox": {"mu": 0.01}, "fedmgda": {},
    "fedmgda_plus": {"eta": 1.0}, "mgda_prox": {"eta": 1.0}, "qfedavg": {"q": 0.1},
    "afl": {"gamma_w": 1.0, "gamma_lambda": 0.1}, "fedavgm": {"beta": 0.8},
}
NORMALISING = ("fedavg_n", "fedmgda_plus", "mgda_prox")
LOSS_READERS = ("qfedavg", "afl")


def config(name, **overrides):
    plugin = {"plugin": FEDAVGM} if name == "fedavgm" else {}
    return toy_config(**{"algorithm": name, "hparams": ALGORITHMS[name], "rounds": 6, **plugin,
                         **overrides})


def scaled(value):
    return {"kind": "scaling", "user": 0, "value": value}


# ---------------------------------------------------------------------------- the numerics
def test_finite_updates_are_normalised_as_before_and_huge_or_tiny_ones_keep_their_direction():
    u = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    # the float32 path, bit for bit
    assert torch.equal(normalise_rows(u), u / u.norm(dim=1, keepdim=True))
    reference = normalise_rows(u)
    for factor in (1e12, 1e20, 1e30, 1e-25, 1e-40):
        rows = u * factor
        assert torch.isfinite(rows).all() and (rows != 0).any(dim=1).all()
        got = normalise_rows(rows)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, reference, atol=2e-6, rtol=0, msg=f"factor {factor:g}")
    zero = torch.zeros(2, 5)
    assert torch.equal(normalise_rows(zero), zero)


def test_gram_matrix_is_the_float32_product_unless_it_overflows_and_then_a_scaled_finite_one():
    u = torch.randn(3, 40, generator=torch.Generator().manual_seed(1))
    assert np.array_equal(gram_matrix(u), (u @ u.T).double().numpy())
    attacked = u.clone()
    attacked[2] *= 1e25  # its squared norm overflows float32
    assert not torch.isfinite(attacked @ attacked.T).all()
    gram = gram_matrix(attacked)
    assert np.isfinite(gram).all()
    exact = (attacked.double() @ attacked.double().T).numpy()  # float64 does not overflow here
    np.testing.assert_allclose(min_norm_weights(gram), min_norm_weights(exact), atol=1e-9)


def test_simplex_projection_survives_losses_that_swamp_its_sums():
    v = np.array([0.25, 0.25, 1e20, 0.25])
    np.testing.assert_array_equal(project_to_simplex(v), [0.0, 0.0, 1.0, 0.0])
    normal = np.array([0.3, 0.9, 0.1])
    # shift (0.3 + 0.9 - 1) / 2
    np.testing.assert_allclose(project_to_simplex(normal), [0.2, 0.8, 0.0], atol=1e-12)
    with pytest.raises(FloatingPointError):
        project_to_simplex(np.array([0.5, np.inf]))


def test_the_screening_rule_and_the_reported_mean_loss():
    updates = torch.tensor([[1.0, 2.0], [float("nan"), 0.0], [3.0, 4.0], [5.0, 6.0]])
    losses = [torch.tensor([0.5, 0.7, float("inf"), 0.9])]
    strict = screen_reports([7, 3, 5, 1], updates, losses, uses_losses=True)
    assert strict.kept == [0, 3]
    assert strict.columns() == {"nonfinite_updates": 1, "nonfinite_losses": 1,
                                "nonfinite_users": "3 5", "dropped": 2}
    assert screen_reports([7, 3, 5, 1], updates, losses, uses_losses=False).kept == [0, 2, 3]
    assert finite_mean(losses[0]) == pytest.approx((0.5 + 0.7 + 0.9) / 3)
    assert np.isnan(finite_mean(torch.tensor([float("nan")])))
    plain = torch.tensor([0.25, 1.5, 3.0])
    assert finite_mean(plain) == float(plain.mean())


# ---------------------------------------------------------------------------- scaling attackers
@pytest.fixture
def finite_grams(monkeypatch):
    """Fails a test whose min-norm QP is handed a non-finite Gram matrix; counts the QPs."""
    seen = []

    def checked(gram, *args, **kwargs):
        assert np.isfinite(gram).all(), "the QP was given a non-finite Gram matrix"
        seen.append(gram)
        return min_norm_weights(gram, *args, **kwargs)

    # the rules import it when they aggregate
    monkeypatch.setattr(fedmgda.algorithms.qp, "min_norm_weights", checked)
    return seen


@pytest.mark.parametrize("value", [1e12, 1e30])
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_scaling_attacker_never_stops_a_run_by_its_reports(name, value, finite_grams):
    result = run(config(name, attack=scaled(value)), data=make_toy_federated(), model_name="logreg")
    metrics = result.metrics
    if result.summary["status"] != "ok":  # only the global model itself may end a run
        assert result.summary["diverged_because"] in ("weights not finite", "test loss not finite")
    else:
        assert (result.summary["rounds_completed"] == 6
                and torch.isfinite(result.final_weights).all())
    assert np.isfinite(metrics["train_loss"]).all()  # non-finite losses are left out of the mean
    flagged = metrics["nonfinite_losses"] + metrics["nonfinite_updates"] > 0
    assert (metrics.loc[flagged, "nonfinite_users"].astype(str) == "0").all()  # only the attacker
    if name in NORMALISING:
        assert result.summary["status"] == "ok"
    if name in ("fedmgda", "fedmgda_plus", "mgda_prox"):
        assert finite_grams  # the QP ran, on finite matrices only


@pytest.mark.parametrize("name", NORMALISING)
def test_normalising_rules_give_an_attacker_of_any_factor_the_same_direction(name):
    """One full-batch local step: the attacker's update is its gradient times the factor, so a
    normalising rule must end where it ends without the attack, whatever the factor (before the
    fix, a float32 norm overflowed to Inf from about 1e19 and the direction became zero)."""
    full = dict(batch_size="full", momentum=0.5, local_epochs=1)
    data = make_toy_federated()
    honest = run(config(name, attack=scaled(1.0), **full), data=data, model_name="logreg")
    for value in (1e12, 1e20, 1e30):
        attacked = run(config(name, attack=scaled(value), **full), data=data, model_name="logreg")
        assert attacked.summary["status"] == "ok"
        torch.testing.assert_close(attacked.final_weights, honest.final_weights, atol=1e-5, rtol=0)


def test_fedavg_follows_a_huge_finite_update_where_fedmgda_plus_does_not():
    full = dict(batch_size="full", momentum=0.5)
    data = make_toy_federated()
    runs = {name: [run(config(name, attack=scaled(v), **full), data=data,
                       model_name="logreg").final_weights
                   for v in (1.0, 1e12)] for name in ("fedavg", "fedmgda_plus")}
    moved = {name: float((b - a).abs().max()) for name, (a, b) in runs.items()}
    assert moved["fedavg"] > 1e6 > 1e-4 > moved["fedmgda_plus"]


# ---------------------------------------------------------------------------- injected NaN / Inf
def inject(monkeypatch, poison):
    """Patches the scheduler: ``poison[t] = (user, "update" | "loss", value)`` spoils that user's
    report in round t (0-based)."""
    original = Scheduler.train

    def train(self, requests):
        answers = original(self, requests)
        spoiled = []
        for request, (updates, losses) in zip(requests, answers):
            if request.t in poison and poison[request.t][0] in request.users:
                user, what, value = poison[request.t]
                k = request.users.index(user)
                updates, losses = updates.clone(), losses.clone()
                if what == "update":
                    updates[k, ::3] = value
                else:
                    losses[k] = value
            spoiled.append((updates, losses))
        return spoiled

    monkeypatch.setattr(Scheduler, "train", train)


def spy_aggregate(monkeypatch, sim):
    """Records what ``aggregate`` is given each call: (round, participants, updates)."""
    calls = []
    original = sim.algorithm.aggregate

    def aggregate(w, updates, ctx):
        calls.append((ctx.round, list(ctx.participants), updates.clone()))
        return original(w, updates, ctx)

    monkeypatch.setattr(sim.algorithm, "aggregate", aggregate)
    return calls


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_nan_or_inf_update_is_left_out_of_its_round_and_counted(monkeypatch, name):
    sim = Simulation(config(name, attack=scaled(1.0)), data=make_toy_federated(),
                     model_name="logreg")
    inject(monkeypatch, {1: (0, "update", float("nan")), 3: (0, "update", float("inf"))})
    calls = spy_aggregate(monkeypatch, sim)

    result = run_packed([sim], [None])[0]
    assert result.summary["status"] == "ok" and torch.isfinite(result.final_weights).all()
    metrics = result.metrics
    assert list(metrics["nonfinite_updates"]) == [0, 1, 0, 1, 0, 0]
    assert list(metrics["dropped"]) == [0, 1, 0, 1, 0, 0]
    assert list(metrics["nonfinite_users"].fillna("").astype(str)) == ["", "0", "", "0", "", ""]
    for t, participants, updates in calls:
        assert torch.isfinite(updates).all()
        # the attacker (forced into every round) only when finite
        assert (0 in participants) == (t not in (1, 3))
        # its row removed, not zeroed
        assert len(participants) == len(updates) == (3 if t in (1, 3) else 4)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_non_finite_loss_leaves_out_only_where_the_rule_reads_losses(monkeypatch, name):
    sim = Simulation(config(name, attack=scaled(1.0)), data=make_toy_federated(),
                     model_name="logreg")
    inject(monkeypatch, {2: (0, "loss", float("inf"))})
    calls = spy_aggregate(monkeypatch, sim)

    metrics = run_packed([sim], [None])[0].metrics
    assert list(metrics["nonfinite_losses"]) == [0, 0, 1, 0, 0, 0]
    assert np.isfinite(metrics["train_loss"]).all()
    reads_losses = name in LOSS_READERS or name == "fedavgm" and sim.algorithm.uses_losses
    assert sim.algorithm.uses_losses == reads_losses
    assert metrics["dropped"].iloc[2] == int(reads_losses)
    assert (0 in calls[2][1]) == (not reads_losses)


def test_a_round_in_which_no_participant_reports_finitely_ends_the_run(monkeypatch):
    """Every client overflowing from the global model is the model's divergence, not a client's."""
    sim = Simulation(config("fedavgm", participation=1 / 8), data=make_toy_federated(),
                     model_name="logreg")
    calls = spy_aggregate(monkeypatch, sim)
    only = sim.participants(2)[0]
    inject(monkeypatch, {2: (only, "update", float("nan"))})

    result = run_packed([sim], [None])[0]
    assert result.summary["status"] == "diverged" and result.summary["diverged_round"] == 3
    assert result.summary["diverged_because"] == "no participant sent a finite report"
    assert result.metrics["dropped"].iloc[2] == 1 and [t for t, _, _ in calls] == [0, 1]


def test_divergence_is_the_global_models_and_says_why(tmp_path):
    """A server step beyond float32's range makes the model's weights Inf / NaN in round 1; a step
    of 1e38 makes a huge but finite model whose clients' losses overflow: not a divergence."""
    result = run(toy_config(algorithm="fedavg_n", hparams={"eta": 1e39}, rounds=10), tmp_path,
                 data=make_toy_federated(), model_name="logreg")
    assert result.summary["status"] == "diverged" and result.summary["diverged_round"] == 1
    assert result.summary["diverged_because"] == "weights not finite"
    huge = run(toy_config(algorithm="fedavg_n", hparams={"eta": 1e38}, rounds=6),
               data=make_toy_federated(), model_name="logreg")
    assert huge.metrics["nonfinite_losses"].sum() > 0 and huge.summary["status"] == "ok"
    clean = run(toy_config(algorithm="fedavg", rounds=3), data=make_toy_federated(),
                model_name="logreg")
    assert clean.summary["status"] == "ok" and clean.summary["diverged_because"] is None


# ---------------------------------------------------------------------------- resume
@pytest.mark.parametrize("name", ["afl", "fedavgm", "fedmgda_plus"])
def test_resume_after_a_non_finite_round_is_exact(tmp_path, monkeypatch, name):
    poison = {2: (0, "update", float("nan")), 4: (0, "loss", float("inf"))}
    cfg = config(name, attack=scaled(1e12), rounds=9, checkpoint_every=3)
    inject(monkeypatch, poison)
    uninterrupted = run(cfg, data=make_toy_federated(), model_name="logreg")
    resumed = killed_then_resumed(cfg, tmp_path, monkeypatch, kill_at=5)
    assert uninterrupted.metrics["dropped"].iloc[2] == 1
    pd.testing.assert_frame_equal(resumed.metrics, uninterrupted.metrics)
    pd.testing.assert_frame_equal(resumed.per_user, uninterrupted.per_user)
    assert torch.equal(resumed.final_weights, uninterrupted.final_weights)
