"""The minibatches of a client's local epochs, planned in one place for every training path.

A client trains ``epochs`` passes over its samples in minibatches of ``batch_size`` (None: the
full batch, one step per epoch), each epoch in an order drawn from the client's generator
(``Minibatches.epoch_order``: the one draw per local epoch, whichever path trains the client), and
with a model's dropout, one mask per site, minibatch and sample from the client's own dropout
generator (``Minibatches.dropout_masks``). The reference path walks one client's minibatches
(``batch_order``); the batched paths (``fedmgda.client.VmapSteps``, ``fedmgda.fastpaths``) take
several clients' as one ``ClientsPlan``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


class Minibatches:
    """The minibatch planning of one local training setting (``LocalHParams``' epochs and batch
    size) and one model's dropout ``sites`` (rate, per-sample mask shape; () without dropout)."""

    def __init__(self, epochs: int, batch_size: int | None, sites: tuple = ()):
        self.epochs = epochs
        self.batch_size = batch_size
        self.sites = sites

    def epoch_order(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """One local epoch's order of the client's n samples (positions), drawn from ``generator``:
        the one draw every training path makes per epoch (scripts/lockstep_authors_fmnist.py
        replaces it to feed recorded orders)."""
        return torch.randperm(n, generator=generator)

    def batch_order(self, n: int, generator: torch.Generator) -> list[torch.Tensor]:
        """The minibatches (positions into the client's samples) of every local epoch, in order."""
        if self.batch_size is None:  # one full batch per epoch: its order changes nothing
            return [torch.arange(n)] * self.epochs
        batches = []
        for _ in range(self.epochs):
            batches.extend(self.epoch_order(n, generator).split(self.batch_size))
        return batches

    def padded_batches(self, idx: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``batch_order`` of the samples ``idx`` as a (steps, width) tensor of sample indices, -1
        where a batch is short."""
        n = len(idx)
        width = n if self.batch_size is None else min(self.batch_size, n)
        rows = []
        for _ in range(self.epochs):
            perm = (idx if self.batch_size is None
                    else idx[self.epoch_order(n, generator).to(idx.device)])
            padded = torch.full((math.ceil(n / width) * width,), -1, dtype=torch.long,
                                device=idx.device)
            padded[:n] = perm
            rows.append(padded.view(-1, width))
        return torch.cat(rows)

    def dropout_masks(self, steps: int, width: int, generator: torch.Generator | None,
                      device: torch.device) -> tuple[torch.Tensor, ...] | None:
        """A client's dropout masks for ``steps`` minibatches of up to ``width`` samples: per site
        of the model, (steps, width, *mask shape) booleans, True = kept (probability 1 - p), drawn
        from ``generator`` (the client's own: the scheduler seeds it from the run seed, round and
        user, so a client's masks do not depend on which clients train beside it; None: torch's
        default generator of ``device``). None without dropout sites."""
        if not self.sites:
            return None
        return tuple(torch.rand((steps, width, *shape), generator=generator, device=device) >= p
                     for p, shape in self.sites)

    def plan(self, client_idx: list[torch.Tensor], generators: list[torch.Generator],
             dropout_generators: list[torch.Generator] | None = None) -> ClientsPlan:
        """The minibatches of clients trained together (client i: samples ``client_idx[i]``, best
        on the CPU, order from ``generators[i]``, dropout masks from ``dropout_generators[i]``).
        Clients given the same index tensor and the same generator object share one plan, drawn
        once (packed runs of one seed: the same user's minibatch order)."""
        plans: dict[tuple[int, int], int] = {}
        distinct: list[torch.Tensor] = []
        for idx, g in zip(client_idx, generators):
            if (id(idx), id(g)) not in plans:
                plans[id(idx), id(g)] = len(distinct)
                distinct.append(self.padded_batches(idx.cpu(), g))
        return ClientsPlan(self, distinct,
                           [plans[id(idx), id(g)] for idx, g in zip(client_idx, generators)],
                           dropout_generators)


@dataclass(frozen=True)
class PaddedSteps:
    """The local steps of several clients padded to common shapes.

    order: the clients as rows, most steps first; positions: (clients, steps, width) sample
    indices on the CPU, -1 = pad, rows in ``order``; keep: per dropout site, the clients' masks
    padded to (clients, steps, width, *mask shape), or None; active[s]: how many rows, a prefix,
    still have a minibatch at step s."""

    order: list[int]
    positions: torch.Tensor
    keep: tuple[torch.Tensor, ...] | None
    active: tuple[int, ...]


@dataclass
class ClientsPlan:
    """The minibatches of clients trained together: the ``distinct`` plans ((steps, width) sample
    indices, -1 = pad, as ``Minibatches.padded_batches`` makes them) and ``plan_of[i]``, client
    i's; ``padded`` lays them out for the paths that pad every client to the same steps."""

    minibatches: Minibatches
    distinct: list[torch.Tensor]
    plan_of: list[int]
    dropout_generators: list[torch.Generator] | None = None

    def padded(self, device: torch.device) -> PaddedSteps:
        """The clients' steps padded to common shapes, their dropout masks drawn on ``device``."""
        batches = [self.distinct[i] for i in self.plan_of]
        order = sorted(range(len(batches)), key=lambda i: -len(batches[i]))  # most steps first
        width = max(b.shape[1] for b in batches)
        positions = torch.full((len(batches), len(batches[order[0]]), width), -1, dtype=torch.long)
        for row, i in enumerate(order):
            positions[row, : batches[i].shape[0], : batches[i].shape[1]] = batches[i]
        keep = self._padded_masks(batches, order, positions.shape, device)
        steps = torch.tensor([len(b) for b in batches])
        active = tuple((steps[:, None] > torch.arange(positions.shape[1])).sum(dim=0).tolist())
        return PaddedSteps(order, positions, keep, active)

    def _padded_masks(self, batches: list[torch.Tensor], order: list[int], shape: torch.Size,
                      device: torch.device) -> tuple[torch.Tensor, ...] | None:
        """Each client's ``dropout_masks`` (drawn from its own generator, for its own steps and
        width, as the reference path draws them), padded to (clients, steps, width, *mask shape)
        in the rows' ``order``; None without dropout."""
        sites, generators = self.minibatches.sites, self.dropout_generators
        if not sites:
            return None
        clients, steps, width = shape
        padded = tuple(torch.zeros((clients, steps, width, *site_shape), dtype=torch.bool,
                                   device=device) for _, site_shape in sites)
        row_of = {i: row for row, i in enumerate(order)}
        # client after client (the order of draws without generators)
        for i, plan in enumerate(batches):
            row = row_of[i]
            drawn = self.minibatches.dropout_masks(*plan.shape,
                                                   None if generators is None else generators[i],
                                                   device)
            for site, masks in zip(padded, drawn):
                site[row, : masks.shape[0], : masks.shape[1]] = masks
        return padded
