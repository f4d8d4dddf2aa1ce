"""The dirichlet partition: each class dealt among the users in Dir(alpha) proportions, each
user's own samples cut 80/10/10 per class (fedmgda.partitioners.Dirichlet)."""

from __future__ import annotations

import numpy as np
import pytest

from fedmgda.catalog import get_dataset
from fedmgda.data import DataError
from fedmgda.data.partition import RawData, build_partition
from fedmgda.partitioners import apportion, dirichlet_partition, options_error, stratified_cut

LABELS = np.random.RandomState(0).permutation(np.repeat(np.arange(10), 6000))  # F-MNIST's size
OPTIONS = {"num_users": 100, "dirichlet_min_samples": 10}


def _raw(labels):
    import torch

    return RawData(name="fmnist", x=torch.zeros(len(labels), 1), y=torch.as_tensor(labels))


def histograms(users, labels=LABELS, classes=10):
    return np.stack([np.bincount(labels[u], minlength=classes) for u in users])


@pytest.mark.parametrize("alpha", [0.1, 0.5, 1.0])
def test_each_class_is_cut_where_the_drawn_proportions_say(alpha):
    users, proportions = dirichlet_partition(LABELS, 100, alpha, 10, seed=1)
    counts = histograms(users)
    for c in range(10):
        cuts = (np.cumsum(proportions[c]) * 6000).astype(int)
        cuts[-1] = 6000  # np.split's last part takes the rest
        assert np.array_equal(counts[:, c], np.diff(cuts, prepend=0))
    allidx = np.concatenate(users)
    assert len(allidx) == len(np.unique(allidx)) == len(LABELS)
    assert min(len(u) for u in users) >= 10
    assert np.allclose(proportions.sum(axis=1), 1.0)


def test_alpha_dials_the_label_skew():
    """Small alpha: a user's samples from few classes; large: close to the pool's own mix."""
    dominant = {}
    for alpha in (0.1, 0.5, 100.0):
        users, _ = dirichlet_partition(LABELS, 100, alpha, 10, seed=1)
        h = histograms(users)
        dominant[alpha] = float((h.max(axis=1) / h.sum(axis=1)).mean())
    assert dominant[0.1] > 0.6 > dominant[0.5] > 0.3 > dominant[100.0]
    assert dominant[100.0] < 0.2  # 10 classes: the pool's mix has 0.1 a class


def test_the_same_seed_gives_the_same_partition_another_seed_another():
    a, _ = dirichlet_partition(LABELS, 100, 0.5, 10, seed=1)
    b, _ = dirichlet_partition(LABELS, 100, 0.5, 10, seed=1)
    c, _ = dirichlet_partition(LABELS, 100, 0.5, 10, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_the_draw_is_repeated_until_every_user_has_the_minimum():
    first, _ = dirichlet_partition(LABELS[:2000], 100, 1.0, 2, seed=3)  # the first draw
    users, _ = dirichlet_partition(LABELS[:2000], 100, 1.0, 12, seed=3)
    assert min(len(u) for u in first) < 12 <= min(len(u) for u in users)
    with pytest.raises(DataError, match="dirichlet_min_samples"):
        dirichlet_partition(LABELS[:1000], 100, 0.01, 10, seed=3, max_draws=5)


def test_apportion_keeps_every_share_within_one_of_its_quota():
    rng = np.random.RandomState(0)
    for _ in range(200):
        counts = rng.randint(0, 50, size=rng.randint(1, 11))
        if counts.sum() == 0:
            continue
        total = rng.randint(0, counts.sum() + 1)
        share = apportion(counts, total)
        assert share.sum() == total
        assert (share <= counts).all() and (share >= 0).all()
        assert np.abs(share - counts * total / counts.sum()).max() < 1


@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_train_and_test_keep_the_users_label_proportions(alpha):
    part = build_partition(_raw(LABELS), "dirichlet", 1, {**OPTIONS, "dirichlet_alpha": alpha})
    for train, val, test in zip(part.train, part.val, part.test, strict=True):
        n = len(train) + len(val) + len(test)
        assert (len(train), len(train) + len(val)) == (int(0.8 * n), int(0.9 * n))
        own = np.bincount(LABELS[np.concatenate([train, val, test])], minlength=10)
        for split in (test, val):
            quota = own * len(split) / n
            assert np.abs(np.bincount(LABELS[split], minlength=10) - quota).max() < 1
        assert np.abs(np.bincount(LABELS[train], minlength=10) - own * len(train) / n).max() < 2
    every = np.concatenate([np.concatenate(p) for p in (part.train, part.val, part.test)])
    assert len(every) == len(np.unique(every)) == len(LABELS)


def test_stratified_cut_keeps_the_order_of_the_users_samples():
    labels = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 2])
    idxs = np.array([11, 3, 0, 5, 2, 7, 9, 1, 4, 6, 8, 10])
    train, val, test = stratified_cut(idxs, labels)
    assert list(train) == [i for i in idxs if i in set(train)]
    assert sorted(np.concatenate([train, val, test])) == sorted(idxs)
    assert (len(train), len(val), len(test)) == (9, 1, 2)


def test_options_are_checked_before_any_job():
    assert "dirichlet_alpha must be a number > 0" in options_error("dirichlet",
                                                                   {"dirichlet_alpha": 0})
    assert "dirichlet_min_samples must be >= 2" in options_error(
        "dirichlet", {"dirichlet_alpha": 1.0, "dirichlet_min_samples": 1})
    fmnist = get_dataset("fmnist")
    assert fmnist.size_error("dirichlet", {"dirichlet_min_samples": 700}) == (
        "fmnist: num_users x dirichlet_min_samples = 100 x 700 needs 70000 samples, it has 60000: "
        "lower them")
    assert fmnist.size_error("dirichlet", {"dirichlet_alpha": 0.1}) is None
