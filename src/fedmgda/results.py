"""Reading a run's results: the one home of what tables, figures and claims read from a run folder.

A run folder (``results/<profile>/runs/<run key>/``) holds ``summary.json`` (``status``, the
``final`` model's statistics, the ``protocol`` statistics of the last stored per-user vector at
round <= T-9, docs/protocol.md §6.3), ``per_user.csv`` and ``metrics.csv``. A *source* names one
number of a run: ``final.<stat>`` / ``protocol.<stat>`` (summary.json), ``final_user.<k>`` /
``final_others.<k>`` (per_user.csv). Over a row's seeds the statistics are the paper's ±: mean
and population std (ddof 0), NaN left out.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


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
    """A source of one run: ``final.<stat>`` / ``protocol.<stat>`` from summary.json, or
    ``final_user.<k>`` (user k's accuracy at the last stored round of per_user.csv) /
    ``final_others.<k>`` (mean accuracy of every other user there), e.g. an attacker vs the rest."""
    section, _, arg = source.partition(".")
    if section in ("final_user", "final_others"):
        users = pd.read_csv(Path(run_dir) / "per_user.csv")
        last = users[users["round"] == users["round"].max()]
        k = int(arg)
        pick = last[last["user"] == k] if section == "final_user" else last[last["user"] != k]
        return float(pick["accuracy"].mean()) if len(pick) else math.nan
    return summary_value(summary, source)


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
    """Per-user accuracies (%) at the protocol round of one run (summary.json protocol.round)."""
    summary = read_summary(run_dir)
    rnd = (summary.get("protocol") or {}).get("round")
    users = pd.read_csv(run_dir / "per_user.csv")
    if rnd is None or rnd not in set(users["round"]):
        rnd = int(users["round"].max())
    return users.loc[users["round"] == rnd, "accuracy"].to_numpy(dtype=float) * 100.0, int(rnd)
