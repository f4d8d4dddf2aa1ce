import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from toy_federated import killed_at, killed_then_resumed, make_toy_federated, toy_config

from fedmgda.checkpoints import CHECKPOINT
from fedmgda.errors import ConfigError, RunFolderError
from fedmgda.scheduler import Scheduler, run, run_packed, run_round
from fedmgda.simulator import Simulation


def simulate(**overrides):
    return run(toy_config(**overrides), data=make_toy_federated(), model_name="logreg")


def test_same_config_and_seed_give_identical_metrics():
    a = simulate(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1})
    b = simulate(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1})
    pd.testing.assert_frame_equal(a.metrics, b.metrics)
    pd.testing.assert_frame_equal(a.per_user, b.per_user)
    assert torch.equal(a.final_weights, b.final_weights)
    c = simulate(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1}, seed=4)
    assert not torch.equal(a.final_weights, c.final_weights)


def test_every_algorithm_sees_the_same_participants_and_initial_model():
    sims = [Simulation(toy_config(algorithm=name), data=make_toy_federated(), model_name="logreg")
            for name in ("fedavg", "qfedavg", "mgda_prox")]
    for t in range(5):
        assert sims[0].participants(t) == sims[1].participants(t) == sims[2].participants(t)
    assert torch.equal(sims[0].model.initial_vector(), sims[2].model.initial_vector())
    assert len(sims[0].participants(0)) == 4  # floor(0.5 * 8)
    assert (sims[0].participants(0) != sims[0].participants(1)
            or sims[0].participants(1) != sims[0].participants(2))


def test_participants_per_round_is_floor_p_m():
    data = make_toy_federated(num_users=30)
    for p, expected in [(0.1, 3), (0.2, 6), (0.29, 8), (1.0, 30), (0.01, 1)]:
        sim = Simulation(toy_config(participation=p), data=data, model_name="logreg")
        users = sim.participants(0)
        assert len(users) == expected and len(set(users)) == expected
    assert len(Simulation(toy_config(clients_per_round=5), data=data,
                          model_name="logreg").participants(0)) == 5
    every = Simulation(toy_config(clients_per_round=30), data=data, model_name="logreg")
    assert len(every.participants(0)) == 30
    with pytest.raises(ConfigError, match="^clients_per_round = 31 but toy has 30 users"):
        Simulation(toy_config(clients_per_round=31), data=data, model_name="logreg")  # not 30


def test_fedmgda_plus_with_epsilon_zero_equals_fedavg_n_step_for_step():
    hp = {"eta": 1.5, "decay": 0.1}
    plus = simulate(algorithm="fedmgda_plus", hparams={**hp, "epsilon": 0.0}, rounds=8)
    avg_n = simulate(algorithm="fedavg_n", hparams=hp, rounds=8)
    pd.testing.assert_frame_equal(plus.metrics, avg_n.metrics)
    assert torch.equal(plus.final_weights, avg_n.final_weights)


def test_common_descent_keeps_participants_improved(capsys):
    """Full-batch clients, one local step, decaying global step: FedMGDA+ (epsilon = 1) moves along
    a common descent direction, so (almost) every participant's loss decreases each round (paper
    §5)."""
    data = make_toy_federated(num_users=10, n_train=30, seed=1)
    common = dict(rounds=300, participation=0.5, batch_size="full", local_lr=0.5, momentum=0.0,
                  eval_every=50, per_user_every=100)
    mgda = run(toy_config(algorithm="fedmgda_plus", hparams={"eta": 0.5, "decay": 0.05}, **common),
               data=data, model_name="logreg")
    fedavg = run(toy_config(algorithm="fedavg", **common), data=data, model_name="logreg")
    second_half = slice(150, 300)
    rate_mgda = mgda.metrics["improved_loss"].iloc[second_half].mean()
    rate_fedavg = fedavg.metrics["improved_loss"].iloc[second_half].mean()
    with capsys.disabled():
        print(f"\n  improved participants over rounds 151-300: FedMGDA+ {100 * rate_mgda:.1f} %, "
              f"FedAvg {100 * rate_fedavg:.1f} %")
    assert rate_mgda >= 0.95
    assert rate_mgda > rate_fedavg


