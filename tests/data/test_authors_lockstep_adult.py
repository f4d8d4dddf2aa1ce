"""The lockstep check with the authors' Adult code (scripts/lockstep_authors_adult.py) against a
recording of their side, so that it runs without their code: FedAvg, FedMGDA+, AFL and q-FedAvg,
without and with the bias attack of the PhD client, seed 1, 5 rounds, both codes in float64 on the
package's Adult arrays, the package's partition and minibatch orders fed to their
``adult/federated_main.py``. Recorded by

    PYTHONPATH=/tmp/authors-site-adult python scripts/lockstep_authors_adult.py \\
        --authors /tmp/Fed-MGDA/adult --seed 1 --rounds 5 \\
        --record tests/data/authors_lockstep_adult_seed1.npz

(watml/Fed-MGDA as released, torch 2.14.1 on the CPU): their global model after every round, the
tested final model and its three test accuracies of every run, the digest of the arrays both
codes read and the inputs both codes were fed (the partition's index lists, every minibatch
order)."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from fedmgda.algorithms.afl import AFL
from fedmgda.algorithms.averaging import WeightedUpdates
from fedmgda.algorithms.qfedavg import QFedAvg

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "authors_lockstep_adult_seed1.npz"
RTOL = 1e-10
MOVED = 1 + 1e-8  # a mutation of a server step: one part in 10^8


@pytest.fixture(scope="module")
def lockstep():
    path = ROOT / "scripts" / "lockstep_authors_adult.py"
    spec = importlib.util.spec_from_file_location("lockstep_authors_adult", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lockstep_args(lockstep, raw_dir) -> Namespace:
    return Namespace(
        seed=1,
        rounds=5,
        raw_dir=str(raw_dir),
        rtol=RTOL,
        recorded=RECORDING,
        record=None,
        authors=None,
        runs=list(lockstep.RUNS),
    )


def package_side(lockstep, args, names=None) -> dict[str, dict[str, np.ndarray]]:
    """{run: the package's ``package_run``} fed the recording's inputs."""
    _, inputs = lockstep.read_recording(
        RECORDING, args.seed, args.rounds, lockstep.package_arrays(args.raw_dir)
    )
    names = names or [lockstep.run_name(*run) for run in lockstep.RUNS]
    return {
        name: lockstep.package_run(
            lockstep.fed_simulation(
                *lockstep.RUN_OF[name], args.seed, args.rounds, args.raw_dir, inputs
            )
        )
        for name in names
    }


def largest_difference(lockstep, ours, theirs) -> float:
    rounds = [lockstep.relative_difference(a, b) for a, b in zip(ours["models"], theirs["models"])]
    return max(*rounds, lockstep.relative_difference(ours["final"], theirs["final"]))


@pytest.mark.realdata
def test_package_rounds_equal_the_authors_adult_code_fed_the_same_inputs(
    lockstep, real_adult, capsys
):
    """Every rule, with and without the bias attack: the package's global model of every round
    and its final model within 1e-10 of the authors' code, the same test accuracies."""
    args = lockstep_args(lockstep, real_adult)
    arrays = lockstep.package_arrays(args.raw_dir)
    assert lockstep.check_runs(args, arrays, package_side(lockstep, args)) == 0, (
        capsys.readouterr().out
    )
    out = capsys.readouterr().out
    assert "lockstep: passed" in out
    assert all(f"{lockstep.run_name(*run)} " in out for run in lockstep.RUNS)


def moved_step(aggregate):
    """``aggregate`` whose server step w_next - w is one part in 10^8 longer."""

    def moved(self, w, updates, ctx):
        w_next, info = aggregate(self, w, updates, ctx)
        return w + (w_next - w) * MOVED, info

    return moved


@pytest.mark.realdata
def test_the_check_fails_when_a_rules_server_step_moves_by_1e_8(
    lockstep, real_adult, monkeypatch, capsys
):
    """One run of each rule (FedAvg, FedMGDA+, AFL, q-FedAvg) with its server step w_next - w moved
    by one part in 10^8: some round's model, or the final one, off by more than 1e-10."""
    for rule in (WeightedUpdates, AFL, QFedAvg):  # FedAvg and FedMGDA+ are WeightedUpdates
        monkeypatch.setattr(rule, "aggregate", moved_step(rule.aggregate))
    args = lockstep_args(lockstep, real_adult)
    one_each = {rule: lockstep.run_name(rule, bias) for rule, bias in reversed(lockstep.RUNS)}
    own = package_side(lockstep, args, list(one_each.values()))
    theirs, _ = lockstep.read_recording(
        RECORDING, args.seed, args.rounds, lockstep.package_arrays(args.raw_dir)
    )
    for name in one_each.values():
        assert largest_difference(lockstep, own[name], theirs[name]) > RTOL, name
    assert lockstep.check_runs(args, lockstep.package_arrays(args.raw_dir), own) == 1
    assert "lockstep: FAILED" in capsys.readouterr().out


@pytest.mark.realdata
def test_the_check_fails_when_afls_lambda_step_moves_by_1e_8(lockstep, real_adult, monkeypatch):
    """AFL's runs, its lambda step (lambda after the projection minus before the ascent) moved by
    one part in 10^8: the models of the rounds after it off by more than 1e-10."""
    aggregate = AFL.aggregate

    def moved_lambda(self, w, updates, ctx):
        before = self.lam.copy()
        out = aggregate(self, w, updates, ctx)
        self.lam = before + (self.lam - before) * MOVED
        return out

    monkeypatch.setattr(AFL, "aggregate", moved_lambda)
    args = lockstep_args(lockstep, real_adult)
    names = [lockstep.run_name(rule, bias) for rule, bias in lockstep.RUNS if rule == "afl"]
    own = package_side(lockstep, args, names)
    theirs, _ = lockstep.read_recording(
        RECORDING, args.seed, args.rounds, lockstep.package_arrays(args.raw_dir)
    )
    for name in names:
        assert largest_difference(lockstep, own[name], theirs[name]) > RTOL, name


@pytest.mark.realdata
def test_the_recorded_inputs_are_what_the_package_draws_on_this_machine(lockstep, real_adult):
    """The recording's partition is the package's ``shift_by_one`` one and its minibatch orders the
    ones the package's seeds give; its arrays are the ones the package builds from the raw files
    (``read_recording`` stops otherwise)."""
    args = lockstep_args(lockstep, real_adult)
    _, recorded = lockstep.read_recording(
        RECORDING, args.seed, args.rounds, lockstep.package_arrays(args.raw_dir)
    )
    drawn = lockstep.drawn_inputs(args.seed, args.rounds, args.raw_dir)
    assert sorted(drawn) == sorted(recorded)
    for name, values in drawn.items():
        assert np.array_equal(values, recorded[name]), name
