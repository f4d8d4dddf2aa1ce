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
    with pytest.raises(DataError, match="fingerprint") as err:
        check_partition(back, path, "cifar10", "shards", 1, part.options, "0" * 16)
    _says_remake(err.value, path, "stale partition file")


def small_partition() -> Partition:
    train = [np.arange(0, 6), np.arange(10, 16)]
    val, test = [np.array([6]), np.array([16])], [np.array([7, 8]), np.array([17])]
    return Partition(dataset="digits", scheme="shards", seed=1, options={"num_users": 2},
                     fingerprint="f" * 16, train=train, val=val, test=test)


def _same(a: Partition, b: Partition) -> bool:
    pairs = [zip(getattr(a, p), getattr(b, p), strict=True) for p in ("train", "val", "test")]
    same_lists = all(np.array_equal(x, y) for part in pairs for x, y in part)
    return a.options == b.options and a.users == b.users and same_lists


def _says_remake(err: DataError, path, opening: str = "partition file") -> None:
    message = str(err)
    assert "\n" not in message and message.startswith(f"{opening} {path}"), message
    assert message.endswith(f"delete it; the workflow remakes it: rm {path}"), message


@pytest.mark.parametrize("damage", ["empty", "cut in half", "cut by one byte", "not a zip"])
def test_an_unreadable_partition_file_is_one_line_naming_it(tmp_path, damage):
    path = save_partition(small_partition(), tmp_path / "p.npz")
    whole = path.read_bytes()
    damaged = {"empty": b"", "cut in half": whole[: len(whole) // 2], "cut by one byte": whole[:-1],
               "not a zip": b"meta = {}\n" * 20}
    path.write_bytes(damaged[damage])
    with pytest.raises(DataError) as err:
        load_partition(path)
    _says_remake(err.value, path)


def test_a_partition_file_denied_to_this_user_is_not_called_damaged(tmp_path, monkeypatch):
    path = save_partition(small_partition(), tmp_path / "p.npz")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(np, "load", denied)
    with pytest.raises(DataError,
                       match=f"^partition file {path} cannot be read: Permission denied$"):
        load_partition(path)


def test_every_flipped_byte_of_a_partition_file_is_caught_or_harmless(tmp_path):
    original = small_partition()
    path = save_partition(original, tmp_path / "p.npz")
    whole = path.read_bytes()
    caught, places = 0, range(0, len(whole), 7)  # about 300 of its bytes, in every part of the file
    for at in places:
        path.write_bytes(whole[:at] + bytes([whole[at] ^ 0x10]) + whole[at + 1:])
        try:
            back = load_partition(path)
        except DataError as err:
            _says_remake(err, path)
            caught += 1
        else:  # a byte no reader checks (a zip time stamp, padding): the same partition
            assert _same(back, original), f"byte {at} flipped gives another partition"
    assert caught > len(places) // 2  # the index lists, their headers and the meta are all checked


def test_a_partition_file_has_the_umasks_permissions(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        path = save_partition(small_partition(), tmp_path / "p.npz")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]  # no temporary file left


def test_too_many_shards_is_a_clear_error():
    with pytest.raises(DataError, match="shards"):
        shard_partition(np.zeros(100), 10, 20, 10, seed=0)


# --------------------------------------------------------------------------- FedMDFG's local test
# split
FMNIST_TEST = balanced_labels(10, 1000, seed=1)
FEDMDFG = {"num_users": 100, "shard_setting": "fedmdfg", "sort": "stable"}


def _partition_hash(part) -> str:
    import hashlib

    h = hashlib.sha256()
    for lists in (part.train, part.val, part.test):
        for a in lists:
            h.update(np.asarray(a, dtype=np.int64).tobytes())
            h.update(b"|")
    return h.hexdigest()[:16]


def _pooled_raw():
    """fmnist as the loader pools it under local_test global_shards: 60 000 training labels, then
    the 10 000 test labels at positions 60 000.. (RawData.test_pool)."""
    import torch

    labels = np.concatenate([FMNIST, FMNIST_TEST])
    return RawData(name="fmnist", x=torch.zeros(len(labels), 1), y=torch.as_tensor(labels),
                   test_pool=np.arange(60_000, 70_000))


def test_default_fmnist_partitions_are_unchanged_by_the_local_test_option():
    """The partitions built before local_test existed, hash for hash (computed with that code), and
    local_test own_shard (the default) is the same partition."""
    raw = _raw(FMNIST, "fmnist")
    for setting, digest in (("code", "69f1875a88c050b9"), ("paper", "9cf1d2c4431b5084")):
        opts = {"num_users": 100, "shard_setting": setting, "sort": "stable"}
        assert _partition_hash(build_partition(raw, "shards", 1, opts)) == digest
        assert _partition_hash(build_partition(raw, "shards", 1,
                                               {**opts, "local_test": "own_shard"})) == digest


def test_fedmdfg_shards_are_200_of_300_two_per_user():
    part = build_partition(_raw(FMNIST, "fmnist"), "shards", 1, FEDMDFG)
    users = [part.user_indices(u) for u in range(100)]
    _assert_disjoint_complete(users, 60_000)
    assert {len(u) for u in users} == {600}
    assert max(len(np.unique(FMNIST[u])) for u in users) <= 2


def test_global_shards_test_each_user_on_two_global_test_shards_independent_of_its_classes():
    raw = _pooled_raw()
    labels = raw.labels
    part = build_partition(raw, "shards", 1, {**FEDMDFG, "local_test": "global_shards"})
    own = build_partition(_raw(FMNIST, "fmnist"), "shards", 1, FEDMDFG)
    # train: all of the user's 600 images, the same shards as without the option; no validation
    assert all(np.array_equal(a, own.user_indices(u)) for u, a in enumerate(part.train))
    assert all(len(v) == 0 for v in part.val)
    # test: 100 images = 2 shards of 50 of the global test set, each shard one class; the 100 users
    # together hold every test image once (drawn without replacement)
    assert {len(t) for t in part.test} == {100}
    allt = np.concatenate(part.test)
    assert allt.min() >= 60_000 and len(np.unique(allt)) == len(allt) == 10_000
    for t in part.test:
        assert np.all(labels[t[:50]] == labels[t[0]]) and np.all(labels[t[50:]] == labels[t[50]])
    # independent of the training classes: most users are tested on a class they never train on
    foreign = [not set(labels[t]) <= set(labels[a])
               for a, t in zip(part.train, part.test, strict=True)]
    assert sum(foreign) > 80


def test_global_shards_are_deterministic_per_seed():
    raw = _pooled_raw()
    opts = {**FEDMDFG, "local_test": "global_shards"}
    a, b, c = (build_partition(raw, "shards", s, opts) for s in (1, 1, 5000))
    assert _partition_hash(a) == _partition_hash(b) != _partition_hash(c)


def test_global_shards_need_the_pooled_test_set_and_the_shards_partition():
    opts = {**FEDMDFG, "local_test": "global_shards"}
    with pytest.raises(DataError, match="needs the global test set pooled"):
        build_partition(_raw(FMNIST, "fmnist"), "shards", 1, opts)
    with pytest.raises(DataError, match="needs the shards partition"):
        build_partition(_pooled_raw(), "iid", 1, opts)
    with pytest.raises(DataError, match="local_test must be 'own_shard' or 'global_shards'"):
        build_partition(_pooled_raw(), "shards", 1, {**FEDMDFG, "local_test": "global"})


def test_the_cifar_shard_statistics_docs_datasets_md_states():
    """docs/datasets.md §3 states, per seed, the mean number of distinct classes in a user's CIFAR
    training split and the share of users whose single-class test split has a class of their
    training split; they are the package's partitions' (the class sizes alone decide them)."""
    import re
    from pathlib import Path

    datasets_md = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"
    page = " ".join(datasets_md.read_text().split())
    m = re.search(r"seeds ([\d/]+) the CIFAR train splits have ([\d./]+) distinct classes on "
                  r"average and the test class is in the user's train split for ([\d/]+) % of "
                  r"users", page)
    assert m, "docs/datasets.md no longer states the CIFAR shard statistics; update this test"
    for seed, classes, share in zip(*(g.split("/") for g in m.groups()), strict=True):
        part = cifar_partition(int(seed))
        train = [CIFAR[t] for t in part.train]
        assert f"{np.mean([len(np.unique(y)) for y in train]):.2f}" == classes
        shared = [CIFAR[te][0] in set(y) for te, y in zip(part.test, train, strict=True)]
        assert f"{100 * np.mean(shared):.0f}" == share
