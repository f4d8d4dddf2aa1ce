"""benchmarks/bench_lstm.py: the Shakespeare LSTM's step, written-out backward beside autograd's."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_lstm",
                                                  ROOT / "benchmarks" / "bench_lstm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_versions_compute_one_gradient_and_written_out_and_wavefront_run_fewer_operations(
        capsys):
    load_bench().main(["--clients", "2", "1", "--batch", "2", "--repeat", "1"])
    out = capsys.readouterr().out
    differences = re.findall(r"largest gradient difference, (written-out|wavefront) vs autograd: "
                             r"(\S+)", out)
    assert [name for name, _ in differences] == ["written-out", "wavefront"]
    assert all(float(d) < 1e-5 for _, d in differences)
    ops = {name: int(count)
           for name, count in re.findall(r"^(autograd|written-out|wavefront|bound)\s+[\d.]+\s+"
                                         r"(\d+)\s+-$", out, re.M)}
    assert ops["written-out"] * 2 < ops["autograd"]  # the time loops hold only the recurrence
    # both layers in one loop of T + 1 iterations
    assert ops["wavefront"] * 3 < ops["written-out"] * 2
    assert re.search(r"^speed-up of the written-out backward: [\d.]+x$", out, re.M)
    assert re.search(r"^speed-up of the wavefront over the written-out: [\d.]+x$", out, re.M)
    ms = {name: float(t)
          for name, t in re.findall(r"^(autograd|written-out|wavefront|bound)\s+([\d.]+)\s", out,
                                    re.M)}
    ratio = float(re.search(r"^written-out step / bound: ([\d.]+)x$", out, re.M).group(1))
    assert set(ms) == {"autograd", "written-out", "wavefront", "bound"}
    assert abs(ratio - ms["written-out"] / ms["bound"]) < 0.01 + 0.01 * ratio
    assert re.search(r"^1 clients: written-out [\d.]+ ms, wavefront [\d.]+ ms, bound [\d.]+ ms; "
                     r"wavefront speed-up [\d.]+x$", out, re.M)


# (3, 2): layers start and end at once
@pytest.mark.parametrize("layers, steps", [(1, 6), (2, 6), (3, 6), (3, 2)])
def test_the_wavefront_candidate_is_the_stacked_lstm_with_its_gradient(layers, steps):
    """``WavefrontLSTM``: its backward against finite differences (float64, a dense block matrix,
    so every coupling is checked), and the model through it against the package's forward and
    gradient, each client's under vmap."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    bench = load_bench()
    torch.manual_seed(layers)
    hidden = 5
    inputs = (torch.randn(2, steps, 4 * hidden, dtype=torch.float64, requires_grad=True),
              (0.3 * torch.randn(layers * hidden, 4 * layers * hidden,
                                 dtype=torch.float64)).requires_grad_(),
              torch.randn((layers - 1) * 4 * hidden, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda *args: bench.WavefrontLSTM.apply(*args)[0], inputs)
    model = bench.ShakespeareLSTM(embed_dim=3, hidden=hidden, layers=layers).double()
    params = {name: p.detach() + 0.05 * torch.randn(3, *p.shape, dtype=p.dtype)
              for name, p in model.named_parameters()}
    x, y = torch.randint(0, 80, (3, 4, steps)), torch.randint(0, 80, (3, 4))
    package = vmap(grad(lambda p, x, y: F.nll_loss(functional_call(model, p, (x,)),
                                                   y)))(params, x, y)
    wavefront = vmap(grad(lambda p, x, y: F.nll_loss(bench.wavefront_forward(model)(p, x),
                                                     y)))(params, x, y)
    assert all(torch.allclose(package[k], wavefront[k], rtol=0, atol=1e-12) for k in params)


def test_the_forward_is_the_autograd_versions_up_to_rounding():
    """``LSTMLayer``'s forward, vmap-ed over clients as the batched path runs it and for one client
    alone, agrees with the package's version before it (the benchmark's ``autograd_layer``)."""
    import torch

    from fedmgda.models import LSTMLayer

    torch.manual_seed(5)
    x, w_ih, w_hh, bias = (torch.randn(3, 4, 12, 8), 0.1 * torch.randn(3, 64, 8),
                           0.1 * torch.randn(3, 64, 16), 0.1 * torch.randn(3, 64))
    before = torch.func.vmap(load_bench().autograd_layer)(x, w_ih, w_hh, bias)
    now = torch.func.vmap(lambda *args: LSTMLayer.apply(*args)[0])(x, w_ih, w_hh, bias)
    assert torch.allclose(before, now, rtol=0, atol=1e-6)
    alone = LSTMLayer.apply(x[0], w_ih[0], w_hh[0], bias[0])[0]
    assert torch.allclose(alone, before[0], rtol=0, atol=1e-6)
