"""Partitioners: which pooled samples belong to which user, and each user's train/val/test cut.

The shard and iid partitioners follow the authors' code (docs/protocol.md §1.3) call for call: the
legacy numpy RNG seeded once with ``seed`` (``np.random.RandomState(seed)`` draws the same stream
as ``np.random.seed(seed)`` + the global functions), the same ``choice`` calls in the same order,
and real Python ``set`` objects wherever the code iterates one (the remaining pool is rebuilt
from a set difference; a user's shards are concatenated in set-iteration order). The per-user
split is positional (docs/protocol.md §1.4): first ⌊0.8n⌋ train, next up to ⌊0.9n⌋ validation, rest
test, so under shards the test split is the tail of the user's last shard. The option
``local_test: global_shards`` (F-MNIST) replaces that cut by FedMDFG's (:func:`global_test_shards`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.catalog import LOCAL_TESTS, SORTS, shard_geometry
from fedmgda.data.base import DataError
from fedmgda.data.legacy_sort import numpy_1_17_argsort

FORMAT_VERSION = 2  # 2: meta carries content_hash; sort 'quicksort' is numpy 1.17's order (format 1: the machine's)


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


# --------------------------------------------------------------------------- per-user split
def split_user(idxs, train_frac: float = 0.8, val_frac: float = 0.1):
    """Positional split of one user's index list (docs/protocol.md §1.4, ``main/update.py``)."""
    idxs = np.asarray(idxs, dtype=np.int64)
    n = len(idxs)
    a, b = int(train_frac * n), int((train_frac + val_frac) * n)
    return idxs[:a], idxs[a:b], idxs[b:]


# --------------------------------------------------------------------------- partitioners
def iid_partition(num_items: int, num_users: int, seed: int) -> list[np.ndarray]:
    """``main/sampling.py`` iid: ⌊N/users⌋ items per user drawn without replacement, in set order."""
    rng = np.random.RandomState(seed)
    per_user = num_items // num_users
    pool = list(range(num_items))
    out = []
    for _ in range(num_users):
        drawn = set(rng.choice(pool, per_user, replace=False).tolist())
        pool = list(set(pool) - drawn)
        out.append(np.fromiter(drawn, dtype=np.int64, count=len(drawn)))
    return out


def sort_by_label(labels: np.ndarray, n: int, sort: str = "stable") -> np.ndarray:
    """Image ids 0..n-1 in label order, the same on every machine. ``stable`` keeps ascending ids
    within a class; ``quicksort`` is the authors' call, ``np.argsort`` with numpy's default kind,
    in the order their numpy (1.17) gave it (:func:`numpy_1_17_argsort`; today's numpy orders a
    class differently on each CPU family, docs/protocol.md §1.3)."""
    if sort not in SORTS:
        raise DataError(f"sort must be {' or '.join(map(repr, SORTS))}, not {sort!r}")
    labels = np.asarray(labels, dtype=np.int64)[:n]
    if sort == "quicksort":
        return numpy_1_17_argsort(labels)
    return np.argsort(labels, kind="stable")


def shard_partition(labels, num_users: int, num_shards: int, shard_size: int, seed: int,
                    sort: str = "stable") -> list[np.ndarray]:
    """``main/sampling.py`` shard non-iid: sort by label, cut ``num_shards`` shards of
    ``shard_size``, give each user ⌊num_shards/num_users⌋ random shards (legacy RNG, set order)."""
    labels = np.asarray(labels)
    if num_shards * shard_size > len(labels):
        raise DataError(f"{num_shards} shards x {shard_size} > {len(labels)} samples")
    if num_shards < num_users:
        raise DataError(f"{num_shards} shards cannot serve {num_users} users")
    return _deal_shards(np.random.RandomState(seed), sort_by_label(labels, num_shards * shard_size, sort),
                        num_users, num_shards, shard_size)


def _deal_shards(rng: np.random.RandomState, idxs: np.ndarray, num_users: int, num_shards: int,
                 shard_size: int) -> list[np.ndarray]:
    """Cut the label-sorted ``idxs`` into ``num_shards`` shards of ``shard_size`` and give each user
    ⌊num_shards/num_users⌋ of them, drawn without replacement with ``rng`` (set order)."""
    per_user = num_shards // num_users
    remaining = list(range(num_shards))
    out = []
    for _ in range(num_users):
        chosen = set(rng.choice(remaining, per_user, replace=False).tolist())
        remaining = list(set(remaining) - chosen)
        out.append(np.concatenate([idxs[s * shard_size:(s + 1) * shard_size] for s in chosen]))
    return out


