"""A run folder's format: the one home of what a run writes there and of what tables, figures
and claims read from it.

A run folder (``results/<profile>/runs/<run key>/``) holds ``summary.json`` (``status``, the run
config, the statistics known when it trained and the ``environment`` stamp of
``fedmgda.provenance``; written last, its presence marks a finished run), ``per_user.csv`` (every
user's test accuracy and loss at the stored rounds), ``per_user_final.csv`` (the same of the final
model, which is the average of the iterates for AFL) and ``metrics.csv`` (one row per round); a run
assembles them (``run_result``) and writes them (``write_result``). Beside them: ``checkpoint.pt``
while the run trains (``fedmgda.checkpoints``), ``train.lock`` while a trainer holds the folder
(``fedmgda.runfolder``, which also writes every file atomically), ``run.yaml`` and ``train.log``
(the workflow's). A *source* names one number of a run:

- ``final.<stat>`` / ``protocol.<stat>`` with ``<stat>`` a statistic of
  ``fedmgda.metrics.STATISTICS``: computed here from a stored per-user vector -- the final
  model's, or the last one stored at a round t (0-based) with t % per_user_every == 0 (round
  T-9, the vector the paper's tables were computed from, docs/protocol.md §6.3). A statistic added
  to ``STATISTICS`` is therefore filled in for runs trained before it existed. The one vector
  older runs lack is an averaged final model's (runs trained before ``per_user_final.csv`` was
  written): there the statistics summary.json has are read from it, others are NaN.
- ``final.<other>`` / ``protocol.<other>`` (``test_acc_<set>`` of a global test set, ``round``):
  summary.json.
- ``final_user.<k>`` / ``final_others.<k>``: user k's accuracy, and the mean accuracy of every
  other user, at the last stored round of per_user.csv (e.g. an attacker vs the rest).

Over a row's seeds the statistics are the paper's ±: mean and population std (ddof 0), NaN left
out.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedmgda.metrics import STATISTICS, accuracy_stats
from fedmgda.runfolder import writing

if TYPE_CHECKING:
    import torch

SUMMARY = "summary.json"
METRICS = "metrics.csv"
PER_USER = "per_user.csv"
PER_USER_FINAL = "per_user_final.csv"
# metrics.csv: the columns of a round's non-finite reports (``fedmgda.simulator.Screened.columns``),
# and every column a run has even when it failed in round 1
NONFINITE_COLUMNS = ("nonfinite_updates", "nonfinite_losses", "nonfinite_users", "dropped")
METRICS_COLUMNS = ("round", "eta", "train_loss", *NONFINITE_COLUMNS, "improved_loss", "improved_acc", *STATISTICS)
# metrics.csv columns a run records only when a flag of its config is on (else NaN): column -> flag
RECORDED_ONLY_WITH = {"improved_loss": "track_improvement", "improved_acc": "track_improvement"}
PER_USER_COLUMNS = ["round", "user", "n_test", "accuracy", "loss"]


# ---------------------------------------------------------------------------------- writing
@dataclass
class RunResult:
    """A run's outputs, as its folder holds them (``write_result``)."""

    metrics: pd.DataFrame
    per_user: pd.DataFrame
    summary: dict[str, Any]
    final_weights: torch.Tensor  # the final model as a flat vector (average iterate for AFL)
    final_users: pd.DataFrame | None = None  # every user's test accuracy and loss under it (None: diverged)


def run_result(config: dict[str, Any], state, final_weights: torch.Tensor,
               final: tuple[str, dict[str, float], pd.DataFrame] | None, **header: Any) -> RunResult:
    """A run's outputs from its progress ``state`` (a ``fedmgda.checkpoints.RunState``): its
    metrics and per-user rows, and summary.json's fields: the run ``config``, its status, what
    ``header`` gives (``device``, ``participants_per_round``, ``environment``), and, when ``final``
    is given (None: the run diverged or failed), the final model (which iterate, in words), its
    statistics and per-user vector, and the statistics of the protocol round (``protocol_stats``)."""
    metrics, per_user = metrics_table(state.rows), per_user_rounds(state.per_user_rows)
    failure = state.failure
    diverged = state.diverged_round is not None or failure is not None
    summary: dict[str, Any] = {
        "config": config,
        "status": "failed" if failure else "diverged" if diverged else "ok",
        "diverged_round": state.diverged_round,
        "diverged_because": state.diverged_because,
        **({"failed_round": failure[0], "error": failure[1]} if failure else {}),
        "rounds_completed": len([r for r in state.rows if state.diverged_round != r["round"]]),
        "runtime_s": round(state.elapsed, 3),
        "device": header["device"],
        "participants_per_round": header["participants_per_round"],
        "final": None,
        "protocol": None,
        "environment": header["environment"],
    }
    final_users = None
    if final is not None:
        summary["final_model"], summary["final"], final_users = final
        summary["protocol"] = protocol_stats(per_user, metrics, config["per_user_every"])
    return RunResult(metrics, per_user, summary, final_weights, final_users)


