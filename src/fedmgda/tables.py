"""Tables 6-14: reproduced statistics over seeds beside the paper's published numbers.

A table spec (:class:`fedmgda.specs.TableSpec`, from ``fedmgda.experiments.item_spec``) lists rows,
each with the run folders of its seeds, and ``columns`` mapping a column name to a source of a run
(``fedmgda.results.run_value``): ``final.<stat>`` (the final model) or ``protocol.<stat>`` (the last
stored per-user vector at round <= T-9, docs/protocol.md §6.3), computed from the per-user vectors
the run stored for every statistic of ``fedmgda.metrics.STATISTICS`` (so a statistic added there
fills the tables of runs already trained), a global test set's accuracy (``final.test_acc_<set>``)
from summary.json. Accuracies are fractions in the runs and percentages in the tables, var_acc is
shown in %^2 (``fedmgda.metrics.display_scale``).

Per row and column: reproduced mean and population std (ddof 0) over seeds (docs/protocol.md §6.3),
the paper's mean and std (from ``fedmgda/reference/paper_tables.csv``), the difference repro -
paper, and a verdict: "within" when |difference| <= the band, else "outside". The band is the
paper's std (its own seed spread), or the table's ``tolerance`` for that column when larger (e.g.
Table 7's PhD column: one of its 181 test rows is 0.55 points). Paper and reproduced numbers live in
separate columns; a row the paper has but the registry does not run is listed as "not run", a row
without a paper value says so, and a row with a diverged seed shows "diverged (k/n seeds)" instead
of a number (a seed whose algorithm broke a hook's contract, "failed (k/n seeds)"). The markdown
ends with a footer saying where its runs were made (their environment stamps,
``fedmgda.provenance``) and, for its runs whose rule solves the min-norm QP, which QP they used.

A column may be bound to one experiment (``column_experiment``): a table spanning two datasets
(q-FFL's Table 2) is built per experiment and its parts joined on the row key (:func:`join_parts`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from fedmgda.metrics import display_scale
from fedmgda.provenance import footer
from fedmgda.results import RunFolders, folders_of, row_runs, run_value, seed_stats
from fedmgda.specs import Row, TableSpec

NOT_IN_PAPER = "not in paper"


def paper_reference() -> pd.DataFrame:
    """The paper's Tables 6-14 as a long table: table, row, label, column, mean, std, note."""
    with resources.files("fedmgda").joinpath("reference", "paper_tables.csv").open() as fh:
        return pd.read_csv(fh, keep_default_na=False, dtype={"note": str})


def verdict(repro_mean: float, paper_mean: float, paper_std: float, n_seeds: int,
            tolerance: float = 0.0) -> str:
    """"within" if |repro - paper| <= max(paper std, tolerance), else "outside"."""
    if any(math.isnan(x) for x in (repro_mean, paper_mean, paper_std)):
        return "n/a"
    word = ("within" if abs(repro_mean - paper_mean) <= max(paper_std, tolerance) + 1e-9
            else "outside")
    return f"{word} (1 seed)" if n_seeds == 1 else word


def _row_values(row: Row, columns: dict[str, str], runs: RunFolders, scale: float | None):
    """Each column's values over the row's seeds, x ``scale`` (None: each source's display scale,
    ``fedmgda.metrics.display_scale``: accuracies in %, var_acc in %^2); each run folder is read
    and verified once (``fedmgda.results.RunFolders``)."""
    folders = runs.row(row)
    summaries = [folder.summary for folder in folders]
    values = {c: [run_value(folder, src) * (display_scale(src) if scale is None else scale)
                  for folder in folders if folder.status == "ok"]
              for c, src in columns.items()}
    return summaries, _problem([s.get("status") for s in summaries]), values


def _problem(statuses: list[str | None]) -> str:
    """"" when every seed is ok, else e.g. "diverged (1/4 seeds)" or "failed (2/4 seeds)" (a
    plug-in's hook broke its contract)."""
    bad = Counter(str(s) for s in statuses if s != "ok")
    return ", ".join(f"{status} ({k}/{len(statuses)} seeds)" for status, k in bad.items())


def _paper_lookup(paper: pd.DataFrame | None, table: str | None):
    if paper is None or table is None:
        return None
    return paper[paper["table"] == table]


def _match(paper_rows: pd.DataFrame, key: str) -> pd.DataFrame:
    hit = paper_rows[paper_rows["row"] == key]
    if len(hit):
        return hit
    mask = [fnmatch.fnmatchcase(key, pat) for pat in paper_rows["row"]]
    return paper_rows[mask]


