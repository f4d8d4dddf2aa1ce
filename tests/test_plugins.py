"""Plug-in algorithms (docs/plugins.md): one file with an Algorithm subclass, named in a config,
runs like a built-in -- validated, trained, resumed, labelled."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from toy_federated import make_toy_federated, toy_config

import fedmgda
from fedmgda.algorithms import PLUGIN_INTERFACE
from fedmgda.algorithms.base import INTERFACE_1_REMOVED_IN
from fedmgda.catalog import algorithms, get_algorithm, load_plugins, make_algorithm
from fedmgda.config import ConfigError
from fedmgda.errors import RegistryError
from fedmgda.experiments import expand
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
    zero = run(toy_config(algorithm="fedavgm", hparams={"beta": 0.0}, plugin=FEDAVGM), data=data,
               model_name="logreg")
    moving = run(toy_config(algorithm="fedavgm", hparams={"beta": 0.9}, plugin=FEDAVGM), data=data,
                 model_name="logreg")
    assert torch.allclose(plain.final_weights, zero.final_weights, atol=1e-6)
    assert not torch.allclose(plain.final_weights, moving.final_weights, atol=1e-3)


@pytest.mark.parametrize("path,message", [
    ("examples/nothere.py:X", "no file"),
    (f"{REPO}/examples/fedavgm.py:Nope", "has no Nope"),
    (f"{REPO}/examples/fedavgm.py:HParam", "not a subclass"),
    # the averaging rules' nameless base
    ("fedmgda.algorithms.averaging:WeightedUpdates", "declare its name"),
    ("no_such_module_xyz:Thing", "cannot import"),
    ("just-a-name", "expected path/to/file.py:Class"),
])
def test_bad_plugins_are_one_clear_error(path, message):
    with pytest.raises(ConfigError, match=message):
        load_plugins([path])


def test_a_plugin_cannot_take_a_builtin_name(tmp_path):
    (tmp_path / "clash.py").write_text(
        "from fedmgda.algorithms import Algorithm\n"
        "class Clash(Algorithm):\n    name = 'fedavg'\n    def aggregate(self, w, updates, ctx):\n "
        "       return w, {}\n")
    with pytest.raises(ConfigError, match="'fedavg' is a built-in"):
        load_plugins([f"{tmp_path}/clash.py:Clash"])


# A plug-in written against plug-in interface 1 (docs/plugins.md, "Interface versions"): its build
# takes algorithm=, which was its AlgorithmInfo; this one is FedAvg and checks what it receives.
INTERFACE_1 = """
from fedmgda.algorithms import Algorithm, HParam

class OldAvg(Algorithm):
    name = "oldavg"
    hparams = {"eta": HParam(1.0, 0.0, low_open=True)}

    @classmethod
    def build(cls, hparams, *, algorithm, rounds, num_users):
        assert algorithm.cls is cls and algorithm.name == "oldavg" and \
set(algorithm.hparams) == {"eta"}
        return cls(hparams["eta"])

    def __init__(self, eta):
        self.eta = eta

    def aggregate(self, w, updates, ctx):
        return w + self.eta * updates.mean(dim=0), {"eta": self.eta}
