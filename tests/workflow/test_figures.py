"""Every figure kind renders a PDF and a PNG from fixture run folders."""

from __future__ import annotations

import numpy as np
import pytest

from fedmgda.figures import make_figure, seed_curves
from fedmgda.specs import FigureSpec, Row

from .conftest import write_run


def _rows(runs_dir, attacked=False):
    rows = []
    for i, alg in enumerate(["fedavg", "fedmgda_plus"]):
        runs = []
        for seed in (1, 2):
            key = f"s/{alg}/default/clean/seed{seed}"
            write_run(runs_dir, key, list(np.linspace(0.3 + 0.1 * i, 0.9, 20)), rounds=12,
                      seed=seed)
            runs.append(key)
        rows.append(Row("e", alg, alg, alg, {},
                        {"kind": "scaling", "value": 10.0, "user": 0} if attacked and i
                        else {"kind": "none"},
                        [1, 2], runs))
    return rows


@pytest.mark.parametrize("kind, extra", [
    ("curves", {"metric": "mean_acc", "ewm": 3}),
    ("curves", {"metric": "train_loss", "ewm": 3, "logy": True, "style_by": "attack"}),
    ("violin", {}),
    ("bars", {"columns": {"Average": "final.mean_acc", "Attacker": "final_user.0"}}),
    ("tradeoff", {"metric": "std_acc"}),
    ("curves", {"metric": "train_loss", "ewm": 3, "inset_last": 5}),
    ("reading_window", {"metrics": ["std_acc", "worst5_acc"], "window_last": 5}),
])
def test_figure_kinds_write_pdf_and_png(tmp_path, runs_dir, kind, extra):
    spec = FigureSpec(name="figX", kind=kind, experiments=["e"], title="t",
                      rows=_rows(runs_dir, attacked=True),
                      **extra)
    make_figure(spec, runs_dir, tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.pdf").stat().st_size > 1000 and (tmp_path / "f.png").stat().st_size > 1000


def test_curves_are_smoothed_per_seed_and_in_percent(runs_dir):
    row = _rows(runs_dir)[0]
    table = seed_curves(row, runs_dir, "mean_acc", ewm=None)
    assert list(table.columns) == [1, 2] and len(table) == 12
    assert table.max().max() <= 100.0 and table.max().max() > 1.0
    smooth = seed_curves(row, runs_dir, "mean_acc", ewm=5)
    assert smooth.iloc[-1, 0] < table.iloc[-1, 0]  # an increasing series lags when smoothed


def test_tradeoff_plots_the_metric_against_mean_accuracy_per_round(tmp_path, runs_dir):
    import matplotlib.pyplot as plt

    from fedmgda.figures import plot_tradeoff

    rows = _rows(runs_dir)
    fig, ax = plt.subplots()
    plot_tradeoff(FigureSpec(name="t", kind="tradeoff", experiments=["e"], rows=rows), runs_dir, ax)
    # the first row's path: x = mean_acc, y = std_acc, seeds averaged, in %
    line = ax.get_lines()[0]
    mean = seed_curves(rows[0], runs_dir, "mean_acc", None).mean(axis=1)
    std = seed_curves(rows[0], runs_dir, "std_acc", None).mean(axis=1)
    assert np.allclose(line.get_xdata(), mean.values) and np.allclose(line.get_ydata(), std.values)
    plt.close(fig)


def test_labels_name_a_default_that_other_rows_set():
    from fedmgda.figures import row_labels

    rows = [Row("e", k, label, "fedmgda", hp, {"kind": "none"}, [1], ["r"])
            for k, label, hp in [("a", "FedMGDA ε=0", {"epsilon": 0.0}), ("b", "FedMGDA", {})]]
    assert row_labels(rows) == {"a": "FedMGDA ε=0", "b": "FedMGDA ε=1"}
    assert row_labels(rows[1:]) == {"b": "FedMGDA"}  # alone, nothing to tell apart


def test_curves_legend_states_the_band_and_the_smoothing(runs_dir):
    import matplotlib.pyplot as plt

    from fedmgda.figures import plot_curves

    fig, ax = plt.subplots()
    plot_curves(FigureSpec(name="c", kind="curves", experiments=["e"], metric="mean_acc", ewm=3,
                           inset_last=4, rows=_rows(runs_dir)), runs_dir, ax)
    title = ax.get_legend().get_title().get_text()
    assert "±1 std over seeds" in title and "span 3" in title
    assert [a.get_title() for a in ax.child_axes] == ["last 4 rounds (means only in range)"]
    plt.close(fig)


def test_reading_window_marks_the_tables_round_and_the_window(runs_dir):
    import matplotlib.pyplot as plt

    from fedmgda.figures import plot_reading_window
    from fedmgda.results import protocol_user_accuracies

    rows = _rows(runs_dir)
    fig, axes = plt.subplots(1, 2)
    plot_reading_window(FigureSpec(name="w", kind="reading_window", experiments=["e"],
                                   metrics=["std_acc", "mean_acc"],
                                   window_last=5, rows=rows), runs_dir, list(axes))
    protocol = protocol_user_accuracies(runs_dir / rows[0].runs[0])[1]
    labels = axes[0].get_legend_handles_labels()[1]
    assert f"round {protocol} = T - 9: the tables' one round" in labels
    assert any(label.startswith("rounds 8-12: the late window") for label in labels)
    # per panel: each seed's line and the seeds' mean per row
    assert len([ln for ln in axes[1].get_lines() if ln.get_linestyle() == "-"]) == 2 * (2 + 1)
    plt.close(fig)


def test_gaps_draw_each_seeds_paired_difference_per_experiment(tmp_path, runs_dir):
    """Two experiments, FedMGDA+ (std 0.1 lower at every seed in e1, equal in e2) minus FedAvg."""
    rows = []
    for e, shift in (("e1", 0.1), ("e2", 0.0)):
        for alg, spread in (("fedavg", 0.3 + shift), ("fedmgda_plus", 0.3)):
            runs = [f"{e}/{alg}/default/clean/seed{s}" for s in (1, 2, 3)]
            for s, key in enumerate(runs):
                accs = 0.5 + spread * np.linspace(-1, 1, 20) + 0.01 * s
                write_run(runs_dir, key, list(accs), rounds=12, seed=s)
            rows.append(Row(e, alg, alg, alg, {}, {"kind": "none"}, [1, 2, 3], runs))
    spec = FigureSpec(name="g", kind="gaps", experiments=["e1", "e2"], xlabels=["one", "two"],
                      select=["fedmgda_plus", "fedavg"], columns={"std": "protocol.std_acc"},
                      rows=rows)
    import matplotlib.pyplot as plt

    from fedmgda.figures import plot_gaps

    fig, ax = plt.subplots()
    plot_gaps(spec, runs_dir, [ax])
    line = ax.containers[0].lines[0]  # the means, one per experiment
    std_gap = 0.1 * np.linspace(-1, 1, 20).std() * 100
    assert np.allclose(line.get_ydata(), [-std_gap, 0.0], atol=1e-9)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["one", "two"]
    points = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert sum(len(p.get_ydata()) for p in points) == 6  # every seed of both experiments
    plt.close(fig)
    make_figure(spec, runs_dir, tmp_path / "g.pdf", tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 1000
