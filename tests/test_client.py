import pytest
import torch
import torch.nn.functional as F

from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, evaluate_samples
from fedmgda.fastpaths import DistinctSamples, evaluate_linear
from fedmgda.models import build_model


def setup(name="logreg", shape=(10,), classes=3, n=23, seed=0):
    torch.manual_seed(seed)
    module = build_model(name, shape, classes)
    x = torch.randn(n, *shape)
    y = torch.randint(0, classes, (n,))
    return module, FlatModel(module), x, y


def test_matches_torch_sgd_with_momentum_and_the_same_batches():
    module, flat, x, y = setup()
    hp = LocalHParams(epochs=2, batch_size=5, lr=0.1, momentum=0.5)
    trainer = LocalTrainer(flat, hp)
    w0 = flat.initial_vector()
    result = trainer.train(w0, x, y, torch.Generator().manual_seed(7))

    # reference: torch.optim.SGD over the same minibatch order (torch's momentum semantics)
    batches = trainer.minibatches.batch_order(len(y), torch.Generator().manual_seed(7))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.5)
    losses = []
    for b in batches:
        optimizer.zero_grad()
        loss = F.nll_loss(module(x[b]), y[b])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    expected = flat.initial_vector() - w0
    assert len(batches) == 2 * 5  # ceil(23/5) batches per epoch, the last one partial
    assert torch.allclose(result.update, expected, atol=1e-6)
    assert abs(result.train_loss.item() - sum(losses) / len(losses)) < 1e-6


def test_full_batch_single_step_is_minus_lr_times_gradient():
    module, flat, x, y = setup()
    hp = LocalHParams(epochs=1, batch_size=None, lr=0.3, momentum=0.5)
    w0 = flat.initial_vector()
    result = LocalTrainer(flat, hp).train(w0, x, y, torch.Generator().manual_seed(0))
    loss = F.nll_loss(module(x), y)
    grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(module.parameters()))])
    assert torch.allclose(result.update, -0.3 * grad, atol=1e-6)


def test_proximal_term_has_no_half():
    """mu * ||w - w_t||^2: its gradient is 2 mu (w - w_t) (docs/protocol.md §3.4)."""
    _, flat, x, y = setup()
    w0 = flat.initial_vector()
    gen = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    plain = LocalTrainer(flat,
                         LocalHParams(epochs=1, batch_size=None, lr=0.1,
                                      momentum=0.0)).train(w0, x, y, gen())
    # one step from w0: the prox gradient is zero at w_t, so two steps are needed to see it
    hp = LocalHParams(epochs=2, batch_size=None, lr=0.1, momentum=0.0, mu=0.5)
    prox = LocalTrainer(flat, hp).train(w0, x, y, gen())
    no_prox = LocalTrainer(flat,
                           LocalHParams(epochs=2, batch_size=None, lr=0.1,
                                        momentum=0.0)).train(w0, x, y, gen())
    w1 = w0 + plain.update
    module_grad = (no_prox.update - plain.update) / -0.1  # gradient of the data loss at w1
    expected_second_step = -0.1 * (module_grad + 2 * 0.5 * (w1 - w0))
    assert torch.allclose(prox.update - plain.update, expected_second_step, atol=1e-6)


def test_loss_scale_scales_the_update_of_a_single_step():
    _, flat, x, y = setup()
    w0 = flat.initial_vector()
    hp = LocalHParams(epochs=1, batch_size=None, lr=0.1)
    base = LocalTrainer(flat, hp).train(w0, x, y, torch.Generator().manual_seed(0))
    scaled = LocalTrainer(flat, hp).train(w0, x, y, torch.Generator().manual_seed(0), scale=10.0)
    assert torch.allclose(scaled.update, 10 * base.update, atol=1e-6)
    assert torch.allclose(scaled.train_loss, 10 * base.train_loss)


def test_client_update_is_pure():
    _, flat, x, y = setup()
    w0 = flat.initial_vector()
    copy = w0.clone()
    trainer = LocalTrainer(flat, LocalHParams(epochs=1, batch_size=4, lr=0.1))
    a = trainer.train(w0, x, y, torch.Generator().manual_seed(3))
    b = trainer.train(w0, x, y, torch.Generator().manual_seed(3))
    assert torch.equal(w0, copy)  # the input weights are not modified
    assert torch.equal(a.update, b.update)


def test_evaluate_samples_in_eval_mode():
    module, flat, x, y = setup("cnn_fmnist", (1, 28, 28), 10, n=7)
    w = flat.initial_vector()
    loss, correct = evaluate_samples(flat, w, x, y, chunk=3)
    module.eval()
    out = module(x)
    assert torch.allclose(loss, F.nll_loss(out, y, reduction="none"), atol=1e-6)  # no dropout
    assert torch.equal(correct, (out.argmax(1) == y).float())


@pytest.mark.parametrize("classes", [2, 3])
def test_evaluate_linear_evaluates_several_models_as_evaluate_samples_each(classes):
    """One matrix product for several linear + log_softmax models; a model of equal logits (zero
    weights: every class ties) predicts class 0, as argmax does."""
    _, flat, x, y = setup("logreg", (10,), classes, n=31)
    ws = torch.stack([flat.initial_vector() + 0.5 * torch.randn(flat.num_params)
                      for _ in range(4)] + [torch.zeros(flat.num_params)])
    per_sample, correct = evaluate_linear(flat, ws, x, y)
    assert per_sample.shape == correct.shape == (31, 5)
    for r, w in enumerate(ws):
        loss, right = evaluate_samples(flat, w, x, y)
        assert torch.allclose(per_sample[:, r], loss, rtol=1e-6, atol=1e-6)
        assert torch.equal(correct[:, r], right)
    assert torch.equal(correct[:, -1], (y == 0).float())


def test_distinct_samples_give_each_sample_its_pairs_value():
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    y = torch.tensor([1, 0, 1, 0, 0])
    pairs = DistinctSamples(x, y)
    assert len(pairs.y) == 3  # (01, 1), (10, 0), (01, 0)
    assert torch.equal(pairs.x[pairs.inverse], x) and torch.equal(pairs.y[pairs.inverse], y)
    values = torch.stack([pairs.y * 10.0, pairs.x[:, 0]], dim=1)  # (pairs, 2)
    assert torch.equal(pairs.expand(values), torch.stack([y * 10.0, x[:, 0]], dim=1))


def test_a_subsets_distinct_samples_are_those_built_from_the_subset():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (200, 3), generator=g).float()
    y = torch.randint(0, 2, (200,), generator=g)
    rows = torch.randperm(200, generator=g)[:70]
    direct, subset = DistinctSamples(x[rows], y[rows]), DistinctSamples(x, y).subset(rows)
    assert len(subset.y) < 70  # equal samples share a pair
    assert (torch.equal(subset.x, direct.x) and torch.equal(subset.y, direct.y)
            and torch.equal(subset.inverse, direct.inverse))
