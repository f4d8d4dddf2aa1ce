"""The batched training paths (``client.ClientSteps``: ``VmapSteps``,
``fastpaths.LinearSoftmaxSteps``, ``fastpaths.ConvNetSteps``) through their one interface,
``train(plan, w_start, data_x, data_y, scales)``, against the reference ``LocalTrainer.train``,
client by client, on the same inputs: the same minibatch plan (``Minibatches.plan``) and dropout
generators. Float64, so that the paths agree up to the order of their sums."""

import numpy as np
import pytest
import torch

from fedmgda.client import ClientSteps, FlatModel, LocalHParams, LocalTrainer, VmapSteps
from fedmgda.fastpaths import ConvNetSteps, LinearSoftmaxSteps
from fedmgda.models import build_model
from fedmgda.scheduler import derived_seed, dropout_generator

CPU = torch.device("cpu")
IMAGE = (1, 28, 28)
# (path, model, input shape, classes, minibatch, client sizes): 1 to 6 steps an epoch, short last
# minibatches, not by size
CASES = [
    ("vmap", "mlp_digits", (7,), 3, 4, [13, 3, 9, 22]),
    ("vmap", "cnn_fmnist", IMAGE, 10, 10, [7, 17, 12]),  # dropout
    # two classes: the steps on the logit difference
    ("linear-softmax", "logreg", (7,), 2, 4, [13, 3, 9, 22]),
    ("linear-softmax", "logreg", (7,), 3, 4, [13, 3, 9, 22]),
    ("linear-softmax", "logreg", (7,), 5, None, [13, 3, 9, 22]),  # full batches
    ("conv-net", "cnn_fmnist", IMAGE, 10, 10, [7, 17, 12]),  # dropout
    ("conv-net", "cnn_femnist", IMAGE, 62, 4, [3, 6, 11]),  # dropout
]


def batched_path(name: str, trainer: LocalTrainer) -> ClientSteps:
    if name == VmapSteps.name:
        return VmapSteps(trainer)
    path = {LinearSoftmaxSteps.name: LinearSoftmaxSteps, ConvNetSteps.name: ConvNetSteps}[name]
    assert path.eligible(trainer.model)
    return path(trainer.model, trainer.hparams)


def pooled_clients(shape, classes, sizes, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), *shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (len(x),), generator=g)
    return x, y, list(torch.arange(sum(sizes)).split(sizes))


def keys(n: int) -> list[tuple[int, int, int]]:
    """Each client's seed key; the last client repeats the first (a packed run of the same seed)."""
    return [(3, 0, user) for user in range(n - 1)] + [(3, 0, 0)]


def train_through(path: str, trainer: LocalTrainer, w_start, x, y, idx, scales):
    """The clients through ``path``, the first and the last sharing one plan (the same samples and
    generator object), each with its own dropout generator."""
    generators = [torch.Generator().manual_seed(derived_seed(*key)) for key in keys(len(idx))[:-1]]
    generators.append(generators[0])
    masks = ([dropout_generator(key, CPU) for key in keys(len(idx))] if trainer.minibatches.sites
             else None)
    plan = trainer.minibatches.plan(idx, generators, masks)
    assert len(plan.distinct) == len(idx) - 1
    return batched_path(path, trainer).train(plan, w_start, x, y, scales)


@pytest.mark.parametrize("mu,packed", [(0.0, False), (0.3, False), (0.3, True)],
                         ids=["plain", "proximal", "proximal, a start per client"])
