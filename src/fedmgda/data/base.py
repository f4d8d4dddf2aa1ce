"""The in-memory form every dataset takes once loaded and partitioned, and the data error.

All samples of a dataset (every user's train and test split) live in two pooled tensors ``x`` and
``y``; a user is nothing but two index tensors into them. Keeping the pool in one tensor lets the
simulator gather a round's participants, or evaluate every user at once, with one indexing
operation instead of a Python loop over users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedmgda.errors import DataError  # noqa: F401  (its home is fedmgda.errors; fedmgda.data exports it)


@dataclass
class FederatedDataset:
    """A dataset split across users.

    x, y:        pooled samples (float32 features or int64 token ids) and int64 labels.
    train_idx:   per user, int64 indices into x/y of the user's training split (the order is the
                 order the protocol's positional split produced; the client shuffles each epoch).
    test_idx:    per user, indices of the user's test split (what per-user accuracy is measured on).
    num_classes: number of output classes of the model.
    global_test: named global test sets (e.g. CIFAR-10's 10 000-image test set, Adult's
                 uniform / PhD / non-PhD sets), each a pair (x, y); evaluated on the global model.
    partition_hash: the partition's ``Partition.content_hash`` (None: users given in memory).
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    train_idx: list[torch.Tensor]
    test_idx: list[torch.Tensor]
    num_classes: int
    global_test: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    partition_hash: str | None = None

    def __post_init__(self) -> None:
        if len(self.train_idx) != len(self.test_idx):
            raise ValueError("train_idx and test_idx must list the same users")
        if len(self.x) != len(self.y):
            raise ValueError("x and y must have the same number of samples")
        self.train_idx = [torch.as_tensor(i, dtype=torch.long) for i in self.train_idx]
        self.test_idx = [torch.as_tensor(i, dtype=torch.long) for i in self.test_idx]

    @property
    def num_users(self) -> int:
        return len(self.train_idx)

    def train_sizes(self) -> list[int]:
        return [len(i) for i in self.train_idx]

    def test_sizes(self) -> list[int]:
        return [len(i) for i in self.test_idx]

    def to(self, device: torch.device | str) -> FederatedDataset:
        """The same dataset with every tensor on ``device`` (index tensors included)."""
        return FederatedDataset(
            name=self.name,
            x=self.x.to(device),
            y=self.y.to(device),
            train_idx=[i.to(device) for i in self.train_idx],
            test_idx=[i.to(device) for i in self.test_idx],
            num_classes=self.num_classes,
            global_test={k: (gx.to(device), gy.to(device))
                         for k, (gx, gy) in self.global_test.items()},
            partition_hash=self.partition_hash,
        )
