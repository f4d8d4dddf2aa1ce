"""CIFAR-10 from the official python tarball (docs/protocol.md §1.1).

Read straight from ``cifar-10-python.tar.gz`` (pickled batches ``data_batch_1..5`` and
``test_batch``); ToTensor + Normalize(0.5, 0.5) per channel, i.e. uint8 v -> (v/255 - 0.5)/0.5,
done once in place on one float32 tensor.
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.base import DataError
from fedmgda.data.download import RawFile
from fedmgda.data.partition import RawData

ARCHIVE = "cifar-10-python.tar.gz"
RAW_FILES = (
    RawFile("cifar10", ARCHIVE, "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "md5:c58f30108f718f92721af3b95e74349a",
            "md5 as published by torchvision (datasets/cifar.py)"),
)
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
MEAN, STD = 0.5, 0.5


def read_batches(archive: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{batch name: (uint8 (N, 3, 32, 32), int64 labels)} for every batch in the tarball."""
    wanted = set(TRAIN_BATCHES) | {TEST_BATCH}
    out = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            base = member.name.rsplit("/", 1)[-1]
            if base not in wanted or not member.isfile():
                continue
            d = pickle.load(tar.extractfile(member), encoding="latin1")
            data = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            out[base] = (data, np.asarray(d["labels"], dtype=np.int64))
    missing = wanted - set(out)
    if missing:
        raise DataError(f"{archive}: batches {sorted(missing)} not found in the archive")
    return out


def to_tensor(u8: np.ndarray, mean: float = MEAN, std: float = STD) -> torch.Tensor:
    """ToTensor + Normalize for a uint8 NCHW array, one float32 allocation."""
    u8 = np.ascontiguousarray(u8)
    if not u8.flags.writeable:  # e.g. np.frombuffer; torch wants a writable buffer
        u8 = u8.copy()
    x = torch.from_numpy(u8).to(torch.float32)
    return x.div_(255.0).sub_(mean).div_(std)


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    batches = read_batches(RAW_FILES[0].path(raw_dir))
    x_tr = np.concatenate([batches[b][0] for b in TRAIN_BATCHES])
    y_tr = np.concatenate([batches[b][1] for b in TRAIN_BATCHES])
    x_te, y_te = batches[TEST_BATCH]
    return RawData(
        name="cifar10", x=to_tensor(x_tr), y=torch.from_numpy(y_tr),
        global_test={"test": (to_tensor(x_te), torch.from_numpy(y_te))},
    )
