"""The paper's models (Tables 2-4), the Adult logistic regression, the Shakespeare LSTM, and two
small models for the offline datasets.

A model with dropout names its ``dropout_sites`` (rate, per-sample mask shape) and takes the masks
as an argument (``keep``), so that the trainer draws them from each client's own generator
(``fedmgda.client``): a client's masks do not depend on which clients share its computation.
Every classifier returns log-probabilities; the loss everywhere is the mean negative
log-likelihood (= cross-entropy), as in the authors' code. No model has buffers (no BatchNorm),
so a model's state is exactly its parameters: the simulator keeps the global model as one flat
vector and the client update works on a dict of parameters through ``torch.func.functional_call``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# how a Conv2d computes, the default first (fedmgda.catalog keeps the names too)
CONVOLUTIONS = ("torch", "im2col")


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (the paper's models': stride 1, no padding) that computes either as torch's
    convolution (``conv: torch``, the default: cuDNN on a GPU, oneDNN on a CPU) or as im2col and
    one matrix product (``conv: im2col``: ``F.unfold``, then the weight times every image's
    columns, cuBLAS on a GPU). The function is the same up to float rounding.

    Why both: under ``vmap`` over clients, each with its own weights, torch's convolution becomes a
    grouped convolution, one group per client. On an H200, cuDNN ran its weight gradient as one
    kernel per client per step (docs/performance.md, "Lower bounds and profiles"). As matrix
    products, a step's convolution is one batched product over all clients. Which is faster is a
    measurement: ``bench_rounds.py --also conv=im2col``.
    """

    im2col = False  # set by ``build_model`` from the run config's ``conv``

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.im2col:
            return super().forward(x)
        assert (self.stride == (1, 1) and self.padding == (0, 0) and self.dilation == (1, 1)
                and self.groups == 1)
        height, width = x.shape[-2] - self.kernel_size[0] + 1, x.shape[-1] - self.kernel_size[1] + 1
        columns = F.unfold(x, self.kernel_size)  # (batch, in channels x kernel, height x width)
        out = torch.matmul(self.weight.flatten(1), columns) + self.bias[:, None]
        return out.unflatten(-1, (height, width))


class CNNCifar(nn.Module):
    """CIFAR-10 CNN, paper Table 2 / ``CNNCifar`` (797 962 parameters).

    conv5x5(3->64)-ReLU-pool-LRN, conv5x5(64->64)-ReLU-LRN-pool, FC 1600-384-192-10. LRN size 2
    with PyTorch's defaults (alpha 1e-4, beta 0.75, k 1), as in the authors' code.
    """

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = Conv2d(3, 64, 5)
        self.conv2 = Conv2d(64, 64, 5)
        self.fc1 = nn.Linear(64 * 5 * 5, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.local_response_norm(max_pool2(F.relu(self.conv1(x))), size=2)
        x = max_pool2(F.local_response_norm(F.relu(self.conv2(x)), size=2))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=1)


