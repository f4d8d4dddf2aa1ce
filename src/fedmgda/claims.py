"""The paper's claims, checked: a ``claims:`` section of the registry config, evaluated on the runs.

A claim names the paper's sentence (``paper``, ``source``), the runs it is judged on and how:

- ``quantity``: a summary statistic as tables use it (``final.<stat>``, ``protocol.<stat>``,
  ``final_user.<k>``, ``final_others.<k>``), or a per-round column of metrics.csv
  (``metrics.<column>``) aggregated (``agg``: mean | min | max | last) over a ``window`` of rounds
  (``{last: N}`` or ``{first: N}``; all rounds when omitted). Shown, and compared, x ``scale``
  (default ``fedmgda.metrics.display_scale``: 100 for accuracy-like quantities, i.e. percentage
  points, 10^4 for var_acc, else 1).
- the rows: ``a`` and ``b`` (pairwise kinds) -- an fnmatch pattern on the row keys of
  ``experiment`` that must match exactly one row, or ``{experiment: E, select: PATTERN}``; ``b``
  may also be a number (a fixed threshold) -- or ``select`` + ``by`` (series kinds): rows
  ordered by a hyper-parameter (``epsilon``; implied defaults such as FedMGDA's epsilon = 1 count)
  or by ``attack`` (the attack's value, e.g. the bias).
- ``compare``:
    * ``identical``: |A - B| <= ``tolerance`` (default 1e-6; ties below) at every seed; with
      ``select``, every row equals every other within it. A deterministic claim: any seed off
      means "fails".
    * ``at_least``: A - B >= ``margin`` (default 0).
    * ``close``: |A - B| <= ``tolerance``.
    * ``monotone``: ``direction`` increasing | decreasing along ``by``, every step allowed to go the
      wrong way by at most ``tolerance`` (default 0), and the total change first -> last in that
      direction positive (a flat series is no trend), or at least ``margin`` when given.
- ``spread_of``: ``a`` or ``b`` (``close``, ``at_least``): that row's seed std (as shown: population
  std over its seeds, in the claim's units) is added to the tolerance (``close``: "A is within the
  seed spread of B") or to the margin (``at_least``: "A exceeds B by more than B's seed spread");
  the row needs two seeds.
- ``seeds``: ``paired`` (default: the claim is judged per seed -- runs of one seed share the
  initial model and the participants -- on the seeds every row has) or ``mean`` (judged once on
  the means over each row's seeds).

Verdict. Each judged unit (a seed when paired, the means otherwise) gets a score s whose sign says
whether the claim holds there (at_least: s = A - B - margin; close / identical: s = tolerance -
|A - B|; monotone: the smallest step in the claimed direction + tolerance, or the total change -
margin if smaller, margin defaulting to a hair above 0). A score within the float resolution of the
statistics it compares, |s| <= 1e-5 x their size + 1e-9 (:data:`FLOAT_RTOL`, :func:`settle_tie`),
is a tie, exactly 0: another machine may put it on either side. A tie holds (A - B >= margin,
|A - B| <= tolerance, a monotone step) except for a monotone total change without a margin, which
must be positive: a flat series is no trend. Paired, over n seeds with mean m and sample std sd
(ddof 1) of s:

- ``holds``: every s >= 0 and (n = 1 or m >= sd);
- ``fails``: every s < 0 and (n = 1 or -m >= sd);
- ``inconclusive``: otherwise -- the seeds straddle the threshold, or the mean margin is smaller
  than its spread over seeds; more seeds would decide it;
- ``not run``: a run the claim needs has no summary.json.

With ``seeds: mean`` the single score uses spread = sqrt(sum of the rows' population variances over
seeds) in place of sd. ``identical`` is never inconclusive. Diverged runs (status != ok) give no
value; a seed without a value is left out of the pairing (noted).

The section is read into typed claims by ``fedmgda.claim_parsing``; this module judges them.
Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedmgda.errors import ClaimError
from fedmgda.results import (
    RunFolder,
    RunFolders,
    as_run,
    folders_of,
    metrics_value,
    row_runs,
    run_value,
    seed_stats,
)
from fedmgda.runkeys import fmt_num
from fedmgda.specs import ClaimSpec, Row

VERDICTS = ("holds", "fails", "inconclusive", "not run")
# a hair above 0: a monotone total change without a margin must exceed it (and settle_tie's floor)
FLAT = 1e-9
# The float resolution of a compared statistic, relative to its size (plus FLAT, for statistics
# near 0): a score within it is a tie, exactly 0 (:func:`settle_tie`). Runs train in float32
# (machine epsilon 1.2e-7), and a run's statistics move from one CPU to another: the committed quick
# claims.csv against a rerun on another machine, a 3-seed mean train loss by 8e-7 relative, and the
# FedMGDA runs at epsilon 0.5 and 1 on iid users (equal in exact arithmetic: the bound is inactive)
# from equal to -3.7e-10 apart (2 ulps in 37 of 100 rounds' losses). 1e-5 is 10x the former and far
# below any difference a claim is about (0.01 pp is one test example in 10 000; the quick profile's
# smallest deciding difference is 3e-3 on a loss of 0.17, 2e-2 relative).
FLOAT_RTOL = 1e-5


# --------------------------------------------------------------------------- values
def run_quantity(run: RunFolder | str | Path, claim: ClaimSpec) -> float:
    """The claim's quantity of one run (unscaled); NaN when the run diverged or lacks it."""
    run = as_run(run)
    if run.summary.get("status", "ok") != "ok":
        return math.nan
    quantity = claim.quantity
    if not quantity.startswith("metrics."):
        return run_value(run, quantity)
    return metrics_value(run, quantity.partition(".")[2], claim.window, claim.agg)


