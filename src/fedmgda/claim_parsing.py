"""The ``claims:`` section of the registry config read into typed claims (``parse_claims``:
one ``fedmgda.specs.ClaimSpec`` per claim, its rows resolved in the registry and checked), the
runs they read (``claim_runs``) and the tag of a claim judged on other runs than its registry
entry names (``evaluation_tag``). What a claim may say, and how it is judged:
``fedmgda.claims``.

Nothing here imports torch.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from fedmgda.errors import ClaimError
from fedmgda.experiments import Registry, unrecorded
from fedmgda.metrics import display_scale
from fedmgda.runkeys import algorithm_info, to_number
from fedmgda.specs import ClaimSpec, Row

PAIR_KINDS = ("identical", "at_least", "close")
SERIES_KINDS = ("identical", "monotone")
KINDS = ("identical", "at_least", "close", "monotone")
SOURCE_RE = re.compile(r"^(final|protocol)\.[A-Za-z0-9_]+$|^final_(user|others)\.[0-9]+$"
                       r"|^metrics\.[A-Za-z0-9_]+$")


def _param(row: Row, by: str) -> float:
    if by == "attack":
        return float(row.attack.get("value", 0.0)) if row.attacked else 0.0
    if by in row.hparams:
        return float(row.hparams[by])
    implied = algorithm_info(row.algorithm).implied_values
    if by in implied:
        return float(implied[by])
    raise KeyError(by)


def _pick(reg: Registry, cid: str, side: str, value: Any, experiment: str | None) -> Row:
    if isinstance(value, dict):
        experiment = value.get("experiment", experiment)
        pattern = value.get("select")
    else:
        pattern = value
    if not isinstance(pattern, str):
        raise ClaimError(f"claim {cid}: {side} must be a row pattern, {{experiment, select}} or "
                         "(b) a number")
    if experiment is None:
        raise ClaimError(f"claim {cid}: {side} names no experiment")
    hits = [r for r in reg.rows[experiment] if fnmatch.fnmatchcase(r.key, pattern)]
    if len(hits) != 1:
        keys = ", ".join(r.key for r in reg.rows[experiment])
        what = ("matches no row" if not hits
                else f"matches {len(hits)} rows ({', '.join(r.key for r in hits)})")
        raise ClaimError(f"claim {cid}: {side} {pattern!r} {what} of experiment {experiment}; it "
                         f"must match exactly one. Rows: {keys}")
    return hits[0]


def _experiments_of(claim: dict[str, Any]) -> list[str]:
    names = [claim["experiment"]] if claim.get("experiment") else []
    names += list(claim.get("gaps") or {})
    for side in ("a", "b"):
        v = claim.get(side)
        if isinstance(v, dict) and v.get("experiment"):
            names.append(v["experiment"])
    return names


def parse_claims(config: dict[str, Any], reg: Registry) -> list[ClaimSpec]:
    """The claims of a (schema-validated) config, checked against the registry and resolved to
    rows and run keys. Raises :class:`ClaimError` naming the claim on any problem.
    Claims on experiments that ``only`` left out are skipped; unknown experiments are errors.

    Per claim: its form (:func:`_claim_form`), its experiments (:func:`_claim_experiments`), its
    spec (:func:`_claim_spec`), then its rows: a series (:func:`_series_rows`) or a pair
    (:func:`_pair_rows`)."""
    known = set(config.get("experiments") or {})
    out = []
    for cid, raw in (config.get("claims") or {}).items():
        claim = dict(raw)
        kind, quantity, window = _claim_form(cid, claim)
        exps = _claim_experiments(cid, claim, known)
        if any(e not in reg.rows for e in exps):  # left out by `only`
            continue
        spec = _claim_spec(cid + evaluation_tag(config, exps), claim, kind, quantity, window)
        if "gaps" in claim:
            spec.update(_gap_rows(cid, claim, kind, reg))
        elif "select" in claim:
            spec.update(_series_rows(cid, claim, kind, reg))
        else:
            spec.update(_pair_rows(cid, claim, kind, spec["seeds"], reg))
        if spec["margin"] is not None:
            spec["margin"] = float(spec["margin"])
        out.append(ClaimSpec(**spec))
        _check_recorded(cid, out[-1], reg)
    return out


def _check_recorded(cid: str, claim: ClaimSpec, reg: Registry) -> None:
    """A claim on a metrics.csv column that only some runs record reads it from runs that do."""
    if (claim.quantity.startswith("metrics.")
        and (problem := unrecorded(reg, claim_runs([claim]), claim.quantity.partition(".")[2]))):
        raise ClaimError(f"claim {cid}: {problem}")


def _rounds(config: dict[str, Any], exp: dict[str, Any], overridden: bool) -> Any:
    """The rounds T of an experiment's runs (as :func:`fedmgda.experiments._run_layers` layers
    them); ``overridden``: with the top-level ``rounds`` and ``run_overrides`` laid over."""
    setting = exp.get("setting")
    setting = ((config.get("settings") or {}).get(setting, {}) if isinstance(setting, str)
               else (setting or {}))
    rounds = (config.get("run_defaults") or {}).get("rounds")
    rounds = (exp.get("run") or {}).get("rounds", setting.get("rounds", rounds))
    if exp.get("rounds") is not None:
        rounds = exp["rounds"]
    if overridden:
        if config.get("rounds") is not None:
            rounds = config["rounds"]
        rounds = (config.get("run_overrides") or {}).get("rounds", rounds)
    return rounds


def evaluation_tag(config: dict[str, Any], experiments: list[str]) -> str:
    """What a claim's id carries when it is judged on other runs than its registry entry names:
    ``""`` when its experiments' runs are the registered ones, else ``@`` and what differs,
    ``T=<rounds>`` (the top-level ``rounds``, ``run_overrides`` or ``experiment_overrides``) and
    ``seeds=<s,...>`` (the seeds judged, from the top-level ``seeds`` or ``experiment_overrides``),
    joined by ``;``: ``fmnist_fairness_std@seeds=1,5000,6000`` is ``fmnist_fairness_std`` judged on
    3 of its experiment's 8 seeds. One id, one meaning: claims files that judge one registry claim
    on different runs give it different ids (tests/test_claim_ids.py)."""
    over = config.get("experiment_overrides") or {}
    registered = {e: (config.get("experiments") or {}).get(e) or {} for e in experiments}
    layered = {e: {**exp, **(over.get(e) or {})} for e, exp in registered.items()}
    parts = []
    rounds = [_rounds(config, layered[e], True) for e in experiments]
    if rounds != [_rounds(config, registered[e], False) for e in experiments]:
        parts.append(f"T={rounds[0]}")
    judged = list(dict.fromkeys(s for e in experiments
                                for s in (config.get("seeds") or layered[e].get("seeds") or [1])))
    if judged != list(dict.fromkeys(s for e in experiments
                                    for s in (registered[e].get("seeds") or [1]))):
        parts.append("seeds=" + ",".join(str(s) for s in judged))
    return "@" + ";".join(parts) if parts else ""


def _claim_form(cid: str, claim: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The claim's comparison, quantity and window, checked: a known comparison, a quantity of a
    form :data:`SOURCE_RE` accepts, a window (metrics quantities only) of one bound."""
    kind = claim.get("compare")
    if kind not in KINDS:
        raise ClaimError(f"claim {cid}: unknown comparison {kind!r}; known: {', '.join(KINDS)}")
    quantity = claim.get("quantity", "")
    if not isinstance(quantity, str) or not SOURCE_RE.match(quantity):
        raise ClaimError(f"claim {cid}: quantity {quantity!r} is not final.<stat>, "
                         f"protocol.<stat>, final_user.<k>, final_others.<k> or metrics.<column>")
    if "window" in claim and not quantity.startswith("metrics."):
        raise ClaimError(f"claim {cid}: a window applies to metrics.<column> quantities only")
    window = claim.get("window") or {}
    if set(window) - {"last", "first"} or len(window) > 1:
        raise ClaimError(f"claim {cid}: window must be {{last: N}} or {{first: N}}, got {window}")
    return kind, quantity, window


