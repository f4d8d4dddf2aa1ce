"""The written-out CNN step on the CPU (``fastpaths.ConvNetSteps``) against the reference path
(``LocalTrainer.train``, one client at a time, the same minibatch orders and dropout masks), and
the scheduler's choice of it."""

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_client_randomness import images
from toy_federated import toy_config

from fedmgda.client import FlatModel, LocalHParams, LocalTrainer
from fedmgda.fastpaths import ConvNetSteps
from fedmgda.models import build_model
from fedmgda.scheduler import (
    Scheduler,
    derived_seed,
    dropout_generator,
    run_packed,
    training_path,
    written_out_cnn,
)
from fedmgda.simulator import Simulation

CPU = torch.device("cpu")
# (model, classes, minibatch, client sizes): 1 to 4 local steps, short last minibatches
MODELS = [("cnn_fmnist", 10, 10, [7, 17, 23, 40]), ("cnn_femnist", 62, 4, [3, 6, 11, 13])]


def clients(model: str, classes: int, sizes: list[int], seed: int = 1):
    torch.manual_seed(0)
    flat = FlatModel(build_model(model, (1, 28, 28), classes))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), 1, 28, 28, generator=g)
    y = torch.randint(0, classes, (len(x),), generator=g)
    return flat, x, y, list(torch.arange(sum(sizes)).split(sizes))


def generators(n: int, seed: int = 3):
    """Each client's minibatch order and dropout-mask generators, fresh, as the scheduler seeds them."""
    keys = [(seed, 0, user) for user in range(n)]
    return [torch.Generator().manual_seed(derived_seed(*key)) for key in keys], [dropout_generator(key, CPU) for key in keys]


@pytest.mark.parametrize("model,classes,batch_size,sizes", MODELS)
def test_each_client_follows_the_reference_trajectory(model, classes, batch_size, sizes):
    """Clients of 1, 2, 3 and 4 local steps (so the trajectory after each of the first steps is
    checked), short last minibatches, dropout on, mu > 0, loss scales != 1, and clients starting
    from different weights (packed runs): updates and mean losses to 1e-5 of ``train``'s."""
    flat, x, y, idx = clients(model, classes, sizes)
    hparams = LocalHParams(epochs=1, batch_size=batch_size, lr=0.05, momentum=0.5, mu=0.1)
    trainer = LocalTrainer(flat, hparams)
    w0 = flat.initial_vector()
    starts = torch.stack([w0 + 0.01 * k * torch.randn(len(w0), generator=torch.Generator().manual_seed(k)) for k in range(len(sizes))])
    scales = torch.tensor([1.0, 2.5, 0.5, 1.0])
    orders, masks = generators(len(sizes))
    fast = ConvNetSteps(flat, hparams).train(trainer, starts, x, y, idx, orders, scales, dropout_generators=masks)
    orders, masks = generators(len(sizes))
    for i in range(len(sizes)):
        reference = trainer.train(starts[i], x[idx[i]], y[idx[i]], orders[i], float(scales[i]), dropout_generator=masks[i])
        assert reference.update.abs().max() > 1e-3  # it trained
        assert torch.allclose(fast[i].update, reference.update, atol=1e-5, rtol=0), f"client {i}"
        assert torch.allclose(fast[i].train_loss, reference.train_loss, atol=1e-5, rtol=1e-6), f"client {i}"
    # the test can fail: without its dropout masks a client moves elsewhere
    orders, _ = generators(len(sizes))
    without = ConvNetSteps(flat, hparams).train(LocalTrainer(flat, hparams, dropout=False), starts, x, y, idx, orders, scales)
    assert not torch.allclose(without[3].update, fast[3].update, atol=1e-4)