def test_outputs_and_protocol_round(tmp_path):
    result = run(toy_config(algorithm="fedavg", rounds=20, per_user_every=10, eval_every=5),
                 tmp_path, data=make_toy_federated(), model_name="logreg")
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert list(metrics["round"]) == list(range(1, 21))
    for column in ("eta", "train_loss", "improved_loss", "improved_acc", "mean_acc", "std_acc",
                   "worst5_acc", "best5_acc", "weighted_acc", "test_acc_pooled"):
        assert column in metrics
    assert metrics["mean_acc"].notna().sum() == 5  # rounds 1, 6, 11, 16 and the last
    per_user = pd.read_csv(tmp_path / "per_user.csv")
    assert sorted(per_user["round"].unique()) == [1, 11, 20]
    assert len(per_user) == 3 * 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["rounds_completed"] == 20
    assert summary["protocol"]["round"] == 11  # t = T - 10: the last vector the code stored
    last = per_user[per_user["round"] == 20]
    assert summary["final"]["mean_acc"] == pytest.approx(last["accuracy"].mean())
    assert summary["config"]["algorithm"] == "fedavg"
    assert result.summary == summary | {"runtime_s": result.summary["runtime_s"]}


def test_divergence_is_recorded_not_raised(tmp_path):
    result = run(toy_config(algorithm="fedavg_n", hparams={"eta": 1e39}, rounds=10), tmp_path,
                 data=make_toy_federated(), model_name="logreg")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged"
    assert 1 <= summary["diverged_round"] <= 10
    assert summary["final"] is None
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == summary["diverged_round"]
    assert result.summary["status"] == "diverged"


FEDAVGM = str(Path(__file__).resolve().parents[1] / "examples/fedavgm.py") + ":FedAvgM"


# both keep server state in their checkpoints: AFL its lambda, the plug-in FedAvgM its momentum
@pytest.mark.parametrize("cfg", [
    dict(algorithm="afl", hparams={"gamma_w": 1.0, "gamma_lambda": 0.3}),
    dict(algorithm="fedavgm", hparams={"beta": 0.8}, plugin=FEDAVGM),
], ids=["afl", "plugin"])
def test_resume_after_a_crash_gives_identical_results(tmp_path, monkeypatch, cfg):
    cfg = dict(cfg, rounds=12, checkpoint_every=3)
    uninterrupted = run(toy_config(**cfg), data=make_toy_federated(), model_name="logreg")
    resumed = killed_then_resumed(toy_config(**cfg), tmp_path, monkeypatch, kill_at=7)
    pd.testing.assert_frame_equal(resumed.metrics, uninterrupted.metrics)
    assert torch.equal(resumed.final_weights, uninterrupted.final_weights)
    assert not (tmp_path / CHECKPOINT).exists()


def test_a_checkpoint_with_the_old_key_aggregator_resumes(tmp_path, monkeypatch):
    """Checkpoints written before the key "algorithm" was named so hold the algorithm's state
    under "aggregator": they resume to the same result (AFL's lambda is that state)."""
    cfg = toy_config(algorithm="afl", hparams={"gamma_w": 1.0, "gamma_lambda": 0.3}, rounds=12,
                     checkpoint_every=3)
    uninterrupted = run(cfg, data=make_toy_federated(), model_name="logreg")
    killed_at(lambda: run(cfg, tmp_path, data=make_toy_federated(),
                          model_name="logreg"), tmp_path, monkeypatch, kill_at=7)
    payload = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    # written under the new key
    assert "lam" in payload["algorithm"] and "aggregator" not in payload
    payload["aggregator"] = payload.pop("algorithm")
    torch.save(payload, tmp_path / CHECKPOINT)
    resumed = run(cfg, tmp_path, data=make_toy_federated(), model_name="logreg")
    pd.testing.assert_frame_equal(resumed.metrics, uninterrupted.metrics)
    assert torch.equal(resumed.final_weights, uninterrupted.final_weights)


