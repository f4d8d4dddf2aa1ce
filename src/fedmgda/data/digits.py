"""scikit-learn's bundled 8×8 digits (1 797 images, no download), flattened to 64 features in
[0, 1] (pixel / 16), partitioned like CIFAR-10 (label-sorted shards) or iid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.partition import RawData


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (np.asarray(d.data, dtype=np.float32) / 16.0).reshape(-1, 64)
    y = np.asarray(d.target, dtype=np.int64)
    return RawData(name="digits", x=torch.from_numpy(x), y=torch.from_numpy(y))
