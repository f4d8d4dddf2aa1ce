"""The ``linear-softmax`` path: the batched client update of a linear + log_softmax model (the
Adult logistic regression), its gradient written out as batched matrix products
(``LinearSoftmaxSteps``). Its evaluation is ``fedmgda.fastpaths.linear_evaluation``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedmgda.client import ClientResult, FlatModel, LocalHParams
from fedmgda.fastpaths.threads import single_thread_on_cpu, threads_for_product
from fedmgda.minibatches import ClientsPlan


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
        """Models that say they are linear + log_softmax, with parameters weight (C, D), bias
        (C)."""
        shapes = model.shapes
        return (bool(getattr(model.module, "linear_softmax", False)) and len(shapes) == 2
                and len(shapes[0]) == 2 and tuple(shapes[1]) == (shapes[0][0],))

    def train(self, plan: ClientsPlan, w_start: torch.Tensor, data_x: torch.Tensor,
              data_y: torch.Tensor, scales: torch.Tensor) -> list[ClientResult]:
        """``ClientSteps.train``: the steps of each distinct minibatch plan, its clients side by
        side."""
        with single_thread_on_cpu(data_x.device, True):
            updates, mean_loss = self._train(w_start, data_x, data_y, plan.distinct, plan.plan_of,
                                             scales.to(device=data_x.device, dtype=w_start.dtype))
        return [ClientResult(update=u, train_loss=loss) for u, loss in zip(updates, mean_loss)]

    def _augmented(self, data_x: torch.Tensor, data_y: torch.Tensor, dtype: torch.dtype,
                   classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[x 1] and onehot(y) of the pooled samples, kept while the pooled samples stay the
        same."""
        key = (data_x.data_ptr(), data_y.data_ptr(), tuple(data_x.shape), dtype, classes)
        if self._data_key != key:
            x = data_x.flatten(1).to(dtype)
            self._x1 = torch.cat([x, x.new_ones(len(x), 1)], dim=1)
            self._onehot = torch.nn.functional.one_hot(data_y, classes).to(dtype)
            self._data_key = key
        return self._x1, self._onehot

    def _slots(self, w_start, n: int, group, slot, groups: int, members: int,
               cols: int) -> torch.Tensor:
        """The clients' start models in their slots: flat [W (C x D) row-major, b] per client ->
        its slot of (groups, D + 1, members, cols) (two classes: v = w_1 - w_0, one column)."""
        classes, features = self.classes, self.features
        flat_start = w_start.expand(n, -1)
        per_client = torch.cat([
            flat_start[:, : classes * features].view(n, classes, features).transpose(1, 2),
            flat_start[:, None, classes * features :]], dim=1)
        per_client = per_client[:, :, 1:] - per_client[:, :, :1]  # u_j = w_j - w_0
        starts = per_client.new_zeros(groups, features + 1, members, cols)
        starts[group, :, slot] = per_client
        return starts

    def _slotted(self, w_start, plans: list[torch.Tensor], plan_of: list[int], scales) -> _Slotted:
        """The round's state: the clients in their groups' slots, weights and buffers, sums."""
        sequences, group, slot, members = plan_groups(plans, plan_of)
        sequences, group, slot = (sequences.to(w_start.device), group.to(w_start.device),
                                  slot.to(w_start.device))
        groups, steps, _ = sequences.shape
        starts = self._slots(w_start, len(plan_of), group, slot, groups, members, self.cols)
        slot_scale = scales.new_zeros(groups, members)  # empty slots: scale 0, so they never move
        slot_scale[group, slot] = scales
        w = starts.clone().view(groups, self.features + 1, members * self.cols)
        loss_sum = torch.zeros(groups, members, device=w.device, dtype=w.dtype)
        real = sequences >= 0
        group_active = (real[:, :, 0].sum(dim=1)[:, None]
                        > torch.arange(steps, device=real.device)).sum(dim=0).tolist()
        return _Slotted(sequences, real, group, slot, members, w, torch.zeros_like(w),
                        starts.view_as(w), slot_scale, loss_sum, torch.zeros_like(loss_sum),
                        group_active)

    def _train(self, w_start, data_x, data_y, plans: list[torch.Tensor], plan_of: list[int],
               scales) -> tuple[torch.Tensor, torch.Tensor]:
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
                # groups with a minibatch at this step: a prefix; constant over the chunk
                k = state.group_active[first]
                last = min(first + chunk, steps)
                last = next((s for s in range(first, last) if state.group_active[s] != k), last)
                self._chunk(state, x1, onehot, logits[: last - first, :k], first, last)
                first = last
        return _unslotted(state, len(plan_of), self.features, self.classes, self.cols,
                          self.proximal)

    def _chunk(self, state: _Slotted, x1, onehot, used, first: int, last: int) -> None:
        """The steps first .. last - 1 of the first k groups (``used``: their logits, (steps, k,
        width, members x cols)), the minibatches gathered once; their losses added up."""
        k, cols = used.shape[1], self.cols
        pos = state.sequences[:k, first:last].transpose(0, 1)  # (steps, groups, width)
        mask = state.real[:k, first:last].transpose(0, 1).to(used.dtype)
        # scale / real samples, (steps, groups, members)
        per_batch = state.slot_scale[None, :k] / mask.sum(dim=2).clamp(min=1)[:, :, None]
        # (steps, groups, width, members, 1)
        coef = (mask[:, :, :, None] * per_batch[:, :, None, :]).unsqueeze(4)
        x = x1[pos.clamp(min=0)]  # (steps, groups, width, D + 1)
        # (steps, groups, width, 1, cols)
        target = onehot[pos.clamp(min=0)].mul_(mask.unsqueeze(3)).unsqueeze(3)
        neg_target = (target * -coef).flatten(3)
        coef = coef.expand(-1, -1, -1, -1, cols).flatten(3)
        w_k, buf_k = state.w[:k], state.buf[:k]
        starts_k, prox_k = state.starts[:k], state.prox_sum[:k]
        for x_s, z_s, target_s, coef_s in zip(x.unbind(0), used.unbind(0), neg_target.unbind(0),
                                              coef.unbind(0)):
            self._step(x_s, z_s, target_s, coef_s, w_k, buf_k, starts_k, prox_k)
        nll = _nll_sums(used, mask, target, self.classes, self.cols)
        state.loss_sum[:k] += (nll * per_batch).sum(dim=0)

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
        buf_k.baddbmm_(x_s.transpose(1, 2), torch.addcmul(neg_target_s, p, coef_s),
                       beta=hparams.momentum)
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