def max_pool2(x: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(x, 2)``, the same values. On the CPU without autograd (evaluation) it is two
    element-wise maxima, columns then rows: torch's CPU pooling kernel takes about ten times as
    long on these small maps (F-MNIST's 256 x 10 x 24 x 24: 8 ms against 0.8 ms on one thread), and
    a maximum is exact in any order (NaN propagates in both). With autograd, or on a GPU, it is
    ``F.max_pool2d`` itself, whose backward the training paths use."""
    if x.device.type != "cpu" or torch.is_grad_enabled():
        return F.max_pool2d(x, 2)
    # an odd last row or column is dropped, as the pooling floors
    x = x[..., : x.shape[-2] // 2 * 2, : x.shape[-1] // 2 * 2]
    columns = torch.maximum(x[..., 0::2], x[..., 1::2])
    return torch.maximum(columns[..., 0::2, :], columns[..., 1::2, :])


def dropout(x: torch.Tensor, model: nn.Module, site: int,
            keep: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
    """Dropout at ``model.dropout_sites[site]`` (rate p, per-sample mask shape): with ``keep``, the
    trainer's masks (``fedmgda.minibatches.Minibatches.dropout_masks``: True = kept, drawn from the
    client's own generator), the kept values scaled by 1 / (1 - p) as ``F.dropout`` does; without,
    ``F.dropout`` on torch's global generator when the model is in training mode (a module used on
    its own), nothing in eval mode. Whole channels where the mask's trailing sizes are 1
    (Dropout2d)."""
    p, shape = model.dropout_sites[site]
    if keep is not None:
        return x * keep[site] / (1 - p)
    if not model.training:
        return x
    return (F.dropout2d(x, p, True) if len(shape) == 3 and shape[1:] == (1, 1)
            else F.dropout(x, p, True))


class CNNFashion(nn.Module):
    """F-MNIST CNN, paper Table 3 / the code's ``CNNMnist`` (21 840 parameters).

    conv5x5(1->10)-pool-ReLU, conv5x5(10->20)-Dropout2d(0.5)-pool-ReLU, FC 320-50-ReLU-dropout-10.
    """

    # Dropout2d keeps or drops conv2's 20 channels whole; dropout after fc1 its 50 units
    dropout_sites = ((0.5, (20, 1, 1)), (0.5, (50,)))
    # ``forward`` as a sequence of layer operations, for the CPU fast path
    # (fedmgda.fastpaths.ConvNetSteps): each conv and linear takes the next (weight, bias), each
    # dropout the next site; log_softmax last
    layer_ops = ("conv", "pool", "relu", "conv", "dropout", "pool", "relu", "linear", "relu",
                 "dropout", "linear")

    def __init__(self, num_classes: int = 10, in_channels: int = 1):
        super().__init__()
        self.conv1 = Conv2d(in_channels, 10, 5)
        self.conv2 = Conv2d(10, 20, 5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x: torch.Tensor,
                keep: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        x = F.relu(max_pool2(self.conv1(x)))
        x = F.relu(max_pool2(dropout(self.conv2(x), self, 0, keep)))
        x = dropout(F.relu(self.fc1(x.flatten(1))), self, 1, keep)
        return F.log_softmax(self.fc2(x), dim=1)


class CNNFemnist(nn.Module):
    """FEMNIST CNN, paper Table 4 (1 206 590 parameters).

    conv3x3(1->32)-ReLU, conv3x3(32->64)-ReLU, pool, dropout 0.25, FC 9216-128-ReLU, dropout 0.5,
    FC 62. Table 4 leaves the activations after conv1 and dense-128 blank; we use ReLU there, as
    in Reddi et al. (2020), whose model the paper says it uses.
    """

    def __init__(self, num_classes: int = 62):
        super().__init__()
        self.conv1 = Conv2d(1, 32, 3)
        self.conv2 = Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, num_classes)

    # the pooled feature map, then fc1's units
    dropout_sites = ((0.25, (64, 12, 12)), (0.5, (128,)))
    # as CNNFashion's
    layer_ops = ("conv", "relu", "conv", "relu", "pool", "dropout", "linear", "relu", "dropout",
                 "linear")

    def forward(self, x: torch.Tensor,
                keep: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = dropout(max_pool2(x), self, 0, keep).flatten(1)
        x = dropout(F.relu(self.fc1(x)), self, 1, keep)
        return F.log_softmax(self.fc2(x), dim=1)


class ShakespeareLSTM(nn.Module):
    """Next-character LSTM of the q-FFL/FedProx Shakespeare setup: 80-symbol embedding of
    dimension 8, two stacked LSTM layers of 256 units, dense 80 on the last time step.

    The recurrence is written out with explicit weights (the same parameter shapes as
    ``nn.LSTM``; ``LSTMLayer``, its backward too) so that it runs under ``torch.func.vmap`` for
    batched client training.
    """

    def __init__(self, num_classes: int = 80, vocab_size: int = 80, embed_dim: int = 8,
                 hidden: int = 256, layers: int = 2):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in range(self.lstm.num_layers):
            w_ih = getattr(self.lstm, f"weight_ih_l{layer}")
            w_hh = getattr(self.lstm, f"weight_hh_l{layer}")
            bias = getattr(self.lstm, f"bias_ih_l{layer}") + getattr(self.lstm, f"bias_hh_l{layer}")
            h = LSTMLayer.apply(h, w_ih, w_hh, bias)[0]
        return F.log_softmax(self.fc(h[:, -1]), dim=1)

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """The same function through ``nn.LSTM``'s own kernels (cuDNN's fused recurrence on a
        GPU). One model only: it does not run under ``torch.func.vmap``. The lower bound of a
        round (``benchmarks/bench_rounds.py --bound``) uses it."""
        out, _ = self.lstm(self.embed(x))
        return F.log_softmax(self.fc(out[:, -1]), dim=1)


class LSTMLayer(torch.autograd.Function):
    """One LSTM layer over a (batch, time, features) sequence, gate order i, f, g, o as
    ``nn.LSTM``, with its backward through time written out. ``apply`` returns the hidden states
    (batch, time, hidden) first; the other outputs are what the backward reads.

    Autograd through the recurrence differentiates each time step's operations one by one and
    adds each step's weight gradients to a running sum: on a GPU, thousands of small kernels a
    training step of 80 time steps. Here the time loops hold only the recurrence. The forward
    loop runs one product and seven element-wise operations a step, the backward loop one product
    and five. The gates' derivatives are computed for all steps before the backward loop, and the
    weight and input gradients after it, as one product each over all steps
    (``benchmarks/bench_lstm.py`` counts the operations of both versions and times them).

    The forward agrees with the autograd version's up to float rounding: the input projection and
    the product are no longer summed in one ``addmm``, and the sigmoid runs on all four gate blocks
    at once. The gradients agree up to float rounding too: the time steps are summed in another
    order (tests/test_models.py, float64).
    ``generate_vmap_rule``: ``torch.func.vmap`` batches both loops like any other operations.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, w_ih, w_hh, bias):
        batch, hidden = x.shape[0], w_hh.shape[1]
        # (time, batch, 4 hidden): every step's input projection
        gates_x = torch.movedim(x @ w_ih.T + bias, 1, 0)
        h = x.new_zeros(batch, hidden)
        c = x.new_zeros(batch, hidden)
        hs, gates, gs, cs, tanh_cs = [], [], [], [], []
        for gate_x in gates_x.unbind(0):
            # not addmm: vmap splits it into four operations (product, scale, copy, add)
            z = gate_x + h @ w_hh.T
            gate = torch.sigmoid(z)  # i, f, o (g's block unused: g is a tanh)
            g = torch.tanh(z[:, 2 * hidden:3 * hidden])
            c = torch.addcmul(gate[:, hidden:2 * hidden] * c, gate[:, :hidden], g)
            tanh_c = torch.tanh(c)
            h = gate[:, 3 * hidden:] * tanh_c
            for saved, value in zip((hs, gates, gs, cs, tanh_cs), (h, gate, g, c, tanh_c)):
                saved.append(value)
        return torch.stack(hs, dim=1), *(torch.stack(saved) for saved in (gates, gs, cs, tanh_cs))

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w_ih, w_hh, _ = inputs
        h_seq, *steps = output  # steps: gates, g, c, tanh(c), each (time, batch, ...)
        ctx.mark_non_differentiable(*steps)
        ctx.save_for_backward(x, w_ih, w_hh, h_seq, *steps)

    @staticmethod
    def backward(ctx, grad_h_seq, *_):
        x, w_ih, w_hh, h_seq, gates, g, c, tanh_c = ctx.saved_tensors
        hidden = w_hh.shape[1]
        i, f, o = gates[..., :hidden], gates[..., hidden:2 * hidden], gates[..., 3 * hidden:]
        c_prev = torch.cat([torch.zeros_like(c[:1]), c[:-1]])
        # d z / d c for the blocks i, f, g and d z / d h for o, every step at once: z's gradient
        # at step t is cat([dc, dc, dc, dh]) * partials[t]
        partials = torch.cat([g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g),
                              tanh_c * o * (1 - o)], dim=-1)
        dc_dh = o * (1 - tanh_c * tanh_c)
        grad_h = torch.movedim(grad_h_seq, 1, 0)
        dh = grad_h[-1]
        dc = dh * dc_dh[-1]
        dzs = []
        for t in range(gates.shape[0] - 1, -1, -1):
            dz = torch.cat([dc, dc, dc, dh], dim=-1) * partials[t]
            dzs.append(dz)
            if t:
                dh = grad_h[t - 1] + dz @ w_hh
                dc = torch.addcmul(dc * f[t], dh, dc_dh[t - 1])
        dz = torch.stack(dzs[::-1], dim=1).flatten(0, 1)  # (batch * time, 4 hidden)
        h_prev = torch.cat([torch.zeros_like(h_seq[:, :1]), h_seq[:, :-1]], dim=1)
        grad_x = (dz @ w_ih).reshape(x.shape) if ctx.needs_input_grad[0] else None
        return grad_x, dz.T @ x.flatten(0, 1), dz.T @ h_prev.flatten(0, 1), dz.sum(0)


