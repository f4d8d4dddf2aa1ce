"""fmnist3 (q-FFL's three-class Fashion-MNIST) and Fashion-MNIST copies with another gzip header."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd
import pytest
import torch

from fedmgda.config import RunConfig
from fedmgda.data import DATASET_SPECS, ensure_raw_files, load_federated, make_partition
from fedmgda.data.download import file_digest
from fedmgda.data.fmnist import read_idx
from fedmgda.scheduler import run

USERS = ["tshirt", "pullover", "shirt"]
LABELS = (0, 2, 6)  # the original Fashion-MNIST labels of the three users


def expected_features(raw_dir, split: str, label: int) -> np.ndarray:
    """Independent reading of fair_flearn data/fmnist/create_dataset.py lines 39-43: pixels of
    ``label`` in ``split``, standardised with the per-pixel mean / std of ALL training images."""
    images = read_idx(raw_dir / "fmnist" / "train-images-idx3-ubyte.gz")
    train = images.reshape(-1, 784).astype(np.float64)
    images = read_idx(raw_dir / "fmnist" / f"{split}-images-idx3-ubyte.gz").reshape(-1, 784)
    labels = read_idx(raw_dir / "fmnist" / f"{split}-labels-idx1-ubyte.gz")
    return (images[labels == label] - train.mean(0)) / (train.std(0) + 0.001)


def two_round_metrics(raw_dir) -> pd.DataFrame:
    cfg = RunConfig.from_dict(dict(dataset="fmnist3", raw_dir=str(raw_dir), algorithm="fedavg",
                                   rounds=2,
                                   participation=1.0, batch_size="full", local_lr=0.1, seed=1,
                                   device="cpu", eval_every=1, per_user_every=1))
    return run(cfg).metrics


def check_fmnist3(raw_dir, n_train: int, n_test: int) -> None:
    fd = load_federated("fmnist3", raw_dir)
    assert fd.num_classes == 3 and fd.x.shape[1:] == (784,) and fd.x.dtype == torch.float32
    assert fd.train_sizes() == [n_train] * 3 and fd.test_sizes() == [n_test] * 3
    for user, label in enumerate(LABELS):
        for idx, split in ((fd.train_idx[user], "train"), (fd.test_idx[user], "t10k")):
            assert fd.y[idx].tolist() == [user] * len(idx)  # 0, 2, 6 -> 0, 1, 2
            # the authors' statistics are float32 numpy sums (so are ours): within 0.2 % of float64
            np.testing.assert_allclose(fd.x[idx].numpy(), expected_features(raw_dir, split, label),
                                       rtol=2e-3, atol=1e-4)
        gx, gy = fd.global_test[USERS[user]]
        assert torch.equal(gx, fd.x[fd.test_idx[user]]) and torch.equal(gy, fd.y[fd.test_idx[user]])
    all_x, all_y = fd.global_test["all"]
    assert list(fd.global_test) == ["all", *USERS]
    assert torch.equal(all_x, torch.cat([fd.global_test[u][0] for u in USERS]))
    assert all_y.tolist() == sum(([u] * n_test for u in range(3)), [])
    part = make_partition("fmnist3", raw_dir, None, 7)
    assert part.scheme == "natural" and part.users == USERS and part.seed == 0
    assert [len(v) for v in part.val] == [0, 0, 0]
    assert sorted(np.concatenate(part.train + part.test).tolist()) == list(range(len(fd.y)))


def test_fmnist3_on_fixture_files(tmp_path, fmt, pin):
    # labels i % 10: 6 train / 2 test images per class
    fmt.write_fmnist(tmp_path, n_train=60, n_test=20)
    pin("fmnist3", tmp_path)
    check_fmnist3(tmp_path, n_train=6, n_test=2)
    metrics = two_round_metrics(tmp_path)
    assert len(metrics) == 2 and np.isfinite(metrics["train_loss"]).all()
    assert {"test_acc_all", "test_acc_tshirt", "test_acc_pullover",
            "test_acc_shirt"} <= set(metrics)


def test_standardisation_uses_every_training_image(tmp_path, fmt, pin):
    """mu and sigma come from all 10 classes: the 60 standardised training images average to ~0."""
    from fedmgda.data.fmnist import standardise

    fmt.write_fmnist(tmp_path, n_train=60, n_test=20)
    pin("fmnist3", tmp_path)
    train = read_idx(tmp_path / "fmnist" / "train-images-idx3-ubyte.gz")
    (z,) = standardise(train)
    assert z.shape == (60, 784) and np.abs(z.mean(0)).max() < 1e-5
    fd = load_federated("fmnist3", tmp_path)
    np.testing.assert_allclose(fd.x[fd.train_idx[0]].numpy(), z[np.arange(60) % 10 == 0], rtol=1e-6)
    three = fd.x[torch.cat(fd.train_idx)].numpy()
    # the three classes alone are not centred: not their mu
    assert np.abs(three.mean(0)).max() > 0.1


def _pin_archive_and_content(monkeypatch, raw_dir):
    """The fmnist3 pins rewritten for the fixture files in raw_dir: md5 of the archive, sha256 of
    the decompressed bytes (the form of the real pins)."""
    spec = DATASET_SPECS["fmnist3"]
    files = tuple(dataclasses.replace(rf, checksum="md5:" + file_digest(rf.path(raw_dir), "md5"),
                                      content_checksum="sha256:"
                                      + file_digest(rf.path(raw_dir), decompress=True))
                  for rf in spec.raw_files)
    monkeypatch.setitem(DATASET_SPECS, "fmnist3", dataclasses.replace(spec, raw_files=files))


def test_restamped_fixture_copy_loads_and_trains_identically(tmp_path, fmt, monkeypatch):
    original, copy = tmp_path / "original", tmp_path / "copy"
    fmt.write_fmnist(original, n_train=60, n_test=20)
    _pin_archive_and_content(monkeypatch, original)
    for rf in DATASET_SPECS["fmnist3"].raw_files:
        fmt.restamp_gz(rf.path(original), rf.path(copy))
        assert hashlib.md5(rf.path(copy).read_bytes()).hexdigest() != rf.digest
    a, b = load_federated("fmnist3", original), load_federated("fmnist3", copy)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    pd.testing.assert_frame_equal(two_round_metrics(original), two_round_metrics(copy))


@pytest.mark.realdata
def test_debian_fmnist_files_pass_the_pins_and_give_fmnist3(real_fmnist):
    """The real files (Debian's dataset-fashion-mnist carries another gzip header than Zalando's)
    are accepted through the content pins; fmnist3 has 6 000 train / 1 000 test images per user."""
    assert len(ensure_raw_files("fmnist", real_fmnist, allow_download=False)) == 4
    check_fmnist3(real_fmnist, n_train=6000, n_test=1000)
    fd = load_federated("fmnist3", real_fmnist)
    assert fd.x.shape == (21_000, 784)


@pytest.mark.realdata
def test_restamped_real_copy_loads_and_trains_identically(real_fmnist, tmp_path, fmt):
    copy = tmp_path / "copy"
    for rf in DATASET_SPECS["fmnist3"].raw_files:
        fmt.restamp_gz(rf.path(real_fmnist), rf.path(copy), mtime=987_654_321, filename="x")
        assert file_digest(rf.path(copy), "md5") != file_digest(rf.path(real_fmnist), "md5")
    a, b = load_federated("fmnist3", real_fmnist), load_federated("fmnist3", copy)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    pd.testing.assert_frame_equal(two_round_metrics(real_fmnist), two_round_metrics(copy))