def _claim_experiments(cid: str, claim: dict[str, Any], known: set[str]) -> list[str]:
    """The experiments the claim reads (:func:`_experiments_of`): at least one, all in the
    config."""
    exps = _experiments_of(claim)
    if not exps:
        raise ClaimError(f"claim {cid}: names no experiment")
    unknown = sorted(set(exps) - known)
    if unknown:
        raise ClaimError(f"claim {cid}: unknown experiment(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    return exps


def _claim_spec(cid: str, claim: dict[str, Any], kind: str, quantity: str,
                window: dict[str, Any]) -> dict[str, Any]:
    """The claim's spec (:class:`ClaimSpec` fields) before its rows: what it says and how it is
    judged, defaults filled in (seeds paired, agg mean, scale the quantity's display scale,
    tolerance 1e-6 for identical)."""
    seeds_mode = claim.get("seeds", "paired")
    if seeds_mode not in ("paired", "mean"):
        raise ClaimError(f"claim {cid}: seeds must be paired or mean, got {seeds_mode!r}")
    spec: dict[str, Any] = {
        "id": cid, "source": claim.get("source", ""), "paper": claim.get("paper", ""),
        "quantity": quantity, "window": window, "agg": claim.get("agg", "mean"),
        "compare": kind, "seeds": seeds_mode,
        "scale": float(claim.get("scale", display_scale(quantity))),
        "tolerance": float(claim.get("tolerance", 1e-6 if kind == "identical" else 0.0)),
        "margin": claim.get("margin"),
    }
    if spec["agg"] not in ("mean", "min", "max", "last"):
        raise ClaimError(f"claim {cid}: agg must be mean, min, max or last")
    return spec


def _series_rows(cid: str, claim: dict[str, Any], kind: str, reg: Registry) -> dict[str, Any]:
    """A series claim's rows (``select``, at least two), ordered by ``by`` (distinct values; the
    config's order without it): ``by``, ``direction``, ``rows`` and ``params`` of its spec."""
    if kind not in SERIES_KINDS:
        raise ClaimError(f"claim {cid}: {kind} compares two rows a and b, not a select")
    if "a" in claim or "b" in claim:
        raise ClaimError(f"claim {cid}: give either select (+ by) or a and b, not both")
    if "spread_of" in claim:
        raise ClaimError(f"claim {cid}: spread_of applies to rows a and b, not a select")
    by = claim.get("by")
    if kind == "monotone" and not by:
        raise ClaimError(f"claim {cid}: monotone needs by (a hyper-parameter or attack)")
    if kind == "monotone" and claim.get("direction") not in ("increasing", "decreasing"):
        raise ClaimError(f"claim {cid}: monotone needs direction increasing or decreasing")
    select = claim["select"] if isinstance(claim["select"], list) else [claim["select"]]
    rows = reg.rows_of([claim["experiment"]], select)
    if len(rows) < 2:
        raise ClaimError(f"claim {cid}: select {select} matches {len(rows)} row(s) of "
                         f"{claim['experiment']}; a series needs at least two. Rows: "
                         f"{', '.join(r.key for r in reg.rows[claim['experiment']])}")
    params = []
    for r in rows:
        try:
            params.append(_param(r, by) if by else None)
        except KeyError:
            raise ClaimError(f"claim {cid}: row {r.key!r} has no parameter {by!r}") from None
    if by and len(set(params)) != len(params):
        raise ClaimError(f"claim {cid}: several selected rows share one value of {by}")
    order = sorted(range(len(rows)), key=lambda i: params[i] if by else i)
    return {"by": by, "direction": claim.get("direction"), "rows": [rows[i] for i in order],
            "params": [params[i] for i in order] if by else []}


def _gap_rows(cid: str, claim: dict[str, Any], kind: str, reg: Registry) -> dict[str, Any]:
    """A gap series' rows: in each experiment of ``gaps`` (experiment -> its value of the dial
    ``by``), row ``a`` and row ``b``; the series is a - b per seed, ordered by the dial's values."""
    if kind != "monotone" or claim.get("direction") not in ("increasing", "decreasing"):
        raise ClaimError(f"claim {cid}: gaps need compare monotone and a direction")
    if "select" in claim or "experiment" in claim or not claim.get("by"):
        raise ClaimError(f"claim {cid}: gaps take rows a and b and the dial's name (by), "
                         "not select or experiment")
    if not all(isinstance(claim.get(side), str) for side in ("a", "b")):
        raise ClaimError(f"claim {cid}: gaps need rows a and b as row-key patterns")
    gaps = sorted(claim["gaps"].items(), key=lambda item: to_number(item[1]))
    values = [to_number(v) for _, v in gaps]
    if len(gaps) < 2 or len(set(values)) != len(values):
        raise ClaimError(f"claim {cid}: gaps need at least two experiments with distinct values of "
                         f"{claim['by']}")
    a = [_pick(reg, cid, "a", claim["a"], e) for e, _ in gaps]
    b = [_pick(reg, cid, "b", claim["b"], e) for e, _ in gaps]
    return {"by": claim["by"], "direction": claim["direction"], "rows": a, "minus": b,
            "params": values}


def _pair_rows(cid: str, claim: dict[str, Any], kind: str, seeds_mode: str,
               reg: Registry) -> dict[str, Any]:
    """A pairwise claim's rows: ``a`` (one row) and ``b`` (another row, or a number: the
    ``threshold``); paired seeds need a seed both rows have."""
    if kind not in PAIR_KINDS:
        raise ClaimError(f"claim {cid}: {kind} needs select and by, not a and b")
    if "a" not in claim or "b" not in claim:
        raise ClaimError(f"claim {cid}: {kind} needs rows a and b")
    a = _pick(reg, cid, "a", claim["a"], claim.get("experiment"))
    spread_of = claim.get("spread_of")
    if spread_of is not None and (spread_of not in ("a", "b") or kind not in ("close", "at_least")):
        raise ClaimError(f"claim {cid}: spread_of must be a or b, with compare close or at_least")
    if isinstance(claim["b"], (int, float)) and not isinstance(claim["b"], bool):
        if spread_of == "b":
            raise ClaimError(f"claim {cid}: spread_of b needs a row b, not a number")
        return {"a": a, "threshold": float(claim["b"]), "spread_of": spread_of}
    b = _pick(reg, cid, "b", claim["b"], claim.get("experiment"))
    if a.key == b.key and a.experiment == b.experiment:
        raise ClaimError(f"claim {cid}: a and b are the same row {a.key!r}")
    if seeds_mode == "paired" and not set(a.seeds) & set(b.seeds):
        raise ClaimError(f"claim {cid}: a and b share no seed; use seeds: mean")
    if spread_of is not None and len({"a": a, "b": b}[spread_of].seeds) < 2:
        raise ClaimError(f"claim {cid}: spread_of {spread_of} needs a row with at least two seeds")
    return {"a": a, "b": b, "spread_of": spread_of}


def claim_runs(claims: list[ClaimSpec]) -> list[str]:
    """Every run key the claims read, once, in order."""
    seen: dict[str, None] = {}
    for c in claims:
        for row in c.compared_rows:
            for r in row.runs:
                seen[r] = None
    return list(seen)
