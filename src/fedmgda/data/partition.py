"""A dataset's pooled samples (``RawData``), a partition of them (``Partition``: which pooled
samples belong to which user, and each user's train/val/test cut), its file, and
:func:`build_partition`, the dispatch to the partitioner a run names.

The partitioners themselves, and the authors' code they follow call for call, are
:mod:`fedmgda.partitioners` (numpy only, no torch; their functions are importable from here too).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda import catalog
from fedmgda.errors import DataError
from fedmgda.partitioners import (  # noqa: F401  (split_user ... global_test_shards: imported from here too)
    get_partitioner,
    global_test_shards,
    iid_partition,
    options_error,
    shard_partition,
    sort_by_label,
    split_user,
)
from fedmgda.runfolder import temporary_file

# 2: meta carries content_hash; sort 'quicksort' is numpy 1.17's order (format 1: the machine's)
FORMAT_VERSION = 2


@dataclass
class RawData:
    """A dataset's pooled samples as loaded from its raw files, before any partition.

    x, y:          pooled samples / int64 labels of everything users can own.
    global_test:   named global test sets (x, y).
    test_pool:     indices into x of a global test set pooled after the users' samples, from which
                   ``local_test: global_shards`` draws the users' test shards (else None).
    users:         natural user names (writers, roles, devices, domains), if the data has them.
    user_idx:      per natural user, all its indices into x (source order).
    source_split:  per natural user, the (train, test) indices the source itself provides.
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    global_test: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    users: list[str] | None = None
    user_idx: list[np.ndarray] | None = None
    source_split: list[tuple[np.ndarray, np.ndarray]] | None = None
    test_pool: np.ndarray | None = None

    @property
    def labels(self) -> np.ndarray:
        return self.y.numpy() if isinstance(self.y, torch.Tensor) else np.asarray(self.y)

    def fingerprint(self) -> str:
        """A short hash of what a partition depends on: sample count, shape and the labels."""
        h = hashlib.sha256()
        h.update(self.name.encode())
        h.update(repr(tuple(self.x.shape)).encode())
        h.update(np.ascontiguousarray(self.labels, dtype=np.int64).tobytes())
        if self.user_idx is not None:
            h.update(np.asarray([len(i) for i in self.user_idx], dtype=np.int64).tobytes())
        return h.hexdigest()[:16]


@dataclass
class Partition:
    """Per-user index arrays (into the pooled samples) plus what they were built from."""

    dataset: str
    scheme: str
    seed: int
    options: dict[str, Any]
    fingerprint: str
    train: list[np.ndarray]
    val: list[np.ndarray]
    test: list[np.ndarray]
    users: list[str] | None = None

    @property
    def num_users(self) -> int:
        return len(self.train)

    def user_indices(self, u: int) -> np.ndarray:
        return np.concatenate([self.train[u], self.val[u], self.test[u]])

    def content_hash(self) -> str:
        """sha256 of the index lists themselves (every user's train, val and test, in order, as
        little-endian int64) and the user names: equal on every machine exactly when the
        partitions are index for index the same."""
        h = hashlib.sha256()
        for part in (self.train, self.val, self.test):
            h.update(np.asarray([len(a) for a in part], dtype="<i8").tobytes())
            for idxs in part:
                h.update(np.ascontiguousarray(idxs, dtype="<i8").tobytes())
        h.update(json.dumps(self.users).encode())
        return h.hexdigest()


# --------------------------------------------------------------------------- the dispatch
def build_partition(raw: RawData, scheme: str, seed: int, options: dict[str, Any]) -> Partition:
    """Apply the partitioner ``scheme`` (``fedmgda.partitioners.PARTITIONERS``) to ``raw`` under
    the dataset ``options`` (defaults filled in): the dataset's presets are expanded (its catalog
    entry's, ``fedmgda.catalog.Dataset.expand``), an option value only another partitioner
    honours or one the partitioner refuses is a DataError naming the dataset, and the partitioner
    sees the options it reads. ``seed`` is used as given (``fedmgda.data.registry.effective_seed``
    makes it 0 where the partition does not depend on it)."""
    partitioner = get_partitioner(scheme)
    dataset = catalog.DATASETS.get(raw.name)
    settings = dataset.expand(options) if dataset is not None else dict(options)
    error = options_error(scheme, settings, dataset.options if dataset is not None else None)
    if error:
        raise DataError(f"{raw.name}: {error}")
    split = partitioner.build(raw, int(seed), partitioner.select(settings))
    return Partition(dataset=raw.name, scheme=scheme, seed=int(seed), options=dict(options),
                     fingerprint=raw.fingerprint(), train=list(split.train), val=list(split.val),
                     test=list(split.test), users=split.users)


# --------------------------------------------------------------------------- save / load
def _jsonable(options: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(options, sort_keys=True, default=str))


