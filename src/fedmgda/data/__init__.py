"""Datasets of the paper (CIFAR-10, Fashion-MNIST, FEMNIST, Shakespeare, Adult), q-FFL's
three-class Fashion-MNIST and two offline ones (Synthetic(α, β), scikit-learn digits): raw files,
preprocessing, partitions, registry. See docs/datasets.md."""

from fedmgda.data.base import DataError, FederatedDataset
from fedmgda.data.download import RawFile
from fedmgda.data.partition import Partition, RawData, load_partition, save_partition
from fedmgda.data.registry import (
    DATASET_SPECS,
    DatasetSpec,
    ensure_raw_files,
    get_spec,
    load_federated,
    load_raw,
    make_partition,
)

__all__ = [
    "DATASET_SPECS",
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
