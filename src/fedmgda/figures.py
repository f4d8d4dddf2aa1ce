"""Figures 1-9: one panel per call, from the run folders the registry names.

A figure spec is a :class:`fedmgda.specs.FigureSpec` with its rows
(``fedmgda.experiments.item_spec``). Kinds (the ``kind`` key of a figure spec in the config):

- ``curves``: a ``metrics.csv`` column per round. Each seed's series is smoothed with an
  exponentially weighted mean (pandas ``ewm(span)``, docs/protocol.md §6.4), then the seeds' mean
  is drawn with a band of ±1 std over seeds; the legend's title says so, with the span.
  Accuracy-like columns are shown in %. ``style_by: attack`` draws attacked runs dashed and clean
  ones solid, in the same colour per algorithm setting. ``inset_last: N`` adds an inset of the last
  N rounds on their own y range (a gap the full range hides).
- ``violin``: the per-user accuracies of the last stored per-user vector at round <= T-9 (the
  table's round, ``fedmgda.results.protocol_vector``), pooled over the seeds that finished
  (Figure 3); the labels give σ = mean over seeds of the per-user std, a note the round, the seeds
  pooled and the inner lines (median dashed, quartiles dotted).
- ``tradeoff``: fairness against accuracy along training: per evaluated round, the seeds' mean of
  ``metric`` (default ``std_acc``) against their mean of ``mean_acc``, one line per row ending in a
  dot at the last round. Rows on one curve differ only in speed; a row below another at the same
  average accuracy is fairer there.
- ``reading_window``: one round against a window of rounds: per panel a ``metrics`` column at every
  evaluation, each seed thin and the seeds' mean thick (no smoothing), with the round the tables
  read (round T - 9, ``fedmgda.results.protocol_vector``) marked and the last ``window_last``
  rounds (what the claims' ``window: {last: N}`` averages) shaded.
- ``gaps``: paired differences across experiments (a dial such as the Dirichlet alpha): per
  experiment (x, labelled by ``xlabels``) the first ``select`` row minus each other one, per seed
  (points), with their mean and its 95 % Student t interval (``fedmgda.metrics.paired_interval``);
  one panel per ``columns`` source (``protocol.<stat>`` / ``final.<stat>``), a zero line.
- ``bars``: summary values (``final.<stat>`` / ``protocol.<stat>`` sources as in tables) per row,
  grouped by column, error bars = std over seeds (Figure 2 left).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedmgda.catalog import algorithms  # noqa: E402
from fedmgda.metrics import display_scale, paired_interval  # noqa: E402
from fedmgda.results import (  # noqa: E402
    RunFolders,
    folders_of,
    protocol_user_accuracies,
    run_value,
    seed_stats,
)
from fedmgda.runkeys import algorithm_info, fmt_display  # noqa: E402
from fedmgda.specs import FigureSpec, Row  # noqa: E402

UNITS = {100.0: " (%)", 1e4: " (%²)"}  # of a display scale (fedmgda.metrics.display_scale)
METRIC_NAMES = {"mean_acc": "average user accuracy (%)", "std_acc": "std of user accuracies (pp)",
                "worst5_acc": "worst 5 % of users: accuracy (%)"}


def _base_label(row: Row) -> str:
    return row.label.split(" [")[0] if row.attacked else row.label


def row_labels(rows: list[Row]) -> dict[str, str]:
    """Each row's label, naming the value of a hyper-parameter that other rows of the figure set and
    this one leaves to its algorithm's default (FedMGDA beside FedMGDA ε=0: "FedMGDA ε=1")."""
    set_somewhere = {k for r in rows for k in r.hparams}
    labels = {}
    for r in rows:
        label = _base_label(r)
        # a plug-in is not loaded in a figure job: its label as it is
        if r.algorithm in algorithms():
            info = algorithm_info(r.algorithm)
            implied = info.implied_values
            bits = [f"{info.hparams[k].symbol or k}={fmt_display(implied[k], k)}"
                    for k in sorted(set_somewhere - set(r.hparams)) if k in implied]
            if bits:
                label += (", " if label != info.display else " ") + ", ".join(bits)
        labels[r.key] = label + r.label[len(_base_label(r)):]
    return labels


