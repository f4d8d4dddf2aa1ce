"""Client-side hooks on the batched path (docs/plugins.md §3): an algorithm's local term vmap-ed
over a round's clients with their states stacked, against the reference path (the oracle); the
fall-back for terms that cannot be vmap-ed; packs of such runs beside built-ins."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda import scheduler
from fedmgda.client import (
    FlatModel,
    LocalHParams,
    LocalTrainer,
    VmapSteps,
    size_groups,
    stack_states,
)
from fedmgda.models import build_model
from fedmgda.scheduler import run, run_packed, training_path
from fedmgda.simulator import Simulation

REPO = Path(__file__).resolve().parents[1]
SCAFFOLD = {"algorithm": "scaffold", "plugin": f"{REPO}/examples/scaffold.py:Scaffold"}
FEDDYN = {"algorithm": "feddyn", "plugin": f"{REPO}/examples/feddyn.py:FedDyn",
          "hparams": {"alpha": 0.1}}
FEDPROX = {"algorithm": "fedprox", "hparams": {"mu": 0.1}}
PROX_TERM = {"algorithm": "prox_term", "plugin": f"{REPO}/tests/term_plugins.py:ProxTerm",
             "hparams": {"mu": 0.1}}


def unequal_clients():
    """Toy users of 5, 13 and 24 samples: several size groups, partial minibatches, clients that
    finish early (padding and the active prefix of the batched path)."""
    data = make_toy_federated()
    data.train_idx[0] = data.train_idx[0][:5]
    data.train_idx[1] = data.train_idx[1][:13]
    data.train_idx[5] = data.train_idx[5][:13]
    return data


def config(algorithm: dict, **overrides):
    return toy_config(**{**algorithm, "momentum": 0.0, "rounds": 4, "batch_size": 5, **overrides})


def test_a_vmapped_term_with_stacked_states_gives_each_clients_reference_update():
    """The vmap path with a term of (w, w_start, state) and a pytree state (a dict of tensors)
    stacked along dim 0 equals train, client by client: unequal sizes, momentum and mu."""
    torch.manual_seed(0)
    for name, shape, classes in (("logreg", (12,), 3), ("mlp_digits", (12,), 4),
                                 ("cnn_fmnist", (1, 28, 28), 10)):
        flat = FlatModel(build_model(name, shape, classes).double())
        trainer = LocalTrainer(flat,
                               LocalHParams(epochs=2, batch_size=4, lr=0.05, momentum=0.5, mu=0.1),
                               dropout=False)
        sizes = [11, 4, 9]
        x = torch.randn(sum(sizes), *shape, dtype=torch.float64)
        y = torch.randint(0, classes, (sum(sizes),))
        idx = list(torch.arange(sum(sizes)).split(sizes))
        states = [{"anchor": torch.randn(flat.num_params, dtype=torch.float64),
                   "weight": torch.tensor(0.5 + k, dtype=torch.float64)} for k in range(3)]

        def term(w, w_start, state):
            return ((state["anchor"] * (w - w_start)).sum()
                    + state["weight"] * ((w - w_start) ** 2).sum())

        w0 = flat.initial_vector()
        plan = trainer.minibatches.plan(idx, [torch.Generator().manual_seed(k) for k in range(3)])
        batched = VmapSteps(trainer).train(plan, w0, x, y, torch.ones(3), term=term,
                                           states=stack_states(states))
        for k, (i, state) in enumerate(zip(idx, states)):
            alone = trainer.train(w0, x[i], y[i], torch.Generator().manual_seed(k), term=term,
                                  state=state)
            assert torch.allclose(batched[k].update, alone.update, atol=1e-10), name
            assert torch.allclose(batched[k].train_loss, alone.train_loss, atol=1e-10), name
        plain = trainer.train(w0, x[idx[0]], y[idx[0]], torch.Generator().manual_seed(0))
        assert not torch.allclose(plain.update, batched[0].update, atol=1e-3)  # the term moved it


def test_stack_states():
    a, b = torch.ones(3), torch.zeros(3)
    assert stack_states([None, None]) is None
    stacked = stack_states([(a, {"c": a[:1]}), (b, {"c": b[:1]})])
    assert torch.equal(stacked[0], torch.stack([a, b])) and stacked[1]["c"].shape == (2, 1)
    with pytest.raises(ValueError, match="holds a float"):
        stack_states([{"x": 1.0}, {"x": 2.0}])
    with pytest.raises(ValueError, match="differ in structure"):
        stack_states([(a,), (a, b)])
    with pytest.raises(ValueError, match="cannot be stacked"):
        stack_states([a, torch.ones(4)])


@pytest.mark.parametrize("model", ["logreg", "mlp_digits"])
@pytest.mark.parametrize("algorithm", [SCAFFOLD, FEDDYN, FEDPROX, PROX_TERM],
                         ids=lambda a: a["algorithm"])
def test_the_batched_run_equals_the_reference_run(algorithm, model, monkeypatch):
    """Whole runs, batched against batched: false: final model, reported losses every round and
    the clients' states (SCAFFOLD's c_i, FedDyn's g_k) to 1e-5; the term's clients really took
    the vmap path with their term."""
    data = unequal_clients()
    calls = []
    original = VmapSteps.train
    monkeypatch.setattr(VmapSteps, "train",
                        lambda self, *a, **k: calls.append(k.get("term"))
                        or original(self, *a, **k))
    reference = Simulation(config(algorithm, batched=False), data=data, model_name=model)
    batched = Simulation(config(algorithm), data=data, model_name=model)
    (ref,), (bat,) = run_packed([reference], [None]), run_packed([batched], [None])
    assert torch.allclose(ref.final_weights, bat.final_weights, atol=1e-5)
    assert (ref.final_weights - reference.model.initial_vector()).abs().max() > 1e-2  # it trained
    pd.testing.assert_series_equal(ref.metrics["train_loss"], bat.metrics["train_loss"], atol=1e-5)
    assert reference.client_states.keys() == batched.client_states.keys()
    for user, state in reference.client_states.items():
        other = batched.client_states[user]
        assert (state is None and other is None) or torch.allclose(state, other, atol=1e-5)
    assert algorithm["algorithm"] not in ("scaffold", "feddyn") or len(reference.client_states) > 2
    if batched.algorithm.has_local_term():
        assert training_path(batched.inputs) == "vmap, local_term vmap-ed"
        assert any(term is not None for term in calls)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("algorithm", [SCAFFOLD, FEDDYN], ids=lambda a: a["algorithm"])
def test_cuda_term_runs_equal_the_reference_run(algorithm):
    """On a GPU the term's clients take the eager vmap-ed step (no CUDA graph: it would freeze the
    algorithm's attributes the term reads), the built-ins' graphs untouched."""
    data = unequal_clients()
    ref = run(config(algorithm, batched=False, device="cuda"), data=data, model_name="mlp_digits")
    bat = run(config(algorithm, device="cuda"), data=data, model_name="mlp_digits")
    assert torch.allclose(ref.final_weights, bat.final_weights, atol=1e-5)


def test_a_term_written_as_a_plugin_is_fedprox():
    """mu ||w - w_start||^2 as a plug-in's term, batched, gives the built-in FedProx's run on the
    reference path."""
    data = unequal_clients()
    ours = run(config(PROX_TERM), data=data, model_name="mlp_digits")
    fedprox = run(config(FEDPROX, batched=False), data=data, model_name="mlp_digits")
    assert torch.allclose(ours.final_weights, fedprox.final_weights, atol=1e-5)
    pd.testing.assert_series_equal(ours.metrics["train_loss"], fedprox.metrics["train_loss"],
                                   atol=1e-5)


@pytest.mark.parametrize("plugin,reason", [
    ("ItemTerm", "RuntimeError: .*item"),
    ("FloatState", "holds a float"),
    ("ProxTermOnReference", "declares vmap_local_term = False"),
])
def test_a_term_that_cannot_be_vmapped_falls_back_and_says_why(plugin, reason, capsys):
    """Its pack's runs of the algorithm go to the reference path, said once in the pack's log; a
    later pack (in the same process) knows nothing of it: it tries again, and says it again."""
    data = make_toy_federated()
    for user in range(5):  # every client each round: groups of 3 x 24 and 5 x 2 samples, so a group
        data.train_idx[user] = data.train_idx[user][:2]  # trains after the one before it fell back
    assert [len(group) for group in size_groups([len(i) for i in data.train_idx])] == [3, 5]
    algorithm = {"algorithm": {"ItemTerm": "item_term", "FloatState": "float_state",
                               "ProxTermOnReference": "prox_term_ref"}[plugin],
                 "plugin": f"{REPO}/tests/term_plugins.py:{plugin}", "hparams": {"mu": 0.1}}
    sims = [Simulation(config(algorithm, seed=seed, participation=1.0), data=data,
                       model_name="mlp_digits") for seed in (1, 2)]
    batched = run_packed(sims, [None, None])
    lines = [line for line in capsys.readouterr().out.splitlines()
             if "its local_term is not vmap-ed" in line]
    assert len(lines) == 1 and re.search(reason, lines[0]), lines
    assert all(training_path(sim.inputs).startswith("reference (") for sim in sims)
    reference = run(config(algorithm, seed=2, participation=1.0, batched=False), data=data,
                    model_name="mlp_digits")
    assert torch.equal(batched[1].final_weights, reference.final_weights)

    later = Simulation(config(algorithm, seed=3, participation=1.0), data=data,
                       model_name="mlp_digits")
    assert (training_path(later.inputs).startswith("reference (")
            == (plugin == "ProxTermOnReference"))
    run_packed([later], [None])
    again = [line for line in capsys.readouterr().out.splitlines()
             if "its local_term is not vmap-ed" in line]
    assert again == lines and training_path(later.inputs).startswith("reference (")
    # nothing kept per process
    assert not hasattr(scheduler, "_REFERENCE_TERMS") and not hasattr(scheduler, "_SAID")


@pytest.mark.parametrize("model", ["logreg", "mlp_digits"])
def test_term_runs_pack_beside_builtins(model):
    """SCAFFOLD, FedDyn (two seeds), FedAvg and FedMGDA+ in one pack: each run gives what it
    gives alone (built-ins keep their path: the linear-softmax path on logreg)."""
    data = unequal_clients()
    configs = [config(SCAFFOLD, seed=1), config(FEDDYN, seed=2), config(FEDDYN, seed=1, rounds=3),
               config({"algorithm": "fedavg"}, seed=1),
               config({"algorithm": "fedmgda_plus", "hparams": {"eta": 1.0, "decay": 0.1}}, seed=3)]
    packed = run_packed([Simulation(cfg, data=data, model_name=model) for cfg in configs],
                        [None] * len(configs))
    for cfg, result in zip(configs, packed):
        alone = run(cfg, data=data, model_name=model)
        assert len(result.metrics) == cfg.rounds
        assert torch.allclose(result.final_weights, alone.final_weights, atol=1e-5), cfg.algorithm
        pd.testing.assert_frame_equal(result.metrics, alone.metrics, atol=1e-5)