def global_test_shards(labels, num_users: int, num_shards: int, shard_size: int, seed: int,
                       sort: str = "stable") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(train, test) per user under FedMDFG's F-MNIST split (zibinpan/FedMDFG,
    ``fedplat/dataloaders/DataLoader_fashion.py``), ``labels`` = the pool's labels, users' samples
    first, then the global test set at positions ``len(labels) - n_test ..``, n_test = the rest.

    train: the user's shards exactly as :func:`shard_partition` deals them, all of them (no
    validation or test cut): their client trains on its whole local training data
    (``fedplat/Client.py`` L264-271, ``for step, (batch_x, batch_y) in
    enumerate(self.local_training_data)``).
    test: the same ``create_data_pool`` applied to the global test set (DataLoader_fashion.py
    L119-121): sorted by label (L78), cut into as many shards as the training set
    (``amount = input_data.shape[0] // split_num``, L83: 10 000 / 200 = 50 images), and each user
    draws ⌊num_shards/num_users⌋ of them (``pick_num``, L97-100) without replacement across users
    (``split_data_indices_list.remove``, L100). The test draws continue the RNG stream of the
    training draws (as theirs continue Python's ``random`` stream after the training pool,
    L119 then L121), so they are deterministic per seed and independent of the user's training
    classes. Not replicated: their last shard of each set is one image short (L89-90 cut at
    ``shape[0] - 1``), and their stream is Python's ``random``, not numpy's.
    """
    labels = np.asarray(labels)
    n_train = num_shards * shard_size
    test_labels = labels[n_train:]
    n_test = len(test_labels)
    if n_test < num_shards:
        raise DataError(f"local_test global_shards: {n_test} global test images cannot make {num_shards} shards")
    rng = np.random.RandomState(seed)
    train = _deal_shards(rng, sort_by_label(labels, n_train, sort), num_users, num_shards, shard_size)
    test = _deal_shards(rng, n_train + sort_by_label(test_labels, n_test, sort), num_users, num_shards,
                        n_test // num_shards)
    return train, test


def adult_domain_clients(is_phd: np.ndarray, shift_by_one: bool = False) -> list[np.ndarray]:
    """Client 0 = PhD rows, client 1 = non-PhD rows (``adult/sampling.py``).

    Default: the rows themselves, in file order. ``shift_by_one=True`` reproduces the released
    code (docs/protocol.md §1.5): ids are the 1-based row numbers, i.e. every id is one row too far,
    and each client's list iterates in CPython set order. An id equal to N (past the last row)
    can only land in the test tail of a client; it is dropped there (the authors never read it).
    """
    is_phd = np.asarray(is_phd, dtype=bool)
    clients = []
    for mask in (is_phd, ~is_phd):
        rows = np.flatnonzero(mask)
        if shift_by_one:
            ids = list(set((rows + 1).tolist()))
            clients.append(np.asarray(ids, dtype=np.int64))
        else:
            clients.append(rows.astype(np.int64))
    return clients  # an out-of-range id N is removed after the positional split


def _drop_out_of_range(parts, n):
    return [p[p < n] for p in parts]


def build_partition(raw: RawData, scheme: str, seed: int, options: dict[str, Any]) -> Partition:
    """Apply ``scheme`` to ``raw`` with the dataset ``options`` (already validated)."""
    n = len(raw.y)
    users = None
    train, val, test = [], [], []

    def add(idxs):
        a, b, c = split_user(idxs)
        train.append(a)
        val.append(b)
        test.append(c)

    local_test = options.get("local_test", LOCAL_TESTS[0])
    if local_test not in LOCAL_TESTS:
        raise DataError(f"local_test must be {' or '.join(map(repr, LOCAL_TESTS))}, not {local_test!r}")
    if local_test == "global_shards" and scheme != "shards":
        raise DataError(f"{raw.name}: local_test 'global_shards' needs the shards partition, not {scheme!r}")
    if local_test == "global_shards":
        num_users = int(options["num_users"])
        num_shards, shard_size = shard_geometry(options, n)
        if raw.test_pool is None or len(raw.test_pool) != n - num_shards * shard_size:
            raise DataError(f"{raw.name}: local_test 'global_shards' needs the global test set pooled "
                            f"right after the {num_shards} x {shard_size} training images")
        train, test = global_test_shards(raw.labels, num_users, num_shards, shard_size, seed,
                                         options.get("sort", "stable"))
        val = [np.zeros(0, dtype=np.int64) for _ in train]
    elif scheme == "shards":
        num_users = int(options["num_users"])
        num_shards, shard_size = shard_geometry(options, n)
        for idxs in shard_partition(raw.labels, num_users, num_shards, shard_size, seed,
                                    options.get("sort", "stable")):
            add(idxs)
    elif scheme == "iid":
        if raw.source_split is not None and options.get("split") == "source":
            raise DataError(f"{raw.name}: split 'source' belongs to the {raw.name} dataset's own "
                            "partition; the iid partition needs split '80_10_10'")
        for idxs in iid_partition(n, int(options.get("num_users", 100)), seed):
            add(idxs)
    elif scheme == "domain":  # adult
        shift = bool(options.get("shift_by_one", False))
        users = ["phd", "non_phd"]
        keep = 1 if options.get("clients", "both") == "phd" else 2  # 1: Table 7's Baseline_PhD
        if options.get("split", "80_10_10") == "source":  # q-FFL: adult.data rows / adult.test rows
            if shift:
                raise DataError("adult: shift_by_one (the FedMGDA+ code's 1-based row ids) only "
                                "applies to split '80_10_10', not to split 'source'")
            for tr, te in raw.source_split[:keep]:
                train.append(np.asarray(tr, dtype=np.int64))
                val.append(np.zeros(0, dtype=np.int64))
                test.append(np.asarray(te, dtype=np.int64))
            users = users[:keep]
        else:
            is_phd = np.zeros(n, dtype=bool)
            is_phd[raw.user_idx[0]] = True
            clients = adult_domain_clients(is_phd, shift)
            clients, users = clients[:keep], users[:keep]
            for idxs in clients:
                a, b, c = split_user(idxs)
                if shift:
                    a, b, c = _drop_out_of_range((a, b, c), n)
                train.append(a)
                val.append(b)
                test.append(c)
    elif scheme == "natural":
        users = list(raw.users or [])
        split = options.get("split", "80_10_10")
        if split == "source" and raw.source_split is not None:
            for tr, te in raw.source_split:
                train.append(np.asarray(tr, dtype=np.int64))
                val.append(np.zeros(0, dtype=np.int64))
                test.append(np.asarray(te, dtype=np.int64))
        elif split in ("80_10_10", "source"):
            rng = np.random.RandomState(seed) if options.get("shuffle", False) else None
            for idxs in raw.user_idx:
                idxs = np.asarray(idxs, dtype=np.int64)
                if rng is not None:
                    idxs = idxs[rng.permutation(len(idxs))]
                add(idxs)
        else:
            raise DataError(f"split must be 'source' or '80_10_10', not {split!r}")
    else:
        raise DataError(f"unknown partition scheme {scheme!r}")
    return Partition(dataset=raw.name, scheme=scheme, seed=int(seed), options=dict(options),
                     fingerprint=raw.fingerprint(), train=train, val=val, test=test, users=users)


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_partition(path: str | Path) -> Partition:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"partition file {path} does not exist")
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        version = meta.get("format_version")
        stale = version == 1 and meta.get("options", {}).get("sort") == "quicksort"
        if version not in (1, FORMAT_VERSION) or stale:
            why = " (with sort 'quicksort' it holds the order of the numpy that made it)" if stale else ""
            raise DataError(f"partition file {path} has format {version}, expected {FORMAT_VERSION}{why}; "
                            f"delete it to rebuild it: rm {shlex.quote(str(path))}")
        parts = {}
        for part in ("train", "val", "test"):
            sizes, flat = z[f"{part}_sizes"], z[f"{part}_idx"]
            parts[part] = np.split(flat, np.cumsum(sizes)[:-1]) if len(sizes) else []
    partition = Partition(dataset=meta["dataset"], scheme=meta["scheme"], seed=meta["seed"],
                          options=meta["options"], fingerprint=meta["fingerprint"],
                          users=meta["users"], **parts)
    if version == 1:  # written before files carried their hash; its other readings are unchanged
        return partition
    if partition.content_hash() != meta["content_hash"]:
        raise DataError(f"partition file {path} is corrupt: its index lists hash to "
                        f"{partition.content_hash()[:16]}..., its header says {meta['content_hash'][:16]}...; "
                        f"delete it to rebuild it: rm {shlex.quote(str(path))}")
    return partition


def check_partition(partition: Partition, path, dataset: str, scheme: str, seed: int,
                    options: dict[str, Any], fingerprint: str) -> None:
    """Raise DataError naming every field in which a saved partition differs from the request."""
    want = {"dataset": dataset, "scheme": scheme, "seed": int(seed),
            "options": _jsonable(options), "fingerprint": fingerprint}
    have = {"dataset": partition.dataset, "scheme": partition.scheme, "seed": partition.seed,
            "options": _jsonable(partition.options), "fingerprint": partition.fingerprint}
    diff = [f"{k}: file has {have[k]!r}, requested {want[k]!r}" for k in want if have[k] != want[k]]
    if diff:
        raw = (" (a fingerprint change means the raw data differ from the data the partition was built on)"
               if have["fingerprint"] != want["fingerprint"] else "")
        raise DataError(f"stale partition file {path}: {'; '.join(diff)}{raw}; delete it to rebuild it: rm {shlex.quote(str(path))}")