def seed_curves(row: Row, runs_dir: Path | RunFolders, metric: str,
                ewm: int | None) -> pd.DataFrame:
    """Rounds x seeds table of the (smoothed) metric; rounds where it was not evaluated dropped."""
    series = {}
    for seed, run, folder in zip(row.seeds, row.runs, folders_of(runs_dir).row(row), strict=True):
        df = folder.table("metrics.csv")
        if metric not in df.columns:
            raise KeyError(f"{run}/metrics.csv has no column {metric!r}; columns: "
                           f"{list(df.columns)}")
        s = df.set_index("round")[metric].astype(float).dropna()
        if ewm:
            s = s.ewm(span=ewm).mean()
        series[seed] = s * display_scale(metric)
    return pd.DataFrame(series)


def plot_curves(spec: FigureSpec, runs_dir: Path | RunFolders, ax: plt.Axes) -> None:
    runs = folders_of(runs_dir)
    metric = spec.metric
    colours: dict[str, Any] = {}
    palette = plt.get_cmap("tab10").colors
    labels = row_labels(spec.rows)
    drawn = []
    for row in spec.rows:
        table = seed_curves(row, runs, metric, spec.ewm)
        if table.empty:
            continue
        mean, std = table.mean(axis=1), table.std(axis=1, ddof=0)
        attacked = row.attacked
        if spec.style_by == "attack":
            base = labels[row.key].split(" [")[0]
            colour = colours.setdefault(base, palette[len(colours) % len(palette)])
            label = f"{base} ({'attacked' if attacked else 'no attack'})"
            style = "--" if attacked else "-"
        else:
            colour = palette[len(colours) % len(palette)]
            colours[row.label] = colour
            label, style = labels[row.key], "-"
        n = table.shape[1]
        ax.plot(mean.index, mean.values, style, color=colour, lw=1.4, label=f"{label} (n={n})")
        ax.fill_between(mean.index, (mean - std).values, (mean + std).values, color=colour,
                        alpha=0.18,
                        lw=0)
        drawn.append((mean, std, style, colour))
    ax.set_xlabel("communication round")
    ax.set_ylabel(spec.ylabel or (metric + UNITS.get(display_scale(metric), "")))
    if spec.logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    smoothing = (f"each seed smoothed (EWM, span {spec.ewm})" if spec.ewm and spec.ewm > 1
                 else "no smoothing")
    ax.legend(fontsize=7, loc="best", title_fontsize=7,
              title="line: mean over n seeds, band: ±1 std over seeds (population, ddof "
              f"0);\n{smoothing}")
    if spec.inset_last and drawn:
        _inset(ax, drawn, spec.inset_last)


def _inset(ax: plt.Axes, drawn: list[tuple], last: int) -> None:
    """An inset of the curves' last ``last`` rounds on their own y range."""
    end = max(mean.index.max() for mean, *_ in drawn)
    inset = ax.inset_axes([0.4, 0.22, 0.35, 0.3])  # below a top-right legend, above a falling curve
    lo, hi = np.inf, -np.inf
    for mean, std, style, colour in drawn:
        m, s = mean[mean.index > end - last], std[std.index > end - last]
        inset.plot(m.index, m.values, style, color=colour, lw=1.2)
        inset.fill_between(m.index, (m - s).values, (m + s).values, color=colour, alpha=0.18, lw=0)
        lo, hi = min(lo, float(m.min())), max(hi, float(m.max()))
    pad = 0.15 * (hi - lo or 1.0)
    inset.set_ylim(lo - pad, hi + pad)
    inset.set_title(f"last {last} rounds (means only in range)", fontsize=6)
    inset.tick_params(labelsize=6)
    inset.grid(alpha=0.3)


def plot_violin(spec: FigureSpec, runs_dir: Path | RunFolders, ax: plt.Axes) -> None:
    import seaborn as sns

    runs = folders_of(runs_dir)
    frames = []
    order = []
    for row in spec.rows:  # seeds that diverged or failed have no vector to show
        accs = [protocol_user_accuracies(folder)[0] for folder in runs.row(row)
                if folder.status == "ok"]
        if not accs:
            continue
        name = f"{row.label}\nσ={np.mean([acc.std(ddof=0) for acc in accs]):.1f}"
        frames += [pd.DataFrame({"row": name, "accuracy": acc}) for acc in accs]
        order.append(name)
    data = pd.concat(frames, ignore_index=True)
    sns.violinplot(data=data, x="row", y="accuracy", order=order, hue="row", legend=False, cut=0,
                   inner="quartile", density_norm="width", ax=ax, palette="tab10")
    ax.set_ylabel(spec.ylabel or "per-user test accuracy (%)")
    rounds = sorted({protocol_user_accuracies(folder)[1] for row in spec.rows
                     for folder in runs.row(row) if folder.status == "ok"})
    seeds = max(len(row.seeds) for row in spec.rows)
    ax.set_xlabel(f"per-user accuracies at round {', '.join(map(str, rounds))}, {seeds} seeds "
                  "pooled; inside: median (dashed), quartiles (dotted); σ: per-user std, mean over "
                  "seeds", fontsize=7)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    for lab in ax.get_xticklabels():
        lab.set_horizontalalignment("right")
    ax.grid(axis="y", alpha=0.3)


