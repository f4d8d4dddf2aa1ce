"""Partitions that do not depend on the machine: the authors' label sort computed the
same way on every CPU, and golden content hashes of every partition reading.

The golden order hashes below were computed by numpy 1.23.5 and 1.24.4 (identical), whose int64
``argsort`` was the scalar introsort of numpy 1.17, the authors' version; the golden partition
hashes by this package. A machine whose numpy orders ties otherwise must still give them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedmgda.data import DataError, load_partition, make_partition, save_partition
from fedmgda.data.partition import sort_by_label
from fedmgda.legacy_sort import introsort, numpy_1_17_argsort


def order_md5(order) -> str:
    return hashlib.md5(np.asarray(order, dtype="<i8").tobytes()).hexdigest()


def sort_cases() -> dict[str, np.ndarray]:
    return {
        "ties_10_classes": np.random.RandomState(0).randint(0, 10, 5000),
        "few_ties": np.random.RandomState(1).randint(0, 1000, 3000),
        "organ_pipe_heapsort": np.concatenate([np.arange(2000), np.arange(2000)[::-1]]),
        "all_equal": np.zeros(100, dtype=np.int64),
        "cifar_like": np.repeat(np.arange(10), 5000)[np.random.RandomState(2).permutation(50000)],
        "seventeen": np.random.RandomState(3).randint(0, 3, 17),
    }


# np.argsort(case) under numpy 1.23.5 / 1.24.4 (int64, default kind), md5 of the order as <i8
NUMPY_1_24_ORDERS = {
    "ties_10_classes": "dcfa3f4cc01c1703cd00c1ea073059da",
    "few_ties": "9d817147d1d5831b20e9392322b4ccf6",
    "organ_pipe_heapsort": "749e952229d7929b0edcde1bd8876d28",
    "all_equal": "cab6b92c6b1d76e2bc21d107aff95821",
    "cifar_like": "8c40c02afd2776c90ab712e9dea17c6d",
    "seventeen": "dd07dbc98ecea8f786b5fdd7c5339e6a",
}
# the same for the real Fashion-MNIST labels (train-labels-idx1-ubyte, t10k-labels-idx1-ubyte)
FMNIST_TRAIN_ORDER = "b6eb0184f15416253ad78058c49a420a"
FMNIST_TEST_ORDER = "82980d4d8fb353713236b2bf3c7dc923"


@pytest.mark.parametrize("name", sorted(NUMPY_1_24_ORDERS))
def test_the_authors_sort_gives_numpy_1_24s_order(name):
    keys = sort_cases()[name]
    order = numpy_1_17_argsort(keys)
    assert order_md5(order) == NUMPY_1_24_ORDERS[name]
    assert np.array_equal(np.sort(keys, kind="stable"), keys[order])  # and it is a sort


def test_the_heapsort_fallback_is_exercised_and_label_arrays_never_reach_it():
    """numpy's introsort falls back to heapsort past a depth of 2 log2(n); the organ pipe reaches
    it (so that branch is checked against numpy above), label arrays do not: for them numpy before
    introsort (pre-1.17) gave the same order too."""
    cases = sort_cases()
    assert introsort(cases["organ_pipe_heapsort"].tolist())[1]
    for name in ("ties_10_classes", "cifar_like", "all_equal"):
        assert not introsort(cases[name].tolist())[1]


def test_rejects_what_numpy_1_17_did_not_sort_this_way():
    with pytest.raises(ValueError, match="integer keys"):
        numpy_1_17_argsort(np.array([0.5, 0.1]))
    with pytest.raises(ValueError, match="integer keys"):
        numpy_1_17_argsort(np.zeros((2, 2), dtype=np.int64))
    assert numpy_1_17_argsort(np.zeros(0, dtype=np.int64)).tolist() == []


def test_equals_this_machines_numpy_with_its_simd_sorts_switched_off():
    """This machine's numpy still has the scalar introsort; with its SIMD dispatch targets disabled
    (NPY_DISABLE_CPU_FEATURES) its default argsort must equal ours on random keys."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy < 2
        from numpy.core import _multiarray_umath as umath
    targets = list(getattr(umath, "__cpu_dispatch__", []))
    code = ("import numpy as np, sys; rs = np.random.RandomState(7); "
            "np.save(sys.argv[1], np.stack([np.argsort(rs.randint(0, k, 4000)) for k in (2, 10, "
            "100, 10**6)]))")
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"scalar_argsort_{os.getpid()}.npy"
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(targets)}
    subprocess.run([sys.executable, "-c", code, str(out)], env=env, check=True)
    theirs = np.load(out)
    out.unlink()
    rs = np.random.RandomState(7)
    for row, k in zip(theirs, (2, 10, 100, 10**6)):
        assert np.array_equal(row, numpy_1_17_argsort(rs.randint(0, k, 4000)))