def build_table(spec: TableSpec, runs_dir: str | Path | RunFolders,
                paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """The reproduced table (one row per registry row, :func:`_row_record`, plus paper rows not
    run, :func:`_paper_only_records`). A table whose columns are bound to experiments
    (``column_experiment``) is built per experiment and joined by row key (:func:`join_parts`)."""
    runs = folders_of(runs_dir)
    if spec.column_experiment:
        return join_parts(spec, runs, paper)
    scale = float(spec.scale) if spec.scale is not None else None
    paper_rows = _paper_lookup(paper if paper is not None
                               else (paper_reference() if spec.paper else None),
                               spec.paper)

    computed = []
    for row in spec.rows:
        _, problem, values = _row_values(row, spec.columns, runs, scale)
        computed.append((row, problem, {c: seed_stats(v) for c, v in values.items()}))
    if spec.kind == "best_of":
        computed = _best_of(computed, spec.rank_by or next(iter(spec.columns)))

    matched: set[str] = set()
    records = [_row_record(spec, row, problem, stats, paper_rows, matched)
               for row, problem, stats in computed]
    if paper_rows is not None:  # rows the paper reports that this registry does not run
        records += _paper_only_records(spec, paper_rows, matched)
    return pd.DataFrame.from_records(records)


def _row_record(spec: TableSpec, row: Row, problem: str, stats: dict[str, tuple[float, float]],
                paper_rows: pd.DataFrame | None, matched: set[str]) -> dict[str, Any]:
    """One registry row of the table: per column the reproduced mean ± population std (ddof 0)
    over seeds and, with a paper reference, the paper's, the difference and the verdict; the
    paper rows it matches are added to ``matched``."""
    n = len(row.runs)
    rec: dict[str, Any] = {"table": spec.name, "row": row.key, "label": row.label,
                           "seeds": n, "status": problem or "ok"}
    hits = _match(paper_rows, row.key) if paper_rows is not None else None
    if hits is not None and len(hits):
        matched.update(hits["row"])
    for c in spec.columns:
        mean, std = stats[c]
        h = hits[hits["column"] == c] if hits is not None else None
        if h is None or not len(h):
            p_mean, p_std, p_text = math.nan, math.nan, NOT_IN_PAPER
        else:
            p_mean, p_std = float(h["mean"].iloc[0]), float(h["std"].iloc[0])
            p_text = f"{p_mean:.2f}±{p_std:.2f}"
        if problem:
            r_text, diff, verd = problem, math.nan, problem.split(" (")[0]
            mean = std = math.nan
        else:
            r_text = "n/a" if math.isnan(mean) else f"{mean:.2f}±{std:.2f}"
            diff = mean - p_mean
            verd = verdict(mean, p_mean, p_std, n, spec.tolerance.get(c, 0.0))
        if paper_rows is None:  # no paper reference: the reproduced statistic only
            rec.update({f"{c} reproduced": r_text, f"{c} repro_mean": mean, f"{c} repro_std": std})
            continue
        rec.update({f"{c} paper": p_text, f"{c} paper_mean": p_mean, f"{c} paper_std": p_std,
                    f"{c} reproduced": r_text, f"{c} repro_mean": mean, f"{c} repro_std": std,
                    f"{c} diff": diff, f"{c} verdict": verd})
    return rec


def _paper_only_records(spec: TableSpec, paper_rows: pd.DataFrame,
                        matched: set[str]) -> list[dict[str, Any]]:
    """The rows the paper reports that no registry row matched: the paper's numbers, "not run"."""
    records = []
    for key, grp in paper_rows.groupby("row", sort=False):
        if key in matched:
            continue
        note = grp["note"].iloc[0]
        rec = {"table": spec.name, "row": key, "label": grp["label"].iloc[0], "seeds": 0,
               "status": "not run" + (f": {note}" if note else "")}
        for c in spec.columns:
            h = grp[grp["column"] == c]
            p_mean = float(h["mean"].iloc[0]) if len(h) else math.nan
            p_std = float(h["std"].iloc[0]) if len(h) else math.nan
            rec.update({f"{c} paper": f"{p_mean:.2f}±{p_std:.2f}", f"{c} paper_mean": p_mean,
                        f"{c} paper_std": p_std, f"{c} reproduced": "not run",
                        f"{c} repro_mean": math.nan,
                        f"{c} repro_std": math.nan, f"{c} diff": math.nan,
                        f"{c} verdict": "not run"})
        records.append(rec)
    return records


def _best_of(computed: list[tuple], rank: str) -> list[tuple]:
    """A table of kind best_of: per algorithm the row with the highest mean of column ``rank``
    (diverged or failed rows last), keyed by the algorithm and labelled "(best <rank>)"."""
    best: dict[str, tuple] = {}
    for item in computed:
        row, problem, stats = item
        m = stats[rank][0]
        score = -math.inf if (problem or math.isnan(m)) else m
        alg = row.algorithm
        if alg not in best or score > best[alg][0]:
            best[alg] = (score, item)
    return [(dataclasses.replace(row, key=alg, label=f"{row.label} (best {rank})"), d, s)
            for alg, (_, (row, d, s)) in best.items()]


def join_parts(spec: TableSpec, runs_dir: str | Path | RunFolders,
               paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """A table spanning several experiments: each experiment's columns built from its own rows
    (:func:`build_table`), joined on the row key in order of first appearance. A joined row's
    label lists its parts' distinct labels, its seeds are the fewest of any part, and its status
    is "ok" only when every part is (otherwise each part's status, named by its experiment)."""
    bound = spec.column_experiment
    runs = folders_of(runs_dir)
    parts = {}
    for exp in dict.fromkeys(bound.values()):
        sub = dataclasses.replace(spec, column_experiment={},
                                  columns={c: s for c, s in spec.columns.items()
                                           if bound[c] == exp},
                                  rows=[r for r in spec.rows if r.experiment == exp])
        parts[exp] = build_table(sub, runs, paper).set_index("row", drop=False)
    keys = list(dict.fromkeys(k for df in parts.values() for k in df["row"]))
    records = []
    for key in keys:
        present = {exp: df.loc[key] for exp, df in parts.items() if key in df.index}
        first = next(iter(present.values()))
        statuses = {exp: r["status"] for exp, r in present.items()}
        missing = [exp for exp in parts if exp not in present]
        if all(st == "ok" for st in statuses.values()) and not missing:
            status = "ok"
        elif len(set(statuses.values())) == 1 and not missing:
            status = first["status"]
        else:
            status = "; ".join([f"{exp}: {st}" for exp, st in statuses.items() if st != "ok"]
                               + [f"{exp}: not in its grid" for exp in missing])
        rec: dict[str, Any] = {"table": spec.name, "row": key,
                               "label": " / ".join(dict.fromkeys(str(r["label"])
                                                                 for r in present.values())),
                               "seeds": min(int(r["seeds"]) for r in present.values())
                               if not missing else 0,
                               "status": status}
        fields = (("paper", "paper_mean", "paper_std") if spec.paper else ()) + \
            ("reproduced", "repro_mean", "repro_std") + (("diff", "verdict") if spec.paper else ())
        for c in spec.columns:
            part = present.get(bound[c])
            for field in fields:
                if part is not None:
                    rec[f"{c} {field}"] = part[f"{c} {field}"]
                # neither run nor printed for this part
                elif field in ("paper", "reproduced", "verdict"):
                    rec[f"{c} {field}"] = NOT_IN_PAPER if field == "paper" else "not run"
                else:
                    rec[f"{c} {field}"] = math.nan
        records.append(rec)
    return pd.DataFrame.from_records(records)


def to_markdown(df: pd.DataFrame, spec: TableSpec) -> str:
    """A readable markdown rendering: per column paper | reproduced | Δ (verdict); a table
    without a paper reference (``paper: null``) has one column per statistic, the reproduced one."""
    columns = list(spec.columns)
    with_paper = bool(spec.paper)
    head = ["Row", "Seeds"]
    for c in columns:
        head += [f"{c} paper", f"{c} reproduced", f"{c} Δ (verdict)"] if with_paper else [c]
    lines = [f"## {spec.heading}", ""]
    if with_paper:
        lines += ["Mean ± population std over seeds, in %. Verdict: *within* when |reproduced − "
                  "paper| ≤ " + _band_text(spec) + ".", ""]
    else:
        lines += ["Mean ± population std over seeds, in % (no paper reference: reproduced numbers "
                  "only).", ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for _, r in df.iterrows():
        cells = [str(r["label"]) + ("" if r["status"] == "ok" else f" — {r['status']}"),
                 str(r["seeds"])]
        for c in columns:
            if not with_paper:
                cells.append(str(r[f"{c} reproduced"]))
                continue
            diff = r[f"{c} diff"]
            dtext = "" if pd.isna(diff) else f"{diff:+.2f} "
            cells += [str(r[f"{c} paper"]), str(r[f"{c} reproduced"]),
                      f"{dtext}({r[f'{c} verdict']})"]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _band_text(spec: TableSpec) -> str:
    tolerance = spec.tolerance
    if not tolerance:
        return "the paper's std"
    return "max(the paper's std, " + ", ".join(f"{v:g} for {c}" for c, v in tolerance.items()) + ")"


# --------------------------------------------------------------------------- protocol variants
def build_variants_table(spec: TableSpec, runs_dir: str | Path | RunFolders,
                         paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """A sensitivity experiment's table: per varied variant, reading and paper row, the
    reproduced columns beside the paper's (one record each, as ``build_table`` makes them),
    with ``chosen`` marking the reading the base experiment uses."""
    runs = folders_of(runs_dir)
    frames = []
    chosen = spec.chosen
    for (variant, reading), group in _by_reading(spec.rows).items():
        sub = dataclasses.replace(spec, kind="stats", rows=group)
        df = build_table(sub, runs, paper)
        # paper rows the experiment does not run are listed once, in the base table
        df = df[df["seeds"] > 0]
        df.insert(1, "variant", variant)
        df.insert(2, "reading", reading)
        df.insert(3, "chosen", chosen.get(variant) == reading)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _by_reading(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    out: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        out.setdefault((row.variant, row.reading), []).append(row)
    return out


def variants_markdown(df: pd.DataFrame, spec: TableSpec) -> str:
    """One section per variant: its question and readings (with sources), then per paper row the
    paper's values and the reproduced ones under each reading (the chosen reading marked ✓), and
    per reading how many rows are within the band on every column."""
    from fedmgda.variants import get_variant

    columns = list(spec.columns)
    lines = [f"## {spec.heading}", "",
             "Cells: " + " / ".join(columns)
             + " in %, mean over seeds. ✓ = the reading the paper profile "
             "uses. *within*: every column within " + _band_text(spec) + " of the paper.", ""]
    for variant, vdf in df.groupby("variant", sort=False):
        info = get_variant(variant)
        readings = list(dict.fromkeys(vdf["reading"]))
        lines += [f"### {variant} — {info.question} (protocol {info.protocol})", ""]
        for r in readings:
            mark = " ✓" if vdf[vdf["reading"] == r]["chosen"].any() else ""
            value = info.readings[r].value
            if isinstance(value, dict):
                value = ", ".join(f"{v} for {k}" if k != "default" else f"{v} otherwise"
                                  for k, v in value.items())
            value = str(value).lower() if isinstance(value, bool) else value
            lines.append(f"- **{r}**{mark} (`{info.field}: {value}`): {info.readings[r].source}")
        lines.append("")
        head = ["Row", "paper"] + [r + (" ✓" if vdf[vdf["reading"] == r]["chosen"].any() else "")
                                   for r in readings]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        within = dict.fromkeys(readings, 0)
        for _, rdf in vdf.groupby("row", sort=False):
            first = rdf.iloc[0]
            cells = [str(first["label"]),
                     " / ".join(_num(first[f"{c} paper_mean"]) for c in columns)]
            for r in readings:
                hit = rdf[rdf["reading"] == r]
                if hit.empty:
                    cells.append("—")
                    continue
                h = hit.iloc[0]
                if h["status"] != "ok":
                    cells.append(h["status"])
                    continue
                ok = all(h[f"{c} verdict"].startswith("within") for c in columns)
                within[r] += ok
                cells.append(" / ".join(_num(h[f"{c} repro_mean"]) for c in columns)
                             + (" *within*" if ok else ""))
            lines.append("| " + " | ".join(cells) + " |")
        n_rows = vdf["row"].nunique()
        lines.append("| rows within the band | | "
                     + " | ".join(f"{within[r]}/{n_rows}" for r in readings) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return "n/a" if pd.isna(x) else f"{x:.2f}"


def write_table(spec: TableSpec, runs_dir: str | Path, out_csv: str | Path,
                out_md: str | Path) -> pd.DataFrame:
    runs = RunFolders(runs_dir)  # each run folder read and verified once for the whole table
    if spec.kind == "variants":
        df = build_variants_table(spec, runs)
        markdown = variants_markdown(df, spec)
    else:
        df = build_table(spec, runs)
        markdown = to_markdown(df, spec)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    Path(out_md).write_text(markdown + environment_footer(spec, runs))
    return df


def environment_footer(spec: TableSpec, runs_dir: str | Path | RunFolders) -> str:
    """Where the table's runs were made and, for its runs whose rule solves the min-norm QP, which
    QP they used (``fedmgda.provenance.footer``), after a rule."""
    runs = folders_of(runs_dir)
    # a run in two rows counts once
    expected = {key: config for row in spec.rows for key, config in row_runs(row)}
    summaries = [runs.summary(key, config) for key, config in expected.items()
                 if runs.finished(key)]
    text = footer([s.get("environment") for s in summaries],
                  [s.get("environment") for s in summaries if solves_qp(s.get("config") or {})])
    return f"\n---\n\n{text}\n" if text else ""


def solves_qp(config: dict[str, Any]) -> bool:
    """Whether a run of ``config`` (summary.json's ``config``) solves the min-norm QP: its rule's
    ``min_norm_qp`` with an epsilon above 0 (epsilon 0 keeps lambda0, no QP)."""
    from fedmgda.catalog import get_algorithm
    from fedmgda.errors import ConfigError

    try:
        info = get_algorithm(config.get("algorithm", ""), config.get("plugin"))
        hparams = info.resolve(config.get("hparams"))
    except (ConfigError, ImportError, OSError):
        return False  # a rule this package cannot name says nothing of a QP
    return info.min_norm_qp and hparams.get("epsilon") != 0