@pytest.mark.parametrize("path,model,shape,classes,batch_size,sizes", CASES)
def test_every_path_follows_the_reference_trajectory(path, model, shape, classes, batch_size, sizes,
                                                     mu, packed):
    """Two epochs, momentum, loss scales (a scaling attacker), clients with different numbers of
    steps, a shared plan, dropout where the model has it; with and without the proximal term."""
    torch.manual_seed(0)
    flat = FlatModel(build_model(model, shape, classes).double())
    trainer = LocalTrainer(flat,
                           LocalHParams(epochs=2, batch_size=batch_size, lr=0.05, momentum=0.5,
                                        mu=mu))
    x, y, idx = pooled_clients(shape, classes, sizes)
    idx.append(idx[0])
    w0 = flat.initial_vector()
    starts = (w0 + 0.05 * torch.randn(len(idx), len(w0), generator=torch.Generator().manual_seed(2),
                                      dtype=w0.dtype) if packed else w0)
    scales = torch.tensor([1.0, 2.5, 0.5] + [1.0] * (len(idx) - 3))
    batched = train_through(path, trainer, starts, x, y, idx, scales)
    for i, key in enumerate(keys(len(idx))):
        start = starts[i] if packed else w0
        reference = trainer.train(start, x[idx[i]], y[idx[i]],
                                  torch.Generator().manual_seed(derived_seed(*key)),
                                  float(scales[i]),
                                  dropout_generator=dropout_generator(key, CPU))
        assert reference.update.abs().max() > 1e-3  # it trained
        assert torch.allclose(batched[i].update, reference.update, rtol=1e-9,
                              atol=1e-11), f"client {i}"
        assert torch.allclose(batched[i].train_loss, reference.train_loss, rtol=1e-9,
                              atol=1e-11), f"client {i}"
    # the test can fail: without its dropout masks a client moves elsewhere
    if trainer.minibatches.sites:
        without = train_through(path, LocalTrainer(flat, trainer.hparams, dropout=False), starts, x,
                                y, idx, scales)
        assert not torch.allclose(without[1].update, batched[1].update, atol=1e-4)


MODELS = [
    ("cnn_cifar", (3, 32, 32), 10),
    ("cnn_fmnist", IMAGE, 10),
    ("cnn_femnist", IMAGE, 62),
    ("lstm_shakespeare", (80,), 80),
    ("logreg", (99,), 2),
    ("mlp_digits", (64,), 10),
    ("mlp_fmnist", IMAGE, 10),
]
NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, NO_CUDA])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,shape,classes", MODELS)
def test_the_vmap_path_follows_the_reference_for_every_model(name, shape, classes, device):
    """Every model of the package on ``VmapSteps``, the path any model can take (dropout off)."""
    torch.manual_seed(0)
    flat = FlatModel(build_model(name, shape, classes).double().to(device))
    large = name in ("lstm_shakespeare", "cnn_femnist", "cnn_cifar")  # keep the float64 run short
    sizes = [6, 3] if large else [23, 9, 16, 30]
    g = torch.Generator().manual_seed(0)
    if name == "lstm_shakespeare":
        x = torch.randint(0, 80, (sum(sizes), *shape), generator=g)
    else:
        x = torch.randn(sum(sizes), *shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (sum(sizes),), generator=g)
    idx = [torch.arange(a, b) for a, b in zip(np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes))]
    x, y = x.to(device), y.to(device)
    trainer = LocalTrainer(flat,
                           LocalHParams(epochs=1 if large else 2, batch_size=5, lr=0.05,
                                        momentum=0.5, mu=0.1), dropout=False)
    w0 = flat.initial_vector()
    scales = torch.tensor([1.0, 3.0] + [1.0] * (len(sizes) - 2))
    plan = trainer.minibatches.plan(idx,
                                    [torch.Generator().manual_seed(k) for k in range(len(idx))])
    batched = VmapSteps(trainer).train(plan, w0, x, y, scales)
    for k, i in enumerate(idx):
        reference = trainer.train(w0, x[i], y[i], torch.Generator().manual_seed(k),
                                  float(scales[k]))
        assert torch.allclose(reference.update, batched[k].update, atol=1e-5, rtol=0)
        assert torch.allclose(reference.train_loss, batched[k].train_loss, atol=1e-5)