"""


def _deprecations(recorded):
    return [str(w.message) for w in recorded if issubclass(w.category, DeprecationWarning)]


def test_a_plugin_of_interface_1_runs_with_one_deprecation(tmp_path, recwarn, capsys):
    """The old build still works for one version: it gets algorithm= and the run is FedAvg's; one
    DeprecationWarning per class (not per run) names the change, the version that removes it and
    the fix, and the same line goes to stderr (a run's train.log), where the workflow shows it."""
    (tmp_path / "old.py").write_text(INTERFACE_1)
    plugin = f"{tmp_path}/old.py:OldAvg"
    data = make_toy_federated()
    old = [run(toy_config(algorithm="oldavg", plugin=plugin), data=data, model_name="logreg")
           for _ in range(2)]
    [message] = _deprecations(recwarn)
    assert "old.py:OldAvg" in message and "no longer receives algorithm=" in message
    assert (f"until fedmgda {INTERFACE_1_REMOVED_IN}" in message
            and "delete `algorithm` from build's parameters" in message)
    assert capsys.readouterr().err.count(f"fedmgda: deprecated: {message}") == 1
    plain = run(toy_config(algorithm="fedavg"), data=data, model_name="logreg")
    assert all(torch.equal(plain.final_weights, o.final_weights) for o in old)


def test_a_plugin_of_the_current_interface_warns_nothing(tmp_path, recwarn, capsys):
    (tmp_path / "new.py").write_text(INTERFACE_1.replace("OldAvg", "NewAvg").replace('"oldavg"',
                                                                                     '"newavg"')
                                     .replace("*, algorithm, rounds",
                                              "*, rounds").replace("assert algorithm",
                                                                   "assert True or algorithm"))
    run(toy_config(algorithm="newavg", plugin=f"{tmp_path}/new.py:NewAvg"),
        data=make_toy_federated(), model_name="logreg")
    assert _deprecations(recwarn) == [] and "deprecated" not in capsys.readouterr().err


def test_a_plugin_written_against_interface_1_names_each_change(tmp_path, monkeypatch):
    """Interface 1's whole form: the old module fedmgda.aggregators (a deprecated alias) and the
    old build; each warns once, naming its change, and the plug-in loads and builds."""
    # so that its import warns here
    monkeypatch.delitem(sys.modules, "fedmgda.aggregators", raising=False)
    (tmp_path / "old.py").write_text(
        "from fedmgda.aggregators import Aggregator\n"
        "from fedmgda.catalog import HParam\n"
        "class Old(Aggregator):\n    name = 'old'\n    hparams = {'eta': HParam(1.0, 0.0)}\n"
        "    @classmethod\n    def build(cls, hparams, *, algorithm, rounds, num_users):\n        "
        "return cls()\n    def aggregate(self, w, updates, ctx):\n        return w, {}\n")
    with pytest.warns(DeprecationWarning) as recorded:
        [info] = load_plugins([f"{tmp_path}/old.py:Old"])
        load_plugins([f"{tmp_path}/old.py:Old"])  # again: no second warning
    module, build = _deprecations(recorded)
    assert ("fedmgda.aggregators is deprecated" in module
            and "build no longer receives algorithm=" in build)
    assert isinstance(make_algorithm("old", {}, rounds=3, num_users=4), info.cls)


@pytest.mark.parametrize("signature,message", [
    # never served
    ("hparams, algorithm, /, *, rounds, num_users", "missing a required argument: 'algorithm'"),
    ("hparams, *, rounds, num_users, extra", "missing a required argument: 'extra'"),
    ("hparams, *, rounds", "unexpected keyword argument 'num_users'"),
])
def test_a_build_that_cannot_be_called_is_one_clear_error(tmp_path, signature, message):
    (tmp_path / "bad.py").write_text(
        "from fedmgda.algorithms import Algorithm\n"
        "class Bad(Algorithm):\n    name = 'bad'\n    @classmethod\n    def build(cls, "
        f"{signature}):\n        return cls()\n"
        "    def aggregate(self, w, updates, ctx):\n        return w, {}\n")
    with pytest.raises(ConfigError,
                       match="plug-in .*bad.py:Bad.*: build cannot be called as build\\(hparams, "
                       f".*{message}"):
        load_plugins([f"{tmp_path}/bad.py:Bad"])


def test_interface_1_is_removed_in_the_version_the_docs_and_changelog_name():
    """Fails once the package reaches INTERFACE_1_REMOVED_IN: then remove interface 1's forms (the
    old build's shim in fedmgda.catalog, fedmgda.aggregators) and say so in the changelog."""
    version = tuple(int(part) for part in fedmgda.__version__.split(".")[:3])
    assert version < tuple(int(part) for part in INTERFACE_1_REMOVED_IN.split("."))
    docs, changelog = (REPO / "docs/plugins.md").read_text(), (REPO / "CHANGELOG.md").read_text()
    assert (f"interface version is {PLUGIN_INTERFACE}" in docs
            and re.search(r"^## .*Interface versions$", docs, re.M))
    assert (f"until fedmgda {INTERFACE_1_REMOVED_IN}" in docs
            and f"until fedmgda {INTERFACE_1_REMOVED_IN}" in changelog)


def test_a_plugin_cannot_own_run_options(tmp_path):
    (tmp_path / "owner.py").write_text(
        "from fedmgda.algorithms import Algorithm\n"
        "class Owner(Algorithm):\n    name = 'owner'\n    own_options = {'sampling': ('size',)}\n"
        "    def aggregate(self, w, updates, ctx):\n        return w, {}\n")
    with pytest.raises(ConfigError, match="own_options is for built-ins.*run_options"):
        load_plugins([f"{tmp_path}/owner.py:Owner"])


def _config(**extra):
    return {"profile": "t", "settings": {"s": {"dataset": "digits", "rounds": 3}},
            "experiments": {"e": {"setting": "s",
                                  "grid": [{"algorithm": "fedavgm", "hparams": {"beta": 0.5}},
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
        expand({**_config(),
                "experiments": {"e": {"setting": "s", "grid": [{"algorithm": "fedsgd"}]}}})
    with pytest.raises(RegistryError, match="unknown hyper-parameter"):
        expand({**_config(plugins=[FEDAVGM]), "experiments": {"e": {"setting": "s", "grid": [
            {"algorithm": "fedavgm", "hparams": {"gamma": 1}}]}}})


def test_a_plugin_receives_its_run_options_and_checks_the_run(tmp_path):
    """``run_options``: run-config keys passed to ``build``; ``check_run``: one error before the
    run."""
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

    sim = Simulation(toy_config(algorithm="opts", plugin=plugin, local_lr=0.2, sampling="size"),
                     data=make_toy_federated(), model_name="logreg")
    assert sim.algorithm.seen == (0.2, "size")
    with pytest.raises(ConfigError, match="opts: at most 50 rounds"):
        toy_config(algorithm="opts", plugin=plugin, rounds=60)