class LogisticRegression(nn.Module):
    """Multinomial logistic regression (Adult: 99 -> 2, 200 parameters; Synthetic: 60 -> 10)."""

    # log_softmax(x W^T + b): batched training uses fastpaths.LinearSoftmaxSteps
    linear_softmax = True

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # logits computed classes-first: on the CPU, log_softmax over a leading dimension is
        # several times faster than over a short trailing one (Adult: 2 classes); same values
        logits_t = torch.addmm(self.linear.bias[:, None], self.linear.weight,
                               x.flatten(1).to(self.linear.weight.dtype).T)
        return F.log_softmax(logits_t, dim=0).T.contiguous()


class DigitsMLP(nn.Module):
    """A small MLP for scikit-learn's 8x8 digits (offline profile): 64-64-ReLU-10."""

    def __init__(self, in_features: int = 64, num_classes: int = 10, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


class MLPFashion(nn.Module):
    """The MLP of FedMDFG's F-MNIST experiments (Pan et al., AAAI 2023; zibinpan/FedMDFG
    ``fedplat/model/MLP.py`` L14-24): flattened input, FC 784-200-ReLU-200-ReLU-10, no dropout,
    PyTorch's default initialisation (199 210 parameters). Their forward returns the logits for
    ``torch.nn.CrossEntropyLoss`` (``fedplat/main.py`` L66); log_softmax + NLL here is the same
    loss.
    """

    def __init__(self, in_features: int = 784, num_classes: int = 10, hidden: int = 200):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc2(F.relu(self.fc1(x.flatten(1)))))
        return F.log_softmax(self.fc3(x), dim=1)


