"""Batched client training (torch.func.vmap over a round's clients) against the sequential
reference path."""

import numpy as np
import pandas as pd
import pytest
import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, size_groups
from fedmgda.data.base import FederatedDataset
from fedmgda.fastpaths import CudaGraphs
from fedmgda.models import build_model
from fedmgda.scheduler import run

MODELS = [
    ("cnn_cifar", (3, 32, 32), 10),
    ("cnn_fmnist", (1, 28, 28), 10),
    ("cnn_femnist", (1, 28, 28), 62),
    ("lstm_shakespeare", (80,), 80),
    ("logreg", (99,), 2),
    ("mlp_digits", (64,), 10),
    ("mlp_fmnist", (1, 28, 28), 10),
]


def pooled_clients(shape, classes, sizes, token_input, seed=0):
    g = torch.Generator().manual_seed(seed)
    total = sum(sizes)
    if token_input:
        x = torch.randint(0, 80, (total, *shape), generator=g)
    else:
        x = torch.randn(total, *shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (total,), generator=g)
    starts = np.cumsum([0, *sizes])
    return x, y, [torch.arange(starts[i], starts[i + 1]) for i in range(len(sizes))]


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,shape,classes", MODELS)
def test_batched_updates_equal_sequential_updates(name, shape, classes, device):
    """Unequal client sizes and partial last batches exercise the padding masks. float64, and
    dropout off, so that the comparison is exact up to reduction order."""
    torch.manual_seed(0)
    flat = FlatModel(build_model(name, shape, classes).double().to(device))
    large = name in ("lstm_shakespeare", "cnn_femnist", "cnn_cifar")  # keep the float64 run short
    sizes = [6, 3] if large else [23, 9, 16, 30]
    x, y, idx = pooled_clients(shape, classes, sizes, token_input=name == "lstm_shakespeare")
    x, y = x.to(device), y.to(device)
    hparams = LocalHParams(epochs=1 if large else 2, batch_size=5, lr=0.05, momentum=0.5, mu=0.1)
    trainer = LocalTrainer(flat, hparams, dropout=False)
    w0 = flat.initial_vector()
    scales = torch.tensor([1.0, 3.0] + [1.0] * (len(sizes) - 2))
    sequential = [trainer.train(w0, x[i], y[i], torch.Generator().manual_seed(k), float(scales[k])) for k, i in enumerate(idx)]
    batched = trainer.train_batched(w0, x, y, idx, [torch.Generator().manual_seed(k) for k in range(len(idx))], scales)
    for seq, bat in zip(sequential, batched):
        assert torch.allclose(seq.update, bat.update, atol=1e-5, rtol=0)
        assert torch.allclose(seq.train_loss, bat.train_loss, atol=1e-5)


def test_batched_dropout_masks_differ_per_client():
    torch.manual_seed(0)
    flat = FlatModel(build_model("cnn_fmnist", (1, 28, 28), 10))
    x = torch.randn(12, 1, 28, 28)
    y = torch.randint(0, 10, (12,))
    same = [torch.arange(12), torch.arange(12)]  # two clients with identical data and batch order
    gens = lambda: [torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)]  # noqa: E731
    w0 = flat.initial_vector()
    with_dropout = LocalTrainer(flat, LocalHParams(batch_size=4, lr=0.1)).train_batched(w0, x, y, same, gens(), torch.ones(2))
    without = LocalTrainer(flat, LocalHParams(batch_size=4, lr=0.1), dropout=False).train_batched(w0, x, y, same, gens(), torch.ones(2))
    assert not torch.allclose(with_dropout[0].update, with_dropout[1].update)
    assert torch.allclose(without[0].update, without[1].update)


def test_size_groups_bound_the_padding():
    assert size_groups([400] * 10) == [list(range(10))]  # equal clients: one batch
    assert size_groups([330, 25718]) == [[1], [0]]  # Adult: trained apart
    sizes = [20, 700, 650, 100, 90, 300, 25, 640, 95, 280]
    groups = size_groups(sizes, max_padding=0.25)
    assert sorted(i for g in groups for i in g) == list(range(10))
    for g in groups:
        assert len(g) * max(sizes[i] for i in g) <= 1.25 * sum(sizes[i] for i in g)