def _nll_sums(used, mask, target, classes: int, cols: int) -> torch.Tensor:
    """As the autograd objective: each minibatch's summed NLL (steps, groups, members), from its
    stored logits, to be divided by its real samples and scaled."""
    if classes == 2:  # -log p(y) = softplus(z) - y z, z the logit difference
        return (F.softplus(used).mul_(mask.unsqueeze(3)) - used * target.flatten(3)).sum(dim=2)
    # -log p(y) = logsumexp(0, z) - z_y, the class-0 logit being 0
    z5 = used.view(*used.shape[:3], -1, cols)
    top = z5.amax(dim=4).clamp_(min=0)
    log_sum = (z5 - top.unsqueeze(4)).exp_().sum(dim=4).add_((-top).exp_()).log_().add_(top)
    return (log_sum.mul_(mask.unsqueeze(3)) - (z5 * target).sum(dim=4)).sum(dim=2)


def _unslotted(state: _Slotted, n: int, features: int, classes: int, cols: int,
               proximal) -> tuple[torch.Tensor, torch.Tensor]:
    """The clients' flat updates (n, P) back from their slots of ``LinearSoftmaxSteps``' round
    state, and their mean losses."""
    groups = len(state.sequences)
    # (clients, D + 1, cols)
    update = (state.w - state.starts).view(groups, features + 1, state.members,
                                           cols)[state.group, :, state.slot]
    prox_sum = state.prox_sum
    # ||w - w_start||^2 = 2 ||(v - v_start) / 2||^2; w_0 and w_1 move by -/+ (v - v_start) / 2
    if classes == 2:
        prox_sum = prox_sum / 2
        update = torch.cat([-update / 2, update / 2], dim=2)
    else:
        moves, mean = _column_moves(update, classes)
        update = torch.cat([-mean, moves], dim=2)
    # a minibatch s is real iff its first slot is
    steps_done = state.real[:, :, 0].sum(dim=1).to(state.w.dtype)[state.group]
    loss = (state.loss_sum + proximal.scaled(prox_sum))[state.group, state.slot]
    flat = torch.cat([update[:, :features].transpose(1, 2).reshape(n, -1), update[:, features]],
                     dim=1)
    return flat, loss / steps_done


@dataclass
class _Slotted:
    """``LinearSoftmaxSteps``' state of a round: the plans as (groups, steps, width) ``sequences``
    (-1 = pad; ``real``: not a pad), each client's group and slot, the largest group's size, the
    weights, buffers and starts as (groups, D + 1, members x cols), each slot's loss scale, the
    summed losses and squared proximal distances per slot, and how many groups are active per
    step."""

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


def plan_groups(plans: list[torch.Tensor],
                plan_of: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``LinearSoftmaxSteps``' groups, the clients of each plan: (the plans padded to one
    (groups, steps, width) tensor, most steps first; each client's group; each client's slot in
    its group, in the clients' order; the largest group's size)."""
    order = sorted(range(len(plans)), key=lambda i: -len(plans[i]))  # most steps first
    sequences = torch.full((len(plans), len(plans[order[0]]), max(p.shape[1] for p in plans)), -1,
                           dtype=torch.long)
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
    torch.softmax costs 4x more on these tiny (groups, width, members, classes) tensors on the
    CPU."""
    top = z.amax(dim=-1, keepdim=True).clamp_(min=0)
    e = (z - top).exp_()
    return e.div_(e.sum(dim=-1, keepdim=True).add_((-top).exp_()))


def _column_moves(gap: torch.Tensor, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """From D = U - U_start (..., C-1): the moves of columns 1 .. C-1, D - m, and m = sum_j D_j / C
    (class 0 moves by -m), the column mean of W|b staying put."""
    mean = gap.sum(dim=-1, keepdim=True) / classes
    return gap - mean, mean