def save_partition(partition: Partition, path: str | Path) -> Path:
    """Write ``partition`` as one .npz (atomically): offsets + concatenated indices + metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "dataset": partition.dataset,
        "scheme": partition.scheme,
        "seed": partition.seed,
        "options": _jsonable(partition.options),
        "fingerprint": partition.fingerprint,
        "users": partition.users,
        "content_hash": partition.content_hash(),
    }
    arrays = {"meta": np.array(json.dumps(meta, sort_keys=True))}
    for part in ("train", "val", "test"):
        lists = getattr(partition, part)
        arrays[f"{part}_sizes"] = np.asarray([len(a) for a in lists], dtype=np.int64)
        arrays[f"{part}_idx"] = (np.concatenate(lists).astype(np.int64) if lists
                                 else np.zeros(0, dtype=np.int64))
    tmp = temporary_file(path.parent, prefix=f".{path.name}.", suffix=".npz")
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _remake(path: Path) -> str:
    """The advice every unusable partition file ends with."""
    return f"delete it; the workflow remakes it: rm {shlex.quote(str(path))}"


# what reading a cut, emptied or bit-flipped .npz raises (zip, npy header, json of the meta;
# RuntimeError: a flipped zip flag or method, "encrypted" or "compression method not supported")
UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, RuntimeError)


def load_partition(path: str | Path) -> Partition:
    """The partition saved in ``path``; a file that is missing, unreadable (cut short, empty,
    damaged), of another format or whose lists do not match its hash is one DataError naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"partition file {path} does not exist")
    try:
        meta, parts = _read_partition(path)
    except PermissionError as err:  # the file may be sound: not a reason to delete it
        raise DataError(f"partition file {path} cannot be read: {err.strerror}") from None
    except UNREADABLE as err:
        why = str(err).strip().splitlines()[0] if str(err).strip() else "no detail"
        raise DataError(f"partition file {path} is unreadable (cut short, empty or damaged: "
                        f"{type(err).__name__}: {why}); {_remake(path)}") from None
    version = meta.get("format_version")
    partition = Partition(dataset=meta["dataset"], scheme=meta["scheme"], seed=meta["seed"],
                          options=meta["options"], fingerprint=meta["fingerprint"],
                          users=meta["users"], **parts)
    if version == 1:  # written before files carried their hash; its other readings are unchanged
        return partition
    if partition.content_hash() != meta["content_hash"]:
        raise DataError(f"partition file {path} is corrupt: its index lists hash to "
                        f"{partition.content_hash()[:16]}..., its header says "
                        f"{meta['content_hash'][:16]}...; {_remake(path)}")
    return partition


META_KEYS = ("dataset", "scheme", "seed", "options", "fingerprint", "users")


def _read_partition(path: Path) -> tuple[dict[str, Any], dict[str, list[np.ndarray]]]:
    """The meta and the index lists of a partition file (its format checked)."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if not isinstance(meta, dict):
            raise ValueError(f"its meta is a {type(meta).__name__}, not a mapping")
        version = meta.get("format_version")
        stale = version == 1 and meta.get("options", {}).get("sort") == "quicksort"
        if version not in (1, FORMAT_VERSION) or stale:
            why = (" (with sort 'quicksort' it holds the order of the numpy that made it)"
                   if stale else "")
            raise DataError(f"partition file {path} has format {version}, expected "
                            f"{FORMAT_VERSION}{why}; "
                            f"{_remake(path)}")
        keys = (*META_KEYS, "content_hash") if version != 1 else META_KEYS
        missing = [k for k in keys if k not in meta]
        if missing:
            raise ValueError(f"its meta lacks {', '.join(missing)}")
        parts = {}
        for part in ("train", "val", "test"):
            sizes, flat = z[f"{part}_sizes"], z[f"{part}_idx"]
            parts[part] = np.split(flat, np.cumsum(sizes)[:-1]) if len(sizes) else []
    return meta, parts


def check_partition(partition: Partition, path, dataset: str, scheme: str, seed: int,
                    options: dict[str, Any], fingerprint: str) -> None:
    """Raise DataError naming every field in which a saved partition differs from the request."""
    want = {"dataset": dataset, "scheme": scheme, "seed": int(seed),
            "options": _jsonable(options), "fingerprint": fingerprint}
    have = {"dataset": partition.dataset, "scheme": partition.scheme, "seed": partition.seed,
            "options": _jsonable(partition.options), "fingerprint": partition.fingerprint}
    diff = [f"{k}: file has {have[k]!r}, requested {want[k]!r}" for k in want if have[k] != want[k]]
    if diff:
        raw = (" (a fingerprint change means the raw data differ from the data the partition was "
               "built on)"
               if have["fingerprint"] != want["fingerprint"] else "")
        raise DataError(f"stale partition file {path}: {'; '.join(diff)}{raw}; "
                        f"{_remake(Path(path))}")
