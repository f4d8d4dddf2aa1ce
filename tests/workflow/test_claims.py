"""The paper's claims checked on fixture runs: every comparison kind holding and failing,
inconclusive (seeds straddling the threshold, margin below its seed spread), not run, paired vs
mean seeds, metrics windows, and malformed claims rejected before any job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml

from fedmgda.claim_parsing import claim_runs, parse_claims
from fedmgda.claims import (
    decide,
    evaluate,
    judge_differences,
    settle_tie,
    to_markdown,
    write_claims,
)
from fedmgda.errors import ClaimError
from fedmgda.experiments import expand
from fedmgda.schema import SCHEMA_PATH

from .conftest import REPO

SETTING = {"dataset": "digits", "partition": "shards", "batch_size": 10, "local_lr": 0.05,
           "participation": 0.2, "rounds": 10}


def base_config(claims: dict, seeds=(1, 2, 3)) -> dict:
    return {
        "profile": "t",
        "settings": {"s": SETTING},
        "grids": {
            "pair": [{"algorithm": "fedavg"},
                     {"algorithm": "fedmgda_plus", "hparams": {"eta": 1.0, "decay": 0.1}}],
            "eps": [{"algorithm": "fedmgda", "hparams": {"epsilon": e}} for e in (0, 0.5, 1)],
            "bias": [{"algorithm": "afl", "hparams": {"gamma_lambda": 0.5, "gamma_w": 0.01},
                      "attacks": [{"kind": "bias", "user": 0, "value": v} for v in (0, 1, 10)]}],
        },
        "experiments": {"exp": {"setting": "s", "grid": "pair", "seeds": list(seeds)},
                        "eps": {"setting": "s", "grid": "eps", "seeds": list(seeds)},
                        "bias": {"setting": "s", "grid": "bias", "seeds": list(seeds)}},
        "claims": claims,
    }


def claim(**kw) -> dict:
    out = {"source": "§6", "paper": "a sentence", "experiment": "exp",
           "quantity": "final.mean_acc", "compare": "at_least", "a": "fedmgda_plus *",
           "b": "fedavg"}
    out.update(kw)
    return out


def write(runs_dir: Path, key: str, mean_acc: float, *, loss: list[float] | None = None,
          improved: list[float] | None = None, status: str = "ok") -> None:
    d = runs_dir / key
    d.mkdir(parents=True, exist_ok=True)
    n = len(loss or improved or [0] * 10)
    pd.DataFrame({"round": range(1, n + 1), "train_loss": loss or [1.0] * n,
                  "improved_loss": improved or [0.5] * n}).to_csv(d / "metrics.csv", index=False)
    (d / "summary.json").write_text(json.dumps({"status": status, "final": {"mean_acc": mean_acc},
                                                "protocol": {"mean_acc": mean_acc, "round": 1}}))


def setup(tmp_path, claims, values: dict[str, list[float]], seeds=(1, 2, 3), **kw):
    """values: {row key pattern prefix: per-seed final.mean_acc}; writes the runs; returns the
    frame."""
    cfg = base_config(claims, seeds)
    reg = expand(cfg)
    specs = parse_claims(cfg, reg)
    runs = tmp_path / "runs"
    for rows in reg.rows.values():
        for row in rows:
            vals = values.get(row.key)
            if vals is None:
                continue
            for run, v in zip(row.runs, vals, strict=True):
                write(runs, run, v, **{k: (f(v) if callable(f) else f) for k, f in kw.items()})
    return specs, evaluate(specs, runs), runs


def verdict_of(tmp_path, claims, values, **kw) -> pd.Series:
    _, df, _ = setup(tmp_path, claims, values, **kw)
    return df.set_index("claim")["verdict"]


PLUS = "fedmgda_plus decay=0.1 eta=1"


def test_at_least_holds_and_fails_on_paired_seeds(tmp_path):
    v = verdict_of(tmp_path, {"up": claim(), "down": claim(a="fedavg", b="fedmgda_plus *")},
                   {PLUS: [0.80, 0.70, 0.90], "fedavg": [0.75, 0.65, 0.85]})
    assert v["up"] == "holds" and v["down"] == "fails"


def test_margin_in_percentage_points(tmp_path):
    v = verdict_of(tmp_path,
                   {"m4": claim(margin=4.0), "m6": claim(margin=6.0),
                    "neg": claim(a="fedavg", b="fedmgda_plus *", margin=-6.0)},
                   {PLUS: [0.80, 0.70, 0.90], "fedavg": [0.75, 0.65, 0.85]})
    assert v["m4"] == "holds" and v["m6"] == "fails" and v["neg"] == "holds"


def test_paired_differences_beat_a_large_seed_spread(tmp_path):
    # seeds differ by 20 pp, but every seed's pair differs by +1: paired holds, unpaired means
    # cannot tell
    vals = {PLUS: [0.51, 0.71, 0.91], "fedavg": [0.50, 0.70, 0.90]}
    v = verdict_of(tmp_path, {"paired": claim(), "mean": claim(seeds="mean")}, vals)
    assert v["paired"] == "holds" and v["mean"] == "inconclusive"


def test_straddling_seeds_are_inconclusive(tmp_path):
    _, df, _ = setup(tmp_path, {"c": claim()},
                     {PLUS: [0.80, 0.60, 0.90], "fedavg": [0.75, 0.65, 0.85]})
    r = df.iloc[0]
    assert r["verdict"] == "inconclusive" and "straddle" in r["note"] and "more seeds" in r["note"]
    assert r["diff_min"] == pytest.approx(-5.0) and r["diff_max"] == pytest.approx(5.0)
    assert r["a_mean"] == pytest.approx(76.666666, rel=1e-5) and r["n_seeds"] == 3


def test_margin_below_its_seed_spread_is_inconclusive():
    # every seed on the claimed side, but one outlier: mean margin < its std over seeds
    verdict, note = decide([0.01, 0.01, 0.01, 1.0], "at_least")
    assert verdict == "inconclusive" and "spread" in note
    assert decide([1.0, 1.2, 0.9], "at_least")[0] == "holds"
    assert decide([-1.0, -1.2, -0.9], "at_least")[0] == "fails"
    assert decide([0.5], "at_least") == ("holds", "1 seed")


def test_close_and_identical(tmp_path):
    vals = {PLUS: [0.800, 0.700, 0.900], "fedavg": [0.795, 0.705, 0.900]}
    v = verdict_of(tmp_path, {"close1": claim(compare="close", tolerance=1.0),
                              "close_tight": claim(compare="close", tolerance=0.1),
                              "ident": claim(compare="identical"),
                              "ident_loose": claim(compare="identical", tolerance=0.6)}, vals)
    assert v["close1"] == "holds" and v["close_tight"] == "inconclusive"
    assert v["ident"] == "fails" and v["ident_loose"] == "holds"  # identical: never inconclusive


def test_within_and_beyond_a_rows_seed_spread(tmp_path):
    """spread_of: the tolerance (close) or margin (at_least) grows by that row's seed std (pp)."""
    b = [0.80, 0.70, 0.90]  # std (ddof 0, as shown) 8.165 pp
    v = verdict_of(tmp_path, {
        "within": claim(compare="close", a="fedmgda_plus *", b="fedavg", spread_of="b"),
        "within_too_far": claim(compare="close", a="fedmgda_plus *", b="fedavg"),
        "beyond": claim(a="fedavg", b="fedmgda_plus *", spread_of="a"),
        "beyond_margin": claim(a="fedavg", b="fedmgda_plus *", spread_of="a", margin=10.0),
    }, {PLUS: [0.78, 0.73, 0.86], "fedavg": b})
    assert v["within"] == "holds" and v["within_too_far"] == "fails"
    assert v["beyond"] == "fails" and v["beyond_margin"] == "fails"
    far = verdict_of(tmp_path / "far",
                     {"beyond": claim(a="fedavg", b="fedmgda_plus *", spread_of="a")},
                     {PLUS: [0.10, 0.10, 0.10], "fedavg": b})
    assert far["beyond"] == "holds"
    _, df, _ = setup(tmp_path / "text", {"w": claim(compare="close", spread_of="b")},
                     {PLUS: b, "fedavg": b})
    assert "B's seed std" in df.iloc[0]["expected"]


