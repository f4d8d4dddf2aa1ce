"""The Shakespeare LSTM's batched training step: the written-out backward (``models.LSTMLayer``)
beside autograd through the same recurrence, in one process.

    python benchmarks/bench_lstm.py                          # CPU, 4 clients
    python benchmarks/bench_lstm.py --device cuda --clients 31 --repeat 20

One step is what ``VmapSteps`` runs per minibatch: the gradient of each client's mean negative
log-likelihood on 10 sequences of 80 characters, ``torch.func.vmap``-ed over ``--clients``
clients, each with its own weights. Both versions compute the same function (the printed gradient
difference is float rounding). Printed per version: the median time of
``--repeat`` steps after two untimed ones, the operations one step runs (torch.profiler: the
aten operations that compute, views and casts left out; on a GPU also the kernels it launches),
and the written-out version's speed-up. Last, the step's lower bound (``bound``): one model's
gradient on all the clients' sequences as one batch through ``nn.LSTM``'s kernels (cuDNN on a
GPU), and the written-out step's ratio to it. Eager steps, no CUDA graph: a graph replays the
same kernels without their launch cost.
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
    """The recurrence differentiated by autograd: the package's version until 2026-11-27, as it
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = ShakespeareLSTM().to(args.device)
    params = {name: p.detach().expand(args.clients, *p.shape).clone() for name, p in model.named_parameters()}
    x = torch.randint(0, 80, (args.clients, args.batch, 80), device=args.device)
    y = torch.randint(0, 80, (args.clients, args.batch), device=args.device)
    versions = {"autograd": batched_gradient(forward_with(model, autograd_layer)),
                "written-out": batched_gradient(lambda params, x: functional_call(model, params, (x,)))}
    print(f"device {args.device} ({torch.cuda.get_device_name() if args.device == 'cuda' else torch.get_num_threads()} "
          f"{'' if args.device == 'cuda' else 'threads'}), torch {torch.__version__}; {args.clients} clients x "
          f"{args.batch} sequences of 80 characters, one vmap-ed training step")
    grads = {name: step(params, x, y) for name, step in versions.items()}
    versions["bound"] = partial(one_model_step, model)
    difference = max((grads["autograd"][k] - grads["written-out"][k]).abs().max().item() for k in params)
    print(f"largest gradient difference: {difference:.2e}")
    seconds = {}
    print(f"{'version':<12} {'ms a step':>10} {'operations':>11} {'CUDA kernels':>13}")
    for name, step in versions.items():
        ops, kernels = count_operations(step, (params, x, y), args.device)
        seconds[name] = time_step(step, (params, x, y), args.device, args.repeat)
        print(f"{name:<12} {1000 * seconds[name]:>10.2f} {ops:>11d} {'-' if kernels is None else kernels:>13}")
    print(f"speed-up of the written-out backward: {seconds['autograd'] / seconds['written-out']:.2f}x")
    print(f"written-out step / bound: {seconds['written-out'] / seconds['bound']:.2f}x")


if __name__ == "__main__":
    main()
