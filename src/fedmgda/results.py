"""Reading a run's results: the one home of what tables, figures and claims read from a run folder.

A run folder (``results/<profile>/runs/<run key>/``) holds ``summary.json`` (``status``, the run
config, the statistics known when it trained and, since issue 41, the ``environment`` stamp of
``fedmgda.provenance``), ``per_user.csv`` (every user's test accuracy
and loss at the stored rounds), ``per_user_final.csv`` (the same of the final model, which is the
average of the iterates for AFL) and ``metrics.csv``. A *source* names one number of a run:

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
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedmgda.metrics import STATISTICS

PER_USER = "per_user.csv"
PER_USER_FINAL = "per_user_final.csv"


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json"
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
    df = pd.read_csv(Path(run_dir) / "metrics.csv")
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
