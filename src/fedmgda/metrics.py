"""Per-round and per-user metrics, computed as the authors' plotting code computes them
(docs/protocol.md §6.3-6.4)."""

from __future__ import annotations

import numpy as np
import torch

STAT_KEYS = ("mean_acc", "std_acc", "worst5_acc", "best5_acc", "weighted_acc")


def accuracy_stats(accuracy: np.ndarray, test_sizes: np.ndarray | None = None) -> dict[str, float]:
    """Statistics of a per-user accuracy vector (fractions in [0, 1]).

    mean_acc: unweighted mean over users; std_acc: population std (ddof 0); worst5_acc and
    best5_acc: ``np.percentile`` 5 and 95 with linear interpolation (not the mean of the worst 5 %
    of users: docs/protocol.md §6.3); weighted_acc: the mean over all test samples (users weighted by
    their test-set size; Table 14's "Avg (data)").
    """
    accuracy = np.asarray(accuracy, dtype=np.float64)
    weights = np.ones_like(accuracy) if test_sizes is None else np.asarray(test_sizes, dtype=np.float64)
    return {
        "mean_acc": float(accuracy.mean()),
        "std_acc": float(accuracy.std()),
        "worst5_acc": float(np.percentile(accuracy, 5)),
        "best5_acc": float(np.percentile(accuracy, 95)),
        "weighted_acc": float((accuracy * weights).sum() / weights.sum()),
    }


def improved_fraction(before: torch.Tensor, after: torch.Tensor, higher_is_better: bool = False) -> float:
    """Fraction of participants whose value did not get worse over the round (ties count as
    improved, paper footnote 5 / docs/protocol.md §6.4)."""
    better = after >= before if higher_is_better else after <= before
    return float(better.double().mean())


def per_owner_mean(values: torch.Tensor, owner: torch.Tensor, num_owners: int) -> torch.Tensor:
    """Mean of ``values`` grouped by ``owner`` (one index per value), for owners 0..num_owners-1.
    ``values`` is (samples,) or (samples, runs): then one mean per owner and column."""
    total = torch.zeros(num_owners, *values.shape[1:], dtype=torch.float64, device=values.device).index_add_(0, owner, values.double())
    count = torch.zeros(num_owners, dtype=torch.float64, device=values.device).index_add_(0, owner, torch.ones(len(owner), dtype=torch.float64, device=values.device))
    return total / count.clamp(min=1).view(-1, *[1] * (values.dim() - 1))


def sum_of_batch_means(per_sample: torch.Tensor, batch_size: int | None) -> torch.Tensor:
    """Sum over consecutive minibatches of size ``batch_size`` of the minibatch-mean loss: the
    authors' "total loss" F_i that q-FedAvg consumes (docs/protocol.md §3, §4.5). None = one batch.
    ``per_sample`` is (samples,) or (samples, runs): then one sum per column (packed runs)."""
    n = len(per_sample)
    if batch_size is None or batch_size >= n:
        return per_sample.mean(dim=0)
    full = n - n % batch_size
    total = per_sample[:full].reshape(full // batch_size, batch_size, *per_sample.shape[1:]).mean(dim=1).sum(dim=0)
    return total + per_sample[full:].mean(dim=0) if full < n else total


def participant_stats(per_sample: torch.Tensor, correct: torch.Tensor, sizes: list[int], batch_size: int | None) -> dict[str, torch.Tensor]:
    """Each participant's mean loss (``loss``), accuracy (``acc``) and F_i (``total``: the sum of
    its minibatch means, ``sum_of_batch_means``) from the per-sample losses and correctness of the
    participants' pooled samples (``sizes[i]`` samples of participant i, in order). (samples,)
    inputs give (participants,) outputs; (samples, runs) inputs, of packed runs, (participants, runs)."""
    loss, acc, total = [], [], []
    for user_losses, user_correct in zip(per_sample.split(sizes), correct.split(sizes)):
        loss.append(user_losses.mean(dim=0))
        acc.append(user_correct.mean(dim=0))
        total.append(sum_of_batch_means(user_losses, batch_size))
    return {"loss": torch.stack(loss), "acc": torch.stack(acc), "total": torch.stack(total)}
