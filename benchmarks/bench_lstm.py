"""The Shakespeare LSTM's batched training step: the written-out backward (``models.LSTMLayer``)
beside autograd through the same recurrence and beside a candidate (``WavefrontLSTM``), in one
process.

    python benchmarks/bench_lstm.py                          # CPU, 4 clients
    python benchmarks/bench_lstm.py --device cuda --clients 31 1 248 --repeat 20

One step is what ``VmapSteps`` runs per minibatch: the gradient of each client's mean negative
log-likelihood on 10 sequences of 80 characters, ``torch.func.vmap``-ed over ``--clients``
clients, each with its own weights. The versions compute the same function (the printed gradient
differences are float rounding). Printed per version: the median time of
``--repeat`` steps after two untimed ones, the operations one step runs (torch.profiler: the
aten operations that compute, views and casts left out; on a GPU also the kernels it launches),
the written-out version's speed-up over autograd, and the wavefront's over the written-out. Last,
the step's lower bound (``bound``): one model's
gradient on all the clients' sequences as one batch through ``nn.LSTM``'s kernels (cuDNN on a
GPU), and the written-out step's ratio to it. Further ``--clients`` are timed after that, a line
each: where a step is bound by its kernel launches its time hardly grows with the clients, and the
wavefront's fewer, larger products pay; where it is bound by compute or memory, its extra work
costs. Eager steps, no CUDA graph: a graph replays the same kernels without their launch cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from torch.profiler import ProfilerActivity, profile

from fedmgda.models import ShakespeareLSTM

# operations that move no data: left out of the count of computing operations
METADATA_OPS = {
    "as_strided", "view", "reshape", "_reshape_alias", "_unsafe_view", "expand", "t", "transpose",
    "permute", "numpy_T", "movedim", "select", "slice", "narrow", "unbind", "split", "chunk",
    "split_with_sizes", "squeeze", "unsqueeze", "alias", "detach", "resolve_conj", "resolve_neg",
    "matmul", "mm", "linear", "to", "_to_copy", "empty", "empty_strided", "empty_like", "zeros",
    "zeros_like", "new_zeros", "new_empty", "flatten", "unflatten", "lift_fresh", "result_type",
}


def autograd_layer(x, w_ih, w_hh, bias):
    """The recurrence differentiated by autograd: the package's former version, as it
    was (its ``addmm`` is four operations under vmap, ``LSTMLayer``'s sum two)."""
    hidden = w_hh.shape[1]
    gates_x = x @ w_ih.T + bias
    h = x.new_zeros(x.shape[0], hidden)
    c = x.new_zeros(x.shape[0], hidden)
    outputs = []
    for gate_x in gates_x.unbind(1):
        i, f, g, o = torch.addmm(gate_x, h, w_hh.T).chunk(4, dim=1)
        c = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def forward_with(model: ShakespeareLSTM, layer):
    """``ShakespeareLSTM.forward`` with ``layer`` for its LSTM layers, on a dict of parameters."""
    def forward(params, x):
        h = F.embedding(x, params["embed.weight"])
        for k in range(model.lstm.num_layers):
            h = layer(h, params[f"lstm.weight_ih_l{k}"], params[f"lstm.weight_hh_l{k}"],
                      params[f"lstm.bias_ih_l{k}"] + params[f"lstm.bias_hh_l{k}"])
        return F.log_softmax(F.linear(h[:, -1], params["fc.weight"], params["fc.bias"]), dim=1)
    return forward


class WavefrontLSTM(torch.autograd.Function):
    """A candidate, not yet the package's: all layers of a stacked LSTM in one time loop.
    Iteration k runs layer l at time k - l, so the layers' recurrent products are one product with
    a block matrix (``wavefront_weights``) and their element-wise operations one operation each:
    T + L - 1 iterations of ``models.LSTMLayer``'s loop body instead of L T. The price: the upper
    layers' input products move into the loop, and the block matrix's zero blocks are multiplied
    too (two layers: the loop's products do twice the work, and read twice the weights).

    ``apply(gates_x, w_block, upper_bias)``: layer 0's input projection with its biases (batch,
    time, 4 hidden), the block matrix (L hidden, 4 L hidden), the upper layers' summed biases
    ((L - 1) 4 hidden). Returns the top layer's hidden states (batch, time, hidden) first, then
    what the backward reads. An iteration where a layer does not run saves zero gates for it, so
    the backward runs every iteration on all layers: a zero gate passes no gradient."""

    generate_vmap_rule = True

    @staticmethod
    def forward(gates_x, w_block, upper_bias):
        batch, steps, hidden = gates_x.shape[0], gates_x.shape[1], gates_x.shape[2] // 4
        layers = w_block.shape[0] // hidden
        iterations = steps + layers - 1
        # each iteration's addend: layer 0's projection (zero once it is done), the upper biases
        addend = torch.movedim(torch.cat([F.pad(gates_x, (0, 0, 0, layers - 1)),
                                          upper_bias.expand(batch, iterations, -1)], -1), 1, 0)
        # the states of the layers that ran last, from layer ran
        h = c = gates_x.new_zeros(batch, 0, hidden)
        ran = 0
        saved = []
        for k in range(iterations):
            low, high = max(0, k - steps + 1), min(layers - 1, k)  # the layers running now
            z = addend[k, :, 4 * hidden * low:4 * hidden * (high + 1)]
            if k:  # the last states: each layer's own and the next layer's input
                z = z + h.flatten(1) @ w_block[hidden * ran:hidden * (ran + h.shape[1]),
                                               4 * hidden * low:4 * hidden * (high + 1)]
            z = z.unflatten(1, (high + 1 - low, 4 * hidden))
            # the running layers' previous cell states: none for a layer done, zero for one starting
            c = c[:, low - ran:]
            if c.shape[1] < high + 1 - low:
                c = F.pad(c, (0, 0, 0, high + 1 - low - c.shape[1]))
            gate = torch.sigmoid(z)
            g = torch.tanh(z[..., 2 * hidden:3 * hidden])
            c = torch.addcmul(gate[..., hidden:2 * hidden] * c, gate[..., :hidden], g)
            tanh_c = torch.tanh(c)
            h = gate[..., 3 * hidden:] * tanh_c
            pad = (0, 0, low, layers - 1 - high)
            saved.append([F.pad(t, pad) if pad[2] or pad[3] else t
                          for t in (h, gate, g, c, tanh_c)])
            ran = low
        # (iterations, batch, layers, ...)
        hs, gates, gs, cs, tanh_cs = (torch.stack(column) for column in zip(*saved))
        return torch.movedim(hs[layers - 1:, :, -1], 0, 1), hs, gates, gs, cs, tanh_cs

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, w_block, _ = inputs
        ctx.mark_non_differentiable(*output[1:])
        ctx.save_for_backward(w_block, *output[1:])

    @staticmethod
    def backward(ctx, grad_top, *_):
        w_block, hs, gates, g, c, tanh_c = ctx.saved_tensors
        iterations, batch, layers, hidden = hs.shape
        steps = iterations - layers + 1
        i, f, o = gates[..., :hidden], gates[..., hidden:2 * hidden], gates[..., 3 * hidden:]
        # a layer's previous time is the previous iteration
        c_prev = torch.cat([torch.zeros_like(c[:1]), c[:-1]])
        partials = torch.cat([g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g),
                              tanh_c * o * (1 - o)], dim=-1)
        dc_dh = o * (1 - tanh_c * tanh_c)
        grad_h = F.pad(torch.movedim(grad_top, 1, 0)[:, :, None],
                       (0, 0, layers - 1, 0, 0, 0, layers - 1, 0))
        dh = grad_h[-1]
        dc = dh * dc_dh[-1]
        dzs = []
        for k in range(iterations - 1, -1, -1):
            dz = torch.cat([dc, dc, dc, dh], dim=-1) * partials[k]
            dzs.append(dz)
            if k:
                dh = grad_h[k - 1] + (dz.flatten(1) @ w_block.T).unflatten(1, (layers, hidden))
                dc = torch.addcmul(dc * f[k], dh, dc_dh[k - 1])
        dz = torch.stack(dzs[::-1])  # (iterations, batch, layers, 4 hidden)
        h_prev = torch.cat([torch.zeros_like(hs[:1]), hs[:-1]])
        grad_w_block = h_prev.flatten(2).flatten(0, 1).T @ dz.flatten(2).flatten(0, 1)
        return (torch.movedim(dz[:steps, :, 0], 0, 1), grad_w_block,
                dz[:, :, 1:].sum((0, 1)).flatten())


