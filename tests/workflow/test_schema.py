"""The config schema rejects bad registries before any job starts (one clear error)."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import subprocess
import sys

import jsonschema
import pytest
import yaml

from fedmgda.catalog import BUILTIN_ALGORITHMS
from fedmgda.claim_parsing import parse_claims
from fedmgda.config import RunConfig
from fedmgda.errors import RegistryError
from fedmgda.experiments import expand, normalise_attack, validate_runs
from fedmgda.packs import pack_resources, pack_size
from fedmgda.schema import SCHEMA_PATH, def_defaults, render_readme, with_defaults
from fedmgda.schema import main as schema_cli
from fedmgda.specs import Row, TableSpec
from fedmgda.tables import build_table

from .conftest import REPO, write_run

SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())


def test_the_schema_is_package_data_and_the_workflow_reads_it():
    """One schema file, inside the package (so an installed fedmgda finds it), declared as package
    data, and the one the Snakefile checks a config against (fedmgda.schema.config_error)."""
    package = REPO / "src" / "fedmgda"
    assert SCHEMA_PATH.parent == package and SCHEMA_PATH.is_file()
    data = (REPO / "pyproject.toml").read_text().split("[tool.setuptools.package-data]", 1)[1]
    # fedmgda = [...]
    globs = yaml.safe_load(data.split("\n[", 1)[0].replace(" = ", ": "))["fedmgda"]
    assert any(fnmatch.fnmatch(SCHEMA_PATH.relative_to(package).as_posix(), g) for g in globs)
    assert "config_error(config)" in (REPO / "workflow" / "Snakefile").read_text()
    copies = [p for p in REPO.rglob("*.schema.yaml") if ".snakemake" not in p.parts
              and p != SCHEMA_PATH]
    assert not copies, copies


def test_shipped_configs_are_valid():
    for name in ("config.yaml", "quick.yaml", "test.yaml"):
        jsonschema.validate(yaml.safe_load((REPO / "config" / name).read_text()), SCHEMA)


def _tiny() -> dict:
    return yaml.safe_load((REPO / "config/test.yaml").read_text())


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda c: c["grids"]["tiny"].append({"algorithm": "fed-sgd"}), "fed-sgd"),
        (lambda c: c["grids"]["tiny"].append({"algorithm": "fedavg",
                                              "hparams": {"tau": "fast"}}), "fast"),
        (lambda c: c["grids"]["tiny"].append({"algorithm": "fedavg",
                                              "hparams": {"tau": True}}), "True"),
        (lambda c: c.update(plugins=["plugins/my_agg.py"]), "my_agg.py"),
        (lambda c: c.update(plugins=["plugins/my_agg.py:1Agg"]), "1Agg"),
        (lambda c: c["settings"]["digits_b10"].update(participation=0), "0"),
        (lambda c: c["settings"]["digits_b10"].update(participation=1.5), "1.5"),
        (lambda c: c["settings"]["digits_b10"].update(local_lr=-0.1), "-0.1"),
        (lambda c: c["settings"]["digits_b10"].update(dataset="mnist"), "mnist"),
        (lambda c: c.update(seeds="one"), "one"),
        (lambda c: c.update(typo_key=1), "typo_key"),
        (lambda c: c["resources"]["default"].update(pack=0), "0"),
        (lambda c: c["resources"]["default"].update(pack=2.5), "2.5"),
        (lambda c: c["resources"].update(digits={"pack": "all"}), "all"),
        (lambda c: c["resources"]["default"].update(pack_runtime=0), "0"),
        (lambda c: c.update(seeds=[1, 1]), "non-unique"),
        (lambda c: c["settings"]["digits_b10"].update(dataset_options={"num_users": "bogus"}),
         "bogus"),
        (lambda c: c["settings"]["digits_b10"].update(dataset_options={"shards_per_user": 0}), "0"),
    ],
)
def test_schema_rejects_bad_configs(mutate, needle):
    cfg = _tiny()
    mutate(cfg)
    with pytest.raises(jsonschema.ValidationError) as err:
        jsonschema.validate(cfg, SCHEMA)
    assert needle in str(err.value.message) or needle in str(err.value)


def test_unknown_algorithm_is_caught_by_the_registry():
    cfg = _tiny()
    cfg["grids"]["tiny"].append({"algorithm": "fedsgd"})
    jsonschema.validate(cfg, SCHEMA)  # any name passes the schema (plug-ins declare their own) ...
    with pytest.raises(RegistryError, match="fedsgd"):
        expand(copy.deepcopy(cfg))  # ... the registry checks it before any job starts


def test_plugin_names_and_hyperparameters_pass_the_schema():
    cfg = _tiny()
    cfg["plugins"] = ["plugins/my_agg.py:MyAgg", "mypkg.aggs:Other_1"]
    cfg["grids"]["tiny"].append({"algorithm": "my_agg",
                                 "hparams": {"tau": 0.5, "rho": "1/3", "eta": 2}})
    jsonschema.validate(cfg, SCHEMA)


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c.update(seeds=[1, 2, 1]), r"seeds \[1, 2, 1\] repeat 1; give each seed once"),
    (lambda c: c["settings"]["digits_b10"].update(dataset_options={"num_users": 0}), "option "
     "num_users must be an integer >= 1, got 0"),
    (lambda c: c["settings"]["digits_b10"].update(dataset_options={"num_users": 2.5}), "option "
     "num_users must be an integer >= 1, got 2.5"),
])
def test_repeated_seeds_and_bad_dataset_options_are_caught_by_the_registry(mutate, needle):
    """What reaches the registry without the schema (e.g. ``--config seeds=[1,1]`` overrides) is
    caught there, before any job: a repeated seed would count one run twice in a row's
    statistics."""
    cfg = _tiny()
    mutate(cfg)
    with pytest.raises(RegistryError, match=needle):
        validate_runs(expand(copy.deepcopy(cfg)))  # as workflow/rules/common.smk does


@pytest.mark.parametrize("algorithm, hparams, needle", [
    ("fedmgda_plus", {"decay": "3/2"}, "decay"),
    ("fedmgda", {"epsilon": 1.5}, "epsilon = 1.5"),
    ("fedavg_n", {"eta": -1}, "eta = -1"),
    ("fedavg", {"eta": 1}, "unknown hyper-parameter"),
])
def test_hyperparameter_ranges_are_checked_by_the_registry(algorithm, hparams, needle):
    cfg = _tiny()
    cfg["grids"]["tiny"].append({"algorithm": algorithm, "hparams": hparams})
    jsonschema.validate(cfg, SCHEMA)  # names and ranges live in the catalog, not the schema ...
    with pytest.raises(RegistryError, match=needle):
        expand(copy.deepcopy(cfg))  # ... and fail before the DAG is built


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c["grids"]["tiny"].append({"algorithm": "fedmgda",
                                          "hparams": {"epsilon": 2}}), "epsilon"),
    (lambda c: c["resources"]["default"].update(pack=0), "pack"),
])
def test_snakemake_stops_on_an_invalid_config_before_any_job(tmp_path, mutate, needle):
    cfg = _tiny()
    mutate(cfg)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile",
                           str(bad)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert needle in out and "Job stats" not in out


# --------------------------------------------------------------------------- a config that
# documents itself
def _properties(node, path="#"):
    """Every (path, subschema) under a ``properties`` keyword, at every level of the schema."""
    if isinstance(node, dict):
        for key, sub in (node.get("properties") or {}).items():
            yield f"{path}/properties/{key}", sub
        for key, value in node.items():
            yield from _properties(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _properties(value, f"{path}/{i}")


def test_every_property_has_a_description():
    props = list(_properties(SCHEMA))
    assert len(props) > 100  # the walk reaches $defs, nested objects and oneOf branches
    assert any(p.startswith("#/$defs/claim_row/oneOf/1/properties/") for p, _ in props)
    missing = [p for p, sub in props if not str(sub.get("description", "")).strip()]
    assert not missing, missing
    untitled = [k for k, d in SCHEMA["$defs"].items() if "title" in d and "properties" in d
                and not d.get("description")]
    assert not untitled


def test_defaults_validate_against_their_own_subschema():
    defaults = [(p, sub) for p, sub in _properties(SCHEMA) if "default" in sub]
    assert len(defaults) > 40
    for path, sub in defaults:
        standalone = {"$defs": SCHEMA["$defs"], **{k: v for k, v in sub.items() if k != "default"}}
        errors = list(jsonschema.Draft202012Validator(standalone).iter_errors(sub["default"]))
        assert not errors, f"{path}: default {sub['default']!r}: {errors[0].message}"


def test_a_default_that_violates_its_subschema_is_caught():
    sub = {"$defs": SCHEMA["$defs"], **SCHEMA["$defs"]["resources"]["properties"]["pack"]}
    del sub["default"]
    assert list(jsonschema.Draft202012Validator(sub).iter_errors(0))  # the check above can fail


def test_config_readme_is_generated_from_the_schema():
    text = (REPO / "config/README.md").read_text()
    assert render_readme(text) == text, "config/README.md is out of date: run `make config-docs`"
    block = text.split("<!-- schema:start -->")[1].split("<!-- schema:end -->")[0]
    for key, sub in SCHEMA["properties"].items():
        assert f"| `{key}` |" in block and sub["description"].split("`")[0].strip() in block
    for name in ("runfields", "entry", "attack", "experiment", "resources", "table", "figure",
                 "claim"):
        assert f"### {SCHEMA['$defs'][name]['title']}\n" in block
    for name, info in BUILTIN_ALGORITHMS.items():  # the algorithms, from the catalog
        assert f"| `{name}` | {info.display} |" in block
    # the prose around the block is kept
    assert ("## Command-line overrides" in text
            and text.index("<!-- schema:end -->") < text.index("Row keys"))


def test_readme_block_follows_a_changed_schema():
    schema = copy.deepcopy(SCHEMA)
    schema["properties"]["raw_dir"]["description"] = "somewhere else"
    schema["properties"]["raw_dir"]["default"] = "data/raw"
    text = (REPO / "config/README.md").read_text()
    new = render_readme(text, schema)
    assert "| `raw_dir` | string | `data/raw` | somewhere else |" in new
    assert new.split("<!-- schema:end -->")[1] == text.split("<!-- schema:end -->")[1]
    assert schema_cli(["--check", str(REPO / "config/README.md")]) == 0


def test_config_docs_check_fails_on_a_stale_readme(tmp_path, capsys):
    stale = tmp_path / "README.md"
    stale.write_text((REPO / "config/README.md").read_text().replace("| `raw_dir` |",
                                                                     "| `rawdir` |"))
    assert schema_cli(["--check", str(stale)]) == 1
    assert "make config-docs" in capsys.readouterr().err
    assert schema_cli([str(stale)]) == 0 and schema_cli(["--check", str(stale)]) == 0


def test_with_defaults_fills_top_level_keys_only():
    cfg = {"profile": "x", "experiments": {}, "report": {}, "run_overrides": {},
           "resources": {"default": {"mem_mb": 4000}, "cifar10": {"gpu": 1}},
           "settings": {"s": {"dataset": "adult"}}}
    out = with_defaults(cfg)
    assert out["raw_dir"] == "resources/raw" and out["train_command"] is None
    assert out["allow_download"] is True and out["partition_jobs"] is True and out["plugins"] == []
    assert out["seeds"] is None and out["rounds"] is None and out["only"] is None
    assert out["report"] == {"notebook": "notebooks/report.ipynb"}
    # layers merged later are not filled: run_overrides would override every setting, a
    # resources.<dataset> default would override resources.default
    assert out["run_overrides"] == {} and out["settings"] == {"s": {"dataset": "adult"}}
    assert out["resources"] == {"default": {"mem_mb": 4000}, "cifar10": {"gpu": 1}}
    assert "device" not in out
    assert cfg["report"] == {} and "raw_dir" not in cfg  # the input is left as it is
    given = with_defaults({"raw_dir": "/data", "report": {"notebook": "n.ipynb"},
                           "plugins": ["a.py:A"]})
    assert (given["raw_dir"] == "/data" and given["report"]["notebook"] == "n.ipynb"
            and given["plugins"] == ["a.py:A"])


def test_shipped_configs_stay_valid_with_defaults_filled_in():
    for name in ("config.yaml", "quick.yaml", "test.yaml"):
        jsonschema.validate(with_defaults(yaml.safe_load((REPO / "config" / name).read_text())),
                            SCHEMA)


def test_run_field_defaults_are_runconfigs():
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    props = SCHEMA["$defs"]["runfields"]["properties"]
    assert set(props) <= set(fields)
    for name, sub in props.items():
        if name == "dataset":
            assert "default" not in sub
            continue
        f = fields[name]
        code = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert sub.get("default", "<none>") == code, name


def test_resource_defaults_are_the_codes():
    res = SCHEMA["$defs"]["resources"]["properties"]
    assert {k: v["default"] for k, v in res.items()} == {
        "gpu": 0, "mem_mb": 2000, "runtime": 30, "threads": 1, "pack": 1, "pack_runtime": 1,
        "pack_mem_mb": 0}
    cfg = _tiny()
    cfg["resources"] = {"default": {"mem_mb": 4000}, "digits": {"runtime": 7}}
    reg = expand(cfg)
    spec = next(iter(reg.runs.values()))
    # schema default, then resources.default, then resources.<dataset>
    assert spec.resources == {**def_defaults("resources"), "mem_mb": 4000, "runtime": 7}
    assert pack_size(spec) == res["pack"]["default"]
    bare = dataclasses.replace(spec,
                               resources={"gpu": 0, "mem_mb": 100, "runtime": 10, "threads": 1})
    assert pack_resources([bare, bare]) == {"threads": 1, "gpu": 0, "mem_mb": 100, "runtime": 20}


def test_registry_defaults_are_the_schemas():
    cfg = _tiny()
    for key in ("raw_dir", "partition_jobs", "seeds", "rounds", "only", "run_overrides",
                "experiment_overrides"):
        cfg.pop(key, None)
    exp = next(iter(cfg["experiments"].values()))
    exp.pop("seeds", None)
    exp.pop("attacks", None)
    reg = expand(cfg)
    top, experiment = SCHEMA["properties"], SCHEMA["$defs"]["experiment"]["properties"]
    assert {r.config["raw_dir"] for r in reg.runs.values()} == {top["raw_dir"]["default"]}
    assert top["partition_jobs"]["default"] is True and all(r.partition for r in reg.runs.values())
    assert sorted({r.config["seed"] for r in reg.runs.values()}) == experiment["seeds"]["default"]
    assert [r.config["attack"] for r in reg.runs.values()][0] == experiment["attacks"]["default"][0]
    attack = SCHEMA["$defs"]["attack"]["properties"]
    assert normalise_attack({"kind": "bias"}) == {"kind": "bias", "user": attack["user"]["default"],
                                                   "value": attack["value"]["default"]}


def test_claim_defaults_are_the_schemas():
    cfg = _tiny()
    claims = parse_claims(cfg, expand(cfg))
    assert claims and all("agg" not in c and "seeds" not in c for c in cfg["claims"].values())
    claim = SCHEMA["$defs"]["claim"]["properties"]
    assert {c.agg for c in claims} == {claim["agg"]["default"]}
    assert {c.seeds for c in claims} == {claim["seeds"]["default"]}


def test_table_scale_default_is_each_sources_display_scale(runs_dir):
    write_run(runs_dir, "r/seed1", [0.5, 0.7])
    row = Row("t", "fedavg", "FedAvg", "fedavg", {}, {"kind": "none"}, [1], ["r/seed1"])
    spec = TableSpec(name="t", experiments=["t"],
                     columns={"Average": "protocol.mean_acc", "Var": "protocol.var_acc"},
                     rows=[row])
    assert "default" not in SCHEMA["$defs"]["table"]["properties"]["scale"]
    table = build_table(spec, runs_dir).iloc[0]
    assert table["Average repro_mean"] == pytest.approx(60.0)  # accuracies in %
    assert table["Var repro_mean"] == pytest.approx(0.01 * 1e4)  # var_acc in %^2
    assert build_table(dataclasses.replace(spec, scale=1),
                       runs_dir).iloc[0]["Var repro_mean"] == pytest.approx(0.01)
