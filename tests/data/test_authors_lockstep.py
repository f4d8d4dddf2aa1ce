"""The lockstep check with the authors' code (scripts/lockstep_authors_fmnist.py) against a
recording of their side, so that it runs without their code: FedAvg on the authors' F-MNIST
partition, seed 1, 5 rounds, dropout off, the package's participants and minibatches fed to
their ``federated_main.py``, both codes in float64. Recorded by

    NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" PYTHONPATH=/tmp/authors-site \\
        python scripts/lockstep_authors_fmnist.py rounds --authors /tmp/Fed-MGDA/main \\
        --seed 1 --rounds 5 --record tests/data/authors_lockstep_seed1.pt

(watml/Fed-MGDA as released, numpy 2.4.6 with its SIMD sorts off, i.e. numpy 1.17's label order,
torch 2.14.1 on the CPU): their global models after rounds 1 and 5, every user's test accuracy
after round 5, and the inputs both codes were fed (the partition's index lists, each round's
participants, every participant's minibatch order). The package is fed those inputs again, so the
check does not depend on how this machine's numpy sorts or draws."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmgda import partitioners
from fedmgda.data import make_partition

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "authors_lockstep_seed1.pt"


@pytest.fixture(scope="module")
def lockstep():
    spec = importlib.util.spec_from_file_location("lockstep_authors_fmnist", ROOT / "scripts" / "lockstep_authors_fmnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lockstep_args(lockstep, raw_dir, recording=RECORDING) -> Namespace:
    return Namespace(seed=1, rounds=5, raw_dir=str(raw_dir), dtype=torch.float64, rtol=1e-10, recorded=recording,
                     record=None, authors=None, inputs=lockstep.recording_inputs(recording))


def another_machines_order(keys):
    """An unstable sort as another CPU's numpy may do it: sorted, each class in descending id order."""
    keys = np.asarray(keys)
    return np.lexsort((-np.arange(len(keys)), keys))


@pytest.mark.realdata
def test_package_rounds_equal_the_authors_code_fed_the_same_inputs(lockstep, real_fmnist, capsys, tmp_path, monkeypatch):
    """On a machine whose sort leaves equal labels in another order (simulated: the package's own
    partition then differs) the package, fed the recorded inputs, still equals the authors' code;
    and the check still fails when the authors' model moves by 1e-8 of its size."""
    args = lockstep_args(lockstep, real_fmnist)
    own = make_partition("fmnist", real_fmnist, "shards", 1, {"sort": "quicksort"})
    monkeypatch.setattr(partitioners, "numpy_1_17_argsort", another_machines_order)
    elsewhere = make_partition("fmnist", real_fmnist, "shards", 1, {"sort": "quicksort"})
    assert elsewhere.content_hash() != own.content_hash()  # the simulated machine's partition differs

    package_models = lockstep.package_paths(args, paths=(True,))  # the batched path the package keeps
    assert lockstep.check_rounds(args, package_models) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "lockstep: passed" in out and "users whose test accuracy differs 0/100" in out

    recorded = torch.load(RECORDING, weights_only=True)
    recorded["models"][-1] *= 1 + 1e-8
    torch.save(recorded, tmp_path / "moved.pt")
    assert lockstep.check_rounds(lockstep_args(lockstep, real_fmnist, tmp_path / "moved.pt"), package_models) == 1
    assert "lockstep: FAILED" in capsys.readouterr().out


@pytest.mark.realdata
def test_the_recorded_inputs_are_what_the_package_draws_on_this_machine(lockstep, real_fmnist):
    """The recording's partition is the package's ``sort: quicksort`` one (numpy 1.17's order,
    computed alike on every machine), and its participants and minibatch orders are the ones the
    package's seeds give: feeding them changes nothing where nothing differs."""
    args = lockstep_args(lockstep, real_fmnist)
    sim = lockstep.Simulation(lockstep.package_config(1, 5, str(real_fmnist), batched=True))
    drawn = lockstep.recorded_inputs(sim, make_partition("fmnist", real_fmnist, "shards", 1, {"sort": "quicksort"}))
    assert sorted(drawn) == sorted(args.inputs)
    for name, values in drawn.items():
        assert torch.equal(values, args.inputs[name]), name