def shuffled_ties_argsort(keys, kind=None, **_):
    """Another machine's unstable sort: sorted, each class's members in reverse id order."""
    keys = np.asarray(keys)
    return np.lexsort((-np.arange(len(keys)), keys))


def test_quicksort_reading_ignores_the_machines_own_sort(monkeypatch):
    labels = sort_cases()["cifar_like"]
    before = sort_by_label(labels, len(labels), "quicksort")
    monkeypatch.setattr(np, "argsort", shuffled_ties_argsort)
    assert np.array_equal(sort_by_label(labels, len(labels), "quicksort"), before)
    assert order_md5(before) == NUMPY_1_24_ORDERS["cifar_like"]


# ------------------------------------------------------------------------ golden partition hashes
def content_hashes(raw_dir, readings) -> dict[str, str]:
    out = {}
    for name, (dataset, scheme, options, seed) in readings.items():
        out[name] = make_partition(dataset, raw_dir, scheme, seed, options).content_hash()[:16]
    return out


OFFLINE_READINGS = {
    "digits_shards_stable_s1": ("digits", "shards", {}, 1),
    "digits_shards_stable_s5000": ("digits", "shards", {}, 5000),
    "digits_shards_quicksort_s1": ("digits", "shards", {"sort": "quicksort"}, 1),
    "digits_shards_quicksort_s5000": ("digits", "shards", {"sort": "quicksort"}, 5000),
    "digits_iid_s1": ("digits", "iid", {}, 1),
    "digits_iid_s5000": ("digits", "iid", {}, 5000),
    "synthetic_natural": ("synthetic", "natural", {}, 1),
    "synthetic_natural_shuffle_s1": ("synthetic", "natural", {"shuffle": True}, 1),
    "synthetic_natural_shuffle_s5000": ("synthetic", "natural", {"shuffle": True}, 5000),
    "digits_dirichlet_0.5_s1": ("digits", "dirichlet", {"dirichlet_alpha": 0.5}, 1),
    "digits_dirichlet_0.5_s5000": ("digits", "dirichlet", {"dirichlet_alpha": 0.5}, 5000),
}
OFFLINE_GOLDEN = {
    "digits_shards_stable_s1": "6d8866ff10a13325",
    "digits_shards_stable_s5000": "e6c5a4f5a55ec36b",
    "digits_shards_quicksort_s1": "2bc6579f5c94d600",
    "digits_shards_quicksort_s5000": "32295aff8494152b",
    "digits_iid_s1": "879ad1bb139be548",
    "digits_iid_s5000": "6162e241ff95f640",
    "synthetic_natural": "b8516bcdb268c1ce",
    "synthetic_natural_shuffle_s1": "558cf0f523b2a0b7",
    "synthetic_natural_shuffle_s5000": "1efd49d5a793384a",
    "digits_dirichlet_0.5_s1": "a6a0788e3b1a4070",
    "digits_dirichlet_0.5_s5000": "45cbf02bff406d3c",
}


def test_golden_hashes_of_the_offline_readings(tmp_path):
    assert content_hashes(tmp_path, OFFLINE_READINGS) == OFFLINE_GOLDEN