def _flat_features(input_shape: tuple[int, ...]) -> int:
    size = 1
    for dim in input_shape:
        size *= dim
    return size


MODELS: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {
    "cnn_cifar": lambda shape, classes: CNNCifar(classes),
    "cnn_fmnist": lambda shape, classes: CNNFashion(classes, in_channels=shape[0]),
    "cnn_femnist": lambda shape, classes: CNNFemnist(classes),
    "lstm_shakespeare": lambda shape, classes: ShakespeareLSTM(classes),
    "logreg": lambda shape, classes: LogisticRegression(_flat_features(shape), classes),
    "mlp_digits": lambda shape, classes: DigitsMLP(_flat_features(shape), classes),
    "mlp_fmnist": lambda shape, classes: MLPFashion(_flat_features(shape), classes),
}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, init: str = "torch",
                conv: str = "torch") -> nn.Module:
    """The model registered as ``name`` for samples of ``input_shape`` and ``num_classes`` outputs,
    initialised by PyTorch's defaults (``init`` "torch") or by ``glorot_init`` ("glorot"), its
    convolutions computed as ``conv`` says (``Conv2d``; a model without any ignores it)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    if conv not in CONVOLUTIONS:
        raise ValueError(f"unknown conv {conv!r}; known: {', '.join(CONVOLUTIONS)}")
    model = MODELS[name](tuple(input_shape), num_classes)
    for layer in model.modules():
        if isinstance(layer, Conv2d):
            layer.im2col = conv == "im2col"
    return glorot_init(model) if init == "glorot" else model


def convolution(model: nn.Module) -> str | None:
    """How the model's convolutions compute (``CONVOLUTIONS``), None for a model without any."""
    layers = [layer for layer in model.modules() if isinstance(layer, Conv2d)]
    return ("im2col" if layers[0].im2col else "torch") if layers else None


@torch.no_grad()
def glorot_init(model: nn.Module) -> nn.Module:
    """TensorFlow's default initialisation of ``tf.layers.dense`` / ``conv2d``, which the q-FFL
    code's models use (fair_flearn flearn/models/adult/lr.py, ``tf.layers.dense(inputs=features,
    units=num_classes)``): every Linear and Conv weight glorot-uniform, U(-b, b) with b = sqrt(6 /
    (fan_in + fan_out)) (``torch.nn.init.xavier_uniform_``), every bias zero. Other layers
    (embedding, LSTM) keep PyTorch's. Drawn from torch's global generator, after PyTorch's own
    initialisation, in module order: the same seed gives the same model."""
    for layer in model.modules():
        if isinstance(layer, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