def test_batched_simulation_with_unequal_clients_matches_the_sequential_one():
    data = make_toy_federated(num_users=6)
    data.train_idx[0] = data.train_idx[0][:5]  # very unequal sizes: several size groups
    data.train_idx[1] = data.train_idx[1][:13]
    common = dict(algorithm="qfedavg", hparams={"q": 0.5}, rounds=4, participation=1.0, batch_size=4)
    seq = run(toy_config(batched=False, **common), data=data, model_name="logreg")
    bat = run(toy_config(batched=True, **common), data=data, model_name="logreg")
    assert torch.allclose(seq.final_weights, bat.final_weights, atol=1e-5)


def test_batched_simulation_matches_the_sequential_one():
    common = dict(algorithm="mgda_prox", hparams={"eta": 1.0, "decay": 0.1}, rounds=5, batch_size=7)
    seq = run(toy_config(batched=False, **common), data=make_toy_federated(), model_name="logreg")
    bat = run(toy_config(batched=True, **common), data=make_toy_federated(), model_name="logreg")
    assert torch.allclose(seq.final_weights, bat.final_weights, atol=1e-5)
    assert np.allclose(seq.metrics["train_loss"], bat.metrics["train_loss"], atol=1e-5)


def test_batched_fedmgda_plus_with_fedmdfgs_mlp_matches_the_sequential_one():
    """FedMDFG's MLP (mlp_fmnist) through whole rounds: the vmap-ed path = the reference path."""
    common = dict(algorithm="fedmgda_plus", hparams={"eta": 0.1, "decay": 0, "epsilon": 0.1}, rounds=3,
                  participation=0.5, batch_size=5, local_lr=0.1, momentum=0.0)
    seq = run(toy_config(batched=False, **common), data=make_toy_federated(), model_name="mlp_fmnist")
    bat = run(toy_config(batched=True, **common), data=make_toy_federated(), model_name="mlp_fmnist")
    assert torch.allclose(seq.final_weights, bat.final_weights, atol=1e-5)
    assert np.allclose(seq.metrics["train_loss"], bat.metrics["train_loss"], atol=1e-5)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@needs_cuda
def test_cuda_graph_replay_gives_the_eager_updates():
    """First call eager, second captured and replayed, third replayed: with the same CUDA seed all
    three give the same updates bit for bit, dropout included."""
    torch.manual_seed(0)
    flat = FlatModel(build_model("cnn_fmnist", (1, 28, 28), 10).cuda())
    x, y, idx = pooled_clients((1, 28, 28), 10, [40, 33, 40], token_input=False)
    x, y = x.float().cuda(), y.cuda()
    graphs = CudaGraphs()
    trainer = LocalTrainer(flat, LocalHParams(batch_size=10, lr=0.1))
    w0 = flat.initial_vector()
    runs = []
    for _ in range(3):
        torch.manual_seed(7)
        runs.append(trainer.train_batched(w0, x, y, idx, [torch.Generator().manual_seed(k) for k in range(3)], torch.ones(3), graphs=graphs))
    assert len(graphs.graphs) == 1
    for later in runs[1:]:
        for a, b in zip(runs[0], later):
            assert torch.equal(a.update, b.update) and torch.equal(a.train_loss, b.train_loss)
    torch.manual_seed(8)  # another seed: other dropout masks through the same graph
    other = trainer.train_batched(w0, x, y, idx, [torch.Generator().manual_seed(k) for k in range(3)], torch.ones(3), graphs=graphs)
    assert not torch.equal(other[0].update, runs[0][0].update)


@needs_cuda
def test_cuda_batched_runs_are_deterministic_with_and_without_graphs():
    common = dict(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1}, rounds=5, participation=1.0, batched=True, device="cuda")
    a = run(toy_config(**common), data=make_toy_federated(), model_name="logreg")
    b = run(toy_config(**common), data=make_toy_federated(), model_name="logreg")
    eager = run(toy_config(cuda_graphs=False, **common), data=make_toy_federated(), model_name="logreg")
    pd.testing.assert_frame_equal(a.metrics, b.metrics)
    assert torch.equal(a.final_weights, b.final_weights)
    assert torch.equal(a.final_weights, eager.final_weights)