def test_checkpoint_of_another_config_is_refused(tmp_path, monkeypatch):
    original = Simulation._round

    def crash(self, w, t, state):
        if t == 4:
            raise KeyboardInterrupt
        return (yield from original(self, w, t, state))

    monkeypatch.setattr(Simulation, "_round", crash)
    with pytest.raises(KeyboardInterrupt):
        run(toy_config(rounds=8, checkpoint_every=2), tmp_path, data=make_toy_federated(),
            model_name="logreg")
    monkeypatch.setattr(Simulation, "_round", original)
    with pytest.raises(RunFolderError, match="belongs to a different run config; delete it to "
                                             "start this run afresh"):
        run(toy_config(rounds=8, checkpoint_every=2, seed=9), tmp_path, data=make_toy_federated(),
            model_name="logreg")


def test_afl_final_model_is_the_average_iterate():
    result = simulate(algorithm="afl", participation=1.0)
    assert result.summary["final_model"] == "average of all iterates"
    last = simulate(algorithm="fedavg")
    assert last.summary["final_model"] == "last iterate"


def test_final_model_average_is_the_mean_of_the_iterates():
    sim = Simulation(toy_config(algorithm="fedavg", rounds=4, final_model="average"),
                     data=make_toy_federated(), model_name="logreg")
    iterates = []
    original = sim._round

    def record(w, t, state):
        row, w_next = yield from original(w, t, state)
        iterates.append(w_next)
        return row, w_next

    sim._round = record
    result = run_packed([sim], [None])[0]
    assert result.summary["final_model"] == "average of all iterates"
    assert torch.allclose(result.final_weights, torch.stack(iterates).mean(0), atol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_runs_on_cuda():
    result = simulate(algorithm="fedmgda_plus", device="cuda")
    assert result.final_weights.is_cuda
    assert np.isfinite(result.summary["final"]["mean_acc"])


def test_afl_gamma_w_as_local_lr_is_a_server_step_of_one():
    """afl_gamma_w: local_lr (docs/protocol.md §8.11): gamma_w is the clients' lr, the server step
    is 1."""
    as_lr = simulate(algorithm="afl", participation=1.0, local_lr=0.05, afl_gamma_w="local_lr",
                     hparams={"gamma_w": 0.05, "gamma_lambda": 0.3})
    literal = simulate(algorithm="afl", participation=1.0, local_lr=0.05,
                       hparams={"gamma_w": 1.0, "gamma_lambda": 0.3})
    assert torch.equal(as_lr.final_weights, literal.final_weights)
    multiplier = simulate(algorithm="afl", participation=1.0, local_lr=0.05,
                          hparams={"gamma_w": 0.05, "gamma_lambda": 0.3})
    assert not torch.allclose(multiplier.final_weights, literal.final_weights)


# ---------------------------------------------------------------- options for checks
# (scripts/lockstep_authors_fmnist.py)
def test_one_round_at_a_time_is_the_run():
    """``run_round`` from each round's own model gives the run's models and metrics bit for bit; its
    record names the participants and holds the updates the aggregation used."""
    cfg = toy_config(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1}, rounds=4)
    whole = run(cfg, data=make_toy_federated(), model_name="logreg")
    sim = Simulation(cfg, data=make_toy_federated(), model_name="logreg")
    scheduler, w, rows = Scheduler([sim.inputs]), sim.model.initial_vector(), []
    for t in range(cfg.rounds):
        record = run_round(sim, w, t, scheduler)
        assert record.t == t and record.users == sim.participants(t) and record.diverged is None
        assert record.updates.shape == (len(record.users), len(w))
        w = record.w_next
        rows.append(record.row)
    assert torch.equal(w, whole.final_weights)
    pd.testing.assert_frame_equal(pd.DataFrame(rows), whole.metrics[pd.DataFrame(rows).columns])
    # any model: the round starts there (a scheduler of its own by default)
    start = torch.zeros_like(w)
    again = [run_round(Simulation(cfg, data=make_toy_federated(), model_name="logreg"), start, 2)
             for _ in range(2)]
    assert torch.equal(again[0].w_next, again[1].w_next) and not torch.equal(again[0].w_next, w)