FMNIST_READINGS = {
    **{f"shards_{sort}_{setting}_s{seed}": ("fmnist", "shards",
                                            {"sort": sort, "shard_setting": setting}, seed)
       for sort in ("stable", "quicksort") for setting in ("code", "paper", "fedmdfg")
       for seed in (1, 5000)},
    **{f"shards_{sort}_fedmdfg_global_shards_s{seed}": (
        "fmnist", "shards",
        {"sort": sort, "shard_setting": "fedmdfg", "local_test": "global_shards"}, seed)
       for sort in ("stable", "quicksort") for seed in (1, 5000)},
    "iid_s1": ("fmnist", "iid", {}, 1),
    "iid_s5000": ("fmnist", "iid", {}, 5000),
    "fmnist3_natural": ("fmnist3", "natural", {}, 1),
    **{f"dirichlet_{alpha}_s{seed}": ("fmnist", "dirichlet", {"dirichlet_alpha": alpha}, seed)
       for alpha in (0.1, 0.5, 1.0) for seed in (1, 5000)},
}
FMNIST_GOLDEN = {
    "shards_stable_code_s1": "9720450c468981b4",
    "shards_stable_code_s5000": "77e323be39f6ddf0",
    "shards_stable_paper_s1": "696e7a958119ca9d",
    "shards_stable_paper_s5000": "ea26f27ece08cf24",
    "shards_stable_fedmdfg_s1": "6c3c347b5bbc1346",
    "shards_stable_fedmdfg_s5000": "711f36497f829f90",
    "shards_quicksort_code_s1": "f6cfdf5423f523f5",
    "shards_quicksort_code_s5000": "60e4980a83a17cbd",
    "shards_quicksort_paper_s1": "2016664145acf19a",
    "shards_quicksort_paper_s5000": "a19b86f5d8e3cb6d",
    "shards_quicksort_fedmdfg_s1": "12edfe4f6b9e2367",
    "shards_quicksort_fedmdfg_s5000": "cf1ca421197c427f",
    "shards_stable_fedmdfg_global_shards_s1": "502df6bef7764928",
    "shards_stable_fedmdfg_global_shards_s5000": "681f5e98dd152192",
    "shards_quicksort_fedmdfg_global_shards_s1": "1943c4dd24232b6c",
    "shards_quicksort_fedmdfg_global_shards_s5000": "050e620e6302e51e",
    "iid_s1": "551a9fc9a40763b0",
    "iid_s5000": "832801453773e6fa",
    "fmnist3_natural": "6518f0e4b6e42486",
    "dirichlet_0.1_s1": "7c49eaf5f0e96dc0",
    "dirichlet_0.1_s5000": "a84ad3bcc3fd352a",
    "dirichlet_0.5_s1": "d714c1a1204be295",
    "dirichlet_0.5_s5000": "c9dff0cdc488f480",
    "dirichlet_1.0_s1": "c93d6d2711508279",
    "dirichlet_1.0_s5000": "7f554f91a246673f",
}


@pytest.mark.realdata
def test_golden_hashes_of_the_fmnist_readings(real_fmnist):
    from fedmgda.data import load_raw

    # the test labels after the train labels
    pooled = {"shard_setting": "fedmdfg", "local_test": "global_shards"}
    labels = load_raw("fmnist", real_fmnist, pooled).labels
    assert order_md5(sort_by_label(labels, 60_000, "quicksort")) == FMNIST_TRAIN_ORDER
    assert order_md5(sort_by_label(labels[60_000:], 10_000, "quicksort")) == FMNIST_TEST_ORDER
    assert content_hashes(real_fmnist, FMNIST_READINGS) == FMNIST_GOLDEN


ADULT_READINGS = {
    "domain": ("adult", "domain", {}, 1),
    "domain_shift_by_one": ("adult", "domain", {"shift_by_one": True}, 1),
    "domain_phd_only": ("adult", "domain", {"clients": "phd"}, 1),
    "domain_source": ("adult", "domain", {"split": "source"}, 1),
    "iid_s1": ("adult", "iid", {}, 1),
    "iid_s5000": ("adult", "iid", {}, 5000),
}
ADULT_GOLDEN = {
    "domain": "0797c513b31b7d98",
    "domain_shift_by_one": "9b9ed3516de99065",
    "domain_phd_only": "41ee85620ac50ea5",
    "domain_source": "1622584bccc77cf0",
    "iid_s1": "ff70dbd997c344ad",
    "iid_s5000": "0bdec31ec0d6663f",
}


