"""Tiny files in each real raw format go through the same loading / preprocessing / partition
code that real files take."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedmgda.data import DataError, load_federated, make_partition
from fedmgda.data.shakespeare import ALL_LETTERS, NUM_LETTERS


def test_cifar_tarball_is_read_normalised_and_sharded(tmp_path, fmt, pin):
    fmt.write_cifar(tmp_path, per_batch=20, test_n=30)
    pin("cifar10", tmp_path)
    opts = {"num_users": 5, "num_shards": 10, "shard_size": 10}
    fd = load_federated("cifar10", tmp_path, options=opts)
    assert fd.x.shape == (100, 3, 32, 32) and fd.x.dtype == torch.float32
    assert fd.y.dtype == torch.int64 and fd.global_test["test"][0].shape == (30, 3, 32, 32)
    assert fd.x.min() >= -1 and fd.x.max() <= 1
    assert fd.train_sizes() == [16] * 5 and fd.test_sizes() == [2] * 5

    # same numbers as torchvision's ToTensor + Normalize(0.5, 0.5) on the HWC image
    import pickle
    import tarfile

    from torchvision import transforms

    with tarfile.open(tmp_path / "cifar10" / "cifar-10-python.tar.gz") as tar:
        d = pickle.load(tar.extractfile("cifar-10-batches-py/data_batch_2"), encoding="latin1")
    img = d["data"][3].reshape(3, 32, 32).transpose(1, 2, 0)
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
    assert torch.allclose(fd.x[20 + 3], tf(img), atol=1e-6)
    assert fd.y[20 + 3].item() == d["labels"][3]


def test_fmnist_gzipped_idx_is_read_and_normalised_with_mnist_statistics(tmp_path, fmt, pin):
    arrays = fmt.write_fmnist(tmp_path, n_train=60, n_test=20)
    pin("fmnist", tmp_path)
    fd = load_federated("fmnist", tmp_path, partition="iid", options={"num_users": 6})
    assert fd.x.shape == (60, 1, 28, 28) and fd.global_test["test"][0].shape == (20, 1, 28, 28)
    raw = arrays["train-images-idx3-ubyte.gz"][7].astype(np.float32)
    expect = (raw / 255.0 - 0.1307) / 0.3081
    assert np.allclose(fd.x[7, 0].numpy(), expect, atol=1e-5)
    assert fd.y.tolist() == (np.arange(60) % 10).tolist()
    assert fd.train_sizes() == [8] * 6 and fd.test_sizes() == [1] * 6


def test_corrupt_idx_header_is_a_data_error(tmp_path):
    import gzip

    from fedmgda.data.fmnist import read_idx

    p = tmp_path / "bad.gz"
    with gzip.open(p, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"\x00" * 3)
    with pytest.raises(DataError):
        read_idx(p)


def test_shakespeare_leaf_json_gives_one_user_per_role_and_next_char_targets(tmp_path, fmt, pin):
    assert NUM_LETTERS == 80 and len(set(ALL_LETTERS)) == 80
    text_a = ("To be, or not to be: that is the question. Whether 'tis nobler in the mind "
              "to suffer the slings and arrows of outrageous fortune... ") * 2
    text_b = "ALL: Double, double toil and trouble; fire burn and cauldron bubble! " * 3
    fmt.write_shakespeare(tmp_path, {"HAMLET": text_a, "WITCHES": text_b})
    pin("shakespeare", tmp_path)
    fd = load_federated("shakespeare", tmp_path)
    assert fd.num_users == 2 and fd.x.shape[1] == 80 and fd.x.dtype == torch.int64
    n_a = len(text_a) - 80
    assert fd.train_sizes()[0] == int(0.8 * n_a) and fd.test_sizes()[0] == n_a - int(0.8 * n_a)
    first = fd.train_idx[0][0].item()
    decoded = "".join(ALL_LETTERS[i] for i in fd.x[first].tolist())
    assert decoded == text_a[:80] and ALL_LETTERS[fd.y[first].item()] == text_a[80]
    resplit = make_partition("shakespeare", tmp_path, None, 1, {"split": "80_10_10"})
    assert len(resplit.val[0]) > 0 and len(resplit.test[0]) == n_a - int(0.9 * n_a)


def test_femnist_tff_h5_archive_is_extracted_once_and_split_by_writer(tmp_path, fmt, pin):
    pytest.importorskip("h5py")
    fmt.write_femnist(tmp_path, {"f0000_14": (7, 2), "f0001_41": (5, 1), "f0002_00": (3, 0)})
    pin("femnist", tmp_path)
    fd = load_federated("femnist", tmp_path)
    assert fd.num_users == 3 and fd.x.shape == (18, 1, 28, 28) and fd.x.dtype == torch.float32
    assert fd.train_sizes() == [7, 5, 3] and fd.test_sizes() == [2, 1, 0]
    assert int(fd.y.max()) < 62
    h5 = tmp_path / "femnist" / "fed_emnist_train.h5"
    stamp = h5.stat().st_mtime_ns
    fd2 = load_federated("femnist", tmp_path, options={"max_users": 2})
    assert h5.stat().st_mtime_ns == stamp  # not extracted again
    assert fd2.num_users == 2 and torch.equal(fd2.x, fd.x[:15])


def test_load_federated_saves_then_reuses_the_partition_file(tmp_path, fmt, pin):
    fmt.write_cifar(tmp_path)
    pin("cifar10", tmp_path)
    opts = {"num_users": 5, "num_shards": 10, "shard_size": 10}
    pfile = tmp_path / "parts" / "cifar10_seed3.npz"
    a = load_federated("cifar10", tmp_path, seed=3, options=opts, partition_file=pfile)
    assert pfile.is_file()
    b = load_federated("cifar10", tmp_path, seed=3, options=opts, partition_file=pfile)
    assert all(torch.equal(x, y) for x, y in zip(a.train_idx, b.train_idx, strict=True))
    with pytest.raises(DataError, match="stale"):
        load_federated("cifar10", tmp_path, seed=4, options=opts, partition_file=pfile)
