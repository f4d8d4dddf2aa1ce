"""The experiment registry: expansion counts, shared runs, overrides, readable run paths."""

from __future__ import annotations

import copy

import pytest
import yaml

from fedmgda.errors import RegistryError
from fedmgda.experiments import expand, validate_runs
from fedmgda.runkeys import fmt_display, row_key, run_key

from .conftest import REPO


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


@pytest.fixture(scope="module")
def paper():
    return load("config.yaml")


def test_paper_registry_has_at_least_1000_distinct_training_runs(paper):
    reg = expand(paper)
    print(f"paper registry: {len(reg.runs)} distinct training runs, {len(reg.partitions)} "
          "partitions")
    assert len(reg.runs) >= 1000
    # Tables 8-11: 26 grid rows x 4 seeds each
    for t in ("table8", "table9", "table10", "table11", "table12", "table13"):
        assert len(reg.rows[t]) == 26 and all(len(r.runs) == 4 for r in reg.rows[t])
    assert set(reg.tables) == ({f"table{n}" for n in range(6, 15)} | {"table7_variants"}
                               | {"qffl_table2", "qffl_table2_variants", "qffl_table11",
                                  "qffl_table11_variants"})
    assert {f[:4] for f in reg.figures} == {f"fig{n}" for n in range(1, 10)}


def test_shared_runs_are_one_job(paper):
    reg = expand(paper)
    fedavg = reg.rows["table8"][[r.key for r in reg.rows["table8"]].index("fedavg")].runs[0]
    assert fedavg == "cifar10-shards_b10_lr0.01_p0.1_T2000_ev10/fedavg/default/clean/seed1"
    # Table 8 FedAvg is also Figure 4 (left)'s FedAvg and Figure 3's: one run
    assert set(reg.runs[fedavg].experiments) == {"table8", "fig4_b10"}
    # vanilla FedMGDA = FedMGDA with epsilon 1: Figure 1's epsilon=1 curve is Table 8's seed 1 but
    # evaluated every round (Table 8's runs every 10: docs/performance.md "Evaluation"): two runs
    fig1 = reg.runs["cifar10-shards_b10_lr0.01_p0.1_T2000_impr0/fedmgda/default/clean/seed1"]
    table8 = reg.runs["cifar10-shards_b10_lr0.01_p0.1_T2000_ev10/fedmgda/default/clean/seed1"]
    assert fig1.experiments == ["fig1_shards"]
    assert table8.experiments == ["table8"]
    total_requested = sum(len(r.runs) for rows in reg.rows.values() for r in rows)
    assert total_requested > len(reg.runs)


def test_run_paths_are_readable(paper):
    reg = expand(paper)
    keys = set(reg.runs)
    assert ("cifar10-shards_b400_lr0.1_p0.2_T3000_ev10_impr0/fedmgda_plus/decay0.025_eta1.5/"
            "clean/seed9000" in keys)
    assert ("cifar10-shards_b10_lr0.01_p0.2_T1500_impr0/fedavg_n/decay0.1_eta1/scaling10-u0/seed3"
            in keys)
    assert any(k.startswith("femnist-natural_bfull_lr0.1_n10_T1500_ev10_impr0/") for k in keys)
    assert any("/qfedavg/L1_q5/bias10000-u0/" in k for k in keys)


def test_seed_and_round_overrides(paper):
    cfg = copy.deepcopy(paper)
    cfg["seeds"] = [1]
    cfg["rounds"] = 50
    reg = expand(cfg)
    assert all(s.config["seed"] == 1 and s.config["rounds"] == 50 for s in reg.runs.values())
    # one seed of every run (the variants of Table 7 and q-FFL Table 2 included)
    assert len(reg.runs) < 360


def test_only_keeps_just_what_the_named_outputs_need(paper):
    cfg = dict(paper, only=["table8", "fig3a"])
    reg = expand(cfg)
    assert set(reg.tables) == {"table8"} and set(reg.figures) == {"fig3a"}
    assert len(reg.runs) == 26 * 4


def test_experiment_overrides(paper):
    cfg = dict(paper, only=["table8"],
               experiment_overrides={"table8": {"seeds": [1, 5000], "rounds": 20}})
    reg = expand(cfg)
    assert len(reg.runs) == 26 * 2
    assert all(s.config["rounds"] == 20 for s in reg.runs.values())
    with pytest.raises(RegistryError, match="unknown experiment"):
        expand(dict(paper, experiment_overrides={"nope": {"seeds": [1]}}))


def test_conflicting_configs_on_one_path_are_an_error(paper):
    cfg = copy.deepcopy(paper)
    # a field outside the run identity (path) that differs between two requests of one run
    # what it shares with table8 (eval_every)
    shared = cfg["experiments"]["fig4_b10"].get("run") or {}
    cfg["experiments"]["fig4_b10"]["run"] = {**shared, "checkpoint_every": 5}
    with pytest.raises(RegistryError, match="different configs"):
        expand(cfg)
    # a field that changes results is part of the setting name: two distinct runs, no clash
    cfg["experiments"]["fig4_b10"]["run"] = {**shared, "qffl_loss": "batch_sum_per_sample"}
    reg = expand(cfg)
    assert any("qlossbatch_sum_per_sample" in k for k in reg.runs)


