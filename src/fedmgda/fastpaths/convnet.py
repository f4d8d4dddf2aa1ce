"""The ``conv-net`` path: the batched client update of the small CNNs (F-MNIST's, FEMNIST's) on
the CPU, forward and backward written out as one batched product per layer for all clients
(``ConvNetSteps``), and its layers (convolution, max-pooling, ReLU, dropout, linear)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fedmgda.client import ClientResult, FlatModel, LocalHParams
from fedmgda.fastpaths.threads import single_thread_on_cpu
from fedmgda.minibatches import ClientsPlan


class ConvNetSteps:
    """The batched client update (``ClientSteps``) of a small convolutional network on the CPU, its
    forward and backward written out (no autograd, no ``torch.func``): F-MNIST's ``CNNFashion`` and
    FEMNIST's ``CNNFemnist``, each described by its ``layer_ops``.

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
    # activations and im2col buffers of one chunk of clients (F-MNIST: about 30 clients; measured
    # best on one thread)
    chunk_bytes = 48 << 20

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
        if (not ops or set(ops) - {"conv", "pool", "relu", "dropout", "linear"}
            or ops[-1] != "linear"):
            return False
        weighted = [op for op in ops if op in ("conv", "linear")]
        shapes = [tuple(shape) for shape in model.shapes]
        if len(shapes) != 2 * len(weighted) or ops.count("dropout") != len(model.dropout_sites):
            return False
        rank = {"conv": 4, "linear": 2}
        return all(len(shapes[2 * i]) == rank[op] and shapes[2 * i + 1] == shapes[2 * i][:1]
                   for i, op in enumerate(weighted))

    def train(self, plan: ClientsPlan, w_start: torch.Tensor, data_x: torch.Tensor,
              data_y: torch.Tensor, scales: torch.Tensor) -> list[ClientResult]:
        """``ClientSteps.train`` with the written-out step, chunk of clients after chunk."""
        padded = plan.padded(data_x.device)
        order, positions, keep = padded.order, padded.positions, padded.keep
        n, steps, width = positions.shape
        dtype = w_start.dtype
        real = positions >= 0
        # pads read a real sample
        positions = torch.where(real, positions, positions.amax(dim=2, keepdim=True).clamp(min=0))
        mask = real.to(dtype)
        steps_of = real[:, :, 0].sum(dim=1)  # a client's minibatch s is real iff its first slot is
        starts = (w_start.expand(n, -1)[torch.tensor(order)] if w_start.dim() == 2
                  else w_start.expand(n, -1))
        scales = scales.to(dtype)[order]
        sites = self.sites if keep is not None else ()
        layers = self._layers(tuple(data_x.shape[1:]), width, dtype)
        most = max(1, self.chunk_bytes // max(1, sum(layer.bytes_per_client for layer in layers)))
        chunk = math.ceil(n / math.ceil(n / most))  # equal chunks
        updates, mean_loss = (torch.empty(n, starts.shape[1], dtype=dtype),
                              torch.empty(n, dtype=dtype))
        # one thread: a product of one client alone would be split across threads, those of several
        # clients not, and the two sum in different orders; on one, a client's bits are its own
        with single_thread_on_cpu(data_x.device, True):
            for first in range(0, n, chunk):
                rows = slice(first, min(n, first + chunk))
                chunk_keep = None if keep is None else tuple(site[rows] for site in keep)
                update, loss_sum = self._chunk(layers, starts[rows], data_x, data_y,
                                               positions[rows], mask[rows], scales[rows],
                                               chunk_keep, sites, steps_of[rows])
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
                    # input channels / features
                    if self.shapes[param][1] != (shape[0] if op == "conv" else math.prod(shape)):
                        raise ValueError(f"layer_ops: {op} {param // 2} gets inputs of shape "
                                         f"{shape}, its weight is {self.shapes[param]}")
                    layer.params = (param, param + 1)
                    param += 2
                layers.append(layer)
                shape = layer.out_shape
            self._built, self._layers_key = layers, key
        return self._built

    def _chunk(self, layers, starts, data_x, data_y, positions, mask, scales, keep, sites,
               steps_of) -> tuple[torch.Tensor, torch.Tensor]:
        """All the local steps of one chunk of clients (rows, most steps first): their updates
        (clients, P) in the flat order of the parameters, and their summed losses."""
        lr, momentum, proximal = self.hparams.lr, self.hparams.momentum, self.hparams.proximal
        clients = len(starts)
        start = _layer_major(starts, self.sizes)
        w, buf, grad = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
        loss_sum = torch.zeros(clients, dtype=starts.dtype)
        for s in range(positions.shape[1]):
            # the clients with a minibatch at step s: a prefix of the rows
            k = int((steps_of > s).sum())
            if k == 0:
                break
            weights, grads = self._views(w, clients, k), self._views(grad, clients, k)
            x = data_x[positions[:k, s]].movedim(1, -1).contiguous()  # (k, *sample shape, width)
            y = data_y[positions[:k, s]]
            factors = ([] if keep is None
                       else [site[:k, s].movedim(1, -1).to(starts.dtype).div_(1 - p)
                             for (p, _), site in zip(sites, keep)])
            for layer in layers:
                x = layer.forward(x, weights, factors)
            loss, x = _nll_and_gradient(x, y, mask[:k, s], scales[:k])
            for layer in reversed(layers):  # the first layer computes no input gradient
                x = layer.backward(x, weights, grads)
            if proximal.mu:  # its gradient, and its value at the step's start
                for w_part, start_part, grad_part in zip(self._views(w, clients, k),
                                                         self._views(start, clients, k), grads):
                    gap = w_part - start_part
                    grad_part.add_(proximal.gradient(gap))
                    loss = loss + proximal.value(gap.flatten(1), dim=1)
            loss_sum[:k] += loss
            for w_part, buf_part, grad_part in zip(*(self._blocks(t, clients, k)
                                                     for t in (w, buf, grad))):
                if s == 0:
                    buf_part.copy_(grad_part)
                else:
                    buf_part.mul_(momentum).add_(grad_part)
                w_part.sub_(buf_part * lr)
        return _client_major(w - start, self.sizes, clients), loss_sum

    def _views(self, buffer: torch.Tensor, clients: int, k: int) -> list[torch.Tensor]:
        """The parameters of the first k clients in a layer-major buffer of ``clients``: (k, *shape)
        each."""
        views, offset = [], 0
        for size, shape in zip(self.sizes, self.shapes):
            views.append(buffer[offset : offset + clients * size].view(clients, *shape)[:k])
            offset += clients * size
        return views

    def _blocks(self, buffer: torch.Tensor, clients: int, k: int) -> list[torch.Tensor]:
        """The first k clients' part of a layer-major buffer: the whole buffer when all clients are
        active (one operation), else one block per parameter."""
        return ([buffer] if k == clients
                else [view.reshape(k, -1) for view in self._views(buffer, clients, k)])


def _layer_major(flat: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Clients' flat weights (clients, P) as one layer-major buffer: each parameter of all clients,
    in turn."""
    return torch.cat([part.reshape(-1) for part in flat.split(sizes, dim=1)])


def _client_major(buffer: torch.Tensor, sizes: list[int], clients: int) -> torch.Tensor:
    """A layer-major buffer back as (clients, P), each row in the order of the model's
    parameters."""
    return torch.cat([part.view(clients, -1)
                      for part in buffer.split([clients * size for size in sizes])], dim=1)


def _nll_and_gradient(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                      scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax + NLL of (clients, classes, width) logits: per client, scale * the mean NLL over
    the minibatch's real samples (``mask``), and its gradient with respect to the logits."""
    log_p = torch.log_softmax(logits, dim=1)
    nll = -log_p.gather(1, y.unsqueeze(1)).squeeze(1)  # (clients, width)
    real = mask.sum(dim=1).clamp(min=1)
    loss = scales * (nll * mask).sum(dim=1) / real
    # d loss / d nll, (clients, 1, width)
    weight = (scales[:, None] * mask / real[:, None]).unsqueeze(1)
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
        self.bytes_per_client = 4 * width * (
            channels * k * k * self.out_shape[1] * self.out_shape[2]
            + (2 if input_gradient else 0) * channels * height * width_)
        self._cols = self._input_grad = self._tap_grad = torch.empty(0)

    def forward(self, x, weights, factors):
        clients, (channels, _, _), (out_channels, oh, ow), k = (x.shape[0], self.in_shape,
                                                                self.out_shape, self.k)
        if self._cols.shape[0] < clients:  # buffers reused from step to step (no page faults)
            self._cols = torch.empty(clients, channels, k, k, oh, ow, self.width, dtype=self.dtype)
            self._out = torch.empty(clients, out_channels, oh * ow * self.width, dtype=self.dtype)
        cols = self._cols[:clients]
        # im2col as one copy: x seen with a (kh, kw, row, column) window for each output position
        s_client, s_channel, s_row, s_column, s_sample = x.stride()
        windows = x.as_strided((clients, channels, k, k, oh, ow, self.width),
                               (s_client, s_channel, s_row, s_column, s_row, s_column, s_sample),
                               x.storage_offset())
        cols.copy_(windows)
        self.cols = cols.view(clients, channels * k * k, -1)
        weight, bias = (weights[i] for i in self.params)
        out = torch.baddbmm(bias.unsqueeze(2), weight.view(clients, out_channels, -1), self.cols,
                            out=self._out[:clients])
        return out.view(clients, out_channels, oh, ow, self.width)

    def backward(self, grad_out, weights, grads):
        clients, (channels, height, width_), (out_channels, oh, ow), k = (
            grad_out.shape[0], self.in_shape, self.out_shape, self.k)
        grad_out = grad_out.reshape(clients, out_channels, -1)
        weight = weights[self.params[0]].view(clients, out_channels, -1)
        torch.bmm(grad_out, self.cols.transpose(1, 2),
                  out=grads[self.params[0]].view(clients, out_channels, -1))
        torch.sum(grad_out, dim=2, out=grads[self.params[1]])
        if not self.input_gradient:
            return None
        if self._input_grad.shape[0] < clients:
            self._input_grad = torch.empty(clients, channels, height, width_, self.width,
                                           dtype=self.dtype)
            self._tap_grad = torch.empty(clients, channels, oh * ow * self.width, dtype=self.dtype)
        grad_in, tap_grad = self._input_grad[:clients].zero_(), self._tap_grad[:clients]
        # tap by tap: each (kh, kw)'s part of the im2col gradient, a block that stays in the cache,
        # added where its columns came from: the whole product + col2im's dot products and, tap
        # after tap, its additions (with this machine's MKL the same bits for both CNNs)
        # (k, k, clients, C, out)
        taps = weight.view(clients, out_channels, channels, k,
                           k).permute(3, 4, 0, 2, 1).contiguous()
        for kh in range(k):
            for kw in range(k):
                torch.bmm(taps[kh, kw], grad_out, out=tap_grad)
                grad_in[:, :, kh : kh + oh, kw : kw + ow].add_(
                    tap_grad.view(clients, channels, oh, ow, self.width))
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
        # channels-last, as its input
        pooled, self.indices = F.max_pool2d(self.images, 2, return_indices=True)
        return pooled.permute(0, 2, 3, 1).reshape(x.shape[0], *self.out_shape, self.width)

    def backward(self, grad_out, weights, grads):
        clients = grad_out.shape[0]
        # reused from step to step: a fresh one page-faults as it is zeroed
        if self._grad_in.shape[0] < clients:
            self._grad_in = torch.empty(clients, *self.in_shape, self.width, dtype=grad_out.dtype)
        grad_in = self._grad_in[:clients]
        torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
            _as_images(grad_out.contiguous()), self.images, [2, 2], [2, 2], [0, 0], [1, 1],
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
        # (clients, *site shape, width); none: dropout off
        self.factor = factors[self.site] if factors else None
        return x if self.factor is None else x.mul_(self.factor)

    def backward(self, grad_out, weights, grads):
        return grad_out if self.factor is None else grad_out.mul_(self.factor)


class _Linear:
    """A linear layer on (clients, features, width) (images flattened channel-major, as
    ``flatten(1)``)."""

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
        return torch.bmm(weights[self.params[0]].transpose(1, 2),
                         grad_out).view(grad_out.shape[0], *self.in_shape, self.width)