def wavefront_weights(w_ih: list, w_hh: list) -> torch.Tensor:
    """``WavefrontLSTM``'s block matrix of L layers' weights: block (l, l) is w_hh[l]^T, block
    (l - 1, l) is w_ih[l]^T (layer l - 1's state is layer l's input), the rest zero."""
    layers, hidden = len(w_hh), w_hh[0].shape[1]
    zero = w_hh[0].new_zeros(hidden, 4 * hidden)
    rows = [[w_hh[row].T if col == row else w_ih[col].T if col == row + 1 else zero
             for col in range(layers)] for row in range(layers)]
    return torch.cat([torch.cat(blocks, dim=1) for blocks in rows])


def wavefront_forward(model: ShakespeareLSTM):
    """``ShakespeareLSTM.forward`` with ``WavefrontLSTM`` for its layers, on a dict of
    parameters."""
    layers = model.lstm.num_layers

    def forward(params, x):
        weight = [params[f"lstm.weight_ih_l{k}"] for k in range(layers)]
        bias = [params[f"lstm.bias_ih_l{k}"] + params[f"lstm.bias_hh_l{k}"] for k in range(layers)]
        gates_x = F.embedding(x, params["embed.weight"]) @ weight[0].T + bias[0]
        w_block = wavefront_weights(weight, [params[f"lstm.weight_hh_l{k}"] for k in range(layers)])
        h = WavefrontLSTM.apply(gates_x, w_block,
                                torch.cat(bias[1:]) if layers > 1 else bias[0][:0])[0]
        return F.log_softmax(F.linear(h[:, -1], params["fc.weight"], params["fc.bias"]), dim=1)
    return forward


