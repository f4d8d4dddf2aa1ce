"""Per-round and per-user metrics, computed as the authors' plotting code computes them
(docs/protocol.md §6.3-6.4), and the scale each statistic is shown at.

A table statistic is one entry of ``STATISTICS``: a function of a per-user accuracy vector (and
the users' test sizes) and its display scale. Tables, claims and figures compute it from the
per-user vectors a run stores (``fedmgda.results``), so a statistic added there reaches every run
already trained, without retraining.

torch is imported by the functions that need it: tables, claims and figures read
``display_scale`` while the Snakefile parses, without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

@dataclass(frozen=True)
class Statistic:
    """A statistic of a per-user accuracy vector: ``compute(accuracy, test_sizes)`` (fractions in
    [0, 1]; each user's number of test samples) and the factor it is shown at
    (``display_scale``)."""

    compute: Callable[[np.ndarray, np.ndarray], float]
    scale: float = 100.0  # accuracies in %


def _tenth(accuracy: np.ndarray) -> int:
    return max(1, math.floor(0.1 * len(accuracy)))


# Every statistic the tables, claims and figures can name as final.<name> / protocol.<name>.
# They are computed from the stored per-user vectors (fedmgda.results), so one added here fills
# every table for runs already trained; runs trained afterwards also log it in metrics.csv.
STATISTICS: dict[str, Statistic] = {
    "mean_acc": Statistic(lambda acc, n: acc.mean()),
    "std_acc": Statistic(lambda acc, n: acc.std()),
    "worst5_acc": Statistic(lambda acc, n: np.percentile(acc, 5)),
    "best5_acc": Statistic(lambda acc, n: np.percentile(acc, 95)),
    "weighted_acc": Statistic(lambda acc, n: (acc * n).sum() / n.sum()),
    "worst10_acc": Statistic(lambda acc, n: np.sort(acc)[:_tenth(acc)].mean()),
    "best10_acc": Statistic(lambda acc, n: np.sort(acc)[-_tenth(acc):].mean()),
    # q-FFL's variance of the accuracy fractions is shown in %^2 (x 10^4, plot_fairness.py:L51)
    "var_acc": Statistic(lambda acc, n: acc.var(), scale=1e4),
}
STAT_KEYS = tuple(STATISTICS)  # the built-in ones, in metrics.csv's column order
# other fractions of metrics.csv / summary.json: shown in %
PERCENT_PREFIXES = ("test_acc_", "improved_")


def display_scale(name: str) -> float:
    """The display factor of a statistic, a metrics.csv column or a summary source
    (``protocol.var_acc``): the statistic's ``scale`` (``STATISTICS``); ``test_acc_<set>``,
    ``improved_*``, ``final_user.<k>`` and ``final_others.<k>`` (fractions) 100; anything else
    (losses, eta) 1."""
    section, _, stat = name.rpartition(".")
    if section in ("final_user", "final_others"):
        return 100.0
    if stat in STATISTICS:
        return STATISTICS[stat].scale
    return 100.0 if stat.startswith(PERCENT_PREFIXES) else 1.0


def accuracy_stats(accuracy: np.ndarray, test_sizes: np.ndarray | None = None) -> dict[str, float]:
    """Every statistic of ``STATISTICS`` of a per-user accuracy vector (fractions in [0, 1]).

    mean_acc: unweighted mean over users; std_acc: population std (ddof 0); worst5_acc and
    best5_acc: ``np.percentile`` 5 and 95 with linear interpolation (not the mean of the worst 5 %
    of users: docs/protocol.md §6.3); weighted_acc: the mean over all test samples (users weighted
    by their test-set size; Table 14's "Avg (data)").

    q-FFL's statistics, as its plotting code computes them (fair_flearn plot_fairness.py:L42-51,
    ``get_bar_y``): worst10_acc and best10_acc, the mean of the lowest / highest floor(0.1 m) user
    accuracies (``int(num_user * 0.1)``; with m < 10 users the code averages no user and gets NaN,
    here at least one user), and var_acc, the population variance (``np.var``, ddof 0) of the
    accuracy fractions (the code prints it x 10^4, its ``scale``).
    """
    accuracy = np.asarray(accuracy, dtype=np.float64)
    sizes = (np.ones_like(accuracy) if test_sizes is None
             else np.asarray(test_sizes, dtype=np.float64))
    return {name: float(stat.compute(accuracy, sizes)) for name, stat in STATISTICS.items()}


def improved_fraction(before: torch.Tensor, after: torch.Tensor,
                      higher_is_better: bool = False) -> float:
    """Fraction of participants whose value did not get worse over the round (ties count as
    improved, paper footnote 5 / docs/protocol.md §6.4)."""
    better = after >= before if higher_is_better else after <= before
    return float(better.double().mean())


def per_owner_mean(values: torch.Tensor, owner: torch.Tensor, num_owners: int) -> torch.Tensor:
    """Mean of ``values`` grouped by ``owner`` (one index per value), for owners 0..num_owners-1.
    ``values`` is (samples,) or (samples, runs): then one mean per owner and column."""
    import torch

    total = torch.zeros(num_owners, *values.shape[1:], dtype=torch.float64,
                        device=values.device).index_add_(0, owner, values.double())
    ones = torch.ones(len(owner), dtype=torch.float64, device=values.device)
    count = torch.zeros(num_owners, dtype=torch.float64,
                        device=values.device).index_add_(0, owner, ones)
    return total / count.clamp(min=1).view(-1, *[1] * (values.dim() - 1))


def sum_of_batch_means(per_sample: torch.Tensor, batch_size: int | None) -> torch.Tensor:
    """Sum over consecutive minibatches of size ``batch_size`` of the minibatch-mean loss: the
    authors' "total loss" F_i that q-FedAvg consumes (docs/protocol.md §3, §4.5). None = one batch.
    ``per_sample`` is (samples,) or (samples, runs): then one sum per column (packed runs)."""
    n = len(per_sample)
    if batch_size is None or batch_size >= n:
        return per_sample.mean(dim=0)
    full = n - n % batch_size
    total = per_sample[:full].reshape(full // batch_size, batch_size,
                                      *per_sample.shape[1:]).mean(dim=1).sum(dim=0)
    return total + per_sample[full:].mean(dim=0) if full < n else total


def participant_stats(per_sample: torch.Tensor, correct: torch.Tensor, sizes: list[int],
                      batch_size: int | None) -> dict[str, torch.Tensor]:
    """Each participant's mean loss (``loss``), accuracy (``acc``) and F_i (``total``: the sum of
    its minibatch means, ``sum_of_batch_means``) from the per-sample losses and correctness of the
    participants' pooled samples (``sizes[i]`` samples of participant i, in order). (samples,)
    inputs give (participants,) outputs; (samples, runs) inputs, of packed runs, (participants,
    runs)."""
    import torch

    loss, acc, total = [], [], []
    for user_losses, user_correct in zip(per_sample.split(sizes), correct.split(sizes)):
        loss.append(user_losses.mean(dim=0))
        acc.append(user_correct.mean(dim=0))
        total.append(sum_of_batch_means(user_losses, batch_size))
    return {"loss": torch.stack(loss), "acc": torch.stack(acc), "total": torch.stack(total)}


def paired_interval(mean: float, sd: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of a paired mean difference over n seeds (sd: ddof 1). Its half-width
    is the smallest mean difference those seeds resolve: a smaller one leaves the threshold inside
    the interval. Not a verdict (verdicts follow :func:`fedmgda.claims.decide`); NaNs for n < 2."""
    if n < 2:
        return math.nan, math.nan
    # scipy comes with scikit-learn; imported here, so that parsing the Snakefile stays fast
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n))
    return mean - half, mean + half
