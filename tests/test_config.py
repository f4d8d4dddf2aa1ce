"""Bad input gets one clear error, before anything is built."""

import subprocess
import sys

import pytest
import yaml

from fedmgda.config import ConfigError, RunConfig

GOOD = dict(dataset="synthetic", algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1},
            rounds=3)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"algorithm": "fedsgd"}, "unknown algorithm 'fedsgd'"),
        ({"hparams": {"epsilon": 1.5}}, "epsilon = 1.5 is out of range"),
        ({"hparams": {"eta": -1}}, "eta = -1"),
        ({"local_lr": -0.1}, "local_lr must be a positive number"),
        ({"participation": 0.0}, r"participation p must be in \(0, 1\]"),
        ({"participation": 1.5}, r"participation p must be in \(0, 1\]"),
        ({"batch_size": 0}, "batch_size must be a positive integer or 'full'"),
        ({"rounds": 0}, "rounds must be an integer >= 1"),
        ({"momentum": 1.0}, r"momentum must be in \[0, 1\)"),
        ({"attack": {"kind": "poison"}}, "unknown attack 'poison'"),
        ({"attack": {"kind": "scaling", "value": -2}}, "scaling factor must be > 0"),
        ({"attack": {"kind": "bias", "strength": 1}}, "unknown attack key"),
        ({"device": "tpu"}, "device must be auto, cpu, cuda"),
        ({"learning_rate": 0.1}, "unknown run config key"),
        ({"sampling": "weighted"}, "sampling must be uniform or size, got 'weighted'"),
        ({"aggregation_weights": "data"},
         "aggregation_weights must be uniform or samples, got 'data'"),
        ({"qffl_loss": "mean"},
         "qffl_loss must be batch_sum, batch_sum_per_sample or train_mean, got 'mean'"),
        ({"afl_step_weights": "mean"}, "afl_step_weights must be lambda or uniform, got 'mean'"),
        ({"init": "xavier"}, "init must be torch or glorot, got 'xavier'"),
        ({"final_model": "best"}, "final_model must be auto, last or average, got 'best'"),
        ({"model": "mlp"}, "model must be null .* or one of .*mlp_fmnist, got 'mlp'"),
        ({"dataset": "fmnist", "dataset_options": {"local_test": "global"}},
         r"dataset_options: fmnist: option local_test='global' not in \['own_shard', "
         r"'global_shards'\]"),
        ({"dataset": "fmnist", "dataset_options": {"test_split": "global_shards"}},
         r"fmnist: unknown option\(s\) \['test_split'\]"),
        # options of one server rule, given to another
        ({"algorithm": "qfedavg", "hparams": {}, "aggregation_weights": "samples"},
         "aggregation_weights: samples .* qfedavg weights the updates by its own rule"),
        ({"algorithm": "afl", "hparams": {}, "aggregation_weights": "samples"},
         "aggregation_weights: samples .*fedmgda_plus, mgda_prox\\); afl"),
        ({"afl_step_weights": "uniform"},
         "afl_step_weights: uniform changes AFL's model step only; fedmgda_plus is not AFL"),
        # dataset options typed and ranged before the partition job
        ({"dataset_options": {"num_users": "bogus"}},
         "synthetic: option num_users must be an integer >= 1, got 'bogus'"),
        ({"dataset_options": {"num_users": 0}},
         "synthetic: option num_users must be an integer >= 1, got 0"),
        ({"dataset_options": {"num_users": -3}},
         "synthetic: option num_users must be an integer >= 1, got -3"),
        ({"dataset_options": {"num_users": 2.5}},
         "synthetic: option num_users must be an integer >= 1, got 2.5"),
        ({"dataset_options": {"num_users": True}},
         "synthetic: option num_users must be an integer >= 1, got True"),
        ({"dataset_options": {"alpha": float("nan")}},
         "synthetic: option alpha must be a finite number >= 0, got nan"),
        ({"dataset_options": {"max_samples": -1}},
         "synthetic: option max_samples must be an integer >= 0"),
        ({"dataset": "digits", "dataset_options": {"shards_per_user": 0}},
         "digits: option shards_per_user must be an integer >= 1, got 0"),
        ({"dataset": "cifar10", "dataset_options": {"shard_size": "100"}},
         "cifar10: option shard_size must be an integer >= 1"),
        ({"attack": {"kind": "bias", "value": float("nan")}},
         "attack.value must be a finite number, got nan"),
        ({"attack": {"kind": "bias", "value": float("-inf")}},
         "attack.value must be a finite number, got -inf"),
        ({"attack": {"kind": "scaling", "value": float("inf")}},
         "attack.value must be a finite number, got inf"),
        ({"attack": {"kind": "bias", "value": "big"}},
         "attack.value must be a finite number, got 'big'"),
        # more clients a round than the run has users, known before the data are loaded
        ({"dataset": "digits", "clients_per_round": 1000},
         "clients_per_round = 1000 but digits has 20 users"),
        ({"dataset": "cifar10", "partition": "iid", "dataset_options": {"num_users": 8},
          "clients_per_round": 9}, "clients_per_round = 9 but cifar10 has 8 users"),
        ({"dataset_options": {"num_users": 5}, "clients_per_round": 10},
         "clients_per_round = 10 but synthetic has 5 users"),
    ],
)
def test_invalid_run_configs_are_rejected_with_one_clear_message(change, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_dict({**GOOD, **change})


def test_clients_per_round_up_to_the_users_is_accepted_and_natural_users_are_checked_on_loading():
    RunConfig.from_dict({**GOOD, "dataset": "digits", "clients_per_round": 20})
    for dataset in ("femnist", "adult"):  # writers, domains: counted as the data are loaded
        RunConfig.from_dict({**GOOD, "dataset": dataset, "clients_per_round": 5000})


def test_a_valid_config_round_trips():
    cfg = RunConfig.from_dict(GOOD)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


def test_the_q_ffl_code_options_are_accepted_where_they_apply_and_default_to_today():
    cfg = RunConfig.from_dict(GOOD)
    assert (cfg.sampling, cfg.aggregation_weights, cfg.qffl_loss, cfg.afl_step_weights,
            cfg.init) == \
        ("uniform", "uniform", "batch_sum", "lambda", "torch")
    for algorithm in ("fedavg", "fedavg_n", "fedprox", "fedmgda", "fedmgda_plus", "mgda_prox"):
        RunConfig.from_dict({**GOOD, "algorithm": algorithm, "hparams": {},
                             "aggregation_weights": "samples", "sampling": "size"})
    RunConfig.from_dict({**GOOD, "algorithm": "afl", "hparams": {}, "afl_step_weights": "uniform",
                         "init": "glorot"})
    RunConfig.from_dict({**GOOD, "algorithm": "qfedavg", "hparams": {}, "qffl_loss": "train_mean",
                         "sampling": "size"})


def run_cli(tmp_path, text, *extra):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "fedmgda", "train", "--config", str(path), "--out",
                           str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, timeout=300)


