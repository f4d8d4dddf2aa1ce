"""The fast batched training paths (``fedmgda.client.ClientSteps``) beside the vmap-ed autograd
step, chosen by the scheduler (``fedmgda.scheduler.batched_path``), never by a run or a client:
each gives the numbers of the reference path (``fedmgda.client.LocalTrainer``) up to float
rounding, or bit for bit.

- ``LinearSoftmaxSteps``: the batched client update of a linear + log_softmax model (the Adult
  logistic regression), its gradient written out as batched matrix products; beside it
  ``LinearSoftmaxEvaluation``: the losses and accuracies of several such models at once, once per
  distinct (features, label) pair (``evaluate_linear`` on ``DistinctSamples``);
- ``ConvNetSteps``: the batched client update of the small CNNs (F-MNIST's, FEMNIST's) on the
  CPU, forward and backward written out as one batched product per layer for all clients;
- ``CudaGraphs``: the vmap-ed batched client update replayed as captured CUDA graphs;
- ``single_thread_on_cpu``, ``threads_for_product``: tiny operations on one CPU thread, large
  products on all the job's threads.

They serve the proximal term (``LocalHParams.mu``, ``fedmgda.client.ProximalTerm``) but no
algorithm's ``local_term``: the scheduler trains such an algorithm's clients on
``fedmgda.client.VmapSteps``, eagerly.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from fedmgda.client import ClientResult, FlatModel, LocalHParams
from fedmgda.metrics import participant_stats, per_owner_mean
from fedmgda.minibatches import ClientsPlan

LARGE_PRODUCT = 1 << 26  # multiply-adds from which a product is split across the CPU threads

_REPLACED_THREADS: list[int] = []  # the thread counts single_thread_on_cpu replaced, outermost first


@contextmanager
def single_thread_on_cpu(device: torch.device, active: bool = True):
    """Tiny operations run on one CPU thread: splitting them costs more than it saves, and on a
    shared, busy machine waiting for a second thread can make each one take milliseconds. Large
    products inside take the threads back (``threads_for_product``)."""
    if not active or device.type != "cpu" or torch.get_num_threads() == 1:
        yield
        return
    threads = torch.get_num_threads()
    _REPLACED_THREADS.append(threads)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        _REPLACED_THREADS.pop()
        torch.set_num_threads(threads)


@contextmanager
def threads_for_product(multiply_adds: float):
    """Inside ``single_thread_on_cpu``: a product of at least ``LARGE_PRODUCT`` multiply-adds runs
    on the threads the process was given (its job's ``threads``). The q-FFL paper's F-MNIST full
    batches (3 x 6 000 samples x 785 features x 20 runs' columns) are such products; Adult's are
    not. The choice depends only on the shapes, so a run stays deterministic for a given thread
    count (``benchmarks/bench_pack.py --threads 1 2`` measures the split)."""
    if multiply_adds < LARGE_PRODUCT or not _REPLACED_THREADS or torch.get_num_threads() != 1:
        yield
        return
    torch.set_num_threads(_REPLACED_THREADS[0])
    try:
        yield
    finally:
        torch.set_num_threads(1)


class LinearSoftmaxSteps:
    """The batched client update (``ClientSteps``) of a model log_softmax(x W^T + b), its gradient
    written out.

    Per client and step, with c = scale * mask / (real samples of the minibatch):
        grad W|b = [x 1]^T (c * (softmax(z) - onehot(y))) + 2 mu (w - w_start),  z = [x 1] [W|b]^T
    and the momentum update of ``LocalTrainer.step`` (the first step's buffer is the gradient:
    the buffer starts at zero). The clients of one minibatch plan form a group (packed runs of one
    seed draw the same order for the same user: Table 7's 115 runs have 10 plans), whose
    weights sit side by side as (features + 1, members x classes), bias last: each step is one
    ``bmm`` forward and one in-place ``baddbmm_`` (gradient and momentum) per group, on samples
    gathered once per group. Minibatches are gathered a chunk of steps at a time, and a chunk's
    loss is computed afterwards from its stored logits. Groups are ordered by their number of
    steps, so the groups with a minibatch at a step are a prefix (as ``active`` in
    ``VmapSteps``). Same minibatch order, hence the same trajectory as the autograd step up to
    float rounding.

    The steps run on the logits relative to class 0, one column fewer than the classes: the loss
    depends on W|b only through u_j = w_j - w_0 (j = 1 .. C-1), and the data gradients of the C
    columns, g_j = [x 1]^T (c * (p_j - y_j)), sum to zero, as do the proximal ones, 2 mu (w_j -
    w_start_j), once the column mean stays put; so the column mean never moves and W|b is
    recovered from U = [u_1 .. u_{C-1}] and w_start. With D = U - U_start and m = sum_j D_j / C,
    the moves are w_j - w_start_j = D_j - m (j >= 1) and -m (class 0); the buffer holds those of
    columns 1 .. C-1, and the proximal term (``ProximalTerm``) is applied to these moves:
        buf <- momentum * buf + g + 2 mu (D - m),   U <- U - lr (buf + sum_j buf_j)
    (w_0's buffer is minus the sum). The same SGD in exact arithmetic with (C-1)/C of the matmul
    width: a third less for the q-FFL paper's three F-MNIST classes. Two classes (Adult) use a
    sigmoid for the softmax and write the step as v <- v - 2 lr buf with buf w_1's buffer, whose
    move is (v - v_start) / 2 (v = u_1): half the width, and about half the step's operations,
    which is what these small steps cost.
    """

    name = "linear-softmax"
    groups_by_size = False  # no padding to waste: done clients leave the steps
    trains_one_alone = True
    chunk_elements = 1 << 22  # gathered samples x features per chunk of steps (16 MB in float32)

    def __init__(self, model: FlatModel, hparams: LocalHParams):
        self.classes, self.features = model.shapes[0]
        self.cols = self.classes - 1  # weight columns per member: u_1 .. u_{C-1}
        self.hparams = hparams
        self.proximal = hparams.proximal
        self._data_key = None

    @staticmethod
    def eligible(model: FlatModel) -> bool:
        """Models that say they are linear + log_softmax, with parameters weight (C, D), bias (C)."""
        shapes = model.shapes
        return bool(getattr(model.module, "linear_softmax", False)) and len(shapes) == 2 and len(shapes[0]) == 2 and tuple(shapes[1]) == (shapes[0][0],)

    def train(self, plan: ClientsPlan, w_start: torch.Tensor, data_x: torch.Tensor, data_y: torch.Tensor, scales: torch.Tensor) -> list[ClientResult]:
        """``ClientSteps.train``: the steps of each distinct minibatch plan, its clients side by side."""
        with single_thread_on_cpu(data_x.device, True):
            updates, mean_loss = self._train(w_start, data_x, data_y, plan.distinct, plan.plan_of, scales.to(device=data_x.device, dtype=w_start.dtype))
        return [ClientResult(update=u, train_loss=loss) for u, loss in zip(updates, mean_loss)]

    def _augmented(self, data_x: torch.Tensor, data_y: torch.Tensor, dtype: torch.dtype, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[x 1] and onehot(y) of the pooled samples, kept while the pooled samples stay the same."""
        key = (data_x.data_ptr(), data_y.data_ptr(), tuple(data_x.shape), dtype, classes)
        if self._data_key != key:
            x = data_x.flatten(1).to(dtype)
            self._x1 = torch.cat([x, x.new_ones(len(x), 1)], dim=1)
            self._onehot = torch.nn.functional.one_hot(data_y, classes).to(dtype)
            self._data_key = key
        return self._x1, self._onehot

    def _slots(self, w_start, n: int, group, slot, groups: int, members: int, cols: int) -> torch.Tensor:
        """The clients' start models in their slots: flat [W (C x D) row-major, b] per client ->
        its slot of (groups, D + 1, members, cols) (two classes: v = w_1 - w_0, one column)."""
        classes, features = self.classes, self.features
        flat_start = w_start.expand(n, -1)
        per_client = torch.cat([flat_start[:, : classes * features].view(n, classes, features).transpose(1, 2), flat_start[:, None, classes * features :]], dim=1)
        per_client = per_client[:, :, 1:] - per_client[:, :, :1]  # u_j = w_j - w_0
        starts = per_client.new_zeros(groups, features + 1, members, cols)
        starts[group, :, slot] = per_client
        return starts

    def _slotted(self, w_start, plans: list[torch.Tensor], plan_of: list[int], scales) -> _Slotted:
        """The round's state: the clients in their groups' slots, weights and buffers, sums."""
        sequences, group, slot, members = _plan_groups(plans, plan_of)
        sequences, group, slot = sequences.to(w_start.device), group.to(w_start.device), slot.to(w_start.device)
        groups, steps, _ = sequences.shape
        starts = self._slots(w_start, len(plan_of), group, slot, groups, members, self.cols)
        slot_scale = scales.new_zeros(groups, members)  # empty slots: scale 0, so they never move
        slot_scale[group, slot] = scales
        w = starts.clone().view(groups, self.features + 1, members * self.cols)
        loss_sum = torch.zeros(groups, members, device=w.device, dtype=w.dtype)
        real = sequences >= 0
        group_active = (real[:, :, 0].sum(dim=1)[:, None] > torch.arange(steps, device=real.device)).sum(dim=0).tolist()
        return _Slotted(sequences, real, group, slot, members, w, torch.zeros_like(w), starts.view_as(w), slot_scale,
                        loss_sum, torch.zeros_like(loss_sum), group_active)

    def _train(self, w_start, data_x, data_y, plans: list[torch.Tensor], plan_of: list[int], scales) -> tuple[torch.Tensor, torch.Tensor]:
        """The updates and mean losses of clients (rows, in ``plan_of``'s order) from ``w_start``
        ((P,), or one row per client): plans[k] is a minibatch plan (``ClientsPlan.distinct``),
        plan_of[i] client i's."""
        x1, onehot = self._augmented(data_x, data_y, w_start.dtype, self.classes)
        onehot = onehot[:, 1:]  # y_1 .. y_{C-1}
        state = self._slotted(w_start, plans, plan_of, scales)
        groups, steps, width = state.sequences.shape
        chunk = max(1, self.chunk_elements // (groups * width * (self.features + 1)))
        logits = state.w.new_zeros(min(chunk, steps), groups, width, state.members * self.cols)
        first = 0
        # one step's products: (groups, width, D + 1) x (groups, D + 1, members x cols), and back
        with threads_for_product(groups * width * (self.features + 1) * state.members * self.cols):
            while first < steps:
                k = state.group_active[first]  # groups with a minibatch at this step: a prefix; constant over the chunk
                last = min(first + chunk, steps)
                last = next((s for s in range(first, last) if state.group_active[s] != k), last)
                self._chunk(state, x1, onehot, logits[: last - first, :k], first, last)
                first = last
        return self._results(state, len(plan_of))

    def _chunk(self, state: _Slotted, x1, onehot, used, first: int, last: int) -> None:
        """The steps first .. last - 1 of the first k groups (``used``: their logits, (steps, k,
        width, members x cols)), the minibatches gathered once; their losses added up."""
        k, cols = used.shape[1], self.cols
        pos = state.sequences[:k, first:last].transpose(0, 1)  # (steps, groups, width)
        mask = state.real[:k, first:last].transpose(0, 1).to(used.dtype)
        per_batch = state.slot_scale[None, :k] / mask.sum(dim=2).clamp(min=1)[:, :, None]  # scale / real samples, (steps, groups, members)
        coef = (mask[:, :, :, None] * per_batch[:, :, None, :]).unsqueeze(4)  # (steps, groups, width, members, 1)
        x = x1[pos.clamp(min=0)]  # (steps, groups, width, D + 1)
        target = onehot[pos.clamp(min=0)].mul_(mask.unsqueeze(3)).unsqueeze(3)  # (steps, groups, width, 1, cols)
        neg_target = (target * -coef).flatten(3)
        coef = coef.expand(-1, -1, -1, -1, cols).flatten(3)
        w_k, buf_k, starts_k, prox_k = state.w[:k], state.buf[:k], state.starts[:k], state.prox_sum[:k]
        for x_s, z_s, target_s, coef_s in zip(x.unbind(0), used.unbind(0), neg_target.unbind(0), coef.unbind(0)):
            self._step(x_s, z_s, target_s, coef_s, w_k, buf_k, starts_k, prox_k)
        state.loss_sum[:k] += (self._nll_sums(used, mask, target) * per_batch).sum(dim=0)

    def _step(self, x_s, z_s, neg_target_s, coef_s, w_k, buf_k, starts_k, prox_k) -> None:
        """One local step of k groups, in place: the logits into ``z_s``, the gradient into the
        momentum buffer, the proximal term's squared distance into ``prox_k``."""
        hparams, cols = self.hparams, self.cols
        k, width, slots = z_s.shape
        z = torch.bmm(x_s, w_k, out=z_s)
        if self.classes == 2:
            p = torch.sigmoid(z)  # P(class 1), the softmax of the two logits
        else:
            p = _softmax_beside_zero(z.view(k, width, slots // cols, cols)).view_as(z)
        buf_k.baddbmm_(x_s.transpose(1, 2), torch.addcmul(neg_target_s, p, coef_s), beta=hparams.momentum)
        if hparams.mu:
            self._add_proximal(buf_k, w_k - starts_k, prox_k)
        if self.classes == 2:  # v moves twice w_1's step
            w_k.sub_(buf_k, alpha=2 * hparams.lr)
        else:  # u_j moves by w_j's step minus w_0's, whose buffer is minus the sum
            buf4 = buf_k.view(k, self.features + 1, slots // cols, cols)
            w_k.sub_((buf4 + buf4.sum(dim=3, keepdim=True)).view_as(w_k), alpha=hparams.lr)

    def _add_proximal(self, buf_k, gap, prox_k) -> None:
        """The proximal gradient of the moves of gap = D into the buffer; their ||w - w_start||^2
        (two classes: ||v - v_start||^2, twice it, halved in ``_results``) into ``prox_k``."""
        proximal = self.proximal
        slots = gap.view(len(gap), self.features + 1, -1, self.cols)
        if self.classes == 2:  # buf is w_1's, which moves by (v - v_start) / 2
            proximal.add_gradient_(buf_k, gap, move_scale=0.5)
            prox_k += slots.square().sum(dim=(1, 3))
        else:
            moves, mean = _column_moves(slots, self.classes)
            proximal.add_gradient_(buf_k, moves.view_as(gap))
            prox_k += moves.square().sum(dim=(1, 3)) + mean.square().sum(dim=(1, 3))

    def _nll_sums(self, used, mask, target) -> torch.Tensor:
        """As the autograd objective: each minibatch's summed NLL (steps, groups, members), from
        its stored logits, to be divided by its real samples and scaled."""
        if self.classes == 2:  # -log p(y) = softplus(z) - y z, z the logit difference
            return (F.softplus(used).mul_(mask.unsqueeze(3)) - used * target.flatten(3)).sum(dim=2)
        # -log p(y) = logsumexp(0, z) - z_y, the class-0 logit being 0
        z5 = used.view(*used.shape[:3], -1, self.cols)
        top = z5.amax(dim=4).clamp_(min=0)
        log_sum = (z5 - top.unsqueeze(4)).exp_().sum(dim=4).add_((-top).exp_()).log_().add_(top)
        return (log_sum.mul_(mask.unsqueeze(3)) - (z5 * target).sum(dim=4)).sum(dim=2)

    def _results(self, state: _Slotted, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The clients' flat updates (n, P) back from their slots, and their mean losses."""
        features, classes = self.features, self.classes
        groups = len(state.sequences)
        update = (state.w - state.starts).view(groups, features + 1, state.members, self.cols)[state.group, :, state.slot]  # (clients, D + 1, cols)
        prox_sum = state.prox_sum
        if classes == 2:  # ||w - w_start||^2 = 2 ||(v - v_start) / 2||^2; w_0 and w_1 move by -/+ (v - v_start) / 2
            prox_sum = prox_sum / 2
            update = torch.cat([-update / 2, update / 2], dim=2)
        else:
            moves, mean = _column_moves(update, classes)
            update = torch.cat([-mean, moves], dim=2)
        steps_done = state.real[:, :, 0].sum(dim=1).to(state.w.dtype)[state.group]  # a minibatch s is real iff its first slot is
        loss = (state.loss_sum + self.proximal.scaled(prox_sum))[state.group, state.slot]
        flat = torch.cat([update[:, :features].transpose(1, 2).reshape(n, -1), update[:, features]], dim=1)
        return flat, loss / steps_done


@dataclass
class _Slotted:
    """``LinearSoftmaxSteps``' state of a round: the plans as (groups, steps, width) ``sequences``
    (-1 = pad; ``real``: not a pad), each client's group and slot, the largest group's size, the
    weights, buffers and starts as (groups, D + 1, members x cols), each slot's loss scale, the
    summed losses and squared proximal distances per slot, and how many groups are active per step."""

    sequences: torch.Tensor
    real: torch.Tensor
    group: torch.Tensor
    slot: torch.Tensor
    members: int
    w: torch.Tensor
    buf: torch.Tensor
    starts: torch.Tensor
    slot_scale: torch.Tensor
    loss_sum: torch.Tensor
    prox_sum: torch.Tensor
    group_active: list[int]


def _plan_groups(plans: list[torch.Tensor], plan_of: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``LinearSoftmaxSteps``' groups, the clients of each plan: (the plans padded to one
    (groups, steps, width) tensor, most steps first; each client's group; each client's slot in
    its group, in the clients' order; the largest group's size)."""
    order = sorted(range(len(plans)), key=lambda i: -len(plans[i]))  # most steps first
    sequences = torch.full((len(plans), len(plans[order[0]]), max(p.shape[1] for p in plans)), -1, dtype=torch.long)
    for row, i in enumerate(order):
        sequences[row, : plans[i].shape[0], : plans[i].shape[1]] = plans[i]
    rank = torch.empty(len(plans), dtype=torch.long)
    rank[order] = torch.arange(len(plans))
    group = rank[plan_of]
    # a client's slot: how many of its group come before it
    by_group = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=len(plans))
    slot = torch.empty_like(group)
    slot[by_group] = torch.arange(len(group)) - (counts.cumsum(0) - counts)[group[by_group]]
    return sequences, group, slot, int(counts.max())


def _softmax_beside_zero(z: torch.Tensor) -> torch.Tensor:
    """p_1 .. p_{C-1} of the softmax of (0, z_1 .. z_{C-1}) over the last dimension, written out:
    torch.softmax costs 4x more on these tiny (groups, width, members, classes) tensors on the CPU."""
    top = z.amax(dim=-1, keepdim=True).clamp_(min=0)
    e = (z - top).exp_()
    return e.div_(e.sum(dim=-1, keepdim=True).add_((-top).exp_()))


def _column_moves(gap: torch.Tensor, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """From D = U - U_start (..., C-1): the moves of columns 1 .. C-1, D - m, and m = sum_j D_j / C
    (class 0 moves by -m), the column mean of W|b staying put."""
    mean = gap.sum(dim=-1, keepdim=True) / classes
    return gap - mean, mean


class ConvNetSteps:
    """The batched client update (``ClientSteps``) of a small convolutional network on the CPU, its forward and backward written out (no autograd, no ``torch.func``): F-MNIST's
    ``CNNFashion`` and FEMNIST's ``CNNFemnist``, each described by its ``layer_ops``.

    Why: the paper's F-MNIST setting (100 users, 10 per round, 48 local steps of 10 images) is
    thousands of tiny steps per round; on a CPU thread, the vmap-ed autograd step spends its time
    on the overhead of many small operations, and a plain PyTorch loop beats it. Here every layer
    of a step is one batched matrix product for all the step's clients, each client with its own
    weights:

    - a k x k convolution (stride 1, no padding) is im2col + ``bmm``; the activations are laid
      out (clients, channels, height, width, minibatch), the minibatch innermost, so that im2col
      is one copy of a strided view and its transpose (col2im), done tap by tap, k*k adds of
      contiguous runs;
    - a 2 x 2 max-pool runs on the same memory seen as channels-last images (the minibatch as
      the channels: torch's fast CPU kernel) and keeps its indices for the backward;
    - ReLU and dropout work in place; dropout multiplies by the client's own masks
      (``Minibatches.dropout_masks``, drawn once per client as every path draws them: True =
      kept, kept values scaled by 1 / (1 - p));
    - linear layers are ``baddbmm``s on (clients, features, minibatch).

    The objective and the step are ``LocalTrainer``'s: scale * (mean NLL over the minibatch's
    real samples) + the proximal term (``ProximalTerm``), SGD with momentum (the first step's
    buffer is the gradient); each client's mean loss over its real steps includes the proximal
    term. The clients are padded and masked as in ``VmapSteps`` (``ClientsPlan.padded``: the same
    minibatch orders, masks and padding), so every client follows ``LocalTrainer.train``'s
    trajectory up to float rounding.

    The weights of a chunk of clients live layer-major during local training (each parameter
    (clients, *shape), one after another in one buffer), so the momentum update is a few in-place
    operations over the whole buffer and the gradients are written into their place. A chunk of
    about ``chunk_bytes`` of activations (F-MNIST: 30 clients) runs all its steps before the next
    chunk starts: its buffers stay in the cache. Every operation is per client (no sum across
    clients), so a client's numbers do not depend on the clients of its chunk: a run gives the
    same numbers alone or packed beside others.
    """

    name = "conv-net"
    groups_by_size = True
    trains_one_alone = True  # so that a client alone gets the numbers it gets in a group
    chunk_bytes = 48 << 20  # activations and im2col buffers of one chunk of clients (F-MNIST: about 30 clients; measured best on one thread)

    def __init__(self, model: FlatModel, hparams: LocalHParams):
        self.ops = model.module.layer_ops
        self.shapes = [tuple(shape) for shape in model.shapes]
        self.sizes = model.sizes
        self.sites = model.dropout_sites
        self.hparams = hparams
        self._layers_key = None

    @staticmethod
    def eligible(model: FlatModel) -> bool:
        """Models that describe their forward as ``layer_ops`` (conv, pool, relu, dropout, linear),
        each conv and linear with a weight and a bias, in the order of its parameters."""
        ops = getattr(model.module, "layer_ops", None)
        if not ops or set(ops) - {"conv", "pool", "relu", "dropout", "linear"} or ops[-1] != "linear":
            return False
        weighted = [op for op in ops if op in ("conv", "linear")]
        shapes = [tuple(shape) for shape in model.shapes]
        if len(shapes) != 2 * len(weighted) or ops.count("dropout") != len(model.dropout_sites):
            return False
        rank = {"conv": 4, "linear": 2}
        return all(len(shapes[2 * i]) == rank[op] and shapes[2 * i + 1] == shapes[2 * i][:1] for i, op in enumerate(weighted))

    def train(self, plan: ClientsPlan, w_start: torch.Tensor, data_x: torch.Tensor, data_y: torch.Tensor, scales: torch.Tensor) -> list[ClientResult]:
        """``ClientSteps.train`` with the written-out step, chunk of clients after chunk."""
        padded = plan.padded(data_x.device)
        order, positions, keep = padded.order, padded.positions, padded.keep
        n, steps, width = positions.shape
        dtype = w_start.dtype
        real = positions >= 0
        positions = torch.where(real, positions, positions.amax(dim=2, keepdim=True).clamp(min=0))  # pads read a real sample
        mask = real.to(dtype)
        steps_of = real[:, :, 0].sum(dim=1)  # a client's minibatch s is real iff its first slot is
        starts = w_start.expand(n, -1)[torch.tensor(order)] if w_start.dim() == 2 else w_start.expand(n, -1)
        scales = scales.to(dtype)[order]
        sites = self.sites if keep is not None else ()
        layers = self._layers(tuple(data_x.shape[1:]), width, dtype)
        most = max(1, self.chunk_bytes // max(1, sum(layer.bytes_per_client for layer in layers)))
        chunk = math.ceil(n / math.ceil(n / most))  # equal chunks
        updates, mean_loss = torch.empty(n, starts.shape[1], dtype=dtype), torch.empty(n, dtype=dtype)
        # one thread: a product of one client alone would be split across threads, those of several
        # clients not, and the two sum in different orders; on one, a client's bits are its own
        with single_thread_on_cpu(data_x.device, True):
            for first in range(0, n, chunk):
                rows = slice(first, min(n, first + chunk))
                chunk_keep = None if keep is None else tuple(site[rows] for site in keep)
                update, loss_sum = self._chunk(layers, starts[rows], data_x, data_y, positions[rows], mask[rows], scales[rows], chunk_keep, sites, steps_of[rows])
                updates[rows], mean_loss[rows] = update, loss_sum / steps_of[rows].to(dtype)
        results: list[ClientResult | None] = [None] * n
        for row, i in enumerate(order):
            results[i] = ClientResult(update=updates[row], train_loss=mean_loss[row])
        return results

    def _layers(self, input_shape: tuple[int, ...], width: int, dtype: torch.dtype) -> list:
        """The layer operations of ``layer_ops`` for samples of ``input_shape`` in minibatches of
        ``width``, their shapes checked against the parameters; kept while those stay the same."""
        key = (input_shape, width, dtype)
        if self._layers_key != key:
            layers, shape, param, site = [], input_shape, 0, 0
            for op in self.ops:
                if op == "conv":
                    layer = _Conv(shape, self.shapes[param], width, dtype, input_gradient=param > 0)
                elif op == "linear":
                    layer = _Linear(shape, self.shapes[param], width, input_gradient=param > 0)
                elif op == "pool":
                    layer = _MaxPool2(shape, width)
                elif op == "relu":
                    layer = _ReLU(shape, width)
                else:
                    layer = _Dropout(shape, width, site, *self.sites[site])
                    site += 1
                if op in ("conv", "linear"):
                    if self.shapes[param][1] != (shape[0] if op == "conv" else math.prod(shape)):  # input channels / features
                        raise ValueError(f"layer_ops: {op} {param // 2} gets inputs of shape {shape}, its weight is {self.shapes[param]}")
                    layer.params = (param, param + 1)
                    param += 2
                layers.append(layer)
                shape = layer.out_shape
            self._built, self._layers_key = layers, key
        return self._built

    def _chunk(self, layers, starts, data_x, data_y, positions, mask, scales, keep, sites, steps_of) -> tuple[torch.Tensor, torch.Tensor]:
        """All the local steps of one chunk of clients (rows, most steps first): their updates
        (clients, P) in the flat order of the parameters, and their summed losses."""
        lr, momentum, proximal = self.hparams.lr, self.hparams.momentum, self.hparams.proximal
        clients = len(starts)
        start = _layer_major(starts, self.sizes)
        w, buf, grad = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
        loss_sum = torch.zeros(clients, dtype=starts.dtype)
        for s in range(positions.shape[1]):
            k = int((steps_of > s).sum())  # the clients with a minibatch at step s: a prefix of the rows
            if k == 0:
                break
            weights, grads = self._views(w, clients, k), self._views(grad, clients, k)
            x = data_x[positions[:k, s]].movedim(1, -1).contiguous()  # (k, *sample shape, width)
            y = data_y[positions[:k, s]]
            factors = [] if keep is None else [site[:k, s].movedim(1, -1).to(starts.dtype).div_(1 - p) for (p, _), site in zip(sites, keep)]
            for layer in layers:
                x = layer.forward(x, weights, factors)
            loss, x = _nll_and_gradient(x, y, mask[:k, s], scales[:k])
            for layer in reversed(layers):  # the first layer computes no input gradient
                x = layer.backward(x, weights, grads)
            if proximal.mu:  # its gradient, and its value at the step's start
                for w_part, start_part, grad_part in zip(self._views(w, clients, k), self._views(start, clients, k), grads):
                    gap = w_part - start_part
                    grad_part.add_(proximal.gradient(gap))
                    loss = loss + proximal.value(gap.flatten(1), dim=1)
            loss_sum[:k] += loss
            for w_part, buf_part, grad_part in zip(*(self._blocks(t, clients, k) for t in (w, buf, grad))):
                if s == 0:
                    buf_part.copy_(grad_part)
                else:
                    buf_part.mul_(momentum).add_(grad_part)
                w_part.sub_(buf_part * lr)
        return _client_major(w - start, self.sizes, clients), loss_sum

    def _views(self, buffer: torch.Tensor, clients: int, k: int) -> list[torch.Tensor]:
        """The parameters of the first k clients in a layer-major buffer of ``clients``: (k, *shape) each."""
        views, offset = [], 0
        for size, shape in zip(self.sizes, self.shapes):
            views.append(buffer[offset : offset + clients * size].view(clients, *shape)[:k])
            offset += clients * size
        return views

    def _blocks(self, buffer: torch.Tensor, clients: int, k: int) -> list[torch.Tensor]:
        """The first k clients' part of a layer-major buffer: the whole buffer when all clients are
        active (one operation), else one block per parameter."""
        return [buffer] if k == clients else [view.reshape(k, -1) for view in self._views(buffer, clients, k)]


def _layer_major(flat: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Clients' flat weights (clients, P) as one layer-major buffer: each parameter of all clients, in turn."""
    return torch.cat([part.reshape(-1) for part in flat.split(sizes, dim=1)])


def _client_major(buffer: torch.Tensor, sizes: list[int], clients: int) -> torch.Tensor:
    """A layer-major buffer back as (clients, P), each row in the order of the model's parameters."""
    return torch.cat([part.view(clients, -1) for part in buffer.split([clients * size for size in sizes])], dim=1)


def _nll_and_gradient(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax + NLL of (clients, classes, width) logits: per client, scale * the mean NLL over
    the minibatch's real samples (``mask``), and its gradient with respect to the logits."""
    log_p = torch.log_softmax(logits, dim=1)
    nll = -log_p.gather(1, y.unsqueeze(1)).squeeze(1)  # (clients, width)
    real = mask.sum(dim=1).clamp(min=1)
    loss = scales * (nll * mask).sum(dim=1) / real
    weight = (scales[:, None] * mask / real[:, None]).unsqueeze(1)  # d loss / d nll, (clients, 1, width)
    gradient = log_p.exp_()  # softmax - onehot(y), weighted
    gradient.scatter_add_(1, y.unsqueeze(1), torch.full_like(gradient[:, :1], -1.0))
    return loss, gradient.mul_(weight)


def _as_images(t: torch.Tensor) -> torch.Tensor:
    """(clients, C, H, W, width) memory as (clients x C, width, H, W) channels-last images."""
    clients, channels, height, width_, batch = t.shape
    return t.view(clients * channels, height, width_, batch).permute(0, 3, 1, 2)


class _Conv:
    """A k x k convolution, stride 1, no padding: im2col (clients, C k k, OH OW width) + ``bmm``."""

    def __init__(self, in_shape, weight_shape, width: int, dtype, input_gradient: bool):
        out_channels, channels, k, _ = weight_shape
        _, height, width_ = in_shape
        self.k, self.in_shape, self.width = k, tuple(in_shape), width
        self.out_shape = (out_channels, height - k + 1, width_ - k + 1)
        self.input_gradient = input_gradient
        self.dtype = dtype
        self.bytes_per_client = 4 * width * (channels * k * k * self.out_shape[1] * self.out_shape[2] + (2 if input_gradient else 0) * channels * height * width_)
        self._cols = self._input_grad = self._tap_grad = torch.empty(0)

    def forward(self, x, weights, factors):
        clients, (channels, _, _), (out_channels, oh, ow), k = x.shape[0], self.in_shape, self.out_shape, self.k
        if self._cols.shape[0] < clients:  # buffers reused from step to step (no page faults)
            self._cols = torch.empty(clients, channels, k, k, oh, ow, self.width, dtype=self.dtype)
            self._out = torch.empty(clients, out_channels, oh * ow * self.width, dtype=self.dtype)
        cols = self._cols[:clients]
        # im2col as one copy: x seen with a (kh, kw, row, column) window for each output position
        s_client, s_channel, s_row, s_column, s_sample = x.stride()
        windows = x.as_strided((clients, channels, k, k, oh, ow, self.width), (s_client, s_channel, s_row, s_column, s_row, s_column, s_sample),
                               x.storage_offset())
        cols.copy_(windows)
        self.cols = cols.view(clients, channels * k * k, -1)
        weight, bias = (weights[i] for i in self.params)
        out = torch.baddbmm(bias.unsqueeze(2), weight.view(clients, out_channels, -1), self.cols, out=self._out[:clients])
        return out.view(clients, out_channels, oh, ow, self.width)

    def backward(self, grad_out, weights, grads):
        clients, (channels, height, width_), (out_channels, oh, ow), k = grad_out.shape[0], self.in_shape, self.out_shape, self.k
        grad_out = grad_out.reshape(clients, out_channels, -1)
        weight = weights[self.params[0]].view(clients, out_channels, -1)
        torch.bmm(grad_out, self.cols.transpose(1, 2), out=grads[self.params[0]].view(clients, out_channels, -1))
        torch.sum(grad_out, dim=2, out=grads[self.params[1]])
        if not self.input_gradient:
            return None
        if self._input_grad.shape[0] < clients:
            self._input_grad = torch.empty(clients, channels, height, width_, self.width, dtype=self.dtype)
            self._tap_grad = torch.empty(clients, channels, oh * ow * self.width, dtype=self.dtype)
        grad_in, tap_grad = self._input_grad[:clients].zero_(), self._tap_grad[:clients]
        # tap by tap: each (kh, kw)'s part of the im2col gradient, a block that stays in the cache, added
        # where its columns came from: the whole product + col2im's dot products and, tap after tap, its
        # additions (with this machine's MKL the same bits for both CNNs)
        taps = weight.view(clients, out_channels, channels, k, k).permute(3, 4, 0, 2, 1).contiguous()  # (k, k, clients, C, out)
        for kh in range(k):
            for kw in range(k):
                torch.bmm(taps[kh, kw], grad_out, out=tap_grad)
                grad_in[:, :, kh : kh + oh, kw : kw + ow].add_(tap_grad.view(clients, channels, oh, ow, self.width))
        return grad_in


class _MaxPool2:
    """2 x 2 max-pooling on the activations seen as channels-last images (``_as_images``)."""

    def __init__(self, in_shape, width: int):
        channels, height, width_ = in_shape
        self.in_shape, self.out_shape = tuple(in_shape), (channels, height // 2, width_ // 2)
        self.width = width
        self.bytes_per_client = 0
        self._grad_in = torch.empty(0)

    def forward(self, x, weights, factors):
        self.images = _as_images(x)
        pooled, self.indices = F.max_pool2d(self.images, 2, return_indices=True)  # channels-last, as its input
        return pooled.permute(0, 2, 3, 1).reshape(x.shape[0], *self.out_shape, self.width)

    def backward(self, grad_out, weights, grads):
        clients = grad_out.shape[0]
        if self._grad_in.shape[0] < clients:  # reused from step to step: a fresh one page-faults as it is zeroed
            self._grad_in = torch.empty(clients, *self.in_shape, self.width, dtype=grad_out.dtype)
        grad_in = self._grad_in[:clients]
        torch.ops.aten.max_pool2d_with_indices_backward.grad_input(_as_images(grad_out.contiguous()), self.images, [2, 2], [2, 2], [0, 0], [1, 1],
                                                                   False, self.indices, grad_input=_as_images(grad_in))
        return grad_in


class _ReLU:
    """ReLU in place; its backward zeroes the gradient where the output is 0."""

    def __init__(self, in_shape, width: int):
        self.out_shape = in_shape
        self.bytes_per_client = 0

    def forward(self, x, weights, factors):
        self.out = x.clamp_(min=0)
        return self.out

    def backward(self, grad_out, weights, grads):
        return grad_out.mul_(self.out > 0)


class _Dropout:
    """Dropout by the client's masks: x * keep / (1 - p), masks broadcast over whole channels
    where the site's trailing sizes are 1 (Dropout2d)."""

    def __init__(self, in_shape, width: int, site: int, p: float, site_shape):
        self.out_shape = in_shape
        self.site = site
        self.bytes_per_client = 0

    def forward(self, x, weights, factors):
        self.factor = factors[self.site] if factors else None  # (clients, *site shape, width); none: dropout off
        return x if self.factor is None else x.mul_(self.factor)

    def backward(self, grad_out, weights, grads):
        return grad_out if self.factor is None else grad_out.mul_(self.factor)


class _Linear:
    """A linear layer on (clients, features, width) (images flattened channel-major, as ``flatten(1)``)."""

    def __init__(self, in_shape, weight_shape, width: int, input_gradient: bool):
        self.in_shape, self.width = tuple(in_shape), width
        self.out_shape = (weight_shape[0],)
        self.input_gradient = input_gradient
        self.bytes_per_client = 4 * width * (weight_shape[0] + weight_shape[1])

    def forward(self, x, weights, factors):
        self.inputs = x.reshape(x.shape[0], -1, self.width)
        weight, bias = (weights[i] for i in self.params)
        return torch.baddbmm(bias.unsqueeze(2), weight, self.inputs)

    def backward(self, grad_out, weights, grads):
        torch.bmm(grad_out, self.inputs.transpose(1, 2), out=grads[self.params[0]])
        torch.sum(grad_out, dim=2, out=grads[self.params[1]])
        if not self.input_gradient:
            return None
        return torch.bmm(weights[self.params[0]].transpose(1, 2), grad_out).view(grad_out.shape[0], *self.in_shape, self.width)


class CudaGraphs:
    """Replays a function of fixed-shape CUDA tensors as captured CUDA graphs.

    A round's batched client update is thousands of small kernels, so on a GPU its time is the
    CPU's time to launch them; a graph launches them all at once. A key (shapes and everything
    else the function depends on) is captured the second time it is seen: the first call runs
    eagerly, so keys seen only once (FEMNIST's changing client groups) cost no capture. Replays
    give the eager results bit for bit; nothing random is drawn inside (the dropout masks are
    inputs, drawn per client beforehand: ``Minibatches.dropout_masks``). A key whose capture fails
    (an operation that cannot be captured) runs eagerly, with a warning.

    At most ``capacity`` graphs are held, and together no more than ``memory_fraction`` of the
    device's memory: a graph keeps its function's working set (the peak of its first, eager call,
    ``footprint``) for as long as it is held, where an eager call gives it back, so a few graphs of
    large full-batch groups (FEMNIST's, 8 runs packed) could fill the GPU. A key to capture first
    evicts the least recently used graphs until it fits (one larger than the share alone runs
    eagerly). ``capacity`` bounds the host's side (each graph's nodes; their instantiation) and
    holds every recurring key of a round: Shakespeare's 31 clients of very unequal sizes train in
    11 size groups (``client.size_groups``) of spans of up to ``client.GRAPH_STEPS`` steps, 29
    distinct keys a round (``tests/test_batched.py``). A capacity of 4 left 56 of the 61 steps of
    its 1 % round eager (counted on the CPU with a stand-in graph); that round took 8.2 s on an
    H200 (benchmarks/measurements/h200_bounds_2026-11-27/).

    An evicted key runs eagerly from then on, unless its graph was replayed at least
    ``recapture_after`` times: when a round has more recurring keys than fit, evicting and
    capturing every key again every round would cost more than eager calls (a capture costs an
    eager run and more). A key replayed many times in a row (the middle spans of a long client,
    ``VmapSteps._local_steps``) pays its capture back within the round: it is captured again.
    """

    def __init__(self, capacity: int = 64, recapture_after: int = 4, memory_fraction: float = 0.5):
        self.capacity = capacity
        self.recapture_after = recapture_after
        self.memory_fraction = memory_fraction
        self.graphs: OrderedDict = OrderedDict()
        self.replays: dict = {}  # key -> replays of its current graph
        self.footprints: dict = {}  # key -> peak bytes of its eager call
        self.seen: set = set()
        self.failed: set = set()
        self.evicted: set = set()

    def __call__(self, key, fn, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if key not in self.graphs:
            if key not in self.seen or key in self.failed or key in self.evicted:
                self.seen.add(key)
                outputs, self.footprints[key] = self.footprint(fn, inputs)
                return outputs
            if not self._make_room(key):
                return fn(*inputs)
            try:
                self.graphs[key] = self._capture(fn, inputs)
            except RuntimeError as error:  # an operation that cannot be captured: stay eager for this key
                self.failed.add(key)
                warnings.warn(f"CUDA graph capture failed, running eagerly: {str(error).splitlines()[0]}", stacklevel=2)
                return fn(*inputs)
            self.replays[key] = 0
        self.graphs.move_to_end(key)
        self.replays[key] += 1
        graph, static_inputs, static_outputs = self.graphs[key]
        for static, x in zip(static_inputs, inputs):
            static.copy_(x)
        graph.replay()
        return tuple(out.clone() for out in static_outputs)

    @staticmethod
    def footprint(fn, inputs) -> tuple[tuple[torch.Tensor, ...], int]:
        """``fn(*inputs)`` and the peak bytes it allocated on the CUDA device beyond what was
        allocated before (0 on the CPU)."""
        device = next((x.device for x in inputs if x.is_cuda), None)
        if device is None:
            return fn(*inputs), 0
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        outputs = fn(*inputs)
        return outputs, torch.cuda.max_memory_allocated(device) - before

    def _make_room(self, key) -> bool:
        """Whether ``key`` may be captured: the least recently used graphs are evicted until one
        more graph stays within ``capacity`` and the held graphs' and its own peaks (their eager
        calls') within ``memory_fraction`` of the device memory (:meth:`device_memory`). False,
        evicting nothing, for a key whose peak alone exceeds that share."""
        limit = self.memory_fraction * self.device_memory()
        need = self.footprints.get(key, 0)
        if need > limit:
            return False
        while self.graphs and (len(self.graphs) >= self.capacity or sum(self.footprints.get(k, 0) for k in self.graphs) + need > limit):
            oldest = self.graphs.popitem(last=False)[0]
            if self.replays.pop(oldest) < self.recapture_after:
                self.evicted.add(oldest)
        return True

    @staticmethod
    def device_memory() -> int:
        """The current CUDA device's memory in bytes (unbounded without CUDA)."""
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory if torch.cuda.is_available() else 1 << 62

    @staticmethod
    def _capture(fn, inputs):
        static_inputs = tuple(x.clone() for x in inputs)
        stream = torch.cuda.Stream()
        # warm up on the capture stream first (per-stream cuBLAS/cuDNN state must not be created
        # during capture); the generator is rewound so that replays draw what eager calls would
        rng = torch.cuda.get_rng_state()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(*static_inputs)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.set_rng_state(rng)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            static_outputs = fn(*static_inputs)
        return graph, static_inputs, static_outputs


@torch.no_grad()
def evaluate_linear(model: FlatModel, ws: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``evaluate_samples`` of several linear + log_softmax models (``LinearSoftmaxSteps.eligible``)
    at once, in one matrix product: ``ws`` (models, P) flat weights; per-sample NLL and correctness
    as (samples, models). The logits are laid out classes first, (classes, models, samples), so
    that the softmax and the argmax run over the leading dimension (several times faster on the
    CPU than over a short trailing one); the prediction is the first of equal maxima, as
    ``torch.argmax``'s (written out: torch.argmax over a leading dimension is slow on the CPU)."""
    classes, features = model.shapes[0]
    models = len(ws)
    weight = ws[:, : classes * features].reshape(models, classes, features).transpose(0, 1).reshape(classes * models, features)
    bias = ws[:, classes * features :].T.reshape(-1, 1)
    with threads_for_product(classes * models * features * len(y)):
        logits = torch.addmm(bias, weight, x.flatten(1).to(ws.dtype).T).view(classes, models, len(y))
    log_p = F.log_softmax(logits, dim=0)
    per_sample = -log_p.gather(0, y.view(1, 1, -1).expand(1, models, -1))[0]
    if classes == 2:
        correct = (log_p[1] > log_p[0]) == y.bool()
    else:
        best, predicted = log_p[0], torch.zeros_like(per_sample, dtype=y.dtype)
        for c in range(1, classes):
            predicted = torch.where(log_p[c] > best, c, predicted)
            best = torch.maximum(best, log_p[c])
        correct = predicted == y
    return per_sample.T.contiguous(), correct.to(per_sample.dtype).T.contiguous()


class DistinctSamples:
    """The distinct (features, label) pairs of a set of samples and each sample's pair: samples
    that are equal have equal losses, so a model can be evaluated once per pair and the values
    read back per sample (``expand``). Adult's 99 binary features: 32 561 train samples are
    9 646 pairs, 16 281 test samples 5 891."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        x = x.flatten(1)
        pairs, self.inverse = torch.unique(torch.cat([x, y[:, None].to(x.dtype)], dim=1), dim=0, return_inverse=True)
        self.x, self.y = pairs[:, :-1], pairs[:, -1].to(y.dtype)

    def subset(self, rows: torch.Tensor) -> DistinctSamples:
        """The ``DistinctSamples`` of the samples ``rows`` of those this was built from, the same
        pairs in the same (sorted) order as built from those samples directly, found with a 1-D
        ``unique`` of their pair numbers: a round's participants cost no row-wise ``unique`` (on
        Synthetic's 60 continuous features, where no two samples are equal, that cost 20 ms)."""
        used, inverse = torch.unique(self.inverse[rows], return_inverse=True)
        part = object.__new__(DistinctSamples)
        part.x, part.y, part.inverse = self.x[used], self.y[used], inverse
        return part

    def expand(self, values: torch.Tensor) -> torch.Tensor:
        """Values of the pairs, (pairs, ...), as values of the samples, (samples, ...)."""
        return values[self.inverse]


class LinearSoftmaxEvaluation:
    """The participant losses and test accuracies of several runs' linear + log_softmax models
    (the batched runs of a pack, which ``LinearSoftmaxSteps`` trains), each distinct (features,
    label) pair evaluated once for all of them (``evaluate_linear`` on ``DistinctSamples``), the
    pairs kept per partition. A run is known by its ``fedmgda.simulator.RunInputs``; the runs
    evaluated together share its partition."""

    def __init__(self):
        self._train: dict[str, tuple[list[int], DistinctSamples]] = {}  # partition -> the latest participants'
        self._test: dict[str, DistinctSamples] = {}
        self._pool: DistinctSamples | None = None  # the pairs of all the pack's samples

    def participant_losses(self, run, ws: list[torch.Tensor], users: list[int]) -> list[dict[str, torch.Tensor]]:
        """``RunInputs.participant_losses`` of the models ``ws`` (one per run, the runs sharing
        ``run``'s partition and the participants ``users``)."""
        pairs = self.train_pairs(run, users)
        per_sample, correct = (pairs.expand(values) for values in evaluate_linear(run.trainer.model, torch.stack(ws), pairs.x, pairs.y))  # (samples, runs)
        sizes = [len(run.data.train_idx[user]) for user in users]
        stats = participant_stats(per_sample, correct, sizes, run.trainer.hparams.batch_size)  # (users, runs) each
        return [{key: value[:, r] for key, value in stats.items()} for r in range(len(ws))]

    def evaluate(self, run, ws: list[torch.Tensor], with_global: list[bool]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
        """``RunInputs.evaluate`` of the models ``ws`` (one per run, the runs sharing ``run``'s
        partition) on the users' and the global test sets."""
        pairs = self.test_pairs(run)
        per_sample, correct = (pairs.expand(values) for values in evaluate_linear(run.trainer.model, torch.stack(ws), pairs.x, pairs.y))  # (samples, runs)
        n = len(run.test_y)
        acc = per_owner_mean(correct[:n], run.test_owner, run.data.num_users).T.cpu().numpy()  # (runs, users)
        loss = per_owner_mean(per_sample[:n], run.test_owner, run.data.num_users).T.cpu().numpy()
        global_acc, start = {}, n
        for name, (_, gy) in run.data.global_test.items():
            global_acc[f"test_acc_{name}"] = correct[start : start + len(gy)].mean(dim=0).tolist()
            start += len(gy)
        return [(acc[r], loss[r], {key: values[r] for key, values in global_acc.items()} if wanted else {}) for r, wanted in enumerate(with_global)]

    def train_pairs(self, run, users: list[int]) -> DistinctSamples:
        """The participants' pooled train samples as ``DistinctSamples``: a subset of the pack's
        samples' pairs (found once), the latest participants' kept per partition."""
        kept = self._train.get(run.partition)
        if kept is None or kept[0] != users:
            if self._pool is None:
                self._pool = DistinctSamples(run.data.x, run.data.y)  # the pack shares one copy of the samples
            pooled = torch.cat([run.data.train_idx[user] for user in users])
            kept = self._train[run.partition] = (list(users), self._pool.subset(pooled))
        return kept[1]

    def test_pairs(self, run) -> DistinctSamples:
        """The users' test samples (``test_x``), then each global test set, as ``DistinctSamples``."""
        if run.partition not in self._test:
            global_sets = list(run.data.global_test.values())
            x = torch.cat([run.test_x.flatten(1), *(gx.flatten(1) for gx, _ in global_sets)])
            self._test[run.partition] = DistinctSamples(x, torch.cat([run.test_y, *(gy for _, gy in global_sets)]))
        return self._test[run.partition]