def row_values(row: Row, claim: ClaimSpec,
               runs_dir: str | Path | RunFolders) -> tuple[dict[int, float], int]:
    """{seed: scaled value} of a row and the number of its runs without summary.json; each run
    folder verified against the registry's config of its run (``fedmgda.results.open_run``)."""
    runs = folders_of(runs_dir)
    values, missing = {}, 0
    for seed, (run, config) in zip(row.seeds, row_runs(row), strict=True):
        if not runs.finished(run):
            missing += 1
            continue
        values[int(seed)] = run_quantity(runs.open(run, config), claim) * claim.scale
    return values, missing


def settle_tie(score: float, *values: float) -> float:
    """``score``, a comparison of the statistics ``values`` (s >= 0 on the claimed side), or exactly
    0.0 -- a tie -- when |score| <= FLOAT_RTOL * max |values| + FLAT: within the float resolution
    of those statistics, where another machine may land on either side. Every score is settled by
    it; a tie holds for ">=" and "<=" (at_least, close, identical, a monotone step) and fails for
    the one strict ">" (a monotone total change without a margin: a flat series is no trend)."""
    resolution = FLOAT_RTOL * max((abs(v) for v in values), default=0.0) + FLAT
    return 0.0 if abs(score) <= resolution else score


def _score_pair(a: float, b: float, claim: ClaimSpec) -> float:
    d = a - b
    if claim.compare == "at_least":
        return settle_tie(d - (claim.margin or 0.0), a, b)
    return settle_tie(claim.tolerance - abs(d), a, b)


def _score_series(vals: list[float], claim: ClaimSpec) -> float:
    if claim.compare == "identical":
        return settle_tie(claim.tolerance - (max(vals) - min(vals)), *vals)
    sign = 1.0 if claim.direction == "increasing" else -1.0
    steps = [settle_tie(sign * (b - a) + claim.tolerance, a, b)
             for a, b in zip(vals, vals[1:], strict=False)]
    total = sign * (vals[-1] - vals[0])
    if claim.margin is not None:
        return min(min(steps), settle_tie(total - claim.margin, vals[0], vals[-1]))
    # a flat series is not a trend: the total change, a tie counting as 0, must be positive
    return min(min(steps), settle_tie(total, vals[0], vals[-1]) - FLAT)