def test_cli_reports_malformed_yaml_and_bad_keys_in_one_line(tmp_path):
    bad_yaml = run_cli(tmp_path, "dataset: synthetic\nalgorithm: [fedavg\n")
    assert bad_yaml.returncode == 2
    assert "invalid configuration" in bad_yaml.stderr and "Traceback" not in bad_yaml.stderr
    unknown_dataset = run_cli(tmp_path, yaml.safe_dump({**GOOD, "dataset": "imagenet"}))
    assert (unknown_dataset.returncode == 2
            and "unknown dataset 'imagenet'" in unknown_dataset.stderr)
    assert not (tmp_path / "out" / "summary.json").exists()


def test_cli_reports_missing_raw_files_with_where_to_put_them(tmp_path):
    result = run_cli(tmp_path,
                     yaml.safe_dump({**GOOD, "dataset": "adult", "raw_dir": str(tmp_path / "raw")}))
    assert result.returncode == 3
    assert "adult.data" in result.stderr and str(tmp_path / "raw" / "adult") in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_trains_and_overrides(tmp_path):
    result = run_cli(tmp_path, yaml.safe_dump(GOOD), "--set", "rounds=2", "--set",
                     "hparams={eta: 0.5}")
    assert result.returncode == 0, result.stderr
    summary = yaml.safe_load((tmp_path / "out" / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["config"]["hparams"] == {"eta": 0.5}


def test_numeric_dataset_options_in_range_are_accepted():
    RunConfig.from_dict({**GOOD,
                         "dataset_options": {"num_users": 5, "alpha": 0, "beta": 0.5,
                                             "max_samples": 0}})
    RunConfig.from_dict({**GOOD, "dataset": "digits",
                         "dataset_options": {"num_users": 10, "shards_per_user": 3}})
    RunConfig.from_dict({**GOOD, "attack": {"kind": "bias", "value": -4}})


def test_cli_reports_a_bad_dataset_option_before_anything_is_written(tmp_path):
    result = run_cli(tmp_path, yaml.safe_dump({**GOOD, "dataset_options": {"num_users": "bogus"}}))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (result.stderr.strip() == "fedmgda: invalid configuration: dataset_options: synthetic: "
                                     "option num_users must be an integer >= 1, got 'bogus'")
    assert not (tmp_path / "out").exists()
