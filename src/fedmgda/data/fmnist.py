"""Fashion-MNIST from the four gzipped IDX files: ``fmnist`` (FedMGDA+, docs/protocol.md §1.2) and
``fmnist3`` (q-FFL's three-class version, fair_flearn ``data/fmnist/create_dataset.py``).

fmnist: ToTensor + Normalize(0.1307, 0.3081) — the MNIST statistics, as the authors' code does.
fmnist3: see :func:`load_three_classes`.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.base import DataError
from fedmgda.data.cifar10 import to_tensor
from fedmgda.data.download import RawFile
from fedmgda.data.partition import RawData

BASE_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_NOTE = ("md5 as published by torchvision (datasets/mnist.py, FashionMNIST.resources); the "
         "content sha256 is that of the decompressed IDX bytes, taken from Debian's "
         "dataset-fashion-mnist (same content, another gzip header)")
RAW_FILES = (
    RawFile("fmnist", "train-images-idx3-ubyte.gz", BASE_URL + "train-images-idx3-ubyte.gz",
            "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d", _NOTE,
            "sha256:c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
    RawFile("fmnist", "train-labels-idx1-ubyte.gz", BASE_URL + "train-labels-idx1-ubyte.gz",
            "md5:25c81989df183df01b3e8a0aad5dffbe", _NOTE,
            "sha256:bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
    RawFile("fmnist", "t10k-images-idx3-ubyte.gz", BASE_URL + "t10k-images-idx3-ubyte.gz",
            "md5:bef4ecab320f06d8554ea6380940ec79", _NOTE,
            "sha256:5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
    RawFile("fmnist", "t10k-labels-idx1-ubyte.gz", BASE_URL + "t10k-labels-idx1-ubyte.gz",
            "md5:bb300cfdad3c16e7a12a480ee83cd310", _NOTE,
            "sha256:0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
)
MEAN, STD = 0.1307, 0.3081


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzipped or not) as a uint8 array of its declared shape."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    dims = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise DataError(f"{path}: IDX header says {dims}, body has {body.size} bytes")
    return body.reshape(dims)


def read_all(raw_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) as uint8 arrays."""
    x_tr, y_tr, x_te, y_te = (read_idx(rf.path(raw_dir)) for rf in RAW_FILES)
    return x_tr, y_tr, x_te, y_te


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    """The 60 000 training images pooled; the t10k images the global test set. With
    ``local_test: global_shards`` the t10k images are also pooled after the training images
    (positions 60 000..69 999, ``RawData.test_pool``), so that users' test shards can index them."""
    x_tr, y_tr, x_te, y_te = read_all(raw_dir)
    if options.get("local_test", "own_shard") == "global_shards":
        x = to_tensor(np.concatenate([x_tr, x_te])[:, None], MEAN, STD)
        y = torch.from_numpy(np.concatenate([y_tr, y_te]).astype(np.int64))
        n = len(y_tr)
        return RawData(name="fmnist", x=x, y=y, global_test={"test": (x[n:], y[n:])},
                       test_pool=np.arange(n, len(y), dtype=np.int64))
    return RawData(
        name="fmnist",
        x=to_tensor(x_tr[:, None], MEAN, STD), y=torch.from_numpy(y_tr.astype(np.int64)),
        global_test={"test": (to_tensor(x_te[:, None], MEAN, STD),
                              torch.from_numpy(y_te.astype(np.int64)))},
    )


# q-FFL's Fashion-MNIST (fair_flearn data/fmnist/create_dataset.py): one device per class.
# user -> original label; new label = position
THREE_CLASSES = {"tshirt": 0, "pullover": 2, "shirt": 6}
SIGMA_EPS = 0.001  # (x - mu) / (sigma + 0.001), create_dataset.py lines 42-43


def standardise(x_train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Flattened float32 images standardised per pixel with the mean / std of ``x_train``
    (create_dataset.py lines 39-43: float32 numpy mean and population std over axis 0)."""
    flat = [a.reshape(len(a), -1).astype(np.float32) for a in (x_train, *others)]
    mu = np.mean(flat[0], 0)
    sigma = np.std(flat[0], 0)
    return [(a - mu) / (sigma + SIGMA_EPS) for a in flat]


def load_three_classes(raw_dir: Path, options: dict[str, Any]) -> RawData:
    """fmnist3: T-shirt/top, pullover, shirt (labels 0, 2, 6 -> 0, 1, 2), one user per class.

    Features: the 784 pixels standardised with mu / sigma over ALL 60 000 training images (every
    class). Pool: per user, its train images then its t10k images, each in file order; the source
    split (train = the class's train images, test = its t10k images) is what fair_flearn's
    ``data_partition_seed == 0`` uses. Global test sets: ``all`` (the three classes' t10k images)
    and one per user.
    """
    x_tr, y_tr, x_te, y_te = read_all(raw_dir)
    x_tr, x_te = standardise(x_tr, x_te)
    xs, ys, user_idx, source = [], [], [], []
    pos = 0
    for new_label, label in enumerate(THREE_CLASSES.values()):
        rows_tr, rows_te = np.flatnonzero(y_tr == label), np.flatnonzero(y_te == label)
        xs += [x_tr[rows_tr], x_te[rows_te]]
        ys.append(np.full(len(rows_tr) + len(rows_te), new_label, dtype=np.int64))
        idx = np.arange(pos, pos + len(rows_tr) + len(rows_te), dtype=np.int64)
        user_idx.append(idx)
        source.append((idx[:len(rows_tr)], idx[len(rows_tr):]))
        pos += len(idx)
    x, y = torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))

    def subset(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.from_numpy(rows)
        return x[rows], y[rows]

    tests = {user: subset(te) for user, (_, te) in zip(THREE_CLASSES, source, strict=True)}
    all_te = np.concatenate([te for _, te in source])
    return RawData(name="fmnist3", x=x, y=y, global_test={"all": subset(all_te), **tests},
                   users=list(THREE_CLASSES), user_idx=user_idx, source_split=source)