def decide(scores: list[float], kind: str, spread: float | None = None) -> tuple[str, str]:
    """Verdict and a note from the judged units' scores, ties already settled by :func:`settle_tie`
    (see the module docstring)."""
    s = np.asarray(scores, dtype=float)
    n = len(s)
    if n == 0:
        return "inconclusive", "no seed with a value for every row (diverged?)"
    if kind == "identical":
        bad = int((s < 0).sum())
        return (("holds", "") if not bad
                else ("fails", f"{bad}/{n} seed(s) differ beyond the tolerance"))
    m = float(s.mean())
    sd = spread if spread is not None else (float(s.std(ddof=1)) if n > 1 else 0.0)
    if (s >= 0).all() and m >= sd:
        return "holds", "1 seed" if n == 1 and spread is None else ""
    if (s < 0).all() and -m >= sd:
        return "fails", "1 seed" if n == 1 and spread is None else ""
    if (s >= 0).any() and (s < 0).any():
        return "inconclusive", (f"seeds straddle the threshold ({int((s >= 0).sum())}/{n} on the "
                                "claimed side); more seeds would decide")
    return "inconclusive", (f"mean margin {m:+.3g} is smaller than its spread over seeds {sd:.3g}; "
                            "more seeds would decide")


def judge_differences(differences: list[float], margin: float = 0.0,
                      size: float = 0.0) -> dict[str, Any]:
    """The one rule (:func:`decide`) applied to paired differences A - B, one per seed, for a
    comparison that no claim runs (e.g. a script's package-against-authors gap): "A - B >= margin".
    ``size``: the magnitude of A and B, for the float resolution (:func:`settle_tie`). Returns n,
    mean, sd (ddof 1), the interval mean ± sd, the seeds on the claimed side, the verdict and its
    note."""
    d = np.asarray([x for x in differences if not math.isnan(x)], dtype=float)
    scores = np.asarray([settle_tie(x - margin, size) for x in d], dtype=float)
    verdict, note = decide(list(scores), "at_least")
    n = len(d)
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    return {"n": n, "mean": mean, "sd": sd, "low": mean - sd, "high": mean + sd,
            "on_side": int((scores >= 0).sum()), "verdict": verdict, "note": note}


# --------------------------------------------------------------------------- evaluation
def _b_label(c: ClaimSpec) -> str:
    return c.b.label if c.b is not None else f"{c.threshold:g}"


def _series_names(c: ClaimSpec) -> list[str]:
    """A series' rows as the claim names them: their values of ``by``, else their labels."""
    return [fmt_num(p) for p in c.params] if c.params else [r.label for r in c.rows]


def expected_text(c: ClaimSpec) -> str:
    q = c.quantity + (f" ({c.agg} over {next(iter(c.window))} {next(iter(c.window.values()))} "
                      "rounds)"
                      if c.window else "")
    unit = " pp" if c.scale == 100.0 else ""
    if c.minus:
        q = f"{q}: {c.rows[0].label} - {c.minus[0].label}"
    if c.is_series:
        names = ", ".join(_series_names(c))
        if c.compare == "identical":
            return f"{q} identical across [{names}] (spread <= {fmt_num(c.tolerance)}{unit})"
        extra = f", total change >= {fmt_num(c.margin)}{unit}" if c.margin is not None else ""
        return (f"{q} {c.direction} in {c.by} over [{names}] (steps may go back "
                f"<= {fmt_num(c.tolerance)}{unit}{extra})")
    a, b = c.a.label, _b_label(c)
    if c.b is None:
        b = f"{b}{unit}"
    spread = f"{'A' if c.spread_of == 'a' else 'B'}'s seed std"
    if c.compare == "at_least":
        m = c.margin or 0.0
        if c.spread_of:
            return f"{q}: {a} - {b} >= {spread}" + (f" + {fmt_num(m)}{unit}" if m else "")
        rel = f">= {b}" if m == 0 else f"- {b} >= {fmt_num(m)}{unit}"
        return f"{q}: {a} {rel}"
    word = "identical to" if c.compare == "identical" else "close to"
    slack = (spread + (f" + {fmt_num(c.tolerance)}{unit}" if c.tolerance else "") if c.spread_of
             else f"{fmt_num(c.tolerance)}{unit}")
    return f"{q}: {a} {word} {b} (difference within ±{slack})"