def test_two_epochs_of_full_minibatches_follow_the_reference():
    """Several epochs (the momentum buffer carried across them), no proximal term."""
    flat, x, y, idx = clients("cnn_fmnist", 10, [30, 30, 20])
    hparams = LocalHParams(epochs=2, batch_size=10, lr=0.05, momentum=0.9)
    trainer = LocalTrainer(flat, hparams)
    orders, masks = generators(3)
    fast = ConvNetSteps(flat, hparams).train(trainer, flat.initial_vector(), x, y, idx, orders, torch.ones(3), dropout_generators=masks)
    orders, masks = generators(3)
    for i in range(3):
        reference = trainer.train(flat.initial_vector(), x[idx[i]], y[idx[i]], orders[i], dropout_generator=masks[i])
        assert torch.allclose(fast[i].update, reference.update, atol=1e-5, rtol=0)
        assert torch.allclose(fast[i].train_loss, reference.train_loss, atol=1e-5)


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
        return fast.train(trainer, w0, x, y, [idx[i] for i in members], [orders[i] for i in members], torch.ones(len(members)),
                          dropout_generators=[masks[i] for i in members])

    together, one_by_one = train([0, 1, 2, 3], 1 << 30), train([0, 1, 2, 3], 1)
    alone, beside_others = train([2], 1 << 30), train([3, 2, 1], 1 << 30)
    for a, b in [(together[2], one_by_one[2]), (together[2], alone[0]), (together[2], beside_others[1]), (together[0], one_by_one[0])]:
        assert torch.equal(a.update, b.update) and torch.equal(a.train_loss, b.train_loss)


def cnn_run(**overrides) -> Simulation:
    return Simulation(toy_config(**{"rounds": 3, "participation": 0.5, "batch_size": 10, "local_lr": 0.05, **overrides}),
                      data=images(), model_name="cnn_fmnist")


def test_the_scheduler_trains_cpu_cnn_runs_on_it_and_nothing_else(monkeypatch):
    """Batched CPU runs of a CNN it covers take it (a client alone too); not a run with a local
    term (SCAFFOLD: train_batched with its term), nor batched: false, nor a CUDA run, nor a model
    it does not cover."""
    calls = []
    original = ConvNetSteps.train
    # the clients of each call (its arguments: trainer, w_start, data_x, data_y, client_idx, ...)
    monkeypatch.setattr(ConvNetSteps, "train", lambda self, *a, **k: calls.append(len(a[4])) or original(self, *a, **k))
    run_packed([cnn_run(), cnn_run(participation=0.125)], [None, None])
    assert calls and all(n > 1 for n in calls)
    calls.clear()
    run_packed([cnn_run(participation=0.125)], [None])  # one client per round: a group of one
    assert calls == [1, 1, 1]
    calls.clear()
    scaffold = cnn_run(algorithm="scaffold", plugin=f"{Path(__file__).resolve().parents[1]}/examples/scaffold.py:Scaffold", momentum=0.0)
    terms = []
    original_batched = LocalTrainer.train_batched
    monkeypatch.setattr(LocalTrainer, "train_batched", lambda self, *a, **k: terms.append(k.get("term")) or original_batched(self, *a, **k))
    run_packed([scaffold], [None])
    assert not calls and terms and all(term is not None for term in terms)
    inputs = cnn_run().inputs
    assert written_out_cnn(inputs) and training_path(inputs) == "written-out CNN step" and Scheduler([inputs]).conv is not None
    assert not written_out_cnn(cnn_run(batched=False).inputs)
    assert not written_out_cnn(dataclasses.replace(inputs, device=torch.device("cuda")))
    assert Scheduler([dataclasses.replace(inputs, batched=False)]).conv is None
    for model, shape in [("cnn_cifar", (3, 32, 32)), ("mlp_fmnist", (1, 28, 28)), ("logreg", (784,))]:
        assert not ConvNetSteps.eligible(FlatModel(build_model(model, shape, 10)))


def test_a_run_on_it_equals_the_run_on_the_vmap_path(monkeypatch, tmp_path):
    """A whole short FedProx run (dropout, mu > 0): the written-out step and the vmap-ed
    train_batched give the same losses and accuracies up to float rounding."""
    cfg = dict(algorithm="fedprox", hparams={"mu": 0.1}, per_user_every=1)
    (fast,) = run_packed([cnn_run(**cfg)], [tmp_path / "fast"])
    monkeypatch.setattr(ConvNetSteps, "eligible", staticmethod(lambda model: False))
    (vmapped,) = run_packed([cnn_run(**cfg)], [tmp_path / "vmap"])
    assert (fast.final_weights - vmapped.final_weights).abs().max() < 1e-4
    assert (fast.final_weights - cnn_run(**cfg).model.initial_vector()).abs().max() > 1e-2  # it trained
    a, b = (pd.read_csv(tmp_path / name / "metrics.csv") for name in ("fast", "vmap"))
    numeric = [c for c in a.columns if pd.api.types.is_float_dtype(a[c])]
    pd.testing.assert_frame_equal(a[numeric], b[numeric], atol=1e-4, rtol=1e-4)