@pytest.mark.parametrize("bad, needle", [
    ({"spread_of": "c"}, "spread_of must be a or b"),
    ({"compare": "identical", "spread_of": "a"}, "spread_of must be a or b"),
    ({"b": 50, "spread_of": "b"}, "needs a row b"),
])
def test_spread_of_errors(bad, needle):
    cfg = base_config({"bad": claim(**bad)})
    with pytest.raises(ClaimError, match=needle):
        parse_claims(cfg, expand(cfg))
    one_seed = base_config({"bad": claim(spread_of="a")}, seeds=(1,))
    with pytest.raises(ClaimError, match="at least two seeds"):
        parse_claims(one_seed, expand(one_seed))


def test_identical_series_across_attack_values(tmp_path):
    keys = [f"afl gamma_lambda=0.5 gamma_w=0.01 bias={b}" for b in (0, 1, 10)]
    same = {k: [0.7, 0.8, 0.9] for k in keys}
    series = claim(experiment="bias", select="afl * bias=*", by="attack", compare="identical")
    series.pop("a"), series.pop("b")
    assert verdict_of(tmp_path / "1", {"s": series}, same)["s"] == "holds"
    moved = dict(same, **{keys[2]: [0.7, 0.8, 0.95]})
    assert verdict_of(tmp_path / "2", {"s": series}, moved)["s"] == "fails"


