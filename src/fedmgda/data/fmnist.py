"""Fashion-MNIST from the four gzipped IDX files (protocol.md §1.2).

ToTensor + Normalize(0.1307, 0.3081) — the MNIST statistics, as the authors' code does.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.cifar10 import to_tensor
from fedmgda.data.download import DataError, RawFile
from fedmgda.data.partition import RawData

BASE_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_NOTE = "md5 as published by torchvision (datasets/mnist.py, FashionMNIST.resources)"
RAW_FILES = (
    RawFile("fmnist", "train-images-idx3-ubyte.gz", BASE_URL + "train-images-idx3-ubyte.gz",
            "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d", _NOTE),
    RawFile("fmnist", "train-labels-idx1-ubyte.gz", BASE_URL + "train-labels-idx1-ubyte.gz",
            "md5:25c81989df183df01b3e8a0aad5dffbe", _NOTE),
    RawFile("fmnist", "t10k-images-idx3-ubyte.gz", BASE_URL + "t10k-images-idx3-ubyte.gz",
            "md5:bef4ecab320f06d8554ea6380940ec79", _NOTE),
    RawFile("fmnist", "t10k-labels-idx1-ubyte.gz", BASE_URL + "t10k-labels-idx1-ubyte.gz",
            "md5:bb300cfdad3c16e7a12a480ee83cd310", _NOTE),
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


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    p = [rf.path(raw_dir) for rf in RAW_FILES]
    x_tr, y_tr, x_te, y_te = (read_idx(q) for q in p)
    return RawData(
        name="fmnist",
        x=to_tensor(x_tr[:, None], MEAN, STD), y=torch.from_numpy(y_tr.astype(np.int64)),
        global_test={"test": (to_tensor(x_te[:, None], MEAN, STD),
                              torch.from_numpy(y_te.astype(np.int64)))},
    )
