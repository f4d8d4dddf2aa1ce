"""A small heterogeneous federated dataset generated in memory, and a run config for it, so
that the library's tests need neither files nor the dataset registry."""

from __future__ import annotations

import pytest
import torch

from fedmgda.checkpoints import CHECKPOINT
from fedmgda.config import RunConfig
from fedmgda.data.base import FederatedDataset
from fedmgda.scheduler import run
from fedmgda.simulator import Simulation


def make_toy_federated(num_users: int = 8, dim: int = 10, classes: int = 3, n_train: int = 24,
                       n_test: int = 8, seed: int = 0) -> FederatedDataset:
    """Users with their own linear labelling rule plus a shared one (heterogeneous, learnable)."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(dim, classes, generator=g)
    xs, ys, train_idx, test_idx = [], [], [], []
    start = 0
    for _ in range(num_users):
        own = shared + 0.8 * torch.randn(dim, classes, generator=g)
        n = n_train + n_test
        x = torch.randn(n, dim, generator=g) + 0.5 * torch.randn(1, dim, generator=g)
        y = (x @ own).argmax(dim=1)
        xs.append(x)
        ys.append(y)
        train_idx.append(torch.arange(start, start + n_train))
        test_idx.append(torch.arange(start + n_train, start + n))
        start += n
    return FederatedDataset("toy", torch.cat(xs), torch.cat(ys), train_idx, test_idx, classes,
                            global_test={"pooled": (torch.cat(xs)[:40], torch.cat(ys)[:40])})


def toy_config(**overrides) -> RunConfig:
    base = dict(dataset="toy", algorithm="fedavg", rounds=6, participation=0.5, batch_size=8,
                local_lr=0.1, seed=3, device="cpu", per_user_every=2)
    base.update(overrides)
    return RunConfig.from_dict(base)


def killed_at(train, out, monkeypatch, kill_at: int) -> None:
    """``train()`` (a run into ``out``) killed when round ``kill_at`` (0-based) starts: ``out`` then
    holds the checkpoint of the rounds before and no outputs."""
    original = Simulation._round

    def crash(self, w, t, state):
        if t == kill_at:
            raise KeyboardInterrupt("killed")
        return (yield from original(self, w, t, state))

    monkeypatch.setattr(Simulation, "_round", crash)
    with pytest.raises(KeyboardInterrupt):
        train()
    monkeypatch.setattr(Simulation, "_round", original)
    assert (out / CHECKPOINT).exists() and not (out / "summary.json").exists()


def killed_then_resumed(cfg: RunConfig, out, monkeypatch, kill_at: int):
    """``cfg`` run into ``out``, killed when round ``kill_at`` (0-based) starts, then run again
    (resuming from its last checkpoint): the resumed run's result."""
    killed_at(lambda: run(cfg, out, data=make_toy_federated(),
                          model_name="logreg"), out, monkeypatch, kill_at)
    return run(cfg, out, data=make_toy_federated(), model_name="logreg")
