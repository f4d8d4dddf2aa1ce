"""What the report (notebooks/report.ipynb) shows beyond the tables and figures of the registry.

- :func:`bare_experiments`: the experiments no table or figure shows; the report shows each one's
  results itself, so a one-experiment run (e.g. ``fmnist_authors_paired``) is not a report
  without results.
- :func:`experiment_rows`, :func:`curves_figure`, :func:`statistics_table`: those results -- the
  per-round curves of its runs (mean over seeds with a ±1 std band, one line per row) and the
  summary statistics of its rows (mean ± population std over seeds, as the tables show them).
  A row is the runs whose configs differ only in their seed; its label names the algorithm and
  what else differs between the experiment's rows.
- :func:`run_pack`, :func:`training_time`, :func:`jobs_wall_time`: the training time of a profile,
  a pack (runs trained in one process, ``fedmgda.packs``) counted once.

Nothing here imports torch; matplotlib only when drawing.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from fedmgda.metrics import STATISTICS, display_scale
from fedmgda.results import METRICS, RunFolders, metrics_value, run_value, seed_stats

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

# config fields that differ between the seeds of one row
SEED_FIELDS = ("seed", "partition_file")
# the report's statistics of a row: final.<stat> of fedmgda.metrics.STATISTICS, and the mean user
# accuracy averaged over the last LATE_ROUNDS rounds of metrics.csv
SHOWN_STATISTICS = ("mean_acc", "std_acc", "worst10_acc", "best10_acc")
LATE_ROUNDS = 10
# per-round curves: (metrics.csv column, axis label)
CURVES = (("mean_acc", "mean user test accuracy (%)"), ("train_loss", "train loss"))


def bare_experiments(experiments: Iterable[str], items: Iterable[Any]) -> list[str]:
    """The experiments (sorted) that none of ``items`` (table and figure specs, each with its
    ``experiments``) shows."""
    shown = {name for item in items for name in item.experiments}
    return sorted(set(experiments) - shown)


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def experiment_rows(runs_dir: str | Path, runs: Iterable[str]) -> dict[str, list[str]]:
    """``{label: [run keys]}``: the runs grouped into rows (same config but for the seed),
    in the order of ``runs``. A label is the algorithm, then the fields that differ between rows
    (``hparams.`` left out of their names; a field a row lacks not named); with one row, the
    algorithm and its hparams."""
    groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
    folders = RunFolders(runs_dir)
    for key in runs:
        config = (folders.open(key).summary.get("config") or {})
        flat = {k: v for k, v in _flat(config).items() if k not in SEED_FIELDS}
        ident = json.dumps(flat, sort_keys=True, default=str)
        groups.setdefault(ident, (flat, []))[1].append(key)
    configs = [flat for flat, _ in groups.values()]
    fields = sorted({k for c in configs for k in c})
    differ = [k for k in fields if k != "algorithm"
              and len({json.dumps(c.get(k), default=str) for c in configs}) > 1]
    if len(configs) == 1:
        differ = [k for k in fields if k.startswith("hparams.")]
    rows = {}
    for flat, keys in groups.values():
        bits = [f"{k.removeprefix('hparams.')}={flat[k]}" for k in differ if k in flat]
        label = " ".join([str(flat.get("algorithm", "run"))] + ([", ".join(bits)] if bits else []))
        rows[label] = keys
    return rows


def curves_figure(runs_dir: str | Path, rows: Mapping[str, list[str]]) -> plt.Figure:
    """Test accuracy and train loss vs round: per row the mean over its seeds, a ±1 std band
    (population std) where it has several; rounds a run did not evaluate are left out."""
    import matplotlib.pyplot as plt  # here: runs-index (fedmgda.workflow_cli) imports this module

    fig, axes = plt.subplots(1, len(CURVES), figsize=(5.5 * len(CURVES), 3.6))
    folders = RunFolders(runs_dir)
    palette = plt.get_cmap("tab10").colors
    for ax, (column, ylabel) in zip(axes, CURVES):
        for i, (label, keys) in enumerate(rows.items()):
            series = {}
            for key in keys:
                df = folders.open(key).table(METRICS)
                if column in df.columns:
                    series[key] = (df.set_index("round")[column].astype(float)
                                   * display_scale(column))
            if not series:
                continue
            table = pd.DataFrame(series).dropna(how="all")
            mean, std = table.mean(axis=1), table.std(axis=1, ddof=0)
            colour = palette[i % len(palette)]
            ax.plot(mean.index, mean.values, color=colour, lw=1.4,
                    label=f"{label} (n={len(series)})")
            if len(series) > 1:
                ax.fill_between(mean.index, mean - std, mean + std, color=colour, alpha=0.2, lw=0)
        ax.set_xlabel("communication round")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def curves_png(runs_dir: str | Path, rows: Mapping[str, list[str]]) -> bytes:
    """:func:`curves_figure` as PNG bytes (the report shows them as an image, whatever the
    kernel's matplotlib backend: under ``MPLBACKEND=Agg`` a displayed figure is only its text)."""
    import io

    import matplotlib.pyplot as plt

    figure = curves_figure(runs_dir, rows)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def _pm(values: list[float], scale: float) -> str:
    mean, std = seed_stats(values)
    return "n/a" if mean != mean else f"{mean * scale:.2f} ± {std * scale:.2f}"


def statistics_table(runs_dir: str | Path, rows: Mapping[str, list[str]]) -> pd.DataFrame:
    """One line per row: its runs' statuses and, over its seeds, mean ± population std of the
    final model's statistics (``SHOWN_STATISTICS``, in %) and of the mean user accuracy over the
    last ``LATE_ROUNDS`` rounds (NaN-free runs only: a diverged run has no final statistics)."""
    records = []
    folders = RunFolders(runs_dir)
    for label, keys in rows.items():
        runs = [folders.open(key) for key in keys]
        statuses = pd.Series([run.status for run in runs]).value_counts()
        record = {"row": label, "seeds": len(keys),
                  "status": ", ".join(f"{n} {s}" for s, n in statuses.items())}
        for stat in SHOWN_STATISTICS:
            record[f"final {stat}"] = _pm([run_value(run, f"final.{stat}") for run in runs],
                                          STATISTICS[stat].scale)
        record[f"mean_acc, last {LATE_ROUNDS} rounds"] = _pm(
            [metrics_value(run, "mean_acc", {"last": LATE_ROUNDS}) for run in runs],
            display_scale("mean_acc"))
        records.append(record)
    return pd.DataFrame.from_records(records).set_index("row")


def run_pack(run_dir: str | Path) -> str:
    """The pack a run was trained in, as an id shared by its members (``pack-<hash of their
    folders>``), read from the first line of its train.log (``fedmgda.packs.train_pack`` writes
    ``pack of N runs: <command> --out <folders>``); "" for a run trained alone or without a log."""
    log = Path(run_dir) / "train.log"
    if not log.is_file():
        return ""
    with open(log) as fh:
        first = fh.readline()
    if not first.startswith("pack of "):
        return ""
    argv = shlex.split(first.split(": ", 1)[1])
    outs = argv[len(argv) - argv[::-1].index("--out"):] if "--out" in argv else []
    return "pack-" + hashlib.sha1(" ".join(outs).encode()).hexdigest()[:10] if outs else ""


def training_time(index: pd.DataFrame) -> tuple[float, int]:
    """Total training time (s) of the runs of ``index`` (runs_index.csv: ``runtime_s``, ``pack``)
    and the number of packs in it. A pack's members train in one process at the same time, each
    ``runtime_s`` spanning about the pack's whole training, so a pack counts once, as its longest
    member; a run trained alone counts its own ``runtime_s``."""
    packs = (index["pack"].fillna("").astype(str) if "pack" in index
             else pd.Series([""] * len(index), index=index.index))
    alone = index.loc[packs == "", "runtime_s"].sum()
    packed = index[packs != ""].groupby(packs[packs != ""])["runtime_s"].max()
    return float(alone + packed.sum()), len(packed)


def jobs_wall_time(results_dir: str | Path) -> tuple[float, int]:
    """The wall clock (s) of the training jobs of a profile and their number, from the benchmark
    files Snakemake wrote (``benchmarks/train/<run>.tsv``, ``benchmarks/packs/<pack>.tsv``: one per
    job, a pack's job once; process start and data loading included)."""
    files = [f for kind in ("train", "packs")
             for f in sorted((Path(results_dir) / "benchmarks" / kind).rglob("*.tsv"))]
    return float(sum(pd.read_csv(f, sep="\t")["s"].iloc[0] for f in files)), len(files)
