"""The lockstep check with the authors' code (scripts/lockstep_authors_fmnist.py) against a
recording of their side, so that it runs without their code: FedAvg on the authors' F-MNIST
partition, seed 1, 5 rounds, dropout off, the package's participants and minibatches fed to
their ``federated_main.py``, both codes in float64. Recorded by

    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py rounds --authors /tmp/Fed-MGDA/main \\
        --seed 1 --rounds 5 --record tests/data/authors_lockstep_seed1.pt

(watml/Fed-MGDA as released, torch 2.14.1 on the CPU): their global models after rounds 1 and 5
and every user's test accuracy after round 5."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "authors_lockstep_seed1.pt"


@pytest.fixture(scope="module")
def lockstep():
    spec = importlib.util.spec_from_file_location("lockstep_authors_fmnist", ROOT / "scripts" / "lockstep_authors_fmnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lockstep_args(raw_dir, recording=RECORDING) -> Namespace:
    return Namespace(seed=1, rounds=5, raw_dir=str(raw_dir), dtype=torch.float64, rtol=1e-10, recorded=recording, record=None, authors=None)


@pytest.fixture
def package_models(lockstep, real_fmnist):
    """The package's 5 rounds on the path it keeps (batched; the script checks the reference path too)."""
    return lockstep.package_paths(lockstep_args(real_fmnist), paths=(True,))


@pytest.mark.realdata
def test_package_rounds_equal_the_authors_code_fed_the_same_inputs(lockstep, real_fmnist, package_models, capsys, tmp_path):
    assert lockstep.check_rounds(lockstep_args(real_fmnist), package_models) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "lockstep: passed" in out and "users whose test accuracy differs 0/100" in out
    # the check can fail: the authors' round-5 model moved by 1e-8 of its size is far outside 1e-10
    recorded = torch.load(RECORDING, weights_only=True)
    recorded["models"][-1] *= 1 + 1e-8
    torch.save(recorded, tmp_path / "moved.pt")
    assert lockstep.check_rounds(lockstep_args(real_fmnist, tmp_path / "moved.pt"), package_models) == 1
    assert "lockstep: FAILED" in capsys.readouterr().out
