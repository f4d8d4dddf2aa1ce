"""Every random draw of a client comes from its own seed key (run seed, round, user): its minibatch
order and its dropout masks are the same whichever path trains it, whoever trains beside it and
whether its run resumed. (Were a batched step to draw the masks of all its clients together, a
run's numbers would depend on its pack partners.)"""

import pandas as pd
import pytest
import torch
from toy_federated import killed_at, toy_config

from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, VmapSteps
from fedmgda.data.base import FederatedDataset
from fedmgda.minibatches import Minibatches
from fedmgda.models import build_model, dropout
from fedmgda.scheduler import DROPOUT_STREAM, derived_seed, dropout_generator, run_packed
from fedmgda.simulator import Simulation

OUTPUTS = ("metrics.csv", "per_user.csv")


def images(users: int = 8, n_train: int = 30, n_test: int = 10) -> FederatedDataset:
    """Random 28x28 images, equal-sized users: F-MNIST's CNN (with its two dropout sites) trains on
    them."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(users * (n_train + n_test), 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (len(x),), generator=g)
    starts = [u * (n_train + n_test) for u in range(users)]
    return FederatedDataset("images", x, y, [torch.arange(s, s + n_train) for s in starts],
                            [torch.arange(s + n_train, s + n_train + n_test) for s in starts], 10)


COMMON = dict(rounds=6, participation=0.5, batch_size=10, local_lr=0.05, per_user_every=1,
              checkpoint_every=2)
ME = dict(algorithm="fedavg", seed=3, **COMMON)
# another algorithm and seed; another seed with every user each round (another group size)
PARTNERS = [
    dict(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1}, seed=4, **COMMON),
    dict(algorithm="fedavg", seed=9, **{**COMMON, "participation": 1.0}),
]


def train(cfgs: list[dict], outs: list) -> None:
    data = images()
    run_packed([Simulation(toy_config(**cfg), data=data, model_name="cnn_fmnist") for cfg in cfgs],
               outs)


def outputs(out) -> dict[str, str]:
    return {name: (out / name).read_text() for name in OUTPUTS}


def test_a_dropout_run_does_not_depend_on_its_pack_partners_or_on_resuming(tmp_path, monkeypatch):
    """One F-MNIST CNN run (dropout on) alone, packed with either partner, and resumed from a
    round-2 checkpoint beside a partner resumed from round 4: identical metrics.csv and
    per_user.csv."""
    train([ME], [tmp_path / "alone"])
    alone = outputs(tmp_path / "alone")
    for i, partner in enumerate(PARTNERS):
        train([partner, ME], [tmp_path / f"partner{i}", tmp_path / f"packed{i}"])
        assert outputs(tmp_path / f"packed{i}") == alone, f"packed with partner {i}"
    killed_at(lambda: train([ME], [tmp_path / "resumed"]), tmp_path / "resumed", monkeypatch, 2)
    killed_at(lambda: train([PARTNERS[0]],
                            [tmp_path / "partner_resumed"]), tmp_path / "partner_resumed",
              monkeypatch, 4)
    train([PARTNERS[0], ME], [tmp_path / "partner_resumed", tmp_path / "resumed"])
    assert outputs(tmp_path / "resumed") == alone
    assert outputs(tmp_path / "partner_resumed") == outputs(tmp_path / "partner0")
    # the test can fail: dropout's masks matter, a run of another seed gives other numbers
    train([{**ME, "seed": 4}], [tmp_path / "other_seed"])
    assert outputs(tmp_path / "other_seed")["metrics.csv"] != alone["metrics.csv"]


def test_dropout_masks_are_the_authors_dropout():
    """F-MNIST's dropout as the authors' CNNMnist draws it (docs/protocol.md §2): Dropout2d(0.5) on
    conv2's output keeps or drops whole channels, dropout 0.5 after fc1 unit by unit, kept values
    scaled by 2; independently for every sample, step and client (each client's own generator)."""
    model = build_model("cnn_fmnist", (1, 28, 28), 10).train()
    trainer = LocalTrainer(FlatModel(model), LocalHParams())
    cpu = torch.device("cpu")
    channels, units = trainer.minibatches.dropout_masks(6, 10, dropout_generator((1, 0, 0), cpu),
                                                        cpu)
    assert channels.shape == (6, 10, 20, 1, 1) and units.shape == (6, 10, 50)
    conv = dropout(torch.ones(10, 20, 8, 8), model, 0, (channels[0], units[0]))
    per_channel = conv.flatten(2)
    # a channel is kept or dropped whole
    assert torch.equal(per_channel.amin(-1), per_channel.amax(-1))
    assert set(conv.unique().tolist()) == {0.0, 2.0}
    assert set(dropout(torch.ones(10, 50), model, 1,
                       (channels[0], units[0])).unique().tolist()) == {0.0, 2.0}
    for site in (channels, units):
        kept = site.double().mean().item()
        assert abs(kept - 0.5) < 0.06
    assert not torch.equal(channels[0, 0],
                           channels[0, 1]) and not torch.equal(channels[0], channels[1])
    other_user = trainer.minibatches.dropout_masks(6, 10, dropout_generator((1, 0, 1), cpu), cpu)
    assert not torch.equal(other_user[1], units)
    # not the minibatch order's stream
    assert derived_seed(1, 0, 0, DROPOUT_STREAM) != derived_seed(1, 0, 0)


def test_no_random_draw_happens_inside_the_batched_step():
    """The vmap-ed step runs with randomness="error": a draw inside (a model's own dropout, a local
    term's noise) could not be per client, so it raises (and a term then takes the reference
    path)."""
    flat = FlatModel(build_model("cnn_fmnist", (1, 28, 28), 10))
    trainer = LocalTrainer(flat, LocalHParams(batch_size=5))
    # the masks withheld: the module falls back to F.dropout's own draws
    trainer.minibatches.sites = ()
    x, y = torch.randn(10, 1, 28, 28), torch.randint(0, 10, (10,))
    plan = trainer.minibatches.plan([torch.arange(5), torch.arange(5, 10)],
                                    [torch.Generator().manual_seed(k) for k in range(2)])
    with pytest.raises(RuntimeError, match="random"):
        VmapSteps(trainer).train(plan, flat.initial_vector(), x, y, torch.ones(2))


def test_a_pack_and_a_run_alone_draw_the_same_masks(monkeypatch):
    """The masks a client trains with, seen at the source: the same (seed, round, user) draws the
    same masks alone and packed beside another run."""
    drawn: dict[tuple, list[torch.Tensor]] = {}
    original = Minibatches.dropout_masks

    def spy(self, steps, width, generator, device):
        masks = original(self, steps, width, generator, device)
        drawn.setdefault(generator.initial_seed(),
                         []).append(torch.cat([m.flatten() for m in masks]))
        return masks

    monkeypatch.setattr(Minibatches, "dropout_masks", spy)
    train([{**ME, "rounds": 2}], [None])
    alone = {seed: masks[0] for seed, masks in drawn.items()}
    drawn.clear()
    train([{**PARTNERS[1], "rounds": 2}, {**ME, "rounds": 2}], [None, None])
    assert set(alone) <= set(drawn)
    assert all(torch.equal(alone[seed], masks[0]) for seed, masks in drawn.items() if seed in alone)
    # one draw per client and round
    assert pd.Series([len(masks) for masks in drawn.values()]).max() == 1
