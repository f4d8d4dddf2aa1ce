"""One claim id, one meaning: a claim judged on other runs than its registry entry names
carries what differs in its id (fedmgda.claim_parsing.evaluation_tag), no two committed claims
files give one id two meanings, and no two profiles define one id differently."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedmgda.claim_parsing import evaluation_tag, parse_claims
from fedmgda.claims import id_conflicts, to_markdown
from fedmgda.experiments import expand, load_config

REPO = Path(__file__).resolve().parents[1]
PROFILES = sorted((REPO / "config").glob("*.yaml"))


def claims_files(root: Path = REPO) -> list[Path]:
    """Every committed claims file: each csv, and each claims md that has no csv beside it."""
    found = []
    for base in (root / "docs" / "results", root / "benchmarks" / "measurements"):
        csvs = sorted(base.rglob("*claims*.csv"))
        found += csvs + [p for p in sorted(base.rglob("*claims*.md"))
                         if not p.with_suffix(".csv").exists()]
    return found


def test_committed_claims_files_give_each_id_one_meaning():
    files = claims_files()
    assert len(files) >= 10, [str(f) for f in files]
    conflicts = id_conflicts(files)
    assert not conflicts, ("one claim id, two meanings (qualify the id: "
                           "fedmgda.claim_parsing.evaluation_tag):\n" + "\n".join(conflicts))


def test_profiles_define_each_id_once():
    defined = {p.name: (yaml.safe_load(p.read_text()).get("claims") or {}) for p in PROFILES}
    for (a, ca), (b, cb) in itertools.combinations(defined.items(), 2):
        for cid in set(ca) & set(cb):
            assert ca[cid] == cb[cid], (f"{a} and {b} define claim {cid} differently; give one of "
                                        "them another id")


def _row(claim: str, expected: str, n: int, verdict: str = "holds") -> dict:
    return {"claim": claim, "source": "§6", "paper": "p", "expected": expected,
            "measured": f"A 1±0 (n={n} seeds)",
            "verdict": verdict, "note": "", "compare": "at_least", "seeds_mode": "paired",
            "n_seeds": n}


def test_one_id_for_two_seed_sets_is_caught(tmp_path):
    """A drift caught: fmnist_fairness_average judged on 3 seeds in one file (holds) and on 8
    in another (inconclusive) under one id."""
    pd.DataFrame([_row("fmnist_fairness_average", "protocol.mean_acc: A - B >= -1 pp", 3)]).to_csv(
        tmp_path / "claims.csv", index=False)
    eight = pd.DataFrame([_row("fmnist_fairness_average", "protocol.mean_acc: A - B >= -1 pp", 8,
                               "inconclusive")])
    (tmp_path / "claims_core.md").write_text(to_markdown(eight, "fmnist"))
    conflicts = id_conflicts([tmp_path / "claims.csv", tmp_path / "claims_core.md"])
    assert len(conflicts) == 1 and conflicts[0].startswith("fmnist_fairness_average: ")
    qualified = "fmnist_fairness_average@seeds=1,5000,6000,9000,1000,2000,3000,4000"
    (tmp_path / "claims_core.md").write_text(to_markdown(eight.assign(claim=qualified), "fmnist"))
    assert id_conflicts([tmp_path / "claims.csv", tmp_path / "claims_core.md"]) == []


@pytest.fixture(scope="module")
def fmnist():
    return load_config(str(REPO / "config" / "fmnist.yaml"))


def ids(config) -> dict[str, str]:
    return {c.id.split("@")[0]: c.id for c in parse_claims(config, expand(config))}


def test_the_registry_runs_keep_the_bare_id(fmnist):
    assert evaluation_tag(fmnist, ["fmnist_core"]) == ""
    assert ids(fmnist)["fmnist_fairness_average"] == "fmnist_fairness_average"
    same = {**fmnist, "seeds": [1, 5000, 6000, 9000, 1000, 2000, 3000, 4000], "rounds": 200}
    assert evaluation_tag(same, ["fmnist_core"]) == ""


def test_other_seeds_or_rounds_are_in_the_id(fmnist):
    three = {**fmnist, "seeds": [1, 5000, 6000]}
    assert ids(three)["fmnist_fairness_average"] == "fmnist_fairness_average@seeds=1,5000,6000"
    # fmnist_table8's own seeds
    assert ids(three)["fmnist_improved_vs_fedmgda"] == "fmnist_improved_vs_fedmgda"
    long = {**fmnist, "seeds": [1, 5000, 6000, 9000], "rounds": 2000}
    assert (ids(long)["fmnist_fairness_std_late"]
            == "fmnist_fairness_std_late@T=2000;seeds=1,5000,6000,9000")
    over = {**fmnist, "experiment_overrides": {"fmnist_core": {"seeds": [1, 5000]}}}
    assert evaluation_tag(over, ["fmnist_core"]) == "@seeds=1,5000"