def test_dtype_casts_the_model_and_the_samples_after_the_model_is_initialised():
    single = Simulation(toy_config(), data=make_toy_federated(), model_name="logreg")
    double = Simulation(toy_config(), data=make_toy_federated(), model_name="logreg",
                        dtype=torch.float64)
    assert torch.equal(double.model.initial_vector(), single.model.initial_vector().double())
    assert (double.inputs.data.x.dtype == double.inputs.test_x.dtype
            == double.data.global_test["pooled"][0].dtype == torch.float64)
    result = run_packed([double], [None])[0]
    assert result.summary["status"] == "ok" and result.final_weights.dtype == torch.float64
    assert torch.allclose(result.final_weights.float(),
                          run_packed([single], [None])[0].final_weights, atol=1e-4)


def test_without_dropout_the_clients_train_without_masks():
    from test_client_randomness import images

    cfg = toy_config(rounds=2, batch_size=10, local_lr=0.05, batched=False)
    on = Simulation(cfg, data=images(), model_name="cnn_fmnist")
    off = Simulation(cfg, data=images(), model_name="cnn_fmnist", dropout=False)
    assert (on.trainer.minibatches.sites and off.trainer.minibatches.sites == ()
            and not off.trainer.dropout)
    assert not torch.equal(run_packed([on], [None])[0].final_weights,
                           run_packed([off], [None])[0].final_weights)


def test_moved_names_still_import_from_the_simulator_with_one_deprecation_each(capsys):
    """CHECKPOINT (now fedmgda.checkpoints) and RunResult, write_result, protocol_stats,
    NONFINITE_COLUMNS (now fedmgda.results): the old import works until fedmgda 0.2.0, warning
    once per name with the line that fixes it; other names are plain AttributeErrors."""
    import importlib
    import warnings

    import fedmgda.simulator as simulator

    simulator._warned.clear()
    for name, home in simulator.MOVED.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(simulator, name)
            assert getattr(simulator, name) is value  # the second time: no warning
        assert value is getattr(importlib.import_module(home), name)
        assert [str(w.message)
                for w in caught] == [f"fedmgda.simulator.{name} is deprecated: import it from "
                                     f"{home} "
                                                    f"(from {home} import {name}); the old place "
                                     "goes in fedmgda 0.2.0"]
        assert caught[0].category is DeprecationWarning and caught[0].filename == __file__
    assert (capsys.readouterr().err.count("fedmgda: deprecated: fedmgda.simulator.")
            == len(simulator.MOVED))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = simulator.nothing_here


@pytest.mark.parametrize("algorithm, hparams",
                         [("fedmgda_plus", {"eta": 1.0, "decay": 0.1}), ("fedavg", {}),
                          ("qfedavg", {"q": 1.0, "L": 1.0})])
def test_track_improvement_only_adds_its_columns(algorithm, hparams):
    """The pre- and post-round participant losses are bookkeeping: without them (the paper
    profile's runs that no figure or claim reads them from) every other metric, the per-user table
    and the final model are identical, and the improved columns are NaN (q-FFL still evaluates its
    pre-round losses, which its server step uses)."""
    tracked = simulate(algorithm=algorithm, hparams=hparams, track_improvement=True)
    untracked = simulate(algorithm=algorithm, hparams=hparams, track_improvement=False)
    improved = ["improved_loss", "improved_acc"]
    assert (tracked.metrics[improved].notna().all().all()
            and untracked.metrics[improved].isna().all().all())
    pd.testing.assert_frame_equal(tracked.metrics.drop(columns=improved),
                                  untracked.metrics.drop(columns=improved))
    pd.testing.assert_frame_equal(tracked.per_user, untracked.per_user)
    assert torch.equal(tracked.final_weights, untracked.final_weights)