@pytest.mark.realdata
def test_golden_hashes_of_the_adult_readings(real_adult):
    assert content_hashes(real_adult, ADULT_READINGS) == ADULT_GOLDEN


TINY_READINGS = {
    "cifar10_shards_stable": ("cifar10", "shards",
                              {"num_users": 10, "num_shards": 20, "shard_size": 5}, 1),
    "cifar10_shards_quicksort": ("cifar10", "shards",
                                 {"num_users": 10, "num_shards": 20, "shard_size": 5,
                                  "sort": "quicksort"}, 1),
    "cifar10_iid": ("cifar10", "iid", {"num_users": 10}, 1),
    "femnist_source": ("femnist", "natural", {}, 1),
    "femnist_80_10_10_shuffle": ("femnist", "natural", {"split": "80_10_10", "shuffle": True}, 1),
    "shakespeare_source": ("shakespeare", "natural", {}, 1),
    "shakespeare_80_10_10": ("shakespeare", "natural", {"split": "80_10_10"}, 1),
}
TINY_GOLDEN = {
    "cifar10_shards_stable": "c6402b46db921ec3",
    "cifar10_shards_quicksort": "4bd6df414cab30f5",
    "cifar10_iid": "a7169555d7075681",
    "femnist_source": "9b7ebb470d0db5f7",
    "femnist_80_10_10_shuffle": "af28d561275cf791",
    "shakespeare_source": "1089b570eb50a641",
    "shakespeare_80_10_10": "ec32b8512ab9333a",
}


def test_golden_hashes_of_the_readings_on_tiny_files_in_the_real_formats(tmp_path, fmt, pin):
    """CIFAR-10, FEMNIST and Shakespeare cannot be fetched here: the same readings on tiny files
    written in their real formats (tests/data/conftest.py)."""
    fmt.write_cifar(tmp_path)
    fmt.write_femnist(tmp_path, {"w0": (12, 4), "w1": (9, 3), "w2": (20, 5)})
    fmt.write_shakespeare(tmp_path,
                          {"ROMEO": "But soft, what light through yonder window breaks? " * 3,
                                     "JULIET": "O Romeo, Romeo, wherefore art thou Romeo? " * 4})
    for name in ("cifar10", "femnist", "shakespeare"):
        pin(name, tmp_path)
    assert content_hashes(tmp_path, TINY_READINGS) == TINY_GOLDEN


# ------------------------------------------------------------------------ the hash in the file
def test_a_partition_file_carries_its_content_hash_and_a_changed_index_is_caught(tmp_path):
    part = make_partition("digits", tmp_path, "shards", 1, {"sort": "quicksort"})
    path = save_partition(part, tmp_path / "p.npz")
    assert load_partition(path).content_hash() == part.content_hash()
    with np.load(path) as z:
        arrays = dict(z)
    assert json.loads(str(arrays["meta"]))["content_hash"] == part.content_hash()
    arrays["train_idx"] = arrays["train_idx"].copy()
    arrays["train_idx"][[0, 1]] = arrays["train_idx"][[1, 0]]  # two samples swap users' order
    np.savez(tmp_path / "swapped.npz", **arrays)
    with pytest.raises(DataError, match="corrupt"):
        load_partition(tmp_path / "swapped.npz")
    # a file of format 1 (before the hash): stale with sort 'quicksort' (the machine's order then),
    # read as it is otherwise (those readings did not change)
    meta = json.loads(str(arrays["meta"]))
    old = {"format_version": 1,
           **{k: v for k, v in meta.items() if k not in ("format_version", "content_hash")}}
    np.savez(tmp_path / "old.npz", **{**dict(np.load(path)), "meta": np.array(json.dumps(old))})
    with pytest.raises(DataError, match="format 1.*quicksort.*rm "):
        load_partition(tmp_path / "old.npz")
    old["options"] = {**old["options"], "sort": "stable"}
    np.savez(tmp_path / "old_stable.npz",
             **{**dict(np.load(path)), "meta": np.array(json.dumps(old))})
    assert load_partition(tmp_path / "old_stable.npz").content_hash() == part.content_hash()

