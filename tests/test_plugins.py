"""Plug-in algorithms (docs/plugins.md): one file with an Algorithm subclass, named in a config,
runs like a built-in -- validated, trained, resumed, labelled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.catalog import algorithms, get_algorithm, load_plugins
from fedmgda.config import ConfigError
from fedmgda.experiments import RegistryError, expand
from fedmgda.scheduler import run

REPO = Path(__file__).resolve().parents[1]
FEDAVGM = f"{REPO}/examples/fedavgm.py:FedAvgM"


def test_example_plugin_is_declared_like_a_builtin():
    [info] = load_plugins([FEDAVGM])
    assert algorithms()["fedavgm"] is info and info.display == "FedAvgM" and info.plugin == FEDAVGM
    assert info.resolve({}) == {"eta": 1.0, "beta": 0.9}
    with pytest.raises(ConfigError, match="beta = 1.5 is out of range"):
        info.resolve({"beta": 1.5})
    assert not (info.proximal or info.needs_pre_round_losses or info.averages_iterates)
    assert load_plugins([FEDAVGM]) == [info]  # loading twice is harmless


def test_fedavgm_with_zero_momentum_is_fedavg_and_momentum_changes_it():
    data = make_toy_federated()
    plain = run(toy_config(algorithm="fedavg"), data=data, model_name="logreg")
    zero = run(toy_config(algorithm="fedavgm", hparams={"beta": 0.0}, plugin=FEDAVGM), data=data, model_name="logreg")
    moving = run(toy_config(algorithm="fedavgm", hparams={"beta": 0.9}, plugin=FEDAVGM), data=data, model_name="logreg")
    assert torch.allclose(plain.final_weights, zero.final_weights, atol=1e-6)
    assert not torch.allclose(plain.final_weights, moving.final_weights, atol=1e-3)


@pytest.mark.parametrize("path,message", [
    ("examples/nothere.py:X", "no file"),
    (f"{REPO}/examples/fedavgm.py:Nope", "has no Nope"),
    (f"{REPO}/examples/fedavgm.py:HParam", "not a subclass"),
    ("fedmgda.algorithms.averaging:WeightedUpdates", "declare its name"),  # the averaging rules' nameless base
    ("no_such_module_xyz:Thing", "cannot import"),
    ("just-a-name", "expected path/to/file.py:Class"),
])
def test_bad_plugins_are_one_clear_error(path, message):
    with pytest.raises(ConfigError, match=message):
        load_plugins([path])


def test_a_plugin_cannot_take_a_builtin_name(tmp_path):
    (tmp_path / "clash.py").write_text(
        "from fedmgda.algorithms import Algorithm\n"
        "class Clash(Algorithm):\n    name = 'fedavg'\n    def aggregate(self, w, updates, ctx):\n        return w, {}\n")
    with pytest.raises(ConfigError, match="'fedavg' is a built-in"):
        load_plugins([f"{tmp_path}/clash.py:Clash"])


def test_a_plugin_written_for_the_old_build_is_one_clear_error(tmp_path, monkeypatch):
    """Plug-ins written against fedmgda.aggregators still import (a deprecated alias), but a
    ``build`` that takes the ``algorithm=`` it no longer receives is named, not a TypeError."""
    monkeypatch.delitem(sys.modules, "fedmgda.aggregators", raising=False)  # so that its import warns here
    (tmp_path / "old.py").write_text(
        "from fedmgda.aggregators import Aggregator\n"
        "class Old(Aggregator):\n    name = 'old'\n"
        "    @classmethod\n    def build(cls, hparams, *, algorithm, rounds, num_users):\n        return cls()\n"
        "    def aggregate(self, w, updates, ctx):\n        return w, {}\n")
    with pytest.warns(DeprecationWarning, match="fedmgda.algorithms"), \
            pytest.raises(ConfigError, match="plug-in .*old.py:Old.*build no longer receives algorithm="):
        load_plugins([f"{tmp_path}/old.py:Old"])


def test_a_plugin_cannot_own_run_options(tmp_path):
    (tmp_path / "owner.py").write_text(
        "from fedmgda.algorithms import Algorithm\n"
        "class Owner(Algorithm):\n    name = 'owner'\n    own_options = {'sampling': ('size',)}\n"
        "    def aggregate(self, w, updates, ctx):\n        return w, {}\n")
    with pytest.raises(ConfigError, match="own_options is for built-ins.*run_options"):
        load_plugins([f"{tmp_path}/owner.py:Owner"])


def _config(**extra):
    return {"profile": "t", "settings": {"s": {"dataset": "digits", "rounds": 3}},
            "experiments": {"e": {"setting": "s", "grid": [{"algorithm": "fedavgm", "hparams": {"beta": 0.5}},
                                                          {"algorithm": "fedavg"}]}}, **extra}


def test_registry_runs_a_plugin_with_its_path_and_label():
    reg = expand(_config(plugins=[FEDAVGM]))
    [spec] = [s for s in reg.runs.values() if s.config["algorithm"] == "fedavgm"]
    assert spec.config["plugin"] == FEDAVGM and "/fedavgm/beta0.5/" in spec.key
    [row] = [r for r in reg.rows["e"] if r.algorithm == "fedavgm"]
    assert row.label == "FedAvgM β=0.5" and row.key == "fedavgm beta=0.5"
    assert get_algorithm("fedavgm").plugin == FEDAVGM


def test_registry_rejects_an_undeclared_algorithm_and_bad_hparams():
    with pytest.raises(RegistryError, match="unknown algorithm 'fedsgd'"):
        expand({**_config(), "experiments": {"e": {"setting": "s", "grid": [{"algorithm": "fedsgd"}]}}})
    with pytest.raises(RegistryError, match="unknown hyper-parameter"):
        expand({**_config(plugins=[FEDAVGM]), "experiments": {"e": {"setting": "s", "grid": [
            {"algorithm": "fedavgm", "hparams": {"gamma": 1}}]}}})


def test_a_plugin_receives_its_run_options_and_checks_the_run(tmp_path):
    """``run_options``: run-config keys passed to ``build``; ``check_run``: one error before the run."""
    (tmp_path / "opts.py").write_text(
        "from fedmgda.algorithms import Algorithm\n"
        "from fedmgda.errors import ConfigError\n"
        "class Opts(Algorithm):\n"
        "    name = 'opts'\n"
        "    run_options = ('local_lr', 'sampling')\n"
        "    @classmethod\n"
        "    def build(cls, hparams, *, rounds, num_users, local_lr, sampling):\n"
        "        rule = cls()\n"
        "        rule.seen = (local_lr, sampling)\n"
        "        return rule\n"
        "    @classmethod\n"
        "    def check_run(cls, cfg):\n"
        "        if cfg.rounds > 50:\n"
        "            raise ConfigError('opts: at most 50 rounds')\n"
        "    def aggregate(self, w, updates, ctx):\n"
        "        return w + updates.mean(dim=0), {}\n")
    plugin = f"{tmp_path}/opts.py:Opts"
    from fedmgda.simulator import Simulation

    sim = Simulation(toy_config(algorithm="opts", plugin=plugin, local_lr=0.2, sampling="size"), data=make_toy_federated(), model_name="logreg")
    assert sim.algorithm.seen == (0.2, "size")
    with pytest.raises(ConfigError, match="opts: at most 50 rounds"):
        toy_config(algorithm="opts", plugin=plugin, rounds=60)