def with_spread(c: ClaimSpec, a_std: float, b_std: float) -> ClaimSpec:
    """The claim with ``spread_of``'s seed std added to its tolerance (close) or margin
    (at_least)."""
    if c.spread_of is None:
        return c
    std = a_std if c.spread_of == "a" else b_std
    if c.compare == "close":
        return dataclasses.replace(c, tolerance=c.tolerance + std)
    return dataclasses.replace(c, margin=(c.margin or 0.0) + std)


def evaluate_claim(c: ClaimSpec, runs_dir: str | Path | RunFolders) -> dict[str, Any]:
    """One claim judged on its runs: a record of :data:`COLUMNS` (a series by
    :func:`_judge_series`, a pair by :func:`_judge_pair`, the verdict by :func:`decide`)."""
    runs_dir = folders_of(runs_dir)
    rows = c.compared_rows
    per_row, missing = [], 0
    for r in rows:
        vals, miss = row_values(r, c, runs_dir)
        per_row.append(vals)
        missing += miss
    rec: dict[str, Any] = {"claim": c.id, "source": c.source, "paper": c.paper,
                           "expected": expected_text(c), "compare": c.compare,
                           "seeds_mode": c.seeds}
    if missing:
        total = sum(len(r.runs) for r in rows)
        rec.update(measured=f"{missing}/{total} runs missing", verdict="not run",
                   note="build the runs first",
                   n_seeds=0)
        return rec
    if c.threshold is not None:
        per_row.append({s: c.threshold for s in per_row[0]})
    if c.minus:  # a gap series: each point the paired difference of its two rows
        a_rows, b_rows = per_row[:len(c.rows)], per_row[len(c.rows):]
        per_row = [{s: a[s] - b[s] for s in a if s in b}
                   for a, b in zip(a_rows, b_rows, strict=True)]
    common = sorted(set.intersection(*(set(v) for v in per_row)))
    complete = [s for s in common if all(not math.isnan(v[s]) for v in per_row)]
    dropped = sorted(set().union(*(set(v) for v in per_row)) - set(complete))
    notes = ([f"seed(s) {', '.join(map(str, dropped))} left out (no value or not shared)"]
             if dropped else [])
    judge = _judge_series if c.is_series else _judge_pair
    measured, scores, spread = judge(c, per_row, complete, rec, notes)
    if scores:
        rec.update(score_mean=float(np.mean(scores)), score_min=float(np.min(scores)),
                   score_max=float(np.max(scores)))
    verdict, note = decide(scores, c.compare, spread)
    n = len(complete) if c.seeds == "paired" else max(len(v) for v in per_row)
    rec.update(measured=measured + f" (n={n} seed{'s' if n != 1 else ''})", verdict=verdict,
               note="; ".join(x for x in (note, *notes) if x), n_seeds=n)
    return rec