def metrics_table(rows: list[dict[str, float]]) -> pd.DataFrame:
    """metrics.csv: one row per round, with every column of ``METRICS_COLUMNS`` (NaN where absent)."""
    metrics = pd.DataFrame(rows)
    for column in METRICS_COLUMNS:  # a run failed in round 1 has none
        if column not in metrics:
            metrics[column] = np.nan
    return metrics


def per_user_table(test_sizes: np.ndarray, accuracy: np.ndarray, loss: np.ndarray, round_: int | None = None) -> pd.DataFrame:
    """Every user's test size, accuracy and loss under one model: per_user.csv's rows of round
    ``round_`` (1-based), or without it per_user_final.csv."""
    columns = {"user": np.arange(len(test_sizes)), "n_test": test_sizes, "accuracy": accuracy, "loss": loss}
    return pd.DataFrame(columns if round_ is None else {"round": round_, **columns})


def per_user_rounds(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """per_user.csv: the per-user tables of the stored rounds, one after another."""
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=PER_USER_COLUMNS)


def protocol_stats(per_user: pd.DataFrame, metrics: pd.DataFrame, per_user_every: int) -> dict[str, float] | None:
    """Statistics of the last stored per-user vector at a round t (0-based) with
    t % per_user_every == 0: the vector the paper's tables were computed from (docs/protocol.md §6.3:
    round T-9 for T a multiple of 10, not the final model)."""
    last = protocol_round(per_user, per_user_every)
    if last is None:
        return None
    vector = per_user[per_user["round"] == last]
    stats: dict[str, float] = {"round": last, **accuracy_stats(vector["accuracy"].to_numpy(), vector["n_test"].to_numpy())}
    row = metrics[metrics["round"] == last]
    for column in metrics.columns:
        if column.startswith("test_acc_") and not row.empty:
            stats[column] = float(row[column].iloc[0])
    return stats


def write_result(result: RunResult, out: Path) -> None:
    """metrics.csv, per_user.csv, per_user_final.csv (the final model's per-user vector, from
    which tables compute its statistics), then summary.json (written last: its presence marks
    completion); each written atomically (``fedmgda.runfolder.writing``)."""
    out.mkdir(parents=True, exist_ok=True)
    tables = {METRICS: result.metrics, PER_USER: result.per_user, PER_USER_FINAL: result.final_users}
    for name, table in tables.items():
        if table is not None:
            with writing(out / name) as tmp:  # a full disk: one line naming the file
                table.to_csv(tmp, index=False)
    with writing(out / SUMMARY) as tmp:
        tmp.write_text(json.dumps(result.summary, indent=2, default=float))


# ---------------------------------------------------------------------------------- reading


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / SUMMARY
    with open(path) as fh:
        return json.load(fh)


def summary_value(summary: dict[str, Any], source: str) -> float:
    """``final.mean_acc`` -> summary["final"]["mean_acc"]; NaN when absent."""
    section, _, stat = source.partition(".")
    value = (summary.get(section) or {}).get(stat)
    if value is None:
        return math.nan
    return float(value)


