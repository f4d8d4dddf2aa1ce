"""Synthetic(α, β) of the q-FFL paper, appendix D.1 (fair_flearn ``data/synthetic``).

Device k: u_k ~ N(0, α), B_k ~ N(0, β); W_k ~ N(u_k, 1) (60×10), b_k ~ N(u_k, 1);
v_k ~ N(B_k, 1) per coordinate; x ~ N(v_k, Σ) with Σ = diag(j^-1.2); y = argmax(x W_k + b_k).
Samples per device: lognormal(4, 2) + 50 as in fair_flearn, capped at ``max_samples``.
The draws follow fair_flearn's generator call for call with ``np.random.RandomState(data_seed)``
(with ``num_users=100`` and no cap the data equal that script's output for that seed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.partition import RawData

DIMENSION = 60
NUM_CLASSES = 10


def generate(alpha: float, beta: float, num_users: int, data_seed: int,
             max_samples: int | None = None, dimension: int = DIMENSION,
             num_classes: int = NUM_CLASSES) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.RandomState(data_seed)
    samples = rng.lognormal(4, 2, num_users).astype(int) + 50
    if max_samples:
        samples = np.minimum(samples, int(max_samples))
    mean_w = rng.normal(0, alpha, num_users)
    big_b = rng.normal(0, beta, num_users)
    cov_x = np.diag(np.power(np.arange(1, dimension + 1, dtype=np.float64), -1.2))
    mean_x = np.stack([rng.normal(big_b[i], 1, dimension) for i in range(num_users)])
    xs, ys = [], []
    for i in range(num_users):
        w = rng.normal(mean_w[i], 1, (dimension, num_classes))
        b = rng.normal(mean_w[i], 1, num_classes)
        xx = rng.multivariate_normal(mean_x[i], cov_x, samples[i])
        xs.append(xx.astype(np.float32))
        ys.append(np.argmax(xx @ w + b, axis=1).astype(np.int64))
    return xs, ys


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    xs, ys = generate(float(options["alpha"]), float(options["beta"]), int(options["num_users"]),
                      int(options["data_seed"]), int(options["max_samples"]) or None)
    sizes = np.cumsum([0] + [len(y) for y in ys])
    user_idx = [np.arange(sizes[i], sizes[i + 1], dtype=np.int64) for i in range(len(ys))]
    return RawData(name="synthetic", x=torch.from_numpy(np.concatenate(xs)),
                   y=torch.from_numpy(np.concatenate(ys)),
                   users=[f"f_{i:05d}" for i in range(len(ys))], user_idx=user_idx)