def _judge_series(c: ClaimSpec, per_row: list[dict[int, float]], complete: list[int],
                  rec: dict[str, Any],
                  notes: list[str]) -> tuple[str, list[float], float | None]:
    """A series claim's measured text, scores and (``seeds: mean``) spread; its values into
    ``rec``."""
    means = [seed_stats(v.values()) for v in per_row]
    names = _series_names(c)
    rec["values"] = json.dumps({n: round(m, 4) for n, (m, _) in zip(names, means, strict=True)})
    measured = ", ".join(f"{n}: {m:.2f}±{sd:.2f}" for n, (m, sd) in zip(names, means, strict=True))
    if c.seeds == "mean":
        return (measured, [_score_series([m for m, _ in means], c)],
                math.sqrt(sum(sd ** 2 for _, sd in means)))
    return measured, [_score_series([v[s] for v in per_row], c) for s in complete], None


def _judge_pair(c: ClaimSpec, per_row: list[dict[int, float]], complete: list[int],
                rec: dict[str, Any],
                notes: list[str]) -> tuple[str, list[float], float | None]:
    """A pairwise claim's measured text, scores and (``seeds: mean``) spread; its A, B and paired
    differences (sample sd, ddof 1) into ``rec``, a tie at every seed into ``notes``."""
    (am, asd), (bm, bsd) = (seed_stats(v.values()) for v in per_row)
    c = with_spread(c, asd, bsd)
    diffs = [per_row[0][s] - per_row[1][s] for s in complete]
    rec.update(a=c.a.label, b=_b_label(c), a_mean=am, a_std=asd, b_mean=bm, b_std=bsd)
    if diffs:
        d = np.asarray(diffs)
        rec.update(diff_mean=float(d.mean()), diff_std=float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                   diff_min=float(d.min()), diff_max=float(d.max()))
    b_text = f"threshold {bm:g}" if c.threshold is not None else f"B {bm:.2f}±{bsd:.2f}"
    measured = f"A {am:.2f}±{asd:.2f}, {b_text}"
    if diffs and c.compare == "at_least" and all(
            settle_tie(per_row[0][s] - per_row[1][s], per_row[0][s], per_row[1][s]) == 0
            for s in complete):
        notes.append("A equals B at every seed (a tie)")
    if c.seeds == "mean":
        scores = [_score_pair(am, bm, c)] if not (math.isnan(am) or math.isnan(bm)) else []
        return measured + f"; A−B {am - bm:+.3g}", scores, math.sqrt(asd ** 2 + bsd ** 2)
    if diffs:
        measured += (f"; paired A−B {rec['diff_mean']:+.3g} (min {rec['diff_min']:+.3g}, "
                     f"max {rec['diff_max']:+.3g})")
    return measured, [_score_pair(per_row[0][s], per_row[1][s], c) for s in complete], None


COLUMNS = ["claim", "source", "paper", "expected", "measured", "verdict", "note", "compare",
           "seeds_mode",
           "n_seeds", "a", "b", "a_mean", "a_std", "b_mean", "b_std", "diff_mean", "diff_std",
           "diff_min",
           "diff_max", "score_mean", "score_min", "score_max", "values"]


def evaluate(claims: list[ClaimSpec], runs_dir: str | Path) -> pd.DataFrame:
    runs = RunFolders(runs_dir)  # each run folder read and verified once for all the claims
    df = pd.DataFrame.from_records([evaluate_claim(c, runs) for c in claims])
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = np.nan if col not in ("a", "b", "values", "note") else ""
    return df[COLUMNS] if len(df) else pd.DataFrame(columns=COLUMNS)


# the Measured column: A's and B's mean ± population std over their seeds, as tables show them
MEASURED = "Measured (mean ± population std over seeds, ddof 0)"