@needs_cuda
@pytest.mark.parametrize("batched", [True, False])
def test_cuda_cnn_runs_are_reproducible(batched):
    """Same config and seed on the same GPU: identical metrics and weights (cuDNN's deterministic
    algorithms; convolution backward passes are where atomics would differ)."""
    g = torch.Generator().manual_seed(0)
    users, n_train, n_test = 6, 30, 10
    x = torch.randn(users * (n_train + n_test), 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (len(x),), generator=g)
    starts = [u * (n_train + n_test) for u in range(users)]
    data = FederatedDataset("images", x, y, [torch.arange(s, s + n_train) for s in starts], [torch.arange(s + n_train, s + n_train + n_test) for s in starts], 10)
    cfg = toy_config(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1}, rounds=4, participation=1.0, batch_size=10, local_lr=0.05, batched=batched, device="cuda")
    a, b = (run(cfg, data=data, model_name="cnn_cifar") for _ in range(2))
    pd.testing.assert_frame_equal(a.metrics, b.metrics)
    assert torch.equal(a.final_weights, b.final_weights)


def test_batched_dropout_is_the_authors_dropout():
    """The batched path draws F-MNIST's dropout as the authors' CNNMnist does eagerly
    (docs/protocol.md §2: Dropout2d(0.5) on conv2's output, whole channels; dropout 0.5 after fc1,
    unit by unit; kept values scaled by 2), independently for every client and every sample."""
    from torch.func import vmap

    ones = torch.ones(4, 10, 20, 8, 8)  # clients x batch x channels x 8 x 8
    torch.manual_seed(0)
    channels = vmap(lambda x: torch.nn.functional.dropout2d(x, 0.5, True), randomness="different")(ones)
    per_channel = channels.flatten(3)
    assert torch.equal(per_channel.amin(-1), per_channel.amax(-1))  # a channel is kept or dropped whole
    assert set(channels.unique().tolist()) == {0.0, 2.0}
    kept = (per_channel[..., 0] > 0).double()
    assert abs(kept.mean().item() - 0.5) < 0.05
    assert not torch.equal(kept[0], kept[1]) and not torch.equal(kept[0, 0], kept[0, 1])
    units = vmap(lambda x: torch.nn.functional.dropout(x, 0.5, True), randomness="different")(torch.ones(4, 10, 50))
    assert set(units.unique().tolist()) == {0.0, 2.0} and abs((units > 0).double().mean().item() - 0.5) < 0.05


def test_batched_training_loss_under_dropout_matches_the_reference_in_distribution():
    """With dropout on, the batched path's mean training loss of one local epoch is the
    reference path's up to the spread of dropout masks: a weaker or missing dropout in the batched
    path would give a lower loss (F-MNIST CNN, 16 clients on the same data)."""
    torch.manual_seed(0)
    flat = FlatModel(build_model("cnn_fmnist", (1, 28, 28), 10))
    g = torch.Generator().manual_seed(0)
    y = torch.arange(40) % 10  # learnable: one noisy template per class
    x = torch.randn(10, 1, 28, 28, generator=g)[y] + 0.3 * torch.randn(40, 1, 28, 28, generator=g)
    idx = [torch.arange(40)]
    trainer = LocalTrainer(flat, LocalHParams(epochs=3, batch_size=10, lr=0.05, momentum=0.5))
    w0 = flat.initial_vector()
    clients = 16
    torch.manual_seed(1)
    reference = torch.stack([trainer.train(w0, x, y, torch.Generator().manual_seed(k)).train_loss for k in range(clients)])
    torch.manual_seed(2)
    batched = torch.stack([r.train_loss for r in trainer.train_batched(
        w0, x, y, idx * clients, [torch.Generator().manual_seed(k) for k in range(clients)], torch.ones(clients))])
    trainer_off = LocalTrainer(flat, trainer.hparams, dropout=False)
    without = torch.stack([trainer_off.train(w0, x, y, torch.Generator().manual_seed(k)).train_loss for k in range(clients)])
    spread = (reference.var() / clients + batched.var() / clients).sqrt()
    assert abs(reference.mean() - batched.mean()) < 4 * spread
    assert reference.mean() - without.mean() > 4 * spread  # the test can tell dropout from none
