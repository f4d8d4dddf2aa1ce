"""The dataset registry: ``DATASET_SPECS``, one :class:`DatasetSpec` per dataset (its loader, raw
files, classes and input shape; its name, model, partitions and options are its catalog entry's,
``fedmgda.catalog.DATASETS``, torch-free), and the entry points that everything else uses,
``ensure_raw_files``, ``make_partition`` and ``load_federated``.

Adding a dataset touches these files (docs/datasets.md §6 says what goes in each;
tests/data/test_recipes.py follows the steps with a toy dataset):

1. ``src/fedmgda/data/<name>.py``: ``RAW_FILES`` (``RawFile``s with their published checksums;
   ``()`` for generated data) and ``load(raw_dir, options) -> RawData``.
2. ``src/fedmgda/catalog.py``: a ``Dataset`` in ``DATASETS`` (model, partitions among
   ``fedmgda.partitioners.PARTITIONERS``, options and their defaults, option values, presets,
   samples, offline).
3. This module: the module in the ``from fedmgda.data import ...`` line and a ``DatasetSpec`` in
   ``DATASET_SPECS``.
4. ``src/fedmgda/config.schema.yaml``: the name in the ``dataset`` enum (a new numeric option under
   ``dataset_options``), then ``make config-docs``.
5. docs/datasets.md: its raw files, preprocessing, partitions and options.

A new partitioner is one entry of ``fedmgda.partitioners.PARTITIONERS`` (its module docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fedmgda import catalog
from fedmgda.data import adult, cifar10, digits, femnist, fmnist, shakespeare, synthetic
from fedmgda.data.base import DataError, FederatedDataset
from fedmgda.data.download import RawFile, ensure_files
from fedmgda.data.partition import (
    Partition,
    RawData,
    build_partition,
    check_partition,
    load_partition,
    save_partition,
)


@dataclass(frozen=True)
class DatasetSpec:
    """The loader side of one dataset; the rest (model, partitions, options) is its catalog entry's
    (``info``, ``fedmgda.catalog.DATASETS``), read through the properties below.

    load:         ``load(raw_dir, options) -> RawData`` reading (or generating) the samples.
    raw_files:    the files it reads (``()``: generated, nothing to download).
    global_tests: the names of the global test sets its RawData carries.
    """

    name: str
    num_classes: int
    input_shape: tuple[int, ...]
    raw_files: tuple[RawFile, ...]
    load: Callable[[Path, dict[str, Any]], RawData]
    global_tests: tuple[str, ...] = ()

    @property
    def info(self) -> catalog.Dataset:
        return catalog.DATASETS[self.name]

    @property
    def model(self) -> str:
        return self.info.model

    @property
    def default_partition(self) -> str:
        return self.info.default_partition

    @property
    def partitions(self) -> tuple[str, ...]:
        return self.info.partitions

    @property
    def seeded_partitions(self) -> tuple[str, ...]:
        return self.info.seeded_partitions

    @property
    def options(self) -> Mapping[str, Any]:
        """Its options and their defaults (partition settings included)."""
        return MappingProxyType(dict(self.info.options))

    @property
    def option_values(self) -> Mapping[str, tuple[Any, ...]]:
        return MappingProxyType(dict(self.info.option_values))

    @property
    def description(self) -> str:
        return self.info.description


DATASET_SPECS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    DatasetSpec("cifar10", num_classes=10, input_shape=(3, 32, 32), raw_files=cifar10.RAW_FILES,
                load=cifar10.load, global_tests=("test",)),
    DatasetSpec("fmnist", num_classes=10, input_shape=(1, 28, 28), raw_files=fmnist.RAW_FILES,
                load=fmnist.load, global_tests=("test",)),
    DatasetSpec("fmnist3", num_classes=3, input_shape=(784,), raw_files=fmnist.RAW_FILES,
                load=fmnist.load_three_classes, global_tests=("all", *fmnist.THREE_CLASSES)),
    DatasetSpec("femnist", num_classes=62, input_shape=(1, 28, 28), raw_files=femnist.RAW_FILES,
                load=femnist.load),
    DatasetSpec("shakespeare", num_classes=80, input_shape=(80,), raw_files=shakespeare.RAW_FILES,
                load=shakespeare.load),
    DatasetSpec("adult", num_classes=2, input_shape=(99,), raw_files=adult.RAW_FILES,
                load=adult.load,
                global_tests=("uniform", "phd", "non_phd")),
    DatasetSpec("synthetic", num_classes=10, input_shape=(60,), raw_files=(), load=synthetic.load),
    DatasetSpec("digits", num_classes=10, input_shape=(64,), raw_files=(), load=digits.load),
)}


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASET_SPECS[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; valid: {sorted(DATASET_SPECS)}") from None


def ensure_raw_files(name: str, raw_dir: str | Path, allow_download: bool = True) -> list[Path]:
    """Make sure every raw file of dataset ``name`` is in place (``raw_dir/<folder>/<file>``,
    the folder of the dataset owning the files: fmnist3 uses fmnist's) with a matching checksum.

    Present and matching: used as is, no network. Present with a wrong checksum: DataError (the
    file is not deleted). Missing: downloaded (3 tries with backoff, temp file + atomic rename,
    checksum verified before the rename) when ``allow_download`` and ``FEDMGDA_OFFLINE`` is not
    set, else DataError. Every DataError names the file, its checksum, its URL and the path.
    """
    return ensure_files(get_spec(name).raw_files, raw_dir, allow_download)


def resolve_options(spec: DatasetSpec, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec's defaults updated with ``options``; unknown names / values -> DataError."""
    error = catalog.DATASETS[spec.name].option_error(options)
    if error:
        raise DataError(error)
    return {**spec.options, **(options or {})}


def resolve_partition(spec: DatasetSpec, partition: str | None) -> str:
    error = spec.info.partition_error(partition)
    if error:
        raise DataError(error)
    return partition or spec.default_partition


def load_raw(name: str, raw_dir: str | Path, options: Mapping[str, Any] | None = None,
             allow_download: bool = False) -> RawData:
    """Check the raw files (downloading only if allowed) and load the pooled samples."""
    spec = get_spec(name)
    opts = resolve_options(spec, options)
    raw_dir = Path(raw_dir)
    if spec.raw_files:
        ensure_files(spec.raw_files, raw_dir, allow_download)
    stamps = [(st.st_size, st.st_mtime_ns)
              for st in (rf.path(raw_dir).stat() for rf in spec.raw_files)]
    key = (name, str(raw_dir.resolve()), repr(sorted(opts.items())), stamps)
    if _last_raw[0] != key:  # packed runs of one dataset parse the files once
        _last_raw[:] = [key, spec.load(raw_dir, opts)]
    return _last_raw[1]


# (key, RawData) of the last load (the files' checksums are checked every time)
_last_raw: list[Any] = [None, None]


def effective_seed(spec: DatasetSpec, scheme: str, seed: int, opts: Mapping[str, Any]) -> int:
    """``seed`` where the partition depends on it (its partitioner's ``seeded``), else 0 (so such
    partitions match any seed)."""
    return int(seed) if spec.info.is_seeded(scheme, opts) else 0


def _partition_of(raw: RawData, spec: DatasetSpec, scheme: str, seed: int,
                  opts: dict[str, Any]) -> Partition:
    return build_partition(raw, scheme, effective_seed(spec, scheme, seed, opts), opts)


def make_partition(name: str, raw_dir: str | Path, partition: str | None, seed: int,
                   options: Mapping[str, Any] | None = None,
                   allow_download: bool = False) -> Partition:
    """Build the seeded partition (user -> train/val/test indices) of dataset ``name``."""
    spec = get_spec(name)
    scheme = resolve_partition(spec, partition)
    opts = resolve_options(spec, options)
    raw = load_raw(name, raw_dir, opts, allow_download)
    return _partition_of(raw, spec, scheme, seed, opts)


def load_federated(name: str, raw_dir: str | Path, partition: str | None = None, seed: int = 1,
                   options: Mapping[str, Any] | None = None,
                   partition_file: str | Path | None = None,
                   allow_download: bool = False) -> FederatedDataset:
    """Load dataset ``name`` split across users.

    The partition is read from ``partition_file`` when that file exists (and checked against the
    requested dataset / scheme / seed / options and the raw data's fingerprint: a mismatch is a
    DataError), else built and, when ``partition_file`` is given, saved there.
    """
    spec = get_spec(name)
    scheme = resolve_partition(spec, partition)
    opts = resolve_options(spec, options)
    raw = load_raw(name, raw_dir, opts, allow_download)
    if partition_file is not None and Path(partition_file).is_file():
        part = load_partition(partition_file)
        # an option the file lacks was added after the file was written: it was built under the
        # option's default (defaults keep the earlier behaviour), e.g. fmnist's local_test
        part.options = {**spec.options, **part.options}
        check_partition(part, partition_file, name, scheme,
                        effective_seed(spec, scheme, seed, opts),
                        opts, raw.fingerprint())
    else:
        part = _partition_of(raw, spec, scheme, seed, opts)
        if partition_file is not None:
            save_partition(part, partition_file)
    return FederatedDataset(
        name=name, x=raw.x, y=raw.y, train_idx=list(part.train), test_idx=list(part.test),
        num_classes=spec.num_classes, global_test=dict(raw.global_test),
        partition_hash=part.content_hash(),
    )
