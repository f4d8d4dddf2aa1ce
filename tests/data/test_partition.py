"""Partition invariants on label vectors with the real dataset sizes (no images needed)."""

from __future__ import annotations

import numpy as np
import pytest

from fedmgda.data import DataError, load_partition, save_partition
from fedmgda.data.partition import (
    Partition,
    RawData,
    build_partition,
    check_partition,
    iid_partition,
    shard_partition,
    split_user,
)


def balanced_labels(n_classes: int, per_class: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).permutation(np.repeat(np.arange(n_classes), per_class))


CIFAR = balanced_labels(10, 5000)
FMNIST = balanced_labels(10, 6000)


def _raw(labels, name="cifar10"):
    import torch

    return RawData(name=name, x=torch.zeros(len(labels), 1), y=torch.as_tensor(labels))


def cifar_partition(seed=1, **opts):
    options = {"num_users": 100, "num_shards": 500, "shard_size": 100, "sort": "stable", **opts}
    return build_partition(_raw(CIFAR), "shards", seed, options)


def _assert_disjoint_complete(parts, n):
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx), "a sample belongs to two users"
    assert len(allidx) == n


def test_cifar_shards_are_disjoint_complete_and_at_most_5_classes_per_user():
    part = cifar_partition()
    users = [part.user_indices(u) for u in range(part.num_users)]
    _assert_disjoint_complete(users, 50_000)
    assert max(len(np.unique(CIFAR[u])) for u in users) <= 5
    assert part.num_users == 100


def test_cifar_shards_give_400_50_50_and_a_single_class_test_split():
    part = cifar_partition()
    assert {len(t) for t in part.train} == {400}
    assert {len(v) for v in part.val} == {50}
    assert {len(t) for t in part.test} == {50}
    assert all(len(np.unique(CIFAR[t])) == 1 for t in part.test)
    assert max(len(np.unique(CIFAR[t])) for t in part.train) <= 4


def test_fmnist_code_setting_gives_480_60_60_from_3_shards():
    raw = _raw(FMNIST, "fmnist")
    part = build_partition(raw, "shards", 1, {"num_users": 100, "shard_setting": "code",
                                              "sort": "stable"})
    assert {len(t) for t in part.train} == {480} and {len(t) for t in part.test} == {60}
    assert max(len(np.unique(FMNIST[part.user_indices(u)])) for u in range(100)) <= 3
    paper = build_partition(raw, "shards", 1, {"num_users": 100, "shard_setting": "paper",
                                               "sort": "stable"})
    assert max(len(np.unique(FMNIST[paper.user_indices(u)])) for u in range(100)) <= 5
    assert {len(t) for t in paper.train} == {480}


def test_same_seed_same_partition_different_seed_different():
    a, b, c = cifar_partition(1), cifar_partition(1), cifar_partition(2)
    assert all(np.array_equal(x, y) for x, y in zip(a.train, b.train, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train, strict=True))


def test_shard_concatenation_follows_python_set_order():
    # docs/protocol.md §1.3: a user's shards are concatenated in CPython set-iteration order.
    labels = np.repeat(np.arange(10), 50)
    parts = shard_partition(labels, num_users=10, num_shards=100, shard_size=5, seed=3)
    rng = np.random.RandomState(3)
    first = rng.choice(list(range(100)), 10, replace=False).tolist()
    expect = np.concatenate([np.arange(s * 5, s * 5 + 5) for s in set(first)])
    assert np.array_equal(parts[0], expect)  # stable sort of sorted labels = identity


def test_iid_partition_is_disjoint_balanced_and_seeded():
    parts = iid_partition(50_000, 100, seed=1)
    _assert_disjoint_complete(parts, 50_000)
    assert {len(p) for p in parts} == {500}
    assert np.array_equal(iid_partition(1000, 10, 5)[3], iid_partition(1000, 10, 5)[3])
    assert not np.array_equal(iid_partition(1000, 10, 5)[3], iid_partition(1000, 10, 6)[3])


def test_quicksort_option_keeps_the_class_structure():
    part = cifar_partition(sort="quicksort")
    assert all(len(np.unique(CIFAR[t])) == 1 for t in part.test)


def test_positional_split_is_80_10_10_with_the_tail_as_test():
    tr, va, te = split_user(np.arange(87))
    assert (len(tr), len(va), len(te)) == (69, 9, 9)
    assert np.array_equal(te, np.arange(78, 87))


def test_save_load_roundtrip_and_stale_file_detection(tmp_path):
    part = cifar_partition()
    path = save_partition(part, tmp_path / "p" / "cifar.npz")
    back = load_partition(path)
    assert isinstance(back, Partition) and back.options == part.options
    assert all(np.array_equal(x, y) for x, y in zip(back.test, part.test, strict=True))
    check_partition(back, path, "cifar10", "shards", 1, part.options, part.fingerprint)
    with pytest.raises(DataError, match="seed"):
        check_partition(back, path, "cifar10", "shards", 2, part.options, part.fingerprint)
    with pytest.raises(DataError, match="fingerprint"):
        check_partition(back, path, "cifar10", "shards", 1, part.options, "0" * 16)


def test_too_many_shards_is_a_clear_error():
    with pytest.raises(DataError, match="shards"):
        shard_partition(np.zeros(100), 10, 20, 10, seed=0)
