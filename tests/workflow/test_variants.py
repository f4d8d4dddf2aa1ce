"""Protocol variants: the catalog, applying a reading, experiments that choose readings,
sensitivity experiments, and the variants table (fixture runs, no real data)."""

from __future__ import annotations

import copy
import re

import pytest

from fedmgda.config import RunConfig
from fedmgda.errors import RegistryError
from fedmgda.experiments import expand, item_spec, load_config
from fedmgda.runkeys import RUN_FIELDS
from fedmgda.specs import Row, TableSpec
from fedmgda.tables import environment_footer, variants_markdown, write_table
from fedmgda.variants import VariantError, apply_readings, catalog, get_variant

from .conftest import REPO, write_run


@pytest.fixture(scope="module")
def paper():
    return load_config(REPO / "config/config.yaml")


def _run(dataset="adult", algorithm="qfedavg", **extra):
    return {"dataset": dataset, "algorithm": algorithm, "local_lr": 0.01,
            "hparams": {"gamma_w": 0.01}, **extra}


def test_every_reading_cites_a_source_and_sets_a_valid_field():
    for variant in catalog().values():
        section, _, option = variant.field.partition(".")
        assert section in RUN_FIELDS, variant.name
        assert len(variant.readings) >= 2 and variant.question and variant.protocol.startswith("§")
        for reading in variant.readings.values():
            # the paper, a section of docs/protocol.md, or a file and line of the code it comes from
            cited = ("§" in reading.source or "paper" in reading.source
                     or re.search(r"\.py:L\d+", reading.source))
            assert cited, (variant.name, reading.name)


@pytest.mark.parametrize("name", list(catalog()))
def test_each_reading_changes_its_field_and_nothing_else(name):
    variant = get_variant(name)
    dataset = (variant.datasets or ("adult",))[0]
    algorithm = (variant.algorithms or ("fedavg",))[0]
    cfg = _run(dataset, algorithm, dataset_options={"other": 1})
    values = set()
    for reading in variant.readings.values():
        out = variant.apply(cfg, reading.name)
        changed = {k for k in set(out) | set(cfg) if out.get(k) != cfg.get(k)}
        section, _, option = variant.field.partition(".")
        assert changed <= {section}
        got = out[section][option] if option else out[section]
        assert got == variant.value_for(cfg, reading.name)
        if option:
            assert out[section]["other"] == 1  # other dataset options kept
        values.add(repr(reading.value))
    assert len(values) == len(variant.readings)  # readings differ
    # a run the variant does not concern is returned unchanged
    other = _run("digits" if variant.datasets else dataset,
                 "afl" if "afl" not in variant.algorithms else "fedavg")
    if not variant.concerns(other):
        assert variant.apply(other, next(iter(variant.readings))) == other


def test_readings_give_valid_run_configs():
    cfg = {"dataset": "adult", "algorithm": "afl",
           "hparams": {"gamma_w": 0.01, "gamma_lambda": 0.5}, "local_lr": 0.01}
    out = apply_readings(cfg,
                         {"afl_gamma_w": "local_lr", "adult_client_rows": "shifted_ids",
                          "final_model": "last"})
    assert out["afl_gamma_w"] == "local_lr" and out["dataset_options"] == {"shift_by_one": True}
    assert "final_model" not in out  # AFL's output is its average iterate by definition
    RunConfig.from_dict(out)


def test_unknown_variant_or_reading_is_one_clear_error():
    with pytest.raises(VariantError,
                       match="unknown protocol variant 'nope'; known: adult_client_rows"):
        apply_readings({"dataset": "adult", "algorithm": "afl"}, {"nope": "x"})
    with pytest.raises(VariantError, match="unknown reading 'x'; readings: local_lr, server_step"):
        apply_readings({"dataset": "adult", "algorithm": "afl"}, {"afl_gamma_w": "x"})


def test_afl_local_lr_reading_needs_local_lr_equal_to_gamma_w():
    with pytest.raises(ValueError, match="local_lr must equal gamma_w"):
        RunConfig.from_dict({"dataset": "adult", "algorithm": "afl", "hparams": {"gamma_w": 0.1},
                             "local_lr": 0.01, "afl_gamma_w": "local_lr"})


def test_table7_runs_carry_its_readings(paper):
    reg = expand(paper)
    configs = {r.algorithm: reg.runs[r.runs[0]].config for r in reg.rows["table7"]}
    assert configs["afl"]["afl_gamma_w"] == "local_lr" and "final_model" not in configs["afl"]
    assert (configs["qfedavg"]["qffl_loss"] == "batch_sum"
            and configs["qfedavg"]["final_model"] == "last")
    assert configs["fedmgda_plus"]["final_model"] == configs["fedavg"]["final_model"] == "average"
    assert "afl_gamma_w" not in configs["qfedavg"] and "qffl_loss" not in configs["fedmgda_plus"]
    assert all(c["dataset_options"]["shift_by_one"] is True for c in configs.values())
    baseline = [r for r in reg.rows["table7"] if r.key == "baseline_phd"][0]
    assert reg.runs[baseline.runs[0]].config["dataset_options"] == {"clients": "phd",
                                                                    "shift_by_one": True}