def test_monotone_in_epsilon_with_implied_default(tmp_path):
    # rows: fedmgda epsilon=0, epsilon=0.5, fedmgda (epsilon 1 implied): loss grows with epsilon
    mono = {"source": "Fig 1", "paper": "interpolation", "experiment": "eps", "select": "fedmgda*",
            "by": "epsilon",
            "direction": "increasing", "quantity": "metrics.train_loss", "window": {"last": 3},
            "compare": "monotone"}
    vals = {"fedmgda epsilon=0": [1.0, 1.1, 1.2], "fedmgda epsilon=0.5": [1.5, 1.6, 1.7],
            "fedmgda": [2.0, 2.1, 2.2]}
    specs, df, _ = setup(tmp_path / "up", {"m": mono}, vals, loss=lambda v: [9.0] * 7 + [v] * 3)
    assert specs[0].params == [0.0, 0.5, 1.0]
    assert df.iloc[0]["verdict"] == "holds"
    assert json.loads(df.iloc[0]["values"]) == {"0": pytest.approx(1.1), "0.5": pytest.approx(1.6),
                                                "1": pytest.approx(2.1)}
    down = dict(mono, direction="decreasing")
    assert verdict_of(tmp_path / "down", {"m": down}, vals,
                      loss=lambda v: [9.0] * 7 + [v] * 3)["m"] == "fails"
    # the window matters: over all 10 rounds the constant 9.0 rounds dominate equally -> still
    # ordered
    big = dict(mono, margin=0.5)
    assert verdict_of(tmp_path / "margin", {"m": big}, vals,
                      loss=lambda v: [9.0] * 7 + [v] * 3)["m"] == "holds"
    bigger = dict(mono, margin=2.0)
    assert verdict_of(tmp_path / "margin2", {"m": bigger}, vals,
                      loss=lambda v: [9.0] * 7 + [v] * 3)["m"] == "fails"


