"""The dataset registry: ``DATASET_SPECS``, one :class:`DatasetSpec` per dataset (loader, model,
partitions, options, raw files), and the entry points that everything else uses,
``ensure_raw_files``, ``make_partition`` and ``load_federated``.

Adding a dataset = one module with ``RAW_FILES`` and ``load(raw_dir, options) -> RawData``, one
``fedmgda.catalog.Dataset`` (its name, model, partitions and options) and one ``DatasetSpec`` below.
(``fedmgda.catalog.DATASETS`` holds the names, models, partitions and options, without torch.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    """Everything the rest of the package needs to know about one dataset.

    options:      allowed dataset options and their defaults (partition settings included).
    option_values: for options with a closed set of values, the allowed values.
    seeded_partitions: partitions whose result depends on the run seed (others are fixed).
    load:         ``load(raw_dir, options) -> RawData`` reading (or generating) the samples.
    """

    name: str
    model: str
    num_classes: int
    input_shape: tuple[int, ...]
    default_partition: str
    partitions: tuple[str, ...]
    raw_files: tuple[RawFile, ...]
    options: Mapping[str, Any]
    load: Callable[[Path, dict[str, Any]], RawData]
    global_tests: tuple[str, ...] = ()
    option_values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    seeded_partitions: tuple[str, ...] = ("shards", "iid")
    description: str = ""


def _spec(name: str, **kw) -> DatasetSpec:
    """The loader side of a dataset; its name, model, partitions and options come from the catalog."""
    info = catalog.DATASETS[name]
    return DatasetSpec(name=name, model=info.model, default_partition=info.default_partition, partitions=info.partitions,
                       seeded_partitions=info.seeded_partitions, description=info.description,
                       options=MappingProxyType(dict(info.options)),
                       option_values=MappingProxyType(dict(info.option_values)), **kw)


DATASET_SPECS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    _spec("cifar10", num_classes=10, input_shape=(3, 32, 32), raw_files=cifar10.RAW_FILES,
          load=cifar10.load, global_tests=("test",)),
    _spec("fmnist", num_classes=10, input_shape=(1, 28, 28), raw_files=fmnist.RAW_FILES,
          load=fmnist.load, global_tests=("test",)),
    _spec("fmnist3", num_classes=3, input_shape=(784,), raw_files=fmnist.RAW_FILES,
          load=fmnist.load_three_classes, global_tests=("all", *fmnist.THREE_CLASSES)),
    _spec("femnist", num_classes=62, input_shape=(1, 28, 28), raw_files=femnist.RAW_FILES,
          load=femnist.load),
    _spec("shakespeare", num_classes=80, input_shape=(80,), raw_files=shakespeare.RAW_FILES,
          load=shakespeare.load),
    _spec("adult", num_classes=2, input_shape=(99,), raw_files=adult.RAW_FILES, load=adult.load,
          global_tests=("uniform", "phd", "non_phd")),
    _spec("synthetic", num_classes=10, input_shape=(60,), raw_files=(), load=synthetic.load),
    _spec("digits", num_classes=10, input_shape=(64,), raw_files=(), load=digits.load),
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
    scheme = partition or spec.default_partition
    if scheme not in spec.partitions:
        raise DataError(f"{spec.name}: unknown partition {scheme!r}; valid: {list(spec.partitions)}")
    return scheme


def load_raw(name: str, raw_dir: str | Path, options: Mapping[str, Any] | None = None,
             allow_download: bool = False) -> RawData:
    """Check the raw files (downloading only if allowed) and load the pooled samples."""
    spec = get_spec(name)
    opts = resolve_options(spec, options)
    raw_dir = Path(raw_dir)
    if spec.raw_files:
        ensure_files(spec.raw_files, raw_dir, allow_download)
    stamps = [(st.st_size, st.st_mtime_ns) for st in (rf.path(raw_dir).stat() for rf in spec.raw_files)]
    key = (name, str(raw_dir.resolve()), repr(sorted(opts.items())), stamps)
    if _last_raw[0] != key:  # packed runs of one dataset parse the files once
        _last_raw[:] = [key, spec.load(raw_dir, opts)]
    return _last_raw[1]


_last_raw: list[Any] = [None, None]  # (key, RawData) of the last load (the files' checksums are checked every time)


def effective_seed(spec: DatasetSpec, scheme: str, seed: int, opts: Mapping[str, Any]) -> int:
    """``seed`` where the partition depends on it, else 0 (so such partitions match any seed)."""
    return int(seed) if scheme in spec.seeded_partitions or opts.get("shuffle") else 0


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
        check_partition(part, partition_file, name, scheme, effective_seed(spec, scheme, seed, opts),
                        opts, raw.fingerprint())
    else:
        part = _partition_of(raw, spec, scheme, seed, opts)
        if partition_file is not None:
            save_partition(part, partition_file)
    return FederatedDataset(
        name=name, x=raw.x, y=raw.y, train_idx=list(part.train), test_idx=list(part.test),
        num_classes=spec.num_classes, global_test=dict(raw.global_test), partition_hash=part.content_hash(),
    )