def run_value(run_dir: str | Path, summary: dict[str, Any], source: str) -> float:
    """A source of one run (see the module docstring); NaN when the run lacks it."""
    run_dir = Path(run_dir)
    section, _, arg = source.partition(".")
    if section in ("final_user", "final_others"):
        users = read_per_user(run_dir)
        last = users[users["round"] == users["round"].max()]
        k = int(arg)
        pick = last[last["user"] == k] if section == "final_user" else last[last["user"] != k]
        return float(pick["accuracy"].mean()) if len(pick) else math.nan
    if arg in STATISTICS and section in ("final", "protocol"):
        vector = final_vector(run_dir, summary) if section == "final" else protocol_vector(run_dir, summary)[0]
        if vector is not None:
            return float(STATISTICS[arg].compute(vector["accuracy"].to_numpy(dtype=np.float64),
                                                 vector["n_test"].to_numpy(dtype=np.float64)))
    return summary_value(summary, source)


def read_per_user(run_dir: Path, name: str = PER_USER) -> pd.DataFrame:
    return pd.read_csv(run_dir / name)  # pandas reads back the floats it wrote bit for bit


def final_vector(run_dir: Path, summary: dict[str, Any]) -> pd.DataFrame | None:
    """Every user's test accuracy and size under the run's final model: ``per_user_final.csv``; in
    a run trained before that file, the last round of per_user.csv when the final model is the
    last iterate; None when the final model is an average whose vector was not stored."""
    if (run_dir / PER_USER_FINAL).exists():
        return read_per_user(run_dir, PER_USER_FINAL)
    if summary.get("final_model") != "last iterate":
        return None
    users = read_per_user(run_dir)
    return users[users["round"] == users["round"].max()]


def protocol_vector(run_dir: Path, summary: dict[str, Any]) -> tuple[pd.DataFrame | None, int | None]:
    """The per-user vector the paper's tables were computed from and its round (1-based, as
    per_user.csv counts): the last stored at a round t (0-based) with t % per_user_every == 0
    (the run config's; older summaries without it name the round in ``protocol.round``)."""
    users = read_per_user(run_dir)
    every = (summary.get("config") or {}).get("per_user_every")
    if every:
        rnd = protocol_round(users, int(every))
    else:
        rnd = (summary.get("protocol") or {}).get("round")
    if rnd is None or rnd not in set(users["round"]):
        return None, None
    return users[users["round"] == rnd], int(rnd)


def protocol_round(per_user: pd.DataFrame, per_user_every: int) -> int | None:
    """The last round of ``per_user`` (1-based) stored at a round t (0-based) with
    t % per_user_every == 0; None when there is none."""
    stored = per_user[(per_user["round"] - 1) % per_user_every == 0]
    return int(stored["round"].max()) if len(stored) else None


def seed_stats(values) -> tuple[float, float]:
    """Mean and population std (ddof 0) over seeds, as the paper's ± (docs/protocol.md §6.3);
    NaN values are left out, (NaN, NaN) when none is left."""
    arr = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if len(arr) == 0:
        return math.nan, math.nan
    return float(arr.mean()), float(arr.std(ddof=0))


def metrics_value(run_dir: str | Path, column: str, window: dict[str, int] | None = None, agg: str = "mean") -> float:
    """A metrics.csv column of one run aggregated (``agg``: mean | min | max | last) over the rounds
    of ``window`` (``{last: N}``, ``{first: N}``; all rounds when empty); NaN when the column is
    absent or has no value there."""
    df = pd.read_csv(Path(run_dir) / METRICS)
    if column not in df.columns:
        return math.nan
    s = df.sort_values("round").set_index("round")[column].astype(float).dropna()
    window = window or {}
    if "last" in window:
        s = s[s.index > s.index.max() - int(window["last"])] if len(s) else s
    elif "first" in window:
        s = s[s.index <= s.index.min() + int(window["first"]) - 1] if len(s) else s
    if not len(s):
        return math.nan
    return float(s.iloc[-1]) if agg == "last" else float(getattr(s, agg)())


def protocol_user_accuracies(run_dir: Path) -> tuple[np.ndarray, int]:
    """Per-user accuracies (%) at the protocol round of one run (``protocol_vector``; the last
    stored round when there is none)."""
    vector, rnd = protocol_vector(run_dir, read_summary(run_dir))
    if vector is None:
        users = read_per_user(run_dir)
        rnd = int(users["round"].max())
        vector = users[users["round"] == rnd]
    return vector["accuracy"].to_numpy(dtype=float) * 100.0, int(rnd)
