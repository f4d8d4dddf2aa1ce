"""benchmarks/bench_lstm.py: the Shakespeare LSTM's step, written-out backward beside autograd's."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_lstm", ROOT / "benchmarks" / "bench_lstm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_versions_compute_one_gradient_and_the_written_out_one_runs_fewer_operations(capsys):
    load_bench().main(["--clients", "2", "--batch", "2", "--repeat", "1"])
    out = capsys.readouterr().out
    assert float(re.search(r"largest gradient difference: (\S+)", out).group(1)) < 1e-5
    ops = {name: int(count) for name, count in re.findall(r"^(autograd|written-out|bound)\s+[\d.]+\s+(\d+)\s+-$", out, re.M)}
    assert ops["written-out"] * 2 < ops["autograd"]  # the time loops hold only the recurrence
    assert re.search(r"^speed-up of the written-out backward: [\d.]+x$", out, re.M)
    ms = {name: float(t) for name, t in re.findall(r"^(autograd|written-out|bound)\s+([\d.]+)\s", out, re.M)}
    ratio = float(re.search(r"^written-out step / bound: ([\d.]+)x$", out, re.M).group(1))
    assert set(ms) == {"autograd", "written-out", "bound"} and abs(ratio - ms["written-out"] / ms["bound"]) < 0.01 + 0.01 * ratio



def test_the_forward_is_the_autograd_versions_up_to_rounding():
    """``LSTMLayer``'s forward, vmap-ed over clients as the batched path runs it and for one client
    alone, agrees with the package's version before it (the benchmark's ``autograd_layer``)."""
    import torch

    from fedmgda.models import LSTMLayer

    torch.manual_seed(5)
    x, w_ih, w_hh, bias = torch.randn(3, 4, 12, 8), 0.1 * torch.randn(3, 64, 8), 0.1 * torch.randn(3, 64, 16), 0.1 * torch.randn(3, 64)
    before = torch.func.vmap(load_bench().autograd_layer)(x, w_ih, w_hh, bias)
    now = torch.func.vmap(lambda *args: LSTMLayer.apply(*args)[0])(x, w_ih, w_hh, bias)
    assert torch.allclose(before, now, rtol=0, atol=1e-6)
    alone = LSTMLayer.apply(x[0], w_ih[0], w_hh[0], bias[0])[0]
    assert torch.allclose(alone, before[0], rtol=0, atol=1e-6)
