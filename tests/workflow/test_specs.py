"""The typed specs the registry hands the table, figure and claims jobs (fedmgda.specs): their one
JSON form reads back to the same spec for every table, figure and claim of the shipped configs,
is the same text for the same content, and a key a spec does not know is one clear error."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from fedmgda.claim_parsing import parse_claims
from fedmgda.errors import RegistryError
from fedmgda.experiments import expand, item_spec, load_config
from fedmgda.specs import (
    ClaimSpec,
    FigureSpec,
    Row,
    SpecError,
    TableSpec,
    spec_from_json,
    spec_to_json,
)

from .conftest import REPO


@pytest.fixture(scope="module", params=["config.yaml", "quick.yaml"])
def shipped(request):
    cfg = load_config(str(REPO / "config" / request.param))
    reg = expand(cfg)
    return cfg, reg, parse_claims(cfg, reg)


def test_every_table_and_figure_reads_back_from_its_json(shipped):
    _, reg, _ = shipped
    assert reg.tables and reg.figures
    for cls, specs in ((TableSpec, reg.tables), (FigureSpec, reg.figures)):
        for spec in specs.values():
            full = item_spec(reg, spec)
            assert full.rows and all(isinstance(r, Row) for r in full.rows)
            back = spec_from_json(spec_to_json(full), cls)
            assert back == full and isinstance(back, cls), spec.name
            assert _orders(back) == _orders(full), spec.name  # == on dicts ignores their order


def _orders(spec) -> list:
    """The key order of every mapping of a spec (a table's column order is content)."""
    out = []
    for value in [getattr(spec, f.name)
                  for f in dataclasses.fields(spec)] + list(getattr(spec, "rows", [])):
        if isinstance(value, dict):
            out.append(list(value))
        elif isinstance(value, Row):
            out += [list(value.hparams), list(value.attack)]
    return out


def test_the_claims_read_back_from_their_json(shipped):
    _, _, claims = shipped
    assert claims and any(c.is_series for c in claims) and any(c.b is not None for c in claims)
    back = spec_from_json(spec_to_json(claims), ClaimSpec)
    assert back == claims and [_orders(c) for c in back] == [_orders(c) for c in claims]
    for c in claims:
        assert spec_from_json(spec_to_json(c), ClaimSpec) == c


def test_the_json_is_the_same_text_for_the_same_content():
    row = Row("e", "fedavg", "FedAvg", "fedavg", {"mu": 0.1, "eta": 1.0}, {"kind": "none"}, [1, 2],
              ["a", "b"])
    spec = TableSpec(name="t", experiments=["e"], columns={"A": "final.mean_acc"}, rows=[row],
                     tolerance={"B": 1.0, "A": 0.5})
    text = spec_to_json(spec)
    assert spec_to_json(dataclasses.replace(spec)) == text
    assert text.index('"chosen"') < text.index('"columns"') < text.index('"rows"')  # fields sorted
    assert spec_to_json(dataclasses.replace(spec, title="T")) != text
    # a mapping's order is content: a table's columns and the tolerances its band text lists
    swapped = dataclasses.replace(spec, tolerance={"A": 0.5, "B": 1.0})
    assert swapped == spec and spec_to_json(swapped) != text
    back = spec_from_json(spec_to_json(swapped), TableSpec)
    assert (list(back.tolerance) == ["A", "B"]
            and list(spec_from_json(text, TableSpec).tolerance) == ["B", "A"])


def test_spec_json_with_an_unknown_or_missing_key_is_one_error():
    text = spec_to_json(TableSpec(name="t", experiments=["e"], columns={"A": "final.mean_acc"}))
    with pytest.raises(SpecError, match="TableSpec: unknown key.*padding"):
        spec_from_json(text[:-1] + ', "padding": 1}', TableSpec)
    with pytest.raises(SpecError, match="columns"):
        spec_from_json('{"name": "t", "experiments": ["e"]}', TableSpec)


@pytest.mark.parametrize("section, name, key",
                         [("tables", "table8", "colour"), ("figures", "fig3a", "rows"),
                                                ("tables", "table8", "column_experiment")])
def test_a_config_spec_key_the_spec_does_not_know_is_rejected_before_any_job(section, name, key):
    cfg = copy.deepcopy(load_config(str(REPO / "config" / "config.yaml")))
    cfg[section][name][key] = "x"
    with pytest.raises(RegistryError, match=f"{section[:-1]} {name}: unknown key\\(s\\) {key}"):
        expand(cfg)
