import pytest
import torch
from torch import nn

from fedmgda.models import (
    Conv2d,
    LSTMLayer,
    ShakespeareLSTM,
    build_model,
    convolution,
    count_parameters,
)

PAPER_MODELS = [
    # name, input shape, classes, trainable parameters (None: not fixed by the paper)
    ("cnn_cifar", (3, 32, 32), 10, 797_962),
    ("cnn_fmnist", (1, 28, 28), 10, 21_840),
    ("cnn_femnist", (1, 28, 28), 62, 1_206_590),
    ("logreg", (99,), 2, 200),
    ("lstm_shakespeare", (80,), 80, 640 + 272_384 + 526_336 + 20_560),
    ("logreg", (60,), 10, 610),
    ("mlp_digits", (64,), 10, None),
    # 199 210, FedMDFG's MLP
    ("mlp_fmnist", (1, 28, 28), 10, 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),
]


@pytest.mark.parametrize("name,shape,classes,expected", PAPER_MODELS)
def test_parameter_count_and_output_shape(name, shape, classes, expected):
    torch.manual_seed(0)
    model = build_model(name, shape, classes)
    if expected is not None:
        assert count_parameters(model) == expected
    if name == "lstm_shakespeare":
        x = torch.randint(0, 80, (4, *shape))
    else:
        x = torch.randn(4, *shape)
    out = model.eval()(x)
    assert out.shape == (4, classes)
    # log-probabilities: each row exponentiates to a distribution
    assert torch.allclose(out.exp().sum(dim=1), torch.ones(4), atol=1e-5)


def test_lstm_recurrence_matches_torch_lstm():
    """The written-out recurrence (vmap-able) and ``forward_fused`` (nn.LSTM's kernels, the
    bound of bench_rounds --bound) are one function: same outputs and same gradients."""
    torch.manual_seed(1)
    model = ShakespeareLSTM().eval()
    x = torch.randint(0, 80, (3, 80))
    reference_hidden, _ = model.lstm(model.embed(x))
    reference = torch.log_softmax(model.fc(reference_hidden[:, -1]), dim=1)
    assert torch.allclose(model(x), reference, atol=1e-5)
    assert torch.equal(model.forward_fused(x), reference)
    y = torch.tensor([0, 5, 79])
    grads = [torch.autograd.grad(torch.nn.functional.nll_loss(f(x), y), list(model.parameters()))
             for f in (model, model.forward_fused)]
    for written, fused in zip(*grads):
        assert torch.allclose(written, fused, atol=1e-5)


def test_unknown_model_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        build_model("resnet", (3, 32, 32), 10)


def test_models_have_no_buffers():
    """The simulator keeps a model as its flat parameter vector: buffers would be lost."""
    for name, shape, classes, _ in PAPER_MODELS:
        model: nn.Module = build_model(name, shape, classes)
        assert list(model.buffers()) == []


def test_glorot_init_zero_biases_and_the_glorot_bound():
    """init: glorot (TensorFlow's tf.layers.dense / conv2d defaults, the q-FFL code's models)."""
    torch.manual_seed(5)
    model = build_model("cnn_fmnist", (1, 28, 28), 10, init="glorot")
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    assert len(layers) == 4
    for layer in layers:
        receptive = layer.weight[0, 0].numel()  # kernel area (1 for a dense layer)
        bound = (6 / ((layer.weight.shape[1] + layer.weight.shape[0]) * receptive)) ** 0.5
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
        # fills U(-b, b)
        assert layer.weight.abs().max() <= bound and layer.weight.abs().max() > 0.9 * bound
    torch.manual_seed(5)
    again = build_model("cnn_fmnist", (1, 28, 28), 10, init="glorot")
    # same seed, same model
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    torch.manual_seed(5)
    default = build_model("cnn_fmnist", (1, 28, 28), 10)
    torch.manual_seed(5)
    explicit = build_model("cnn_fmnist", (1, 28, 28), 10, init="torch")
    assert all(torch.equal(a, b) for a, b in zip(default.parameters(), explicit.parameters()))
    assert not torch.equal(default.fc1.bias, model.fc1.bias)