def test_sensitivity_experiment_reuses_the_base_runs_and_varies_one_reading(paper):
    reg = expand(paper)
    base = {r.key: r.runs for r in reg.rows["table7"]}
    rows = reg.rows["table7_variants"]
    chosen = paper["experiments"]["table7"]["variants"]
    for row in rows:
        if row.reading == chosen[row.variant]:
            assert row.runs == base[row.key]  # the base's own reading: the very same runs
            continue
        variant = get_variant(row.variant)
        for run, base_run in zip(row.runs, base[row.key]):
            cfg, base_cfg = reg.runs[run].config, reg.runs[base_run].config
            if not variant.concerns(base_cfg):
                assert run == base_run  # e.g. qffl_loss on AFL rows: no extra run
                continue
            diff = {k for k in set(cfg) | set(base_cfg) if cfg.get(k) != base_cfg.get(k)}
            assert diff <= {variant.field.split(".")[0]}, (row.variant, diff)
            # the same value (e.g. average for FedMGDA+): the same run
            assert bool(diff) == (run != base_run)
    spec = item_spec(reg, reg.tables["table7_variants"])
    assert spec.chosen == chosen and {r.variant for r in spec.rows} == set(chosen)


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c["experiments"]["table7"]["variants"].update(nope="x"), "unknown protocol variant "
     "'nope'"),
    (lambda c: c["experiments"]["table7"]["variants"].update(final_model="first"), "unknown "
     "reading 'first'"),
    (lambda c: c["experiments"]["table7_variants"].update(vary=["fmnist_shards"]), "fmnist_shards"),
    (lambda c: c["experiments"]["table7"]["variants"].pop("qffl_loss"), "table7 chooses no reading "
     "of it"),
    (lambda c: c["experiments"]["table7_variants"].update(variants_of="table77"), "not a plain "
     "experiment"),
    (lambda c: c["tables"]["table7"].update(kind="variants"), "kind variants shows a sensitivity "
     "experiment"),
    (lambda c: c["tables"]["table7_variants"].pop("kind"), "show it with a table of kind variants"),
])
def test_bad_variant_configs_are_rejected_before_any_job(paper, mutate, needle):
    config = copy.deepcopy(paper)
    mutate(config)
    with pytest.raises(RegistryError, match=needle):
        expand(config)


def test_variants_table_on_fixture_runs(tmp_path):
    runs = tmp_path / "runs"
    rows = []
    for reading, acc in (("shifted_ids", 0.8326), ("domain_rows", 0.7690)):
        write_run(runs, f"{reading}/seed1", [acc],
                  final={"test_acc_uniform": acc, "test_acc_phd": 0.7790,
                         "test_acc_non_phd": 0.8332})
        rows.append(Row("t7v", "afl gamma_lambda=0.5 gamma_w=0.01 bias=0", "AFL [bias 0]", "afl",
                        {}, {}, [1],
                        [f"{reading}/seed1"], variant="adult_client_rows", reading=reading))
    spec = TableSpec(name="t7v", experiments=["t7v"], kind="variants", paper="table7", rows=rows,
                     chosen={"adult_client_rows": "shifted_ids"},
                     columns={"Uniform": "final.test_acc_uniform", "PhD": "final.test_acc_phd",
                              "Non-PhD": "final.test_acc_non_phd"},
                     tolerance={"Uniform": 0.6, "PhD": 1.2, "Non-PhD": 0.6})
    df = write_table(spec, runs, tmp_path / "t.csv", tmp_path / "t.md")
    assert list(df["reading"]) == ["shifted_ids",
                                   "domain_rows"] and list(df["chosen"]) == [True, False]
    assert list(df["Uniform verdict"]) == ["within (1 seed)", "outside (1 seed)"]
    md = (tmp_path / "t.md").read_text()
    assert md == variants_markdown(df, spec) + environment_footer(spec, runs)
    assert md.endswith("\n---\n\n2 runs carry no environment stamp (trained before stamping).\n")
    assert "### adult_client_rows" in md and "| shifted_ids ✓ | domain_rows |" in md
    assert ("| AFL [bias 0] | 83.26 / 77.90 / 83.32 | 83.26 / 77.90 / 83.32 *within* | 76.90 / "
            "77.90 / 83.32 |" in md)
    assert "| rows within the band | | 1/1 | 0/1 |" in md


def test_docs_list_every_variant_and_reading():
    text = (REPO / "docs/protocol-variants.md").read_text()
    for variant in catalog().values():
        assert f"`{variant.name}`" in text
        for reading in variant.readings:
            assert f"`{reading}`" in text, (variant.name, reading)


def test_dataset_option_readings_are_values_the_dataset_accepts():
    from fedmgda.data.registry import DATASET_SPECS, resolve_options

    for variant in catalog().values():
        section, _, option = variant.field.partition(".")
        if section != "dataset_options":
            continue
        for dataset in variant.datasets:
            for reading in variant.readings.values():
                resolve_options(DATASET_SPECS[dataset], {option: reading.value})  # DataError if not