def test_a_flat_series_is_not_a_trend(tmp_path):
    mono = {"source": "T7", "paper": "drops", "experiment": "bias", "select": "afl * bias=*",
            "by": "attack",
            "direction": "decreasing", "quantity": "final.mean_acc", "compare": "monotone"}
    keys = [f"afl gamma_lambda=0.5 gamma_w=0.01 bias={b}" for b in (0, 1, 10)]
    assert verdict_of(tmp_path / "flat", {"m": mono},
                      {k: [1.0, 1.0, 1.0] for k in keys})["m"] == "fails"
    falling = dict(zip(keys, ([0.9, 0.8, 0.9], [0.85, 0.75, 0.88], [0.8, 0.7, 0.85]), strict=True))
    assert verdict_of(tmp_path / "down", {"m": mono}, falling)["m"] == "holds"


# ---- ties: a difference below the float resolution of its statistic decides nothing
TIES = {"ge": claim(scale=1), "le": claim(a="fedavg", b="fedmgda_plus *", scale=1),
        "close": claim(compare="close", scale=1),
        "ident": claim(compare="identical", tolerance=0.0, scale=1)}


@pytest.mark.parametrize("d, expected", [
    (-3.7e-10, "holds holds holds holds"),  # another machine's float noise on a loss of ~0.5: a tie
    (0.0, "holds holds holds holds"),
    (3.7e-10, "holds holds holds holds"),
    (1e-3, "holds fails fails fails"),  # well above the resolution: decides as before
    (-1e-3, "fails holds fails fails"),
])
def test_a_difference_within_float_resolution_is_a_tie(tmp_path, d, expected):
    b = [0.5, 0.4, 0.6]
    v = verdict_of(tmp_path, TIES, {PLUS: [x + d for x in b], "fedavg": b})
    assert " ".join(v[k] for k in TIES) == expected


EPS_SERIES = {"source": "Fig 1 (d)", "paper": "interpolation", "experiment": "eps",
              "select": "fedmgda*",
              "by": "epsilon", "direction": "increasing", "quantity": "metrics.train_loss",
              "window": {"last": 3},
              "compare": "monotone"}


@pytest.mark.parametrize("d, expected",
                         [(-3.7e-10, "holds"), (0.0, "holds"), (3.7e-10, "holds"),
                          (-1e-3, "fails")])
def test_epsilon_interpolates_loss_iid_does_not_flip_on_float_noise(tmp_path, d, expected):
    # the quick profile's iid series: epsilon 0.5 and 1 equal in exact arithmetic, -3.7e-10 apart on
    # one CPU
    vals = {"fedmgda epsilon=0": [0.1437], "fedmgda epsilon=0.5": [0.1489], "fedmgda": [0.1489 + d]}
    v = verdict_of(tmp_path, {"m": EPS_SERIES}, vals, seeds=(1,),
                   loss=lambda v: [9.0] * 7 + [v] * 3)
    assert v["m"] == expected
    flat = {k: [0.1489 + d * (i - 1)] for i, k in enumerate(vals)}  # a flat series stays no trend
    assert verdict_of(tmp_path / "flat", {"m": EPS_SERIES}, flat, seeds=(1,),
                      loss=lambda v: [9.0] * 7 + [v] * 3)["m"] == "fails"


def test_judge_differences_settles_ties():
    assert (judge_differences([-3.7e-10] * 3, size=0.5)["verdict"]
            == judge_differences([0.0] * 3)["verdict"] == "holds")
    assert judge_differences([-1e-3] * 3, size=0.5)["verdict"] == "fails"
    assert settle_tie(-3.7e-10, 0.5) == 0.0 and settle_tie(-1e-3, 0.5) == -1e-3


def perturb(runs: Path, rng: np.random.Generator, rel: float = 1e-9) -> None:
    """Another machine: every statistic of every run x (1 + u), |u| <= rel, u drawn per value."""
    for path in runs.rglob("summary.json"):
        summary = json.loads(path.read_text())
        for section in ("final", "protocol"):
            summary[section]["mean_acc"] *= 1 + rng.uniform(-rel, rel)
        path.write_text(json.dumps(summary))
        metrics = pd.read_csv(path.parent / "metrics.csv")
        for col in ("train_loss", "improved_loss"):
            metrics[col] *= 1 + rng.uniform(-rel, rel, len(metrics))
        metrics.to_csv(path.parent / "metrics.csv", index=False)