def plot_bars(spec: FigureSpec, runs_dir: Path | RunFolders, ax: plt.Axes) -> None:
    runs = folders_of(runs_dir)
    columns = spec.columns
    rows = spec.rows
    width = 0.8 / max(len(columns), 1)
    x = np.arange(len(rows))
    for j, (col, src) in enumerate(columns.items()):
        means, stds = [], []
        for row in rows:
            vals = [run_value(folder, src) * display_scale(src) for folder in runs.row(row)
                    if folder.status == "ok"]
            mean, std = seed_stats(vals)
            means.append(mean)
            stds.append(std)
        ax.bar(x + (j - (len(columns) - 1) / 2) * width, means, width, yerr=stds, capsize=2,
               label=col)
    ax.set_xticks(x, [r.label for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(spec.ylabel or "accuracy (%)")
    ax.legend(fontsize=8, title="error bars: ±1 std over seeds (population, ddof 0)",
              title_fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def plot_tradeoff(spec: FigureSpec, runs_dir: Path | RunFolders, ax: plt.Axes) -> None:
    runs = folders_of(runs_dir)
    metric = spec.metric or "std_acc"
    for row in spec.rows:
        x = seed_curves(row, runs, "mean_acc", None).mean(axis=1)
        y = seed_curves(row, runs, metric, None).mean(axis=1)
        both = pd.concat([x, y], axis=1).dropna()
        if both.empty:
            continue
        (line,) = ax.plot(both.iloc[:, 0], both.iloc[:, 1], "-", lw=1.2, alpha=0.8,
                          label=f"{row.label} (n={len(row.seeds)})")
        ax.plot(both.iloc[-1, 0], both.iloc[-1, 1], "o", color=line.get_color())
    ax.set_xlabel("average user accuracy (%), mean over seeds")
    ax.set_ylabel(spec.ylabel or (metric + UNITS.get(display_scale(metric), "")))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def plot_reading_window(spec: FigureSpec, runs_dir: Path | RunFolders,
                        axes: list[plt.Axes]) -> None:
    runs = folders_of(runs_dir)
    palette = plt.get_cmap("tab10").colors
    labels = row_labels(spec.rows)
    for ax, metric in zip(axes, spec.metrics, strict=True):
        end = protocol = None
        for i, row in enumerate(spec.rows):
            table = seed_curves(row, runs, metric, None)
            if table.empty:
                continue
            colour = palette[i % len(palette)]
            for seed in table.columns:
                ax.plot(table.index, table[seed].values, "-", color=colour, lw=0.7, alpha=0.45)
            mean = table.mean(axis=1)
            ax.plot(mean.index, mean.values, "-o", color=colour, lw=1.8, ms=2.5,
                    label=f"{labels[row.key]}: mean of {table.shape[1]} seeds (thin: each seed)")
            end = int(table.index.max())
            if spec.window_last:
                late = mean[mean.index > end - spec.window_last]
                ax.hlines(late.mean(), late.index.min(), end, color=colour, ls=":", lw=2.2)
            protocol = protocol_user_accuracies(runs.row(row)[0])[1]
        if end is None:
            continue
        if spec.window_last:
            ax.axvspan(end - spec.window_last + 0.5, end + 0.5, color="0.85", zorder=0,
                       label=f"rounds {end - spec.window_last + 1}-{end}: the late window; dotted: "
                       "its mean")
        ax.axvline(protocol, color="k", ls="--", lw=1,
                   label=f"round {protocol} = T - 9: the tables' one round")
        ax.set_xlabel("communication round (evaluations every 10 rounds, no smoothing)")
        ax.set_ylabel(METRIC_NAMES.get(metric, metric + UNITS.get(display_scale(metric), "")))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6.5, loc="lower left")


def seed_values(row: Row, runs: RunFolders, source: str) -> dict[int, float]:
    """{seed: the run's ``source`` value in display units} of the row's runs that finished ok."""
    return {int(seed): run_value(folder, source) * display_scale(source)
            for seed, folder in zip(row.seeds, runs.row(row), strict=True) if folder.status == "ok"}


def gap_rows(spec: FigureSpec) -> list[tuple[Row, list[Row]]]:
    """Per experiment of ``spec``, in order: its row matching ``select[0]`` and its rows matching
    each other pattern (the rows subtracted)."""
    out = []
    for experiment in spec.experiments:
        rows = [r for r in spec.rows if r.experiment == experiment]
        picked = [[r for r in rows if fnmatch.fnmatchcase(r.key, pattern)]
                  for pattern in spec.select]
        if any(len(p) != 1 for p in picked):
            raise ValueError(f"figure {spec.name}: each select pattern must match one row of "
                             f"{experiment}; rows: {', '.join(r.key for r in rows)}")
        out.append((picked[0][0], [p[0] for p in picked[1:]]))
    return out


def plot_gaps(spec: FigureSpec, runs_dir: Path | RunFolders, axes: list[plt.Axes]) -> None:
    runs = folders_of(runs_dir)
    pairs = gap_rows(spec)
    labels = row_labels([r for a, bs in pairs[:1] for r in (a, *bs)])
    x = np.arange(len(pairs))
    palette = plt.get_cmap("tab10").colors
    for ax, (column, source) in zip(axes, spec.columns.items(), strict=True):
        for j in range(len(pairs[0][1])):
            offset = (j - (len(pairs[0][1]) - 1) / 2) * 0.18
            colour, means, lows, highs = palette[j % len(palette)], [], [], []
            for i, (a, bs) in enumerate(pairs):
                av, bv = seed_values(a, runs, source), seed_values(bs[j], runs, source)
                d = np.asarray([av[s] - bv[s] for s in sorted(set(av) & set(bv))])
                ax.plot(np.full(len(d), x[i] + offset), d, "o", color=colour, ms=3, alpha=0.45)
                mean = float(d.mean()) if len(d) else np.nan
                low, high = paired_interval(mean, float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                                            len(d))
                means.append(mean)
                lows.append(mean - low if len(d) > 1 else 0.0)
                highs.append(high - mean if len(d) > 1 else 0.0)
            label = f"{labels[pairs[0][0].key]} - {labels[pairs[0][1][j].key]}"
            ax.errorbar(x + offset, means, yerr=[lows, highs], fmt="-s", color=colour, ms=5,
                        capsize=3, lw=1.4, label=label)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xticks(x, spec.xlabels or spec.experiments)
        ax.set_ylabel(f"{column}: paired difference (pp)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7, loc="best", title="per seed (points); mean and 95 % t interval",
                   title_fontsize=7)


KINDS = {"curves": plot_curves, "violin": plot_violin, "bars": plot_bars, "tradeoff": plot_tradeoff,
         "reading_window": plot_reading_window, "gaps": plot_gaps}


# kinds drawn one panel per item: (the items of a spec, a panel's width and height, what they need)
PANELS = {
    "reading_window": (lambda spec: spec.metrics, 6.0, 4.8,
                       "metrics (metrics.csv columns, one panel each)"),
    "gaps": (lambda spec: list(spec.columns) if len(spec.select or []) >= 2 else [], 5.2, 4.4,
             "select (the row, then the rows subtracted) and columns (the statistics, one panel "
             "each)"),
}


def make_figure(spec: FigureSpec, runs_dir: str | Path, out_pdf: str | Path,
                out_png: str | Path) -> None:
    kind = spec.kind
    if kind not in KINDS:
        raise ValueError(f"figure {spec.name}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if kind in PANELS:
        items, width, height, needs = PANELS[kind]
        panels = items(spec)
        if not panels:
            raise ValueError(f"figure {spec.name}: {kind} needs {needs}")
        fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height),
                                 squeeze=False)
        KINDS[kind](spec, RunFolders(runs_dir), list(axes[0]))
        fig.suptitle(spec.title or spec.name, fontsize=10)
    else:
        wide = kind in ("violin", "bars") or len(spec.rows) > 6
        fig, ax = plt.subplots(figsize=(8.0 if wide else 6.4, 4.8))
        KINDS[kind](spec, RunFolders(runs_dir), ax)
        ax.set_title(spec.title or spec.name, fontsize=10)
    fig.tight_layout()
    for out in (out_pdf, out_png):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150)
    plt.close(fig)