def batched_gradient(forward):
    """Each client's gradient of its mean loss, vmap-ed over clients."""
    return vmap(grad(lambda params, x, y: F.nll_loss(forward(params, x), y)))


def one_model_step(model: ShakespeareLSTM, params, x, y):
    """The step's lower bound: one model's gradient on all the clients' sequences as one batch,
    through ``nn.LSTM``'s own kernels (``forward_fused``: cuDNN on a GPU), as bench_rounds --bound
    takes it. ``params`` (the clients' weights) is not read."""
    loss = F.nll_loss(model.forward_fused(x.flatten(0, 1)), y.flatten())
    return torch.autograd.grad(loss, list(model.parameters()))


def count_operations(step, args, device: str) -> tuple[int, int | None]:
    """(computing aten operations, CUDA kernels or None) of one call of ``step``."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        step(*args)
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    ops = sum(1 for e in events if e.name.startswith("aten::") and e.name[6:] not in METADATA_OPS)
    kernels = None
    if device == "cuda":
        kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return ops, kernels


def time_step(step, args, device: str, repeat: int) -> float:
    """Median seconds of one step, after two untimed ones."""
    times = []
    for k in range(repeat + 2):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        if k >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_inputs(model: ShakespeareLSTM, clients: int, batch: int, device: str):
    """Every client's weights (the model's), sequences and next characters."""
    params = {name: p.detach().expand(clients, *p.shape).clone()
              for name, p in model.named_parameters()}
    x = torch.randint(0, 80, (clients, batch, 80), device=device)
    return params, x, torch.randint(0, 80, (clients, batch), device=device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, nargs="+", default=[4],
                        help="clients of the step; more than one: the others timed too, one line "
                        "each")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = ShakespeareLSTM().to(args.device)
    versions = {"autograd": batched_gradient(forward_with(model, autograd_layer)),
                "written-out": batched_gradient(lambda params,
                                                x: functional_call(model, params, (x,))),
                "wavefront": batched_gradient(wavefront_forward(model)),
                "bound": partial(one_model_step, model)}
    clients, *more = args.clients
    inputs = step_inputs(model, clients, args.batch, args.device)
    print(f"device {args.device} "
          f"({torch.cuda.get_device_name() if args.device == 'cuda' else torch.get_num_threads()} "
          f"{'' if args.device == 'cuda' else 'threads'}), torch {torch.__version__}; {clients} "
          f"clients x {args.batch} sequences of 80 characters, one vmap-ed training step")
    grads = {name: versions[name](*inputs) for name in ("autograd", "written-out", "wavefront")}
    for name in ("written-out", "wavefront"):
        difference = max((grads["autograd"][k] - grads[name][k]).abs().max().item()
                         for k in grads[name])
        print(f"largest gradient difference, {name} vs autograd: {difference:.2e}")
    seconds = {}
    print(f"{'version':<12} {'ms a step':>10} {'operations':>11} {'CUDA kernels':>13}")
    for name, step in versions.items():
        ops, kernels = count_operations(step, inputs, args.device)
        seconds[name] = time_step(step, inputs, args.device, args.repeat)
        print(f"{name:<12} {1000 * seconds[name]:>10.2f} {ops:>11d} "
              f"{'-' if kernels is None else kernels:>13}")
    print("speed-up of the written-out backward: "
          f"{seconds['autograd'] / seconds['written-out']:.2f}x")
    print("speed-up of the wavefront over the written-out: "
          f"{seconds['written-out'] / seconds['wavefront']:.2f}x")
    print(f"written-out step / bound: {seconds['written-out'] / seconds['bound']:.2f}x")
    # launch-bound steps cost the same at any width, compute-bound ones grow with it
    for width in more:
        inputs = step_inputs(model, width, args.batch, args.device)
        ms = {name: 1000 * time_step(versions[name], inputs, args.device, args.repeat)
              for name in ("written-out", "wavefront", "bound")}
        print(f"{width} clients: "
              + ", ".join(f"{name} {value:.2f} ms" for name, value in ms.items())
              + f"; wavefront speed-up {ms['written-out'] / ms['wavefront']:.2f}x")


if __name__ == "__main__":
    main()