def test_the_catalog_names_every_model():
    """fedmgda.catalog.MODELS (torch-free, what RunConfig.model is checked against) =
    fedmgda.models.MODELS."""
    from fedmgda.catalog import MODELS as NAMES
    from fedmgda.models import MODELS

    assert set(NAMES) == set(MODELS)
    from fedmgda.catalog import CONVOLUTIONS as CONV_NAMES
    from fedmgda.models import CONVOLUTIONS

    assert CONV_NAMES == CONVOLUTIONS  # the same default first


@pytest.mark.parametrize("device",
                         ["cpu",
                          pytest.param("cuda",
                                       marks=[pytest.mark.cuda,
                                              pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA device")])])
@pytest.mark.parametrize("name,shape,classes",
                         [("cnn_cifar", (3, 32, 32), 10), ("cnn_fmnist", (1, 28, 28), 10),
                          ("cnn_femnist", (1, 28, 28), 62)])
def test_im2col_convolutions_are_torchs_up_to_rounding(name, shape, classes, device):
    """``conv: im2col`` computes the same function as torch's convolution: outputs and gradients
    (float64), under vmap over clients with their own weights as the batched path runs it; on
    CUDA too (``make test-cuda``), where torch's is cuDNN's."""
    torch.manual_seed(4)
    models = {conv: build_model(name, shape, classes, conv=conv).double().to(device)
              for conv in ("torch", "im2col")}
    models["im2col"].load_state_dict(models["torch"].state_dict())
    assert [m.im2col for m in models["im2col"].modules() if isinstance(m, Conv2d)] == [True, True]
    assert convolution(models["im2col"]) == "im2col" and convolution(models["torch"]) == "torch"
    assert convolution(build_model("logreg", (99,), 2, conv="im2col")) is None
    clients = 3
    params = {k: v.detach().expand(clients, *v.shape).clone()
              + 0.01 * torch.randn(clients, *v.shape, dtype=torch.float64).to(device)
              for k, v in models["torch"].named_parameters()}
    x = torch.randn(clients, 4, *shape, dtype=torch.float64).to(device)
    y = torch.randint(0, classes, (clients, 4)).to(device)
    models = {conv: m.eval() for conv, m in models.items()}

    def gradient(model):
        def loss(p, x, y):
            return torch.nn.functional.nll_loss(torch.func.functional_call(model, p, (x,)), y)
        return torch.func.vmap(torch.func.grad_and_value(loss))(params, x, y)

    (g_torch, l_torch), (g_im2col, l_im2col) = gradient(models["torch"]), gradient(models["im2col"])
    assert torch.allclose(l_torch, l_im2col, rtol=0, atol=1e-12)
    for k in params:
        assert torch.allclose(g_torch[k], g_im2col[k], rtol=0, atol=1e-10), k


def test_an_unknown_convolution_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown conv 'winograd'; known: torch, im2col"):
        build_model("cnn_cifar", (3, 32, 32), 10, conv="winograd")


def test_mlp_fmnist_is_fedmdfgs_mlp():
    """zibinpan/FedMDFG fedplat/model/MLP.py: Linear 784-200, ReLU, 200-200, ReLU, 200-10, no
    dropout."""
    model = build_model("mlp_fmnist", (1, 28, 28), 10)
    assert [(m.in_features, m.out_features) for m in model.modules()
            if isinstance(m, nn.Linear)] == [(784, 200), (200, 200), (200, 10)]
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    x = torch.randn(5, 1, 28, 28)
    logits = model.fc3(torch.relu(model.fc2(torch.relu(model.fc1(x.flatten(1))))))
    # no randomness in training mode
    assert torch.allclose(model.train()(x), torch.log_softmax(logits, dim=1))


def test_a_run_model_replaces_the_datasets(monkeypatch):
    import fedmgda.data
    from fedmgda.config import RunConfig
    from fedmgda.simulator import load_dataset

    monkeypatch.setattr(fedmgda.data, "load_federated", lambda *a, **k: "data")
    cfg = RunConfig.from_dict({"dataset": "fmnist", "algorithm": "fedavg"})
    assert load_dataset(cfg) == ("data", "cnn_fmnist")
    cfg = RunConfig.from_dict({"dataset": "fmnist", "algorithm": "fedavg", "model": "mlp_fmnist"})
    assert load_dataset(cfg) == ("data", "mlp_fmnist")


@pytest.mark.parametrize("shape", [(256, 10, 24, 24), (7, 3, 9, 11), (2, 1, 3, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_pool2_is_max_pool2d(shape, dtype):
    """The CPU evaluation's pooling gives F.max_pool2d's values bit for bit: odd sizes floored,
    ReLU's zeros (ties), NaN and infinities propagated; with autograd it is F.max_pool2d."""
    import torch.nn.functional as F

    from fedmgda.models import max_pool2

    g = torch.Generator().manual_seed(0)
    x = torch.relu(torch.randn(shape, generator=g, dtype=dtype))  # half zeros: ties
    x.view(-1)[:: 97] = float("nan")
    x.view(-1)[5:: 89] = float("inf")
    with torch.no_grad():
        assert torch.equal(max_pool2(x).isnan(), F.max_pool2d(x, 2).isnan())
        assert torch.equal(max_pool2(x).nan_to_num(), F.max_pool2d(x, 2).nan_to_num())
    assert max_pool2(x.requires_grad_()).grad_fn.name() == F.max_pool2d(x, 2).grad_fn.name()


@pytest.mark.parametrize("name, shape, classes",
                         [("cnn_fmnist", (1, 28, 28), 10), ("cnn_femnist", (1, 28, 28), 62),
                          ("cnn_cifar", (3, 32, 32), 10)])
def test_cnn_evaluation_equals_the_autograd_forward(name, shape, classes):
    """Each CNN's forward without autograd (max_pool2's CPU path) gives the forward with autograd
    (F.max_pool2d) bit for bit."""
    model = build_model(name, shape, classes).eval()
    x = torch.randn(33, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        evaluated = model(x)
    assert torch.equal(evaluated, model(x).detach())


def test_lstm_layer_backward_is_the_gradient():
    """The written-out backward through time against finite differences (float64), with the
    input's gradient too (the first layer's input is the trained embedding)."""
    torch.manual_seed(2)
    batch, time, features, hidden = 3, 6, 5, 4
    inputs = tuple(torch.randn(*shape, dtype=torch.float64, requires_grad=True)
                   for shape in ((batch, time, features), (4 * hidden, features),
                                 (4 * hidden, hidden), (4 * hidden,)))
    assert torch.autograd.gradcheck(lambda *args: LSTMLayer.apply(*args)[0], inputs)


def test_lstm_layer_under_vmap_is_each_clients_gradient():
    """``generate_vmap_rule``: the gradients of several clients' weights at once, as the batched
    client update takes them, equal each client's own (float64, one client at a time)."""
    torch.manual_seed(3)
    clients, batch, time, features, hidden = 3, 2, 7, 5, 4
    weights = tuple(torch.randn(clients, *shape, dtype=torch.float64)
                    for shape in ((4 * hidden, features), (4 * hidden, hidden), (4 * hidden,)))
    x = torch.randn(clients, batch, time, features, dtype=torch.float64)

    def loss(w_ih, w_hh, bias, x):
        return LSTMLayer.apply(x, w_ih, w_hh, bias)[0].sin().sum()

    batched = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1, 2, 3)))(*weights, x)
    for k in range(clients):
        alone = torch.func.grad(loss, argnums=(0, 1, 2, 3))(*(w[k] for w in weights), x[k])
        for together, own in zip(batched, alone):
            assert torch.allclose(together[k], own, rtol=0, atol=1e-12)