def test_verdicts_do_not_change_on_another_machine(tmp_path):
    """Every kind, with ties (equal rows, an equal monotone step, a flat series) and clear cases;
    every statistic perturbed by up to 1e-9, then 1e-6, relative: the same verdicts."""
    flat_bias = {"source": "T7", "paper": "drops", "experiment": "bias", "select": "afl * bias=*",
                 "by": "attack",
                 "direction": "decreasing", "quantity": "final.mean_acc", "compare": "monotone"}
    claims = dict(TIES, up=claim(), down=claim(a="fedavg", b="fedmgda_plus *"),
                  mean=claim(seeds="mean"),
                  threshold=claim(b=50), eps=EPS_SERIES,
                  eps_ident=dict(EPS_SERIES, compare="identical"),
                  flat=flat_bias, flat_ident=dict(flat_bias, compare="identical"))
    keys = [f"afl gamma_lambda=0.5 gamma_w=0.01 bias={b}" for b in (0, 1, 10)]
    values = {PLUS: [0.5, 0.4, 0.6], "fedavg": [0.5, 0.4, 0.6],
              **{k: [0.5, 0.5, 0.5] for k in keys},
              "fedmgda epsilon=0": [0.1437] * 3, "fedmgda epsilon=0.5": [0.1489] * 3,
              "fedmgda": [0.1489] * 3}
    specs, df, runs = setup(tmp_path, claims, values, loss=lambda v: [9.0] * 7 + [v] * 3)
    here = df.set_index("claim")["verdict"]
    assert {k: here[k]
            for k in ("ge", "le", "close", "ident", "up", "down", "eps", "flat", "flat_ident")} == {
        "ge": "holds", "le": "holds", "close": "holds", "ident": "holds", "up": "holds",
        "down": "holds",
        # ties: >= and <= hold, a flat series is no trend
        "eps": "holds", "flat": "fails", "flat_ident": "holds"}
    rng = np.random.default_rng(41)
    # a few ulps averaged; a run's loss between two CPUs (8e-7)
    for rel in (1e-9,) * 3 + (1e-6,) * 3:
        perturb(runs, rng, rel)
        there = evaluate(specs, runs).set_index("claim")["verdict"]
        assert there.to_dict() == here.to_dict()


def test_metrics_window_and_constant_threshold(tmp_path):
    c = claim(quantity="metrics.improved_loss", window={"last": 2}, b=90)
    improved = lambda v: [0.2] * 8 + [v, v]  # noqa: E731
    v = verdict_of(tmp_path, {"c": c}, {PLUS: [0.95, 0.97, 0.99], "fedavg": [0.1, 0.1, 0.1]},
                   improved=improved)
    assert v["c"] == "holds"
    whole = claim(quantity="metrics.improved_loss", b=90)  # over all rounds: ~35 %
    v = verdict_of(tmp_path / "w", {"c": whole},
                   {PLUS: [0.95, 0.97, 0.99], "fedavg": [0.1, 0.1, 0.1]}, improved=improved)
    assert v["c"] == "fails"


def test_missing_runs_are_not_run_and_diverged_seeds_are_left_out(tmp_path):
    specs, df, runs = setup(tmp_path, {"c": claim()}, {PLUS: [0.80, 0.70, 0.90]})  # no fedavg runs
    assert df.iloc[0]["verdict"] == "not run" and "3/6 runs missing" in df.iloc[0]["measured"]
    fedavg = next(r for r in claim_runs(specs) if "/fedavg/" in r and r.endswith("seed1"))
    for r in claim_runs(specs):
        if "/fedavg/" in r:
            write(runs, r, 0.6, status="diverged" if r == fedavg else "ok")
    r = evaluate(specs, runs).iloc[0]
    assert r["verdict"] == "holds" and r["n_seeds"] == 2 and "seed(s) 1 left out" in r["note"]


