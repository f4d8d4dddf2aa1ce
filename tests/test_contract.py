"""A plug-in's contract, checked at the boundary (fedmgda.contract, docs/plugins.md §4): a hook
that returns the wrong thing stops its own run with one error naming the plug-in and the hook;
packed beside FedAvg and FedMGDA+, the broken run is recorded as failed and the other two finish
exactly as they do alone."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.contract import CheckedHooks, is_state
from fedmgda.errors import PluginError
from fedmgda.scheduler import run_packed
from fedmgda.simulator import Simulation

# one plug-in class per way of breaking the contract; each is FedAvg apart from its fault
PLUGINS = '''
import torch
from fedmgda.algorithms import Algorithm

class Base(Algorithm):
    name = "base"
    def __init_subclass__(cls, **kw):  # each plug-in its own name: the class's, lower case
        super().__init_subclass__(**kw)
        cls.name = cls.__name__.lower()
    def aggregate(self, w, updates, ctx):
        return w + updates.mean(dim=0), {"eta": 1.0}

class Unreduced(Base):          # the forgotten .mean(0): one row per participant
    def aggregate(self, w, updates, ctx):
        return w + updates, {"eta": 1.0}

class NoPair(Base):
    def aggregate(self, w, updates, ctx):
        return w + updates.mean(dim=0)

class Double(Base):
    def aggregate(self, w, updates, ctx):
        return (w + updates.mean(dim=0)).double(), {}

class NoDict(Base):
    def aggregate(self, w, updates, ctx):
        return w + updates.mean(dim=0), 1.0

class OneValue(Base):           # after_training must return (new state, report)
    def client_state(self, user, w):
        return torch.zeros(())
    def after_training(self, client):
        return client.state

class OddState(Base):
    def client_state(self, user, w):
        return object()

class FloatTerm(Base):          # local_term must return a tensor
    def local_term(self, w, w_start, state):
        return 0.0

class Raises(Base):
    def after_training(self, client):
        raise KeyError("c_i")

class Buggy(Base):              # a ValueError is a bug of the rule, not a divergence
    def aggregate(self, w, updates, ctx):
        raise ValueError("a plain bug in the rule")

class Overflows(Base):          # a FloatingPointError: numbers not finite, the run diverged
    def aggregate(self, w, updates, ctx):
        raise FloatingPointError("the step overflowed")
'''

CASES = {
    "Unreduced": ("aggregate",
                  r"returned as its model a tensor of shape \(\d+, \d+\).*expected the next global "
                  r"model: a flat tensor of shape \(\d+,\)"),
    "NoPair": ("aggregate",
               r"returned a tensor of shape .*; expected a pair \(the next global model, a dict"),
    "Double": ("aggregate",
               r"returned as its model a tensor of shape \(\d+,\), dtype torch.float64.*expected "
               r".*dtype torch.float32"),
    "NoDict": ("aggregate", r"returned as its log float 1.0; expected a dict"),
    "OneValue": ("after_training",
                 r"returned a tensor of shape \(\), dtype torch.float32, on cpu; expected a pair "
                 r"\(new state, report\)"),
    "OddState": ("client_state", r"returned object .*expected a client state"),
    "FloatTerm": ("local_term",
                  r"returned float 0.0; expected a one-element floating-point tensor"),
    "Raises": ("after_training", r"raised KeyError: 'c_i'"),
    "Buggy": ("aggregate", r"raised ValueError: a plain bug in the rule$"),
}


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugins") / "broken.py"
    path.write_text(PLUGINS)
    return path


@pytest.fixture(scope="module")
def data():
    return make_toy_federated()


def _sims(data, configs):
    return [Simulation(cfg, data=data, model_name="logreg") for cfg in configs]


GOOD = [dict(algorithm="fedavg"),
        dict(algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.1})]


@pytest.fixture(scope="module")
def alone(data):
    """FedAvg and FedMGDA+ trained without the broken plug-in."""
    return run_packed(_sims(data, [toy_config(**g) for g in GOOD]), [None, None])


@pytest.mark.parametrize("cls", sorted(CASES))
def test_a_broken_hook_fails_its_run_alone_and_the_pack_finishes(cls, plugin_file, data, alone,
                                                                 tmp_path):
    hook, problem = CASES[cls]
    spec = f"{plugin_file}:{cls}"
    configs = [toy_config(**GOOD[0]), toy_config(algorithm=cls.lower(), plugin=spec),
               toy_config(**GOOD[1])]
    outs = [tmp_path / name for name in ("fedavg", "broken", "fedmgda_plus")]
    results = run_packed(_sims(data, configs), outs)

    summary = json.loads((outs[1] / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_round"] == 1
    assert summary["final"] is None and results[1].summary["status"] == "failed"
    expected = rf"^plug-in '{cls.lower()}' \({spec}\), hook {hook}: {problem}"
    assert re.search(expected, summary["error"]), summary["error"]
    assert (outs[1] / "metrics.csv").exists() and not (outs[1] / "checkpoint.pt").exists()
    for i, j in ((0, 0), (2, 1)):  # the others went on: as trained alone
        assert results[i].summary["status"] == "ok" and (outs[i] / "per_user_final.csv").exists()
        assert torch.allclose(results[i].final_weights, alone[j].final_weights, atol=1e-6)


def test_a_floating_point_error_of_aggregate_is_a_divergence(plugin_file, data, tmp_path):
    """The run is recorded as diverged, not failed, and its pack goes on."""
    overflows = toy_config(algorithm="overflows", plugin=f"{plugin_file}:Overflows")
    configs = [overflows, toy_config(**GOOD[0])]
    outs = [tmp_path / "overflows", tmp_path / "fedavg"]
    results = run_packed(_sims(data, configs), outs)
    summary = json.loads((outs[0] / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_round"] == 1
    assert summary["diverged_because"] == "weights not finite" and summary.get("error") is None
    assert results[1].summary["status"] == "ok"


def test_a_builtin_is_checked_too_but_its_own_errors_are_not_wrapped(data):
    w = torch.zeros(5)
    real = CheckedHooks(_sims(data, [toy_config(algorithm="fedavg")])[0].algorithm, "fedavg", None)
    assert (real.client_state(0, w) is None
            and real.after_training(SimpleNamespace(state=None)) == (None, None))
    # a built-in's own error is a bug to see, not a plug-in's failure
    with pytest.raises(AttributeError):
        real.aggregate(w, torch.zeros(2, 3), None)
    fake = CheckedHooks(SimpleNamespace(aggregate=lambda w, updates, ctx: (torch.zeros(3), {})),
                        "fedavg", None)
    with pytest.raises(PluginError,
                       match=r"^algorithm 'fedavg', hook aggregate: returned as its model a tensor "
                       r"of shape \(3,\)"):
        fake.aggregate(w, torch.zeros(2, 5), None)


def test_client_states_are_what_checkpoints_keep():
    assert all(is_state(v)
               for v in (None, 1, 2.5, "x", torch.ones(3), [torch.ones(1), {"a": (1, None)}]))
    assert not any(is_state(v) for v in (object(), [lambda: 0], {"a": {1, 2}}, {(1, 2): 0}))


def test_progress_lines_go_on_past_a_failed_run(plugin_file, data, capsys):
    configs = [toy_config(**GOOD[0]),
               toy_config(algorithm="unreduced", plugin=f"{plugin_file}:Unreduced")]
    run_packed(_sims(data, configs), [None, None], progress_every=0)
    rounds = [line.split(" | ")[0] for line in capsys.readouterr().out.splitlines()
              if line.startswith("[progress]")]
    assert rounds[-1] == f"[progress] round {configs[0].rounds}/{configs[0].rounds}", rounds
