"""Datasets of the paper (CIFAR-10, Fashion-MNIST, FEMNIST, Shakespeare, Adult) and two offline
ones (Synthetic(α, β), scikit-learn digits): raw files, preprocessing, partitions, registry.
See docs/datasets.md."""

from fedmgda.data.base import FederatedDataset
from fedmgda.data.download import DataError, RawFile, ensure_raw_files
from fedmgda.data.partition import Partition, RawData, load_partition, save_partition
from fedmgda.data.registry import (
    DATASETS,
    DatasetSpec,
    get_spec,
    load_federated,
    load_raw,
    make_partition,
)

__all__ = [
    "DATASETS",
    "DataError",
    "DatasetSpec",
    "FederatedDataset",
    "Partition",
    "RawData",
    "RawFile",
    "ensure_raw_files",
    "get_spec",
    "load_federated",
    "load_partition",
    "load_raw",
    "make_partition",
    "save_partition",
]
