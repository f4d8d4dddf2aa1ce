"""The lockstep check with the authors' code (scripts/lockstep_authors_fmnist.py) against a
recording of their side, so that it runs without their code: every server rule of their ``main/``
code (the script's ``RULES``: FedAvg, FedAvg-n, FedProx, FedMGDA, FedMGDA+, MGDA-Prox, q-FedAvg,
each from round 1, and FedMGDA+ with ε = 0.1 over rounds 99-103, across the first drop of
the server step; docs/protocol.md §4.2, §4.6) on the authors' F-MNIST partition, seed 1, 5
rounds a run, dropout off, the package's participants and minibatches fed to their
``federated_main.py``, both codes in float64. Recorded by

    NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" PYTHONPATH=/tmp/authors-site \\
        python scripts/lockstep_authors_fmnist.py record --authors /tmp/Fed-MGDA/main \\
        --seed 1 --rounds 5 --out tests/data/authors_lockstep_seed1.pt

(watml/Fed-MGDA as released, numpy 2.4.6 with its SIMD sorts off, i.e. numpy 1.17's label order,
torch 2.14.1 on the CPU): of each run, their global models after its first and last round and
every user's test accuracy after the last; once, the inputs both codes were fed (the partition's
index lists, each round's participants, every participant's minibatch order). The package is fed
those inputs again, so the check does not depend on how this machine's numpy sorts or draws."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmgda import partitioners
from fedmgda.catalog import make_algorithm
from fedmgda.data import make_partition
from fedmgda.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "authors_lockstep_seed1.pt"
RTOL = 1e-10


def load_lockstep():
    path = ROOT / "scripts" / "lockstep_authors_fmnist.py"
    spec = importlib.util.spec_from_file_location("lockstep_authors_fmnist", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCKSTEP = load_lockstep()
RUNS = [pytest.param(rule, start, id=f"{rule}-from-round-{start + 1}")
        for rule, start in LOCKSTEP.RECORDED_RUNS]


@pytest.fixture(scope="module")
def lockstep():
    return LOCKSTEP


@pytest.fixture(scope="module")
def recording():
    return torch.load(RECORDING, weights_only=True)


def lockstep_args(lockstep, raw_dir, rule, start, recording=RECORDING) -> Namespace:
    return Namespace(seed=1, rounds=5, raw_dir=str(raw_dir), dtype=torch.float64, rtol=RTOL,
                     recorded=recording, authors=None, rule=rule, start_round=start,
                     inputs=lockstep.recording_inputs(recording))


def another_machines_order(keys):
    """An unstable sort as another CPU's numpy may do it: sorted, each class in descending id
    order."""
    keys = np.asarray(keys)
    return np.lexsort((-np.arange(len(keys)), keys))


def test_the_recording_holds_every_rule_and_the_decay_run_crosses_the_first_drop(lockstep,
                                                                                recording):
    """One run per rule from round 1 and one across the first drop; there both codes' server
    steps drop (theirs: global_lr * global_lr_decay ** (epoch // 100),
    main/federated_main.py:L199)."""
    held = [(run["rule"], run["start_round"]) for run in recording["runs"]]
    assert held == lockstep.RECORDED_RUNS
    from_round_1 = {rule for rule, start in held if start == 0}
    assert from_round_1 == set(lockstep.RULES) - {"fedmgda_plus_eps0.1"}
    [(rule, start)] = [(rule, start) for rule, start in held if start > 0]
    rounds = range(start, start + recording["rounds"])
    assert rounds[0] < lockstep.FIRST_DROP <= rounds[-1]
    flags = dict(flag[2:].split("=") for flag in lockstep.RULES[rule].flags)
    theirs = [float(flags["global_lr"]) * float(flags["global_lr_decay"]) ** (t // 100)
              for t in rounds]
    config = lockstep.package_config(1, recording["rounds"], "resources/raw", True, rule=rule,
                                     start=start)
    algorithm = make_algorithm(config.algorithm, config.hparams, config.rounds, 100)
    assert [algorithm.step_size(t) for t in rounds] == theirs and theirs[0] != theirs[-1]


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.parametrize("rule,start", RUNS)
def test_package_rounds_equal_the_authors_code_fed_the_same_inputs(lockstep, real_fmnist, capsys,
                                                                   monkeypatch, rule, start):
    """Each rule, fed the recorded inputs on a machine whose sort leaves equal labels in another
    order (simulated: the package's own partition then differs), equals the authors' code after
    the run's first and last round within 1e-10 of the largest weight; the users' test
    accuracies under the authors' last model are identical in both codes' evaluation."""
    monkeypatch.setattr(partitioners, "numpy_1_17_argsort", another_machines_order)
    args = lockstep_args(lockstep, real_fmnist, rule, start)
    # the batched path the package keeps
    package_models = lockstep.package_paths(args, paths=(True,))
    assert lockstep.check_rounds(args, package_models) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "lockstep: passed" in out and "users whose test accuracy differs 0/100" in out


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.parametrize("rule,start", RUNS)
def test_the_check_fails_when_a_rules_server_step_changes_by_1e_8(lockstep, real_fmnist, recording,
                                                                 monkeypatch, rule, start):
    """The package's aggregation of the rule with its step w_next - w scaled by 1 + 1e-8: the
    run's first round is then further than 1e-10 of the largest weight from the authors'."""
    args = lockstep_args(lockstep, real_fmnist, rule, start)
    sim = lockstep.lockstep_simulation(args, batched=True)
    aggregate = type(sim.algorithm).aggregate

    def scaled_step(self, w, updates, ctx):
        w_next, info = aggregate(self, w, updates, ctx)
        return w + (1 + 1e-8) * (w_next - w), info

    monkeypatch.setattr(type(sim.algorithm), "aggregate", scaled_step)
    first = sim.model.initial_vector().to(sim.device, sim.data.x.dtype)
    moved = lockstep.run_round(sim, first, start, Scheduler([sim.inputs])).w_next
    [run] = [r for r in recording["runs"] if (r["rule"], r["start_round"]) == (rule, start)]
    assert run["rounds_kept"][0] == start + 1
    assert lockstep.relative_difference(moved, run["models"][0]) > RTOL


@pytest.mark.realdata
def test_the_recorded_inputs_are_what_the_package_draws_on_this_machine(lockstep, real_fmnist,
                                                                        monkeypatch):
    """The recording's partition is the package's ``sort: quicksort`` one (numpy 1.17's order,
    computed alike on every machine; another machine's order gives another partition), and its
    participants and minibatch orders are the ones the package's seeds give: feeding them changes
    nothing where nothing differs."""
    args = lockstep_args(lockstep, real_fmnist, "fedavg", 0)
    sim = lockstep.Simulation(lockstep.package_config(1, 5, str(real_fmnist), batched=True))
    own = make_partition("fmnist", real_fmnist, "shards", 1, {"sort": "quicksort"})
    drawn = lockstep.recorded_inputs(sim, own, args.inputs["participant_rounds"].tolist())
    assert sorted(drawn) == sorted(args.inputs)
    for name, values in drawn.items():
        assert torch.equal(values, args.inputs[name]), name
    monkeypatch.setattr(partitioners, "numpy_1_17_argsort", another_machines_order)
    elsewhere = make_partition("fmnist", real_fmnist, "shards", 1, {"sort": "quicksort"})
    assert elsewhere.content_hash() != own.content_hash()
