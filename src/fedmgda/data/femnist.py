"""FEMNIST: TensorFlow Federated's writer-partitioned EMNIST-62 (``fed_emnist.tar.bz2``).

Source choice (the paper says "the same dataset as Reddi et al. 2020", who used TFF's
``tff.simulation.datasets.emnist.load_data(only_digits=False)``): the archive holds
``fed_emnist_train.h5`` and ``fed_emnist_test.h5``; in each, ``examples/<writer>/pixels`` is a
float32 (n, 28, 28) array in [0, 1] and ``examples/<writer>/label`` the int class 0..61. TFF's
loader publishes the sha256 pinned below. The archive is extracted once next to itself (with a
marker recording which archive it came from). Pixels are used as stored (no inversion, no
normalisation — Reddi et al. feed them as is), as one float32 (N, 1, 28, 28) tensor filled in
place (about 2.3 GB for all 3 400 writers). Reading needs ``h5py``.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.base import DataError
from fedmgda.data.download import RawFile
from fedmgda.data.partition import RawData

ARCHIVE = "fed_emnist.tar.bz2"
RAW_FILES = (
    RawFile("femnist", ARCHIVE,
            "https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2",
            "sha256:fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
            "sha256 as published in TensorFlow Federated's emnist.load_data"),
)
H5_FILES = ("fed_emnist_train.h5", "fed_emnist_test.h5")
MARKER = ".fed_emnist.extracted"


def _h5py():
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DataError("FEMNIST needs the h5py package to read TFF's h5 files: "
                        "pip install h5py") from exc
    return h5py


def extract(raw_dir: Path) -> tuple[Path, Path]:
    """Extract the two h5 files from the (already verified) archive, once, atomically."""
    archive = RAW_FILES[0].path(raw_dir)
    folder = archive.parent
    marker = folder / MARKER
    stamp = f"{RAW_FILES[0].checksum} {archive.stat().st_size}"
    outs = tuple(folder / name for name in H5_FILES)
    if marker.is_file() and marker.read_text().strip() == stamp and all(p.is_file() for p in outs):
        return outs
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            base = member.name.rsplit("/", 1)[-1]
            if base in H5_FILES and member.isfile():
                tmp = folder / f".{base}.part"
                with tar.extractfile(member) as src, open(tmp, "wb") as dst:
                    while block := src.read(1 << 20):
                        dst.write(block)
                os.replace(tmp, folder / base)
    missing = [p.name for p in outs if not p.is_file()]
    if missing:
        raise DataError(f"{archive}: {missing} not found in the archive")
    marker.write_text(stamp + "\n")
    return outs


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    h5py = _h5py()
    train_path, test_path = extract(Path(raw_dir))
    max_users = int(options.get("max_users", 0) or 0)
    with h5py.File(train_path, "r") as ftr, h5py.File(test_path, "r") as fte:
        gtr, gte = ftr["examples"], fte["examples"]
        writers = sorted(gtr.keys())
        if max_users:
            writers = writers[:max_users]
        sizes = [(gtr[w]["label"].shape[0], gte[w]["label"].shape[0] if w in gte else 0)
                 for w in writers]
        total = sum(a + b for a, b in sizes)
        x = np.empty((total, 1, 28, 28), dtype=np.float32)  # one allocation, filled in place
        y = np.empty(total, dtype=np.int64)
        user_idx, source = [], []
        pos = 0
        for w, (n_tr, n_te) in zip(writers, sizes, strict=True):
            for group, n in ((gtr, n_tr), (gte, n_te)):
                if n:
                    x[pos:pos + n, 0] = group[w]["pixels"][()]
                    y[pos:pos + n] = group[w]["label"][()]
                    pos += n
            idx = np.arange(pos - n_tr - n_te, pos, dtype=np.int64)
            user_idx.append(idx)
            source.append((idx[:n_tr], idx[n_tr:]))
    return RawData(name="femnist", x=torch.from_numpy(x), y=torch.from_numpy(y),
                   users=writers, user_idx=user_idx, source_split=source)
