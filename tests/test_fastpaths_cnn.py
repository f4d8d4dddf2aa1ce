"""The conv-net path on the CPU (``fastpaths.ConvNetSteps``, the small CNNs' step written out; its
trajectory against the reference path: tests/test_backends.py): a client's bits do not depend on
who trains beside it, the scheduler's choice of it, a run on it against the vmap path."""

import dataclasses
from pathlib import Path

import pandas as pd
import torch
from test_client_randomness import images
from toy_federated import toy_config

from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, VmapSteps
from fedmgda.fastpaths import ConvNetSteps
from fedmgda.models import build_model
from fedmgda.scheduler import (
    Scheduler,
    batched_path,
    derived_seed,
    dropout_generator,
    run_packed,
    training_path,
)
from fedmgda.simulator import Simulation

CPU = torch.device("cpu")


def clients(model: str, classes: int, sizes: list[int], seed: int = 1):
    torch.manual_seed(0)
    flat = FlatModel(build_model(model, (1, 28, 28), classes))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), 1, 28, 28, generator=g)
    y = torch.randint(0, classes, (len(x),), generator=g)
    return flat, x, y, list(torch.arange(sum(sizes)).split(sizes))


def generators(n: int, seed: int = 3):
    """Each client's minibatch order and dropout-mask generators, fresh, as the scheduler seeds
    them."""
    keys = [(seed, 0, user) for user in range(n)]
    return ([torch.Generator().manual_seed(derived_seed(*key)) for key in keys],
            [dropout_generator(key, CPU) for key in keys])


def test_a_client_gets_the_same_bits_whoever_trains_beside_it():
    """Chunks of one client, of all, alone or beside others: the same update and loss, bit for bit
    (what lets a packed run equal the run alone, tests/test_client_randomness.py)."""
    flat, x, y, idx = clients("cnn_fmnist", 10, [23, 17, 23, 40])
    hparams = LocalHParams(epochs=1, batch_size=10, lr=0.05, momentum=0.5, mu=0.01)
    trainer = LocalTrainer(flat, hparams)
    w0 = flat.initial_vector()

    def train(members: list[int], chunk_bytes: int):
        fast = ConvNetSteps(flat, hparams)
        fast.chunk_bytes = chunk_bytes
        orders, masks = generators(4)
        plan = trainer.minibatches.plan([idx[i] for i in members], [orders[i] for i in members],
                                        [masks[i] for i in members])
        return fast.train(plan, w0, x, y, torch.ones(len(members)))

    together, one_by_one = train([0, 1, 2, 3], 1 << 30), train([0, 1, 2, 3], 1)
    alone, beside_others = train([2], 1 << 30), train([3, 2, 1], 1 << 30)
    for a, b in [(together[2], one_by_one[2]), (together[2], alone[0]),
                 (together[2], beside_others[1]), (together[0], one_by_one[0])]:
        assert torch.equal(a.update, b.update) and torch.equal(a.train_loss, b.train_loss)


def cnn_run(**overrides) -> Simulation:
    return Simulation(toy_config(**{"rounds": 3, "participation": 0.5, "batch_size": 10,
                                    "local_lr": 0.05, **overrides}),
                      data=images(), model_name="cnn_fmnist")


def test_the_scheduler_trains_cpu_cnn_runs_on_it_and_nothing_else(monkeypatch):
    """Batched CPU runs of a CNN it covers take it (a client alone too); not a run with a local
    term (SCAFFOLD: the vmap path with its term), nor batched: false, nor a CUDA run, nor a model
    it does not cover."""
    calls = []
    original = ConvNetSteps.train
    # the clients of each call (its arguments: plan, w_start, data_x, data_y, scales)
    monkeypatch.setattr(ConvNetSteps, "train",
                        lambda self, *a, **k: calls.append(len(a[0].plan_of))
                        or original(self, *a, **k))
    run_packed([cnn_run(), cnn_run(participation=0.125)], [None, None])
    assert calls and all(n > 1 for n in calls)
    calls.clear()
    run_packed([cnn_run(participation=0.125)], [None])  # one client per round: a group of one
    assert calls == [1, 1, 1]
    calls.clear()
    examples = Path(__file__).resolve().parents[1] / "examples"
    scaffold = cnn_run(algorithm="scaffold", plugin=f"{examples}/scaffold.py:Scaffold",
                       momentum=0.0)
    terms = []
    original_vmap = VmapSteps.train
    monkeypatch.setattr(VmapSteps, "train",
                        lambda self, *a, **k: terms.append(k.get("term"))
                        or original_vmap(self, *a, **k))
    run_packed([scaffold], [None])
    assert not calls and terms and all(term is not None for term in terms)
    inputs = cnn_run().inputs
    assert (batched_path(inputs) is ConvNetSteps and training_path(inputs) == "conv-net"
            and isinstance(Scheduler([inputs]).steps, ConvNetSteps))
    assert training_path(cnn_run(batched=False).inputs) == "reference (batched: false)"
    assert batched_path(dataclasses.replace(inputs, device=torch.device("cuda"))) is VmapSteps
    for model, shape in [("cnn_cifar",
                          (3, 32, 32)), ("mlp_fmnist", (1, 28, 28)), ("logreg", (784,))]:
        assert not ConvNetSteps.eligible(FlatModel(build_model(model, shape, 10)))


def test_a_run_on_it_equals_the_run_on_the_vmap_path(monkeypatch, tmp_path):
    """A whole short FedProx run (dropout, mu > 0): the conv-net and the vmap paths give the same
    losses and accuracies up to float rounding."""
    cfg = dict(algorithm="fedprox", hparams={"mu": 0.1}, per_user_every=1)
    (fast,) = run_packed([cnn_run(**cfg)], [tmp_path / "fast"])
    monkeypatch.setattr(ConvNetSteps, "eligible", staticmethod(lambda model: False))
    (vmapped,) = run_packed([cnn_run(**cfg)], [tmp_path / "vmap"])
    assert (fast.final_weights - vmapped.final_weights).abs().max() < 1e-4
    # it trained
    assert (fast.final_weights - cnn_run(**cfg).model.initial_vector()).abs().max() > 1e-2
    a, b = (pd.read_csv(tmp_path / name / "metrics.csv") for name in ("fast", "vmap"))
    numeric = [c for c in a.columns if pd.api.types.is_float_dtype(a[c])]
    pd.testing.assert_frame_equal(a[numeric], b[numeric], atol=1e-4, rtol=1e-4)