def test_outputs_csv_and_markdown(tmp_path):
    specs, _, runs = setup(tmp_path, {"c": claim()},
                           {PLUS: [0.8, 0.7, 0.9], "fedavg": [0.75, 0.65, 0.85]})
    df = write_claims(specs, runs, tmp_path / "claims.csv", tmp_path / "claims.md", "t")
    md = (tmp_path / "claims.md").read_text()
    assert "| c | §6: “a sentence”" in md and "**holds**" in md and "1 holds, 0 fails" in md
    assert list(pd.read_csv(tmp_path / "claims.csv")["verdict"]) == ["holds"]
    assert "claims, checked" in to_markdown(df)


@pytest.mark.parametrize("bad, needle", [
    ({"experiment": "nope"}, "unknown experiment"),
    ({"a": "fedprox *"}, "matches no row"),
    ({"a": "fed*"}, "matches 2 rows"),
    ({"compare": "bigger"}, "unknown comparison"),
    ({"quantity": "final"}, "quantity"),
    ({"compare": "monotone"}, "needs select"),
    ({"window": {"last": 5}}, "window applies to metrics"),
    ({"a": "fedavg", "b": "fedavg"}, "same row"),
])
def test_malformed_claims_are_rejected(bad, needle):
    cfg = base_config({"bad": claim(**bad)})
    with pytest.raises(ClaimError, match=needle) as err:
        parse_claims(cfg, expand(cfg))
    assert "claim bad" in str(err.value)


def test_series_claim_errors():
    cfg = base_config({"bad": {"source": "s", "paper": "p", "experiment": "eps",
                               "select": "fedmgda*",
                               "quantity": "final.mean_acc", "compare": "monotone",
                               "direction": "increasing",
                               "by": "mu"}})
    with pytest.raises(ClaimError, match="has no parameter 'mu'"):
        parse_claims(cfg, expand(cfg))


def test_schema_rejects_a_bad_comparison_kind():
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    cfg = base_config({"c": claim(compare="bigger")})
    with pytest.raises(jsonschema.ValidationError, match="bigger"):
        jsonschema.validate(cfg, schema)
    jsonschema.validate(base_config({"c": claim()}), schema)


@pytest.mark.parametrize("name", ["config.yaml", "quick.yaml", "test.yaml", "fmnist.yaml"])
def test_shipped_claims_parse(name):
    from fedmgda.experiments import load_config

    cfg = load_config(str(REPO / "config" / name))
    specs = parse_claims(cfg, expand(cfg))
    assert specs, f"{name} has no claims"
    assert all(c.paper and c.source for c in specs)


def test_only_skips_claims_on_left_out_experiments():
    cfg = base_config({"c": claim(),
                       "e": claim(experiment="eps", a="fedmgda", b="fedmgda epsilon=0")})
    cfg["only"] = ["eps"]
    assert [c.id for c in parse_claims(cfg, expand(cfg))] == ["e"]


def test_snakemake_stops_on_a_bad_claim_before_any_job(tmp_path):
    cfg = yaml.safe_load((REPO / "config/test.yaml").read_text())
    cfg["claims"]["fairness_worst5"]["a"] = "fedprox *"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(path)],
                          cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert ("claim fairness_worst5" in proc.stdout + proc.stderr
            and "matches no row" in proc.stdout + proc.stderr)


def gap_config(claims: dict, seeds=(1, 2, 3)) -> dict:
    """Three experiments on three settings (the dial: local lr here), each FedAvg and FedMGDA+."""
    cfg = base_config(claims, seeds)
    cfg["settings"] = {f"s{k}": {**SETTING, "local_lr": lr}
                       for k, lr in enumerate((0.01, 0.05, 0.1))}
    cfg["experiments"] = {f"e{k}": {"setting": f"s{k}", "grid": "pair", "seeds": list(seeds)}
                          for k in range(3)}
    return cfg