def test_a_run_option_given_to_the_wrong_algorithm_stops_the_registry_before_any_job(paper):
    """The schema admits each option's values; which algorithm it fits is RunConfig's check,
    which the Snakefile runs on every run config (validate_runs) before any job starts."""
    cfg = copy.deepcopy(paper)
    cfg["experiments"]["table7"]["run"] = {"afl_step_weights": "uniform", "sampling": "size",
                                           "init": "glorot"}
    reg = expand(cfg)  # a valid registry ...
    with pytest.raises(RegistryError,
                       match="afl_step_weights: uniform changes AFL's model step only"):
        validate_runs(reg)  # ... whose q-FedAvg and FedMGDA+ runs cannot take AFL's option
    cfg["experiments"]["table7"]["run"] = {"aggregation_weights": "samples"}
    with pytest.raises(RegistryError, match="aggregation_weights: samples"):
        validate_runs(expand(cfg))
    cfg["experiments"]["table7"]["run"] = {"sampling": "size", "init": "glorot",
                                           "qffl_loss": "train_mean"}
    reg = expand(cfg)
    validate_runs(reg)
    # part of the runs' identity
    assert any("_initglorot_" in k and "_samplingsize" in k for k in reg.runs)


def test_implied_defaults_and_fractions():
    assert row_key("mgda_prox", {"eta": 1.0, "decay": "1/10", "mu": 0.1, "epsilon": 1}, None,
                   None) == \
        "mgda_prox decay=0.1 eta=1"
    assert row_key("qfedavg", {"q": 5, "L": 1.0}, None,
                   {"kind": "bias", "value": 1000}) == "qfedavg L=1 q=5 bias=1000"
    assert fmt_display(1 / 40, "decay") == "1/40" and fmt_display(0.8, "decay") == "0.8"
    cfg = {"dataset": "digits", "partition": "iid", "batch_size": "full", "local_lr": 0.5,
           "participation": 0.2,
           "rounds": 20, "algorithm": "fedavg", "hparams": {}, "attack": {"kind": "none"},
           "seed": 3,
           "momentum": 0.0}
    assert run_key(cfg) == "digits-iid_bfull_lr0.5_p0.2_T20_m0/fedavg/default/clean/seed3"


@pytest.mark.parametrize("name", ["quick.yaml", "test.yaml"])
def test_offline_profiles_expand(name):
    reg = expand(load(name))
    assert set(reg.datasets) <= {"digits", "synthetic"}
    if name == "quick.yaml":
        print(f"quick profile: {len(reg.runs)} runs")
        assert len(reg.runs) <= 150
        assert len(reg.tables) >= 9 and len({f[:4] for f in reg.figures}) >= 9
        algos = {s.config["algorithm"] for s in reg.runs.values()}
        assert algos == {"fedavg", "fedavg_n", "fedprox", "qfedavg", "afl", "fedmgda",
                         "fedmgda_plus", "mgda_prox"}
        kinds = {s.config["attack"]["kind"] for s in reg.runs.values()}
        assert kinds == {"none", "bias", "scaling"}


def test_every_paper_row_of_the_registry_has_published_values(paper):
    from fedmgda.tables import paper_reference

    ref = paper_reference()
    reg = expand(paper)
    import fnmatch

    for name, spec in reg.tables.items():
        if spec.kind == "best_of":
            continue
        pats = set(ref[ref["table"] == spec.paper]["row"])
        for row in reg.rows_of(spec.experiments):
            assert any(fnmatch.fnmatchcase(row.key, p) for p in pats), (name, row.key)


def test_command_line_overrides_are_typed():
    from fedmgda.experiments import coerce_overrides

    # what `snakemake --config seeds=[1] rounds=50 'experiment_overrides={table8: {seeds: [1,
    # 5000]}}'` gives
    cfg = {"seeds": ["1"], "rounds": 50, "only": ["table8"],
           "experiment_overrides": {"table8": {"seeds": ["1", "5000"],
                                               "run": {"batch_size": "full"}}},
           "grids": {"g": [{"algorithm": "fedmgda_plus", "hparams": {"decay": "1/10"}}]}}
    coerce_overrides(cfg)
    assert cfg["seeds"] == [1] and cfg["only"] == ["table8"]
    assert cfg["experiment_overrides"]["table8"] == {"seeds": [1, 5000],
                                                     "run": {"batch_size": "full"}}
    assert cfg["grids"]["g"][0]["hparams"]["decay"] == "1/10"  # not an override key: untouched


