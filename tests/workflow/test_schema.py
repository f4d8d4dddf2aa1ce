"""The config schema rejects bad registries before any job starts (one clear error)."""

from __future__ import annotations

import copy
import subprocess
import sys

import jsonschema
import pytest
import yaml

from fedmgda.experiments import RegistryError, expand

from .conftest import REPO

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


def test_shipped_configs_are_valid():
    for name in ("config.yaml", "quick.yaml", "test.yaml"):
        jsonschema.validate(yaml.safe_load((REPO / "config" / name).read_text()), SCHEMA)


def _tiny() -> dict:
    return yaml.safe_load((REPO / "config/test.yaml").read_text())


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda c: c["grids"]["tiny"].append({"algorithm": "fedsgd"}), "fedsgd"),
        (lambda c: c["grids"]["tiny"].append({"algorithm": "fedmgda", "hparams": {"epsilon": 1.5}}), "1.5"),
        (lambda c: c["settings"]["digits_b10"].update(participation=0), "0"),
        (lambda c: c["settings"]["digits_b10"].update(participation=1.5), "1.5"),
        (lambda c: c["settings"]["digits_b10"].update(local_lr=-0.1), "-0.1"),
        (lambda c: c["settings"]["digits_b10"].update(dataset="mnist"), "mnist"),
        (lambda c: c["grids"]["tiny"].append({"algorithm": "fedavg_n", "hparams": {"eta": -1}}), "-1"),
        (lambda c: c.update(seeds="one"), "one"),
        (lambda c: c.update(typo_key=1), "typo_key"),
        (lambda c: c["resources"]["default"].update(pack=0), "0"),
        (lambda c: c["resources"]["default"].update(pack=2.5), "2.5"),
        (lambda c: c["resources"].update(digits={"pack": "all"}), "all"),
        (lambda c: c["resources"]["default"].update(pack_runtime=0), "0"),
    ],
)
def test_schema_rejects_bad_configs(mutate, needle):
    cfg = _tiny()
    mutate(cfg)
    with pytest.raises(jsonschema.ValidationError) as err:
        jsonschema.validate(cfg, SCHEMA)
    assert needle in str(err.value.message) or needle in str(err.value)


def test_fraction_decay_out_of_range_is_caught_by_the_registry():
    cfg = _tiny()
    cfg["grids"]["tiny"].append({"algorithm": "fedmgda_plus", "hparams": {"decay": "3/2"}})
    jsonschema.validate(cfg, SCHEMA)  # a fraction string passes the schema ...
    with pytest.raises(RegistryError, match="decay"):
        expand(copy.deepcopy(cfg))  # ... and fails before the DAG is built


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c["grids"]["tiny"].append({"algorithm": "fedmgda", "hparams": {"epsilon": 2}}), "epsilon"),
    (lambda c: c["resources"]["default"].update(pack=0), "pack"),
])
def test_snakemake_stops_on_an_invalid_config_before_any_job(tmp_path, mutate, needle):
    cfg = _tiny()
    mutate(cfg)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(bad)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert needle in out and "Job stats" not in out