GAP = {"source": "§3", "paper": "the gap shrinks with the dial",
       "gaps": {"e2": 1.0, "e0": 0.1, "e1": 0.5},
       "by": "dial", "a": "fedavg", "b": "fedmgda_plus *", "quantity": "final.mean_acc",
       "compare": "monotone", "direction": "decreasing"}


def gap_verdict(tmp_path, gaps_per_seed: dict[str, list[float]], claim_=GAP) -> pd.Series:
    """gaps_per_seed: {experiment: per-seed FedAvg - FedMGDA+}; FedMGDA+ at 0.5 everywhere."""
    cfg = gap_config({"g": claim_})
    reg = expand(cfg)
    specs = parse_claims(cfg, reg)
    runs = tmp_path / "runs"
    for e, gaps in gaps_per_seed.items():
        fedavg, plus = reg.rows[e]
        for a_run, b_run, g in zip(fedavg.runs, plus.runs, gaps, strict=True):
            write(runs, a_run, 0.5 + g)
            write(runs, b_run, 0.5)
    return evaluate(specs, runs).iloc[0]


def test_a_gap_series_across_experiments_is_judged_per_seed(tmp_path):
    shrinking = {"e0": [0.05, 0.06, 0.04], "e1": [0.03, 0.02, 0.03], "e2": [0.01, 0.0, 0.01]}
    rec = gap_verdict(tmp_path / "down", shrinking)
    assert rec["verdict"] == "holds"
    assert json.loads(rec["values"]) == pytest.approx({"0.1": 5.0, "0.5": 2 + 2 / 3, "1": 2 / 3},
                                                      abs=1e-4)
    assert "FedAvg - FedMGDA+" in rec["expected"] and "decreasing in dial" in rec["expected"]
    growing = {"e0": shrinking["e2"], "e1": shrinking["e1"], "e2": shrinking["e0"]}
    assert gap_verdict(tmp_path / "up", growing)["verdict"] == "fails"
    one_seed_flat = {**shrinking, "e2": [0.01, 0.03, 0.01]}  # seed 2: 0.06, 0.02, 0.03 goes back
    assert gap_verdict(tmp_path / "mixed", one_seed_flat)["verdict"] == "inconclusive"


@pytest.mark.parametrize("bad, needle", [
    ({"direction": None}, "gaps need compare monotone and a direction"),
    ({"select": "fed*"}, "not select or experiment"),
    ({"gaps": {"e0": 0.1, "e1": 0.1}}, "distinct values"),
    ({"gaps": {"e0": 0.1, "nope": 0.5}}, "unknown experiment"),
])
def test_gap_series_errors(bad, needle):
    cfg = gap_config({"bad": {k: v for k, v in {**GAP, **bad}.items() if v is not None}})
    with pytest.raises(ClaimError, match=needle):
        parse_claims(cfg, expand(cfg))


@pytest.mark.parametrize("figure, needle", [
    ({"select": ["fedmgda_plus *"]}, "gaps needs select"),
    ({"xlabels": ["a", "b"]}, "2 xlabels for 3 experiments"),
    ({"select": ["fed*", "fedavg"]}, "matches 2 rows of e0"),
])
def test_a_gaps_figure_is_checked_before_any_job(figure, needle):
    from fedmgda.errors import RegistryError

    valid = {"kind": "gaps", "experiments": ["e0", "e1", "e2"], "xlabels": ["a", "b", "c"],
             "select": ["fedmgda_plus *", "fedavg"], "columns": {"std": "protocol.std_acc"}}
    expand({**gap_config({}), "figures": {"g": valid}})
    with pytest.raises(RegistryError, match=needle):
        expand({**gap_config({}), "figures": {"g": {**valid, **figure}}})