def to_markdown(df: pd.DataFrame, profile: str = "") -> str:
    counts = df["verdict"].value_counts().to_dict() if len(df) else {}
    summary = ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
    lines = [f"## The paper's claims, checked{f' ({profile})' if profile else ''}", "",
             f"{len(df)} claims: {summary}.", "",
             "A = first row, B = second (or a threshold); values in % (pp) for accuracies. Paired "
             "differences are per seed (shared initial model and participants). *inconclusive*: "
             "the seeds straddle the threshold or the mean margin is below the sample sd (ddof 1) "
             "of the per-seed differences (more seeds would decide). A difference within the float "
             "resolution of its values (10⁻⁵ relative) is a tie. See docs/workflow.md.", "",
             f"| Claim | Paper source | Expected | {MEASURED} | Verdict |",
             "|---|---|---|---|---|"]
    for _, r in df.iterrows():
        verdict = f"**{r['verdict']}**" + (f" ({r['note']})" if isinstance(r["note"], str)
                                           and r["note"] else "")
        paper = f"{r['source']}: “{r['paper']}”" if r["paper"] else r["source"]
        cells = [str(r["claim"]), paper, str(r["expected"]), str(r["measured"]), verdict]
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ")
                                       for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_claims(claims: list[ClaimSpec], runs_dir: str | Path, out_csv: str | Path,
                 out_md: str | Path,
                 profile: str = "") -> pd.DataFrame:
    df = evaluate(claims, runs_dir)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    Path(out_md).write_text(to_markdown(df, profile))
    return df


def table_verdicts(csv_path: str | Path) -> dict[str, int]:
    """Count of the verdict words (within, outside, not run, n/a, ...) over a table csv's cells."""
    df = pd.read_csv(csv_path, keep_default_na=False)
    cols = [c for c in df.columns if c.endswith(" verdict")]
    words = (df[cols].stack().astype(str).str.split(" (", regex=False).str[0] if cols
             else pd.Series([], dtype=str))
    return {k: int(v) for k, v in words.value_counts().items()}


# --------------------------------------------------------------------------- claims files
def read_claims(path: str | Path) -> pd.DataFrame:
    """A committed claims file: claims.csv, or claims.md as :func:`to_markdown` writes it (its
    claim, expected, measured, verdict and note; the other columns empty)."""
    path = Path(path)
    if path.suffix == ".csv":
        return pd.read_csv(path, keep_default_na=False,
                           dtype={"note": str, "a": str, "b": str, "values": str})
    records = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 5 or cells[0] in ("Claim", "---"):
            continue
        m = re.fullmatch(r"\*\*([a-z ]+)\*\*(?: \((.*)\))?", cells[4])
        if m is None:
            raise ClaimError(f"{path}: verdict cell {cells[4]!r} is not as to_markdown writes it")
        records.append({"claim": cells[0], "expected": cells[2], "measured": cells[3],
                        "verdict": m[1],
                        "note": m[2] or ""})
    df = pd.DataFrame.from_records(records)
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = ""
    return df[COLUMNS]


def claim_meaning(row: pd.Series) -> tuple[str, str]:
    """What a claims file's row claims: its expected relation and the number of seeds it was judged
    on (from ``n_seeds``, or the Measured text of a claims.md)."""
    n = str(row["n_seeds"]) if str(row.get("n_seeds", "")) not in ("", "nan") else ""
    if not n:
        m = re.search(r"\(n=(\d+) seeds?\)", str(row["measured"]))
        n = m[1] if m else ""
    return str(row["expected"]), n


def id_conflicts(paths: list[str | Path]) -> list[str]:
    """One line per claim id that two of the claims files ``paths`` (csv, or md without its csv)
    give two meanings (:func:`claim_meaning`): one id must name one claim (docs/workflow.md,
    "One id, one meaning")."""
    seen: dict[str, dict[tuple[str, str], str]] = {}
    for path in paths:
        df = read_claims(path)
        for _, row in df.iterrows():
            if row["verdict"] == "not run":
                continue
            seen.setdefault(str(row["claim"]), {}).setdefault(claim_meaning(row), str(path))
    return [f"{cid}: "
            + "; ".join(f"{where}: {exp} (n={n})" for (exp, n), where in meanings.items())
            for cid, meanings in seen.items() if len(meanings) > 1]
