import numpy as np
import torch

from fedmgda.metrics import (
    STAT_KEYS,
    accuracy_stats,
    display_scale,
    improved_fraction,
    participant_stats,
    per_owner_mean,
    sum_of_batch_means,
)


def test_accuracy_stats_follow_the_papers_plotting_code():
    rng = np.random.default_rng(0)
    acc = rng.integers(0, 51, size=100) / 50
    sizes = rng.integers(10, 60, size=100)
    stats = accuracy_stats(acc, sizes)
    assert stats["mean_acc"] == acc.mean()
    assert stats["std_acc"] == np.std(acc, ddof=0)
    s = np.sort(acc)  # linear interpolation at index 4.95 and 94.05
    assert np.isclose(stats["worst5_acc"], s[4] + 0.95 * (s[5] - s[4]))
    assert np.isclose(stats["best5_acc"], s[94] + 0.05 * (s[95] - s[94]))
    assert np.isclose(stats["weighted_acc"], (acc * sizes).sum() / sizes.sum())


def test_q_ffl_statistics_follow_its_plotting_code():
    """fair_flearn plot_fairness.py get_bar_y: mean of the int(0.1 m) lowest / highest, np.var."""
    acc = np.array([0.9, 0.1, 0.5, 0.7, 0.3, 0.2, 0.8, 0.6, 0.4, 1.0, 0.0, 0.55, 0.45, 0.35, 0.65,
                    0.75, 0.85, 0.95, 0.05, 0.15, 0.25])
    stats = accuracy_stats(acc)
    assert len(acc) == 21 and int(len(acc) * 0.1) == 2
    assert (stats["worst10_acc"] == np.mean([0.0, 0.05])
            and stats["best10_acc"] == np.mean([0.95, 1.0]))
    assert np.isclose(stats["var_acc"],
                      np.var(acc)) and np.isclose(stats["var_acc"], stats["std_acc"] ** 2)
    # m < 10: at least one user (the code's mean of none is NaN)
    two = accuracy_stats(np.array([0.8, 0.6]))
    assert (two["worst10_acc"] == 0.6 and two["best10_acc"] == 0.8
            and np.isclose(two["var_acc"], 0.01))
    assert set(stats) == set(STAT_KEYS)


def test_display_scale_of_each_statistic_and_source():
    assert display_scale("var_acc") == display_scale("protocol.var_acc") == 1e4  # %^2
    for name in ("mean_acc", "final.worst10_acc", "protocol.best10_acc", "final.test_acc_phd",
                 "test_acc_pooled",
                 "final_user.0", "final_others.3", "metrics.improved_loss", "improved_acc"):
        assert display_scale(name) == 100.0, name
    assert (display_scale("train_loss") == display_scale("metrics.eta")
            == display_scale("protocol.round") == 1.0)


def test_improved_fraction_counts_ties_as_improved():
    before = torch.tensor([1.0, 2.0, 3.0, 4.0])
    after = torch.tensor([0.5, 2.0, 3.5, 4.0])
    assert improved_fraction(before, after) == 0.75
    assert improved_fraction(before, after, higher_is_better=True) == 0.75


def test_per_owner_mean_and_sum_of_batch_means():
    values = torch.tensor([1.0, 2.0, 3.0, 10.0])
    assert torch.allclose(per_owner_mean(values, torch.tensor([0, 0, 1, 1]), 3),
                          torch.tensor([1.5, 6.5, 0.0], dtype=torch.float64))
    losses = torch.arange(25, dtype=torch.float32)
    # batches of 10: means 4.5, 14.5 and a partial batch (20..24) with mean 22
    assert sum_of_batch_means(losses, 10).item() == 4.5 + 14.5 + 22
    assert sum_of_batch_means(losses, None).item() == losses.mean().item()


def test_sum_of_batch_means_of_packed_runs_is_one_sum_per_column():
    losses = torch.arange(25, dtype=torch.float64)
    columns = torch.stack([losses, 2 * losses], dim=1)
    assert sum_of_batch_means(columns, 10).tolist() == [4.5 + 14.5 + 22, 2 * (4.5 + 14.5 + 22)]
    assert sum_of_batch_means(columns, None).tolist() == columns.mean(dim=0).tolist()


def test_participant_stats_of_one_run_and_of_packed_runs():
    losses = torch.arange(25, dtype=torch.float64)
    correct = (torch.arange(25) % 3 == 0).double()
    one = participant_stats(losses, correct, [20, 5], 10)
    assert one["loss"].tolist() == [9.5, 22.0]
    assert one["acc"].tolist() == [7 / 20, 2 / 5]
    assert one["total"].tolist() == [4.5 + 14.5, 22.0]
    packed = participant_stats(torch.stack([losses, 2 * losses], dim=1),
                               torch.stack([correct, 1 - correct], dim=1), [20, 5], 10)
    assert packed["loss"].shape == (2, 2)
    assert (packed["loss"][:, 0].tolist() == one["loss"].tolist()
            and packed["total"][:, 1].tolist() == (2 * one["total"]).tolist())
    assert packed["acc"][:, 1].tolist() == (1 - one["acc"]).tolist()


def test_per_owner_mean_of_packed_runs_is_one_mean_per_column():
    values = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 1.0], [10.0, 1.0]])
    means = per_owner_mean(values, torch.tensor([0, 0, 1, 1]), 3)
    assert means.tolist() == [[1.5, 0.5], [6.5, 1.0], [0.0, 0.0]]