def test_a_table_binds_its_columns_to_experiments():
    """q-FFL's Table 2 shape: one table over two experiments, each column from one of them; a
    variants table's columns may name the base experiments. Bad bindings: one error each."""
    cfg = load("test.yaml")
    cfg["experiments"]["tiny_b"] = {"setting": "digits_b10", "grid": "tiny", "seeds": [1],
                                    "rounds": 3}
    cfg["experiments"]["tiny_v"] = {"variants_of": "tiny", "vary": ["local_momentum"]}
    cfg["experiments"]["tiny"]["variants"] = {"local_momentum": "code"}
    both = {"A": {"experiment": "tiny", "source": "final.mean_acc"},
            "B": {"experiment": "tiny_b", "source": "final.var_acc"}}
    cfg["tables"] = {"two": {"experiments": ["tiny", "tiny_b"], "paper": None, "columns": both},
                     "two_v": {"kind": "variants", "experiments": ["tiny_v"], "paper": None,
                               "columns": {"A": {"experiment": "tiny",
                                                 "source": "final.mean_acc"}}}}
    reg = expand(cfg)
    two = reg.tables["two"]
    assert two.columns == {"A": "final.mean_acc", "B": "final.var_acc"}
    assert two.column_experiment == {"A": "tiny", "B": "tiny_b"}
    # the base names its sensitivity experiment
    assert reg.tables["two_v"].column_experiment == {"A": "tiny_v"}

    def error(columns, experiments=("tiny", "tiny_b")):
        bad = copy.deepcopy(cfg)
        bad["tables"] = {"t": {"experiments": list(experiments), "paper": None, "columns": columns}}
        with pytest.raises(RegistryError) as err:
            expand(bad)
        return str(err.value)

    assert "bind every column or none" in error({**both, "C": "final.mean_acc"})
    assert "names experiment 'nope', which the table does not show" in error(
        {**both, "B": {"experiment": "nope", "source": "final.mean_acc"}})
    assert "no column shows experiment(s) tiny_b" in error({"A": both["A"]})


def test_fmnist_fedmdfg_runs_are_their_own_and_a_bad_local_test_stops_the_registry():
    """FedMDFG's F-MNIST setting (config/fmnist.yaml): its readings reach the run configs and their
    paths; an invalid local_test is one error from validate_runs, before any job."""
    cfg = yaml.safe_load((REPO / "config/fmnist.yaml").read_text())
    reg = expand(cfg)
    validate_runs(reg)
    runs = {k: s.config for k, s in reg.runs.items() if "fmnist_fedmdfg" in s.experiments}
    assert len(runs) == 9
    for key, config in runs.items():
        assert (config["model"] == "mlp_fmnist" and config["batch_size"] == 50
                and config["momentum"] == 0)
        assert config["dataset_options"] == {"shard_setting": "fedmdfg",
                                             "local_test": "global_shards"}
        assert "_modelmlp_fmnist_" in key and "_local_testglobal_shards_" in key
    own_test = {k: s.config for k, s in reg.runs.items()
                if "fmnist_fedmdfg_own_test" in s.experiments}
    assert len(own_test) == 9 and not set(own_test) & set(runs)
    # the same setting with this study's test split (the default)
    for key, config in own_test.items():
        assert (config["model"] == "mlp_fmnist"
                and config["dataset_options"] == {"shard_setting": "fedmdfg"})
        assert "_local_test" not in key
    others = [s.config for k, s in reg.runs.items() if k not in runs and k not in own_test]
    assert others and not any("model" in config for config in others)  # the others keep the CNN
    cfg["settings"]["fmnist_fedmdfg"]["dataset_options"] = {"local_test": "test_shards"}
    cfg["experiments"]["fmnist_fedmdfg"]["variants"].pop("fmnist_local_test")
    with pytest.raises(RegistryError, match="option local_test='test_shards' not in"):
        validate_runs(expand(cfg))


def test_improvement_is_recorded_where_a_figure_or_claim_reads_it(paper):
    """The paper profile records the improved fraction (track_improvement) only in the experiments
    whose figures and claims read it; a figure or a claim that reads it from runs that do not
    record it stops the registry before any job, naming the figure or claim and the experiment."""
    from fedmgda.claim_parsing import parse_claims
    from fedmgda.errors import ClaimError

    reg = expand(paper)
    validate_runs(reg)
    parse_claims(paper, reg)
    tracked = {e for spec in reg.runs.values() if spec.config["track_improvement"]
               for e in spec.experiments}
    # as docs/protocol-choices.md and docs/performance.md state: where read, and Table 7's Adult
    # runs on the CPU, which keep the default
    assert tracked == {"fig4_b10", "fig4_b400", "table8", "table10", "table7", "table7_variants"}
    cfg = copy.deepcopy(paper)
    cfg["experiments"]["table10"]["run"] = {"eval_every": 10, "track_improvement": False}
    with pytest.raises(RegistryError,
                       match=r"figure fig9a: reads improved_loss, which 24 of its runs do not "
                                            r"record \(track_improvement: false\); set run: "
                       r"\{track_improvement: true\} in experiment\(s\) table10"):
        validate_runs(expand(cfg))
    cfg = copy.deepcopy(paper)
    cfg["experiments"]["fig4_b10"]["run"] = {"eval_every": 10, "track_improvement": False}
    reg = expand(cfg)
    with pytest.raises(RegistryError, match="figure fig4a: reads improved_loss"):
        validate_runs(reg)
    with pytest.raises(ClaimError,
                       match=r"claim improved_b10: reads improved_loss, which \d+ of its runs do "
                       r"not record"):
        parse_claims(cfg, reg)
